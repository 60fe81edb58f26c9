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

"""The agent's status, and the guest endpoint's view of this host: which
project an instance belongs to and which image it checkpoints.

Invariant: an unbound instance whose project libvirt cannot tell raises
(BackendUnavailable), so that no guest falls into the scope of callers
without a project.
"""

import logging
import time

from blobcr_common import exception

LOG = logging.getLogger(__name__)


class Status(object):
    """Status and the guest endpoint's view (a mixin of
    :class:`~blobcr_agent.manager.AgentManager`).
    """

    def status(self):
        attached = {}
        for image_id, a in list(self.mirror.attached.items()):
            attached[image_id] = dict(
                a.stats(), path=self.mirror.path_of(image_id),
                attached_version=a.attached_version,
                exposure_s=round(self.protector.exposure(
                    a, self._stable_at(image_id, a.meta['last'])), 1),
                instances=self.instances.instances_of(image_id))
        return {'host': self.host, 'uptime': time.time() - self.started,
                'mountpoint': self.mirror.mountpoint,
                'backend': self.repo.backend.describe(),
                'hints': self.mirror.hints.totals()
                if self.mirror.hints is not None else None,
                'group_tags': self.tagger.status(),
                'header_cas': {'writes': self.repo.cas_writes,
                               'conflicts': self.repo.cas_conflicts},
                'key_writes': self.repo.key_writes,
                'proxy': self.proxy_url,
                'default_quiesce': self.default_quiesce,
                'gc': self.collector.status(),
                'protection': self.protector.status(),
                'guest_checkpoints': dict(
                    self.guest_budget.status(self._projects_of_images()),
                    kept=self.guest_checkpoints_kept,
                    groups_kept=self.guest_groups_kept,
                    obsoleted=self.guest_retired,
                    groups_per_project=self.guest_groups_per_project,
                    published=self.usage_publisher.status()),
                'loop_devices': self.loops.status(),
                'restart': self.mirror.restart_verdict(),
                'attached': attached}

    def _projects_of_images(self):
        """image id -> the project its instances were attached for (the
        first one's), or None, for the images attached here.
        """
        found = {}
        for image_id in list(self.mirror.attached):
            projects = [self.instances.project_of(i)
                        for i in self.instances.instances_of(image_id)]
            found[image_id] = next((p for p in projects if p), None)
        return found

    def _stable_at(self, image_id, number):
        if number is None:
            return None
        try:
            return self.repo.image(image_id).version(number).stable_at
        except exception.BlobCRError:
            return None

    # -- the guest endpoint's view -----------------------------------------

    def project_of(self, instance):
        """The project of an instance hosted here: its binding's (an
        attach that named the instance says it all, None included), else
        its Nova domain's metadata. Raises BackendUnavailable when an
        unbound instance's project cannot be read from libvirt: a guest
        must not fall into the scope of callers without a project.
        """
        if self.instances.images_of(instance):
            return self.instances.project_of(instance)
        if self.hypervisor is None:
            return None
        return self.hypervisor.instance_project(instance)

    def resolve(self, instance):
        """The image an instance hosted here checkpoints (its first one
        attached here, if it uses several), or None.
        """
        for image_id in self.instances.images_of(instance):
            if image_id in self.mirror.attached:
                return image_id
        if self.hypervisor is None:
            return None
        try:
            disks = self.hypervisor.instance_disks(instance)
        except exception.BackendUnavailable as e:
            LOG.warning('cannot ask libvirt about %s: %s', instance, e)
            return None
        if not disks:
            return None
        for image_id in list(self.mirror.attached):
            if disks & {self.hypervisor.disk_name(path)
                        for path in self._disk_paths(image_id)}:
                return image_id
        return None
