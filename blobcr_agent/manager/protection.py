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

"""Protection checkpoints: a bounded exposure to the loss of a host.

An attached image's writes live only on its host until a version holding
them is stable (doc/source/cinder.rst, "What is durable when"). The
Protector checkpoints every attached image in the background, labelled
``protection``: once ``[agent] protect_interval`` seconds have passed
since its last stable version with writes since, or once
``protect_dirty_bytes`` of it are written since its last checkpoint.
A protection version is superseded once a newer version is stable: it is
obsoleted (GC collects what nothing else shares) unless a clone was made
from it. Snapshots are versions of their own and are never touched.

The exposure window (0 with nothing written since the last stable
version, else the age of that version, or of the attach if it is
older) is in each image's status as ``exposure_s``.
"""

import logging
import time

from blobcr_agent.manager import periodic
from blobcr_agent.repository import image as image_mod
from blobcr_common import exception

LOG = logging.getLogger(__name__)

LABEL = 'protection'
TICK = 0.5          # how often the images are looked at (s)
SUPERSEDE_EVERY = 2.0


class Protector(periodic.Periodic):

    def __init__(self, manager, interval=0, dirty_bytes=0):
        super(Protector, self).__init__('blobcr-protect', TICK)
        self.manager = manager
        self.interval = interval
        self.dirty_bytes = dirty_bytes
        self.taken = self.failed = self.superseded = 0
        # image id -> monotonic time of its first write not yet in a
        # checkpoint, as seen by the ticks
        self._dirty_since = {}
        self._superseded_at = {}

    @property
    def enabled(self):
        return bool(self.interval or self.dirty_bytes)

    def tick(self):
        for image_id, attached in list(
                self.manager.mirror.attached.items()):
            try:
                self._look_at(image_id, attached)
            except Exception:       # the next tick tries again
                LOG.exception('protection checkpoint of %s', image_id)

    def _look_at(self, image_id, attached):
        if attached.incoming is not None and \
                not attached.incoming.done.is_set():
            return
        stats = attached.core.stats()
        now = time.monotonic()
        if not attached.persister.versions() and now - \
                self._superseded_at.get(image_id, 0) >= SUPERSEDE_EVERY:
            self._superseded_at[image_id] = now
            self._supersede(image_id, attached)
        if not stats['dirty']:
            self._dirty_since.pop(image_id, None)
            return
        since = self._dirty_since.setdefault(image_id, now)
        due = (self.interval and now - since >= self.interval) or (
            self.dirty_bytes and
            stats['dirty'] * attached.chunk_size >= self.dirty_bytes)
        if not due or attached.persister.versions():
            return          # not yet, or the previous one still persists
        try:
            result = self.manager.checkpoint(image_id, quiesce='none',
                                             label=LABEL)
        except exception.BlobCRError as e:     # Busy, fenced, detaching
            self.failed += 1
            LOG.info('protection checkpoint of %s not taken: %s',
                     image_id, e)
            return
        self._dirty_since.pop(image_id, None)
        self.taken += 1
        LOG.debug('protection checkpoint of %s: version %d', image_id,
                  result['version'])

    def _supersede(self, image_id, attached):
        """Obsolete the protection versions a newer stable one holds."""
        self.superseded += self.retire(
            image_id, attached,
            lambda versions: [v for v in versions if v.made_by == LABEL])

    def retire(self, image_id, attached, pick):
        """Obsolete the stable versions of the attached image that
        ``pick(header.versions)`` returns, but never its head, a version
        a clone was made from, nor the attached image's last or attached
        version; GC is kicked. How many were obsoleted. (The protection
        versions a newer one supersedes, and the guest checkpoints past
        ``[agent] guest_checkpoints_kept``: manager/checkpoints.py.)
        """
        def eligible(header):
            head = header.head()
            if head is None:
                return []
            return [v.number for v in pick(header.versions)
                    if v.state == image_mod.STABLE
                    and v is not head and not v.clones
                    and v.number not in (attached.meta['last'],
                                         attached.attached_version)]
        old = eligible(self.manager.repo.image(image_id))
        if not old:
            return 0
        # Judged again on the header swapped (a version labelled since,
        # a Cinder snapshot's, stays): what goes is what both allow.
        gone = []

        def still(header):
            gone[:] = [n for n in eligible(header) if n in old]
            return gone
        self.manager.repo.obsolete(image_id, old, still=still)
        if gone:
            self.manager.collector.kick()
        return len(gone)

    def exposure(self, attached, stable_at):
        """The image's exposure window in seconds (see the top);
        ``stable_at``: when its last stable version turned stable.
        """
        if not attached.core.stats()['dirty'] and \
                not attached.persister.versions():
            return 0.0
        return max(0.0, time.time() - max(stable_at or 0,
                                          attached.attached_at))

    def status(self):
        return {'interval': self.interval, 'dirty_bytes': self.dirty_bytes,
                'taken': self.taken, 'not_taken': self.failed,
                'superseded': self.superseded}
