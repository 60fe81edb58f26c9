# Copyright 2026 The BlobCR for OpenStack Authors
#
#    Licensed under the Apache License, Version 2.0 (the "License"); you may
#    not use this file except in compliance with the License. You may obtain
#    a copy of the License at
#
#         http://www.apache.org/licenses/LICENSE-2.0
#
#    Unless required by applicable law or agreed to in writing, software
#    distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
#    WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
#    License for the specific language governing permissions and limitations
#    under the License.

"""The panel's two DataTables: the checkpoint chains (a row per volume
and per checkpoint, in tree order, paged by whole chains) and the group
checkpoints (with the last restart from each). Rows whose state is not
settled (a pending checkpoint, a group snapshot being made, a restart
running) are refreshed by Horizon's ajax row updates.
"""

from django import http
from django.template import defaultfilters
from django.urls import reverse
from django.utils import html
from django.utils.translation import gettext_lazy as _
from horizon import tables
from openstack_dashboard.api import cinder

from blobcr_dashboard.checkpoints import chains
from blobcr_dashboard.checkpoints import restarts
from blobcr_dashboard.checkpoints import rules
from blobcrclient import chain

# A row's state as Horizon's status: True settled, False failed, None
# (polled) on its way. Checkpoints: chain.STATES; volumes: Cinder's.
SETTLED = ('stable', 'available', 'in-use', 'reserved', 'done', 'yes')
FAILED = ('failed', 'error', 'error_deleting', 'error_restoring',
          'error_extending', 'error_managing', 'error_backing-up')
STATUS_CHOICES = tuple([(s, True) for s in SETTLED]
                       + [(s, False) for s in FAILED])


def _index():
    return reverse('horizon:project:checkpoints:index')


# -- the chains ---------------------------------------------------------------

def _all_rows(request):
    return chains.rows(cinder.volume_list(request),
                       cinder.volume_snapshot_list(request))


class ChainRow(tables.Row):
    ajax = True

    def get_data(self, request, row_id):
        for row in _all_rows(request):
            if row.node.id == row_id:
                return row
        raise http.Http404(row_id)      # gone: Horizon drops the row

    def load_cells(self, datum=None):
        super().load_cells(datum)
        row = self.datum
        # What the row shows, for scripts and the browser test.
        self.attrs.update({'data-kind': row.node.kind,
                           'data-state': row.state,
                           'data-version': row.node.blobcr.get('version',
                                                               '')})
        self.classes.append('blobcr-%s' % row.node.kind)


class _OnCheckpoint(tables.LinkAction):
    """A dialog on a checkpoint row, shown when ``usable(row)``."""
    classes = ('ajax-modal',)

    def usable(self, row):
        return row.state == 'stable'

    def allowed(self, request, row=None):
        return (row is not None and row.node.kind == 'checkpoint'
                and self.usable(row))


class TakeCheckpoint(tables.LinkAction):
    name = 'take'
    verbose_name = _("Take Checkpoint")
    url = 'horizon:project:checkpoints:take'
    classes = ('ajax-modal', 'blobcr-take')
    icon = 'camera'
    policy_rules = rules.TAKE

    def allowed(self, request, row=None):
        return row is not None and row.node.kind == 'volume'


class CreateVolume(_OnCheckpoint):
    name = 'create_volume'
    verbose_name = _("Create Volume")
    url = 'horizon:project:checkpoints:create_volume'
    policy_rules = rules.CREATE_VOLUME


class Revert(_OnCheckpoint):
    name = 'revert'
    verbose_name = _("Revert")
    url = 'horizon:project:checkpoints:revert'
    policy_rules = rules.REVERT

    def usable(self, row):
        return row.state == 'stable' and row.revertible


class Delete(_OnCheckpoint):
    name = 'delete'
    verbose_name = _("Delete Checkpoint")
    url = 'horizon:project:checkpoints:delete'
    classes = ('ajax-modal', 'btn-danger')
    policy_rules = rules.DELETE

    def usable(self, row):
        return row.state != 'pending'


def _meta(field):
    def get(row):
        return row.node.blobcr.get(field) or '-'
    return get


def _bytes_written(row):
    written = chain.number(row.node.blobcr.get('bytes_written'))
    if row.node.kind == 'volume':
        return _('%d GiB volume') % row.node.size
    return defaultfilters.filesizeformat(written) if written else '-'


def _tree(row):
    """The row's part of the tree drawing, a volume's linked to its page.

    Its own element: the cell's template adds white space around it,
    and the drawing keeps its own (white-space: pre).
    """
    if row.node.kind != 'volume':
        return html.format_html('<span class="blobcr-tree">{}</span>',
                                row.tree)
    return html.format_html(
        '<span class="blobcr-tree"><a href="{}">{}</a></span>',
        reverse('horizon:project:volumes:detail', args=(row.node.id,)),
        row.tree)


class ChainsTable(tables.DataTable):
    tree = tables.Column(_tree, verbose_name=_("Chain"))
    state = tables.Column('state', verbose_name=_("State"), status=True,
                          status_choices=STATUS_CHOICES)
    created = tables.Column(lambda row: row.node.created,
                            verbose_name=_("Created"))
    bytes_written = tables.Column(_bytes_written,
                                  verbose_name=_("Bytes Written"))
    ack_ms = tables.Column(_meta('ack_ms'), verbose_name=_("Ack ms"))
    held_ms = tables.Column(_meta('held_ms'), verbose_name=_("Held ms"))
    quiesce = tables.Column(_meta('quiesce'), verbose_name=_("Quiesce"))
    made_by = tables.Column(lambda row: row.made_by or '-',
                            verbose_name=_("Taken By"))

    def get_object_id(self, row):
        return row.node.id

    def get_object_display(self, row):
        return row.node.name or row.node.id

    class Meta(object):
        name = 'chains'
        verbose_name = _("Checkpoint Chains")
        row_class = ChainRow
        status_columns = ['state']
        row_actions = (TakeCheckpoint, CreateVolume, Revert, Delete)
        # Rows come in tree order; sorting would tear the trees apart.
        multi_select = False


# -- the group checkpoints ----------------------------------------------------

class GroupRow(tables.Row):
    ajax = True

    def get_data(self, request, group_snapshot_id):
        for group in group_checkpoints(request):
            if group.id == group_snapshot_id:
                return group
        raise http.Http404(group_snapshot_id)

    def load_cells(self, datum=None):
        super().load_cells(datum)
        self.attrs['data-complete'] = 'no' if self.datum.incomplete \
            else 'yes'
        self.attrs['data-restart'] = getattr(self.datum.restart, 'state',
                                             '')


def group_checkpoints(request, snapshots=None, volumes=None):
    """chains.groups with each one's last restart (``.restart``)."""
    snapshots = cinder.volume_snapshot_list(request) \
        if snapshots is None else snapshots
    volumes = cinder.volume_list(request) if volumes is None else volumes
    found = chains.groups(cinder.group_snapshot_list(request), snapshots,
                          volumes)
    jobs = restarts.jobs(request.user.project_id)
    for group in found:
        group.restart = jobs.get(group.id)
    return found


class RestartGroup(tables.LinkAction):
    name = 'restart'
    verbose_name = _("Restart Group")
    url = 'horizon:project:checkpoints:restart'
    classes = ('ajax-modal',)
    icon = 'repeat'
    policy_rules = rules.RESTART

    def allowed(self, request, group=None):
        running = getattr(group.restart, 'state', '') == 'running' \
            if group is not None else False
        return group is not None and not group.incomplete and not running

    def get_link_url(self, group):
        return reverse(self.url, args=(group.group_id,))


def _members(group):
    return html.format_html(
        '{}/{} {}<ul class="list-unstyled">{}</ul>', group.stable,
        len(group.members), _('stable'), html.format_html_join(
            '', '<li>{}: v{} ({})</li>',
            ((volume, node.blobcr.get('version', '?'), node.status)
             for volume, node in group.members)))


def _complete(group):
    return _('no: %s') % group.incomplete if group.incomplete else 'yes'


def _restart(group):
    return str(group.restart) if group.restart else '-'


def _restart_state(group):
    return group.restart.state if group.restart else 'done'


class GroupCheckpointsTable(tables.DataTable):
    name = tables.Column('name', verbose_name=_("Group Checkpoint"))
    group_id = tables.Column('group_id', verbose_name=_("Volume Group"))
    created = tables.Column('created', verbose_name=_("Created"))
    status = tables.Column('status', verbose_name=_("Status"), status=True,
                           status_choices=STATUS_CHOICES)
    members = tables.Column(_members, verbose_name=_("Members"))
    complete = tables.Column(_complete, verbose_name=_("Complete"))
    restart = tables.Column(_restart, verbose_name=_("Last Restart"))
    restart_state = tables.Column(_restart_state, hidden=True, status=True,
                                  status_choices=STATUS_CHOICES)

    class Meta(object):
        name = 'groups'
        verbose_name = _("Group Checkpoints")
        row_class = GroupRow
        status_columns = ['status', 'restart_state']
        row_actions = (RestartGroup,)
        multi_select = False
