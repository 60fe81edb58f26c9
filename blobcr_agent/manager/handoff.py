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

"""The source side of a live migration: the handoff of an image to the
destination host's agent (mirror/handoff.py is the destination side).

Invariants: one handoff at a time on this host (``_handoff_lock``); the
image is committed and detached only once no guest runs on it here, and
the version returned holds every write made here; an image handed off
to one host is never handed to another.
"""

import logging
import time

from blobcr_agent.mirror import hints
from blobcr_common import exception

LOG = logging.getLogger(__name__)

# A handoff asked to wait for the guest to stop waits this long at most
# per call (the destination asks again).
HANDOFF_WAIT_MAX = 10.0
HANDOFF_LABEL = 'migrate'


class Handoff(object):
    """The source side of a live migration (a mixin of
    :class:`~blobcr_agent.manager.AgentManager`).
    """

    def set_peers(self, peers):
        """``peers``: the RPC client (rpc.api.AgentAPI) this agent asks
        other hosts' agents with (the handoff of a live migration) and
        sends restart hints through.
        """
        self.mirror.handoff_asker = lambda source, image, wait, timeout: \
            peers.handoff(source, image, self.host, wait=wait,
                          rpc_timeout=timeout)
        self.mirror.handoff_preparer = lambda source, image: \
            peers.prepare_handoff(source, image, self.host)
        if self.mirror.hints is not None:
            # Restart hints go to the other hosts restarting members of
            # the same group (listed in the store), or with agents older
            # than 1.13 about, to every host.
            self.mirror.hints.remote = lambda scope, chunks, hosts: \
                peers.publish_hints(scope, self.host, chunks, hosts=hosts)
            if peers.hints_to_listeners():
                self.mirror.hints.listeners = hints.Listeners(self.repo,
                                                              self.host)

    def receive_hints(self, scope, source, chunks):
        """Prefetch hints from ``source``'s agent (hints.py); its own
        fanout comes back here too and is dropped.
        """
        if source == self.host or self.mirror.hints is None:
            return 0
        return self.mirror.hints.receive(scope, chunks)

    def handoff(self, image, dest, wait=0):
        """A live migration of ``image`` to host ``dest``: once no guest
        runs on it here, commit what is left, detach it and return
        ``{'version': N}``, the version that holds every write made here
        (the destination's base, mirror/handoff.py). While a guest still
        runs on it (waited for up to ``wait`` s): ``{'running': True}``.
        BackendUnavailable while libvirt cannot tell whether one runs.
        An image not attached here: its newest stable version (handed
        off already, or released by Cinder), refused if it was handed
        off to another host; with a cache here that a restart did not
        re-attach, the image is attached again first (refused if that
        fails: its last writes are only in that cache).
        """
        header = self.repo.image(image)
        if not isinstance(dest, str) or not dest or dest == self.host:
            raise exception.InvalidInput('a handoff goes to another host')
        deadline = time.monotonic() + max(0.0, min(float(wait or 0),
                                                   HANDOFF_WAIT_MAX))
        with self._handoff_lock:
            # Detached here in the background (Nova's post-migration
            # detach came first): its cache holds no more than its last
            # versions, which are the handoff once stable. Re-attaching
            # it meanwhile would serve the image here again.
            if not self.mirror.wait_detached(header.id,
                                             self.mirror.busy_detach_timeout):
                raise exception.Busy(
                    'image %s is being detached on %s: its last versions '
                    'are still being persisted; try again'
                    % (header.id, self.host))
            if header.id not in self.mirror.attached:
                if not self.mirror.cached(header.id):
                    return self._handed_off(self.repo.image(header.id),
                                            dest)
                LOG.warning('handoff of %s to %s: attaching it from its '
                            'cache first', header.id, dest)
                self.mirror.attach(header.id)
            while True:
                running = self._guest_running(header.id)
                if running is False:
                    break
                if time.monotonic() >= deadline:
                    if running is None:
                        raise exception.BackendUnavailable(
                            'cannot tell whether a guest still runs on '
                            'image %s on %s (libvirt does not answer): not '
                            'handing it off yet' % (header.id, self.host))
                    return {'image': header.id, 'running': True}
                time.sleep(0.05)
            marks = [time.monotonic()]
            result = self.checkpoint(header.id, quiesce='none',
                                     label=HANDOFF_LABEL)
            version = result['version']
            marks.append(time.monotonic())
            self.mirror.wait_stable(header.id, version)
            marks.append(time.monotonic())
            # The guest is stopped (or gone): its domain may still hold
            # the file open, paused after the migration.
            self.detach(header.id, force=True)
            self.mirror.handed_off[header.id] = dest
            marks.append(time.monotonic())
        # Where the destination's first request waited (its status and
        # blobcr-bench handoff report them).
        phases = {name: round((marks[k + 1] - marks[k]) * 1000, 1)
                  for k, name in enumerate(('commit_ms', 'persist_ms',
                                            'detach_ms'))}
        LOG.info('handed %s off to %s at version %s (%d chunks, %.1f ms: '
                 '%s)', header.id, dest, version, result['chunks'],
                 (marks[-1] - marks[0]) * 1000, ', '.join(
                     '%s %.1f' % item for item in sorted(phases.items())))
        return {'image': header.id, 'running': False, 'version': version,
                'chunks': result['chunks'], 'phases': phases}

    def prepare_handoff(self, image, dest):
        """``dest`` attached ``image`` for a live migration from here (a
        cast from its agent, at Nova's pre_live_migration): checkpoint
        what the guest wrote so far, with no hold, its persist running
        while the migration copies memory. The handoff at the switch
        then commits and persists only what was written since. Nothing
        to do for an image not attached here, handed off already, or
        with nothing written since its last checkpoint.
        """
        header = self.repo.image(image)
        with self._handoff_lock:
            attached = self.mirror.attached.get(header.id)
            if attached is None or header.id in self.mirror.handed_off or \
                    not attached.stats()['dirty']:
                return None
            result = self.checkpoint(header.id, quiesce='none',
                                     label=HANDOFF_LABEL)
        LOG.info('migration of %s to %s under way: version %s (%d chunks) '
                 'persists before the switch', header.id, dest,
                 result['version'], result['chunks'])
        return result

    def _guest_running(self, image_id):
        """Whether a domain runs (not paused, not off) on the image;
        None when libvirt cannot tell.
        """
        try:
            domain = self._domain(image_id)
            return domain is not None and self.hypervisor.is_running(domain)
        except exception.BackendUnavailable as e:
            LOG.warning('cannot ask libvirt whether a guest runs on %s: %s',
                        image_id, e)
            return None

    def _handed_off(self, header, dest):
        """The answer to a handoff of an image not attached (nor cached)
        here: its newest stable version, unless it went to another host.
        """
        went_to = self.mirror.handed_off.get(header.id)
        if went_to not in (None, dest):
            raise exception.InvalidInput(
                'image %s was handed off to %s already: it cannot go to %s '
                'too' % (header.id, went_to, dest))
        return {'image': header.id, 'running': False,
                'version': header.stable_version().number}
