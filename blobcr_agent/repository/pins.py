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

"""Pins and failed-version marks.

A pin keeps a version's objects for a reader on this host (a mirror
reads what its guest has not written from the version it was attached
at): GC treats pinned versions as live even once obsolete. A pending
version its writer gave up is marked failed; when the header write
itself fails, the mark is remembered and retried (GC also marks it once
the writer is gone or silent for ``pending_timeout``).
"""

import logging
import socket

from blobcr_agent.repository.identity import pin_record
from blobcr_agent.repository.identity import same_pin
from blobcr_agent.repository import image as image_mod
from blobcr_agent.repository import writelog
from blobcr_common import exception

LOG = logging.getLogger(__name__)


class Pins(object):
    """Pins and failed marks (a mixin of
    :class:`~blobcr_agent.repository.repository.Repository`).
    """

    def pin(self, ref, number, holder):
        """Keep version ``number`` (None: the newest stable one) of an
        image whole for ``holder`` on this host, until :meth:`unpin`;
        return its number. Pinning again is harmless (it refreshes the
        pin), and works on a version obsoleted meanwhile: its objects
        were kept. A version that is not stable and not pinned by this
        holder is refused (VersionNotStable).
        """
        image_id = self.image(ref).id
        mine = pin_record(holder)

        def mutate(header):
            if header.deleted:
                raise exception.ImageNotFound(image_id)
            v = (header.version(number) if number is not None
                 else header.stable_version())
            for p in v.pins:
                if same_pin(p, mine['host'], holder):
                    p.update(mine)
                    return v.number
            if v.state != image_mod.STABLE:
                raise exception.VersionNotStable(image_id, v.number, v.state)
            v.pins.append(mine)
            return v.number
        return self.update_header(image_id, mutate)[1]

    def unpin(self, image_id, number, holder, host=None):
        """Release the pins of ``holder`` (on ``host``, default this one)
        on version ``number``; return how many were released. Nothing
        to release (no such pin, version or image) is not an error.
        """
        host = host or socket.gethostname()

        def mutate(header):
            try:
                v = header.version(number)
            except exception.VersionNotFound:
                return 0
            kept = [p for p in v.pins if not same_pin(p, host, holder)]
            released = len(v.pins) - len(kept)
            v.pins = kept
            return released
        try:
            if not any(same_pin(p, host, holder)
                       for p in self._pins_of(image_id, number)):
                return 0
            released = self.update_header(image_id, mutate)[1]
        except exception.ImageNotFound:
            return 0
        if released:
            LOG.info('released the pin of %s on version %d of %s',
                     holder, number, image_id)
        return released

    def unpin_quietly(self, image_id, number, holder):
        """:meth:`unpin` for clean-up paths (a mirror's detach, after its
        cache is gone): never raises; GC releases the pins of this host
        whose holder path is gone, should this fail.
        """
        if number is None:
            return 0
        try:
            return self.unpin(image_id, number, holder)
        except exception.BlobCRError as e:
            LOG.warning('could not release the pin of %s on version %d of '
                        '%s (gc will, as %s is gone): %s', holder, number,
                        image_id, holder, e)
            return 0

    def take_over(self, ref, why):
        """Fence the claim of whoever had an image attached (its host is
        lost and the volume is evacuated), before attaching it here: in
        one header update the epoch moves on (a mirror registered under
        the old one can register, resume or finish no version any more:
        Fenced), every pending version fails and every pin goes (the
        caller holds none yet). The image's content is then its newest
        stable version, and with a write-ahead log (`cluster`
        durability) a new one holding every write its guest flushed
        (writelog.fold). Returns ``{epoch, failed, pins_released,
        replayed}``.
        """
        image_id = self.image(ref).id
        host = socket.gethostname()

        def mutate(header):
            header.epoch += 1
            header.taken_over_by = host
            failed, released = [], 0
            for v in header.versions:
                if v.state == image_mod.PENDING:
                    v.state = image_mod.FAILED
                    v.error = 'fenced: %s took the image over (%s)' % (
                        host, why)
                    failed.append(v.number)
                released += len(v.pins)
                v.pins = []
            return {'epoch': header.epoch, 'failed': failed,
                    'pins_released': released}
        result = self.update_header(image_id, mutate)[1]
        LOG.warning('image %s taken over by %s (epoch %d): %s; versions %s '
                    'failed, %d pins released', image_id, host,
                    result['epoch'], why, result['failed'],
                    result['pins_released'])
        # What its guest flushed since its newest stable version: sealed
        # (the lost host appends nothing more) and made a version.
        result['replayed'] = writelog.fold(self, image_id, result['epoch'],
                                           why)
        return result

    def mark_detaching(self, image_id, holder, detaching=True):
        """Mark (or unmark) every pin of ``holder`` on this host as that
        of a mirror being detached while its last versions persist in
        the background: other hosts wait for it to end (a detached
        image's content is its head once they are stable). Returns the
        pins changed.
        """
        host = socket.gethostname()

        def mutate(header):
            changed = 0
            for v in header.versions:
                for p in v.pins:
                    if same_pin(p, host, holder) and \
                            bool(p.get('detaching')) != detaching:
                        if detaching:
                            p['detaching'] = True
                        else:
                            p.pop('detaching', None)
                        changed += 1
            return changed
        return self.update_header(image_id, mutate)[1]

    def _pins_of(self, image_id, number):
        header, _ = self._read(image_id)
        try:
            return header.version(number).pins
        except exception.VersionNotFound:
            return []

    def pins(self, host=None):
        """Every pin (of ``host`` only, if given), as dicts with the
        image, the version and its state.
        """
        found = []
        for header in self.images(include_deleted=True):
            for v in header.versions:
                for p in v.pins:
                    if host is None or p.get('host') == host:
                        found.append(dict(p, image=header.id,
                                          version=v.number, state=v.state))
        return found

    def release_pins(self, host, image=None, holder=None):
        """Release every pin of ``host`` (of one image, one holder): for
        an operator, when a host is gone for good. Its mirrors must not
        be serving any more: what they have not fetched yet may be freed
        by the next GC. Returns the pins released.
        """
        if not host:
            raise exception.InvalidInput('release_pins needs a host')
        released = []
        for found in self.pins(host):
            if image is not None and found['image'] != image:
                continue
            if holder is not None and found['holder'] != holder:
                continue
            if self.unpin(found['image'], found['version'],
                          found['holder'], host):
                released.append(found)
        return released

    def mark_failed(self, image_id, number, reason):
        """Turn a pending version failed (idempotent; stable stays)."""
        def mutate(header):
            v = header.version(number)
            if v.state == image_mod.PENDING:
                v.state = image_mod.FAILED
                v.error = reason[:500]
                return True
            return False
        return self.update_header(image_id, mutate)[1]

    def remember_unmarked(self, image_id, number, reason):
        """A version this process gave up but could not mark failed:
        :meth:`retry_failed_marks` tries again (GC also marks it failed
        once its writer is gone or silent for ``pending_timeout``).
        """
        with self._unmarked_lock:
            self._unmarked[(image_id, number)] = reason

    def retry_failed_marks(self):
        """Mark failed the versions :meth:`remember_unmarked` holds;
        never raises. Returns how many were marked.
        """
        with self._unmarked_lock:
            todo = list(self._unmarked.items())
        marked = 0
        for (image_id, number), reason in todo:
            try:
                marked += bool(self.mark_failed(image_id, number, reason))
            except (exception.ImageNotFound, exception.VersionNotFound):
                pass
            except Exception as e:
                LOG.debug('version %d of %s still not marked failed: %s',
                          number, image_id, e)
                continue
            with self._unmarked_lock:
                self._unmarked.pop((image_id, number), None)
        return marked
