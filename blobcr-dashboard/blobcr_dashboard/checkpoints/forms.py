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

"""The panel's actions, each a Cinder call through Horizon's API layer
(the group restart: blobcr-restart in a process of its own, restarts.py).
"""

import logging

from django.urls import reverse
from django.utils.translation import gettext_lazy as _
from horizon import exceptions
from horizon import forms
from horizon import messages
from openstack_dashboard.api import cinder

from blobcr_dashboard.checkpoints import chains
from blobcr_dashboard.checkpoints import restarts

LOG = logging.getLogger(__name__)
# Volume revert (POST /volumes/{id}/action revert).
REVERT_MICROVERSION = '3.40'


def _index():
    return reverse('horizon:project:checkpoints:index')


class _CinderAction(forms.SelfHandlingForm):
    """One Cinder call (``call``); its failure is shown on the panel."""

    def call(self, request, data):
        raise NotImplementedError

    def failure(self, data):
        raise NotImplementedError

    def success(self, data):
        raise NotImplementedError

    def handle(self, request, data):
        try:
            done = self.call(request, data)
        except Exception:
            exceptions.handle(request, self.failure(data), redirect=_index())
            return False
        messages.info(request, self.success(data))
        return done


class TakeCheckpoint(_CinderAction):
    name = forms.CharField(max_length=255, label=_("Checkpoint Name"))
    description = forms.CharField(max_length=255, required=False,
                                  widget=forms.Textarea(attrs={'rows': 3}),
                                  label=_("Description"))
    # The driver reads it from the snapshot's own blobcr:quiesce
    # property (blobcr_cinder.driver.quiesce_asked).
    quiesce = forms.ChoiceField(
        required=False, label=_("Quiesce Mode"),
        choices=[('', _("The volume type's")),
                 ('none', _('none: do not hold the guest')),
                 ('fsfreeze', _('fsfreeze: freeze its file systems '
                                '(qemu-guest-agent)')),
                 ('suspend', _('suspend: pause the guest'))])

    def call(self, request, data):
        volume_id = self.initial['volume_id']
        volume = chains.volume_get(request, volume_id)
        # An attached volume: a live checkpoint (API < 3.66 asks for
        # force; the driver holds the guest as its quiesce mode says).
        force = volume.status == 'in-use'
        if not data.get('quiesce'):
            return cinder.volume_snapshot_create(
                request, volume_id, data['name'], data['description'],
                force=force)
        # Horizon's wrapper sends no metadata.
        return cinder.cinderclient(request).volume_snapshots.create(
            volume_id, force=force, name=data['name'],
            description=data['description'],
            metadata={'blobcr:quiesce': data['quiesce']})

    def failure(self, data):
        return _('Unable to take a checkpoint of volume %s.') % \
            self.initial['volume_id']

    def success(self, data):
        return _('Taking checkpoint "%s".') % data['name']


class CreateVolume(_CinderAction):
    name = forms.CharField(max_length=255, label=_("Volume Name"))
    size = forms.IntegerField(min_value=1, label=_("Size (GiB)"))

    def clean_size(self):
        size = self.cleaned_data['size']
        if size < self.initial['snapshot_size']:
            raise forms.ValidationError(
                _('At least the checkpoint\'s size, %d GiB.')
                % self.initial['snapshot_size'])
        return size

    def call(self, request, data):
        return cinder.volume_create(request, data['size'], data['name'], '',
                                    None,
                                    snapshot_id=self.initial['snapshot_id'])

    def failure(self, data):
        return _('Unable to create a volume from checkpoint %s.') % \
            self.initial['snapshot_id']

    def success(self, data):
        return _('Creating volume "%s".') % data['name']


class Revert(_CinderAction):

    def call(self, request, data):
        client = cinder.cinderclient(request, REVERT_MICROVERSION)
        client.volumes.revert_to_snapshot(self.initial['volume_id'],
                                          self.initial['snapshot_id'])
        return True

    def failure(self, data):
        return _('Unable to revert volume %(v)s to checkpoint %(s)s.') % {
            'v': self.initial['volume_id'], 's': self.initial['snapshot_id']}

    def success(self, data):
        return _('Reverting volume %s.') % self.initial['volume_id']


class Delete(_CinderAction):

    def call(self, request, data):
        cinder.volume_snapshot_delete(request, self.initial['snapshot_id'])
        return True

    def failure(self, data):
        return _('Unable to delete checkpoint %s.') % \
            self.initial['snapshot_id']

    def success(self, data):
        return _('Deleting checkpoint %s.') % self.initial['snapshot_id']


class RestartGroup(forms.SelfHandlingForm):
    name_prefix = forms.CharField(
        max_length=200, required=False, label=_("Name Prefix"),
        help_text=_('Volumes and servers are named PREFIX-0, PREFIX-1... '
                    '(default restart-<group name>).'))
    boot = forms.BooleanField(
        required=False, initial=True, label=_("Boot Servers"),
        help_text=_('Unticked: create the volumes only.'))
    flavor = forms.CharField(max_length=255, required=False,
                             label=_("Flavor (name or ID)"))

    def clean(self):
        data = super().clean()
        if data.get('boot') and not data.get('flavor'):
            raise forms.ValidationError(_('A flavor is needed to boot the '
                                          'servers.'))
        return data

    def handle(self, request, data):
        group_id = self.initial['group_id']
        try:
            cloud = restarts.cloud_of(request)
            plan = restarts.plan(cloud, group_id, data['name_prefix'])
        except restarts.RestartError as exc:
            messages.error(request, _('Cannot restart group %(g)s: %(e)s')
                           % {'g': group_id, 'e': exc})
            return False
        except Exception:
            exceptions.handle(request, _('Unable to plan the restart of '
                                         'group %s.') % group_id,
                              redirect=_index())
            return False
        try:
            restarts.launch(request, plan, data['name_prefix'],
                            data['flavor'], data['boot'])
        except Exception:
            exceptions.handle(request, _('Unable to start the restart of '
                                         'group %s.') % group_id,
                              redirect=_index())
            return False
        messages.info(request, _('Restarting group %(g)s from group '
                                 'checkpoint %(c)s: %(n)d volumes; the '
                                 'group checkpoint\'s row follows it.')
                      % {'g': group_id, 'c': plan['group_snapshot'],
                         'n': len(plan['members'])})
        return plan
