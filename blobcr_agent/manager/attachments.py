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

"""Attach and detach: the mirror of an image on this host, and the
instance bound to it.

Invariants: a failed attach binds no instance (and undoes the mirror it
started); a detach is refused while an active domain uses the image
(unless forced) and, in the mirror, while writes since the last
checkpoint exist (unless discarded).
"""

import logging

from blobcr_agent import instances as instances_mod
from blobcr_agent.mirror import flushlog
from blobcr_common import auth
from blobcr_common import exception

LOG = logging.getLogger(__name__)


class Attachments(object):
    """Attach and detach (a mixin of
    :class:`~blobcr_agent.manager.AgentManager`).
    """

    def attach(self, image, version=None, instance=None, project=None,
               migrate_from=None, block_device=False, durability=None):
        """Mirror ``image`` (from ``version``, default its newest stable
        one) and return the raw file the hypervisor opens, and with
        ``block_device`` a loop device over it (``device``: what stock
        Nova opens for a 'local' connection, loopdevs.py). ``instance``
        is bound to the image once it is attached (a failed attach binds
        nothing), with its ``project`` (the scope of its groups).
        ``migrate_from``: the host the image is live-migrated from, where
        it is still attached and written; it is attached here incoming
        (mirror/handoff.py) and takes that host's last version when the
        guest starts here. ``durability`` (flushlog.DURABILITIES): what a
        guest's flush makes durable, for a mirror started here (one
        attached already keeps its own); None, the agent's
        ``[agent] durability``.
        """
        header = self.repo.image(image)
        if durability is not None:
            # Refused before anything waits or starts (the mirror would
            # refuse it too, once the image settled).
            flushlog.check_durability(self.repo.backend, durability)
        if project is not None and instance is None:
            raise exception.InvalidInput('a project goes with an instance')
        auth.check_project(project)
        if instance is not None:
            # Refused before attaching, as InstanceTable.bind would.
            instances_mod.check_instance(instance)
        if migrate_from is not None and (
                migrate_from == self.host or version is not None or
                not isinstance(migrate_from, str)):
            raise exception.InvalidInput(
                'an image migrates from another host, from its newest '
                'state (migrate_from %r, version %r)'
                % (migrate_from, version))
        was_attached = header.id in self.mirror.attached
        if not was_attached and migrate_from is None:
            # Detached elsewhere (or here) moments ago: its content is
            # the final checkpoint once that is stable.
            self.settle(header.id)
        path = self.mirror.attach(header.id, version=version,
                                  incoming_from=migrate_from,
                                  durability=durability)
        try:
            device = self.loops.setup(header.id, path) \
                if block_device else None
            if instance is not None:
                self.instances.bind(instance, header.id, project)
        except BaseException:
            if not was_attached:
                self._undo_attach(header.id)
            raise
        attached = self.mirror.attached[header.id]
        # The epoch this mirror writes under: a take-over raises it, and
        # the driver tells a fenced attachment from a live one by it.
        result = {'image': header.id, 'name': header.name, 'path': path,
                  'version': attached.attached_version,
                  'size': header.size, 'epoch': attached.epoch}
        if device is not None:
            result['device'] = device
        return result

    def take_over(self, image, why='its host is lost'):
        """Fence whoever had ``image`` attached (a host given up as lost:
        Repository.take_over) so that it can be attached here or on any
        host, from its newest stable version. Refused if it is attached
        here: detach it instead.
        """
        header = self.repo.image(image)
        if header.id in self.mirror.attached:
            raise exception.InvalidInput('image %s is attached on this '
                                         'host: detach it' % header.id)
        result = self.repo.take_over(header.id, why)
        head = self.repo.image(header.id).head()
        self.collector.kick()
        return dict(result, image=header.id,
                    version=head.number if head else None)

    def _undo_attach(self, image_id):
        try:
            self.loops.release(image_id)
            self.mirror.detach(image_id, discard=True)
        except Exception as e:
            LOG.error('could not undo the attach of %s: %s', image_id, e)

    def detach(self, image, discard=False, force=False, background=False):
        """Stop mirroring ``image``. Refused while an active domain uses
        it, unless ``force``; and while writes since the last checkpoint
        exist, unless ``discard``. With ``background``, returns before
        the last checkpoints are stable (mirror/service.py): the image
        settles (every host waits for them) meanwhile.
        """
        header = self.repo.image(image)
        if not force and header.id in self.mirror.attached:
            self._refuse_if_in_use(header.id)
        # The loop device holds the mirror file open: released first, and
        # set up again if the mirror refuses the detach.
        device = self.loops.device_of(header.id)
        self.loops.release(header.id)
        try:
            result = self.mirror.detach(header.id, discard=discard,
                                        background=background)
        except BaseException:
            if device is not None and header.id in self.mirror.attached:
                self.loops.setup(header.id,
                                 self.mirror.path_of(header.id))
            raise
        self.instances.unbind_image(header.id)
        return result

    def _disk_paths(self, image_id):
        """What a domain's disk names this image by: its mirror file,
        and for a 'local' connection its loop device (by number, which
        the link the domain names resolves to).
        """
        device = self.loops.device_of(image_id)
        path = self.mirror.path_of(image_id)
        return [path] if device is None else [path, device]

    def restore_block_devices(self, images):
        """After a restart, once the mirror re-attached: new loop devices
        behind the links of ``images`` (LoopDevices.recover), for those
        mirrored again and not being detached.
        """
        def path_of(image_id):
            attached = self.mirror.attached.get(image_id)
            if attached is None or attached.meta.get('detaching'):
                return None
            return self.mirror.path_of(image_id)
        self.loops.restore(images, path_of)

    def _refuse_if_in_use(self, image_id):
        try:
            domain = self._domain(image_id)
        except exception.BackendUnavailable as e:
            # libvirt is down (or not on this host): nothing to ask.
            LOG.warning('cannot ask libvirt whether a domain uses %s (%s): '
                        'detaching anyway', image_id, e)
            return
        if domain is not None:
            raise exception.InvalidInput(
                'domain %s is running on image %s; stop it or detach with '
                'force' % (domain.name(), image_id))
