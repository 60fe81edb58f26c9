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

"""The Checkpoints page and its action dialogs."""


from django.urls import reverse
from django.urls import reverse_lazy
from django.utils import safestring
from django.utils.translation import gettext_lazy as _
from horizon import exceptions
from horizon import forms
from horizon import tables
from horizon.utils import functions as utils
from openstack_dashboard.api import cinder
from openstack_dashboard import policy

from blobcr_dashboard.checkpoints import chains
from blobcr_dashboard.checkpoints import forms as checkpoint_forms
from blobcr_dashboard.checkpoints import picture
from blobcr_dashboard.checkpoints import rules
from blobcr_dashboard.checkpoints import tables as checkpoint_tables

INDEX = reverse_lazy('horizon:project:checkpoints:index')


def _page(request, fetched):
    """The page of chains the request's markers name, as the chains
    table shows it: ``(rows, has_prev, has_more)``.
    """
    meta = checkpoint_tables.ChainsTable._meta
    return chains.page(chains.rows(*fetched), utils.get_page_size(request),
                       request.GET.get(meta.pagination_param),
                       request.GET.get(meta.prev_pagination_param))


def _picture(rows, groups):
    roots = [row.node for row in rows if row.node.id == row.root]
    return picture.draw(roots, groups)


class IndexView(tables.MultiTableView):
    """The chains (paged by whole chains, as many per page as the user's
    page size), their picture, and the group checkpoints.
    """
    table_classes = (checkpoint_tables.ChainsTable,
                     checkpoint_tables.GroupCheckpointsTable)
    template_name = 'project/checkpoints/index.html'
    page_title = _("Checkpoints")

    def _fetch(self):
        if not hasattr(self, '_fetched'):
            self._fetched = ([], [])
            try:
                self._fetched = (cinder.volume_list(self.request),
                                 cinder.volume_snapshot_list(self.request))
            except Exception:
                exceptions.handle(self.request,
                                  _('Unable to retrieve the checkpoint '
                                    'chains.'))
        return self._fetched

    def get_chains_data(self):
        rows, self._prev, self._more = _page(self.request, self._fetch())
        return rows

    def get_groups_data(self):
        volumes, snapshots = self._fetch()
        try:
            return checkpoint_tables.group_checkpoints(
                self.request, snapshots, volumes)
        except Exception:
            exceptions.handle(self.request,
                              _('Unable to retrieve group checkpoints.'))
            return []

    def has_prev_data(self, table):
        return table.name == 'chains' and self._prev

    def has_more_data(self, table):
        return table.name == 'chains' and self._more

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        data = self._get_data_dict()
        context['picture'] = safestring.mark_safe(
            _picture(data['chains'], data['groups']))
        return context


class _ActionView(forms.ModalFormView):
    """A dialog on one object (``key`` of the URL); refused unless the
    user has ``rules`` (the buttons of the page are hidden then too).
    """
    template_name = 'project/checkpoints/action.html'
    success_url = INDEX
    cancel_url = INDEX
    key = None
    url_name = None
    policy_rules = ()
    help_text = ''
    note = None     # names the object, from its id

    def dispatch(self, request, *args, **kwargs):
        if not policy.check(self.policy_rules, request):
            raise exceptions.NotAuthorized(_('You may not do this.'))
        return super().dispatch(request, *args, **kwargs)

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        context['submit_url'] = reverse(
            'horizon:project:checkpoints:%s' % self.url_name,
            args=(self.kwargs[self.key],))
        context['help_text'] = self.help_text
        context['notes'] = self.notes()
        return context

    def get_initial(self):
        return {self.key: self.kwargs[self.key]}

    def notes(self):
        return [self.note % self.kwargs[self.key]] if self.note else []

    def _snapshot(self):
        try:
            return cinder.volume_snapshot_get(self.request,
                                              self.kwargs['snapshot_id'])
        except Exception:
            exceptions.handle(self.request,
                              _('Unable to retrieve the checkpoint.'),
                              redirect=INDEX)


class TakeCheckpointView(_ActionView):
    form_class = checkpoint_forms.TakeCheckpoint
    key, url_name, policy_rules = 'volume_id', 'take', rules.TAKE
    page_title = _("Take Checkpoint")
    submit_label = _("Take Checkpoint")
    help_text = _('A live, incremental snapshot of the volume\'s disk. On '
                  'an attached volume the guest is held still in the '
                  'quiesce mode chosen here, else as the volume type\'s '
                  'blobcr:quiesce extra spec says (fsfreeze, suspend or '
                  'none), else as the backend\'s default; the chain shows '
                  'the mode each checkpoint used. An explicit fsfreeze or '
                  'suspend needs a running guest.')

    def _volume(self):
        if not hasattr(self, '_volume_cache'):
            try:
                self._volume_cache = chains.volume_get(
                    self.request, self.kwargs['volume_id'])
            except Exception:
                exceptions.handle(self.request,
                                  _('Unable to retrieve the volume.'),
                                  redirect=INDEX)
        return self._volume_cache

    def notes(self):
        volume = self._volume()
        notes = [_('Volume: %(name)s (%(status)s, type %(type)s)')
                 % {'name': volume.name, 'status': volume.status,
                    'type': volume.volume_type or '-'}]
        quiesce = _quiesce_of(self.request, volume)
        notes.append(_('Quiesce mode: %s') % (
            quiesce or _('the backend\'s default (volume type extra specs '
                         'not visible to you, or none set)')))
        return notes

    def get_initial(self):
        volume = self._volume()
        return {'volume_id': volume.id,
                'name': '%s-checkpoint' % (volume.name or volume.id)}


def _quiesce_of(request, volume):
    """The volume type's blobcr:quiesce, where the user may read it."""
    try:
        types = {t.name: t for t in cinder.volume_type_list(request)}
        vtype = types.get(volume.volume_type)
        if vtype is None:
            return None
        specs = cinder.volume_type_extra_get(request, vtype.id, raw=True)
        return specs.get('blobcr:quiesce')
    except Exception:
        return None


class CreateVolumeView(_ActionView):
    form_class = checkpoint_forms.CreateVolume
    key, url_name = 'snapshot_id', 'create_volume'
    policy_rules = rules.CREATE_VOLUME
    page_title = _("Create Volume from Checkpoint")
    submit_label = _("Create Volume")
    help_text = _('A clone of the checkpoint\'s version: it shares every '
                  'chunk with it, and nothing is copied.')

    def get_initial(self):
        snapshot = self._snapshot()
        return {'snapshot_id': snapshot.id, 'snapshot_size': snapshot.size,
                'size': snapshot.size,
                'name': '%s-volume' % snapshot.name}


class RevertView(_ActionView):
    form_class = checkpoint_forms.Revert
    key, url_name, policy_rules = 'snapshot_id', 'revert', rules.REVERT
    page_title = _("Revert Volume to Checkpoint")
    submit_label = _("Revert")
    help_text = _('The volume gets a new version equal to the checkpoint; '
                  'the later versions stay. Cinder reverts only to a '
                  'volume\'s newest checkpoint, and only while the volume '
                  'is detached.')
    note = _('Checkpoint: %s')

    def get_initial(self):
        snapshot = self._snapshot()
        return {'snapshot_id': snapshot.id, 'volume_id': snapshot.volume_id}


class DeleteView(_ActionView):
    form_class = checkpoint_forms.Delete
    key, url_name, policy_rules = 'snapshot_id', 'delete', rules.DELETE
    page_title = _("Delete Checkpoint")
    submit_label = _("Delete")
    help_text = _('The version becomes obsolete; what later versions and '
                  'clones share with it stays.')
    note = _('Checkpoint: %s')


class RestartGroupView(_ActionView):
    form_class = checkpoint_forms.RestartGroup
    key, url_name, policy_rules = 'group_id', 'restart', rules.RESTART
    page_title = _("Restart Group")
    submit_label = _("Restart")
    help_text = _('From the group\'s newest complete group checkpoint '
                  '(as blobcr-restart): one volume from each member, then '
                  'one server booted from each volume, without network.')
    note = _('Volume group: %s')
