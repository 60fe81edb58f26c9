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

"""The background persister of one attached image: versions in flight,
oldest first.

Each CHECKPOINT freezes a snapshot in the native core and queues its
pending version (a repository Commit) here; the checkpoint is
acknowledged at once. One thread per image persists them in order: the
oldest snapshot's chunks (``core.take()`` until None) go to the
repository, the version turns stable (its tree built on its
predecessor's) and the core ends that snapshot; then the next one.
Versions therefore turn stable in the order they were taken.

A version that fails fails every later one in flight with it: each is
built on its predecessor. The core then makes all their chunks dirty
again (``snapshot_done(False)``), so the next checkpoint carries them.

``journal`` (in the image's cache directory) lists "index digest" of
every chunk of the version being taken that reached the repository
("index digest base" for a delta: deltas.py), so that a restart after
a crash can resume it (recovery.py).

Chunks are stored as deltas over what this persister stored before
where few pages changed (the image's ``tracker``); a failed version
makes the tracker forget everything, so the next one stores whole
chunks.
"""

import collections
import logging
import os
import threading
import time

from blobcr_agent import crashpoint

LOG = logging.getLogger(__name__)

JOURNAL = 'journal'


def in_flight(meta):
    """The versions a cache's metadata says are in flight, oldest
    first: ``persisting`` (being taken) and ``following`` (queued).
    """
    first = meta.get('persisting')
    if first is None:
        return []
    return [first] + list(meta.get('following') or ())


class Persister(object):
    """The queue of ``image``'s versions in flight and the thread that
    persists them. ``image`` gets ``_persisted(version)`` and
    ``_failed(versions, why)`` back, from the persister's thread.

    ``gate``: the lock a checkpoint holds from registering its version
    to queueing it; a failure is handled under it, so that no version
    is registered behind one being failed, nor its snapshot ended by
    that failure.
    """

    def __init__(self, image, gate):
        self.image = image
        self.gate = gate
        self.core = image.core
        self._journal_path = os.path.join(image.cache_dir, JOURNAL)
        self.tracker = image.tracker
        self._cond = threading.Condition()
        self._queue = collections.deque()   # (Commit, journal mode)
        self._thread = None
        self.ahead_used = 0     # chunks linked to objects sent ahead
        self.ahead_unhashed = 0     # ... known unchanged, not hashed
        # Objects the stable versions put (chunks, delta packs, node
        # packs), their deltas in packs, the packs, and the entries
        # moved out of sparse packs (repository/chunkpacks.py).
        self.objects_put = 0
        self.deltas_packed = 0
        self.delta_packs = 0
        self.pack_moved = 0

    def versions(self):
        """Version numbers in flight, oldest first."""
        with self._cond:
            return [pending.version for pending, _ in self._queue]

    def newest(self):
        """The newest version in flight, or None."""
        with self._cond:
            return self._queue[-1][0].version if self._queue else None

    def submit(self, pending, journal_mode='w'):
        """Queue ``pending`` behind the versions in flight; ``'a'``
        resumes the journal of a version taken before a crash.
        """
        with self._cond:
            self._queue.append((pending, journal_mode))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, daemon=True,
                    name='blobcr-persist-%s' % self.image.id[:8])
                self._thread.start()

    def wait(self, timeout=None, room=0):
        """Wait until at most ``room`` versions are in flight (0: all
        persisted); True if so within ``timeout`` seconds.
        """
        with self._cond:
            return self._cond.wait_for(lambda: len(self._queue) <= room,
                                       timeout)

    def _run(self):
        while True:
            with self._cond:
                if not self._queue:
                    self._thread = None
                    self._cond.notify_all()
                    return
                pending, journal_mode = self._queue[0]
            error = self._persist(pending, journal_mode)
            if error is None:
                with self._cond:
                    self._queue.popleft()
                    self._cond.notify_all()
                continue
            with self.gate:
                with self._cond:
                    followers = [p for p, _ in self._queue][1:]
                try:
                    self._fail(pending, followers, error)
                except Exception:
                    # The queue must still move: the versions stay
                    # pending in the repository (GC fails them) and the
                    # next start recovers from the cache's metadata.
                    LOG.exception('failing versions of %s', self.image.id)
                with self._cond:
                    self._queue.clear()
                    self._cond.notify_all()

    def _persist(self, pending, journal_mode):
        """Take the oldest snapshot into ``pending`` and make it stable;
        the error, or None.
        """
        started = time.monotonic()
        # No page hashes at all where no delta would be made.
        if self.tracker.max_entries and self.image.repo.delta_max_fraction:
            pending.track(self.tracker)
        try:
            with open(self._journal_path, journal_mode) as journal:
                while True:
                    item = self.core.take()
                    if item is None:
                        break
                    index, data = item
                    # Sent ahead and not written since (upload_ahead.py):
                    # linked, not hashed again.
                    sent = pending.sent_unchanged(index,
                                                  self.core.write_clock)
                    d = pending.put_sent(index, *sent, data) if sent \
                        else pending.put(index, data)
                    # No fsync: the journal only has to survive the
                    # agent, and the page cache does that.
                    journal.write(_journal_line(index, d,
                                                self.tracker.staged(index)))
                    journal.flush()
                    crashpoint.reached('journal')
            version = pending.finish(pin=self.image.holder)
        except Exception as e:
            self.tracker.forget()
            return e
        self.tracker.stable()
        self.ahead_used += pending.ahead_used
        self.ahead_unhashed += pending.ahead_unhashed
        self.objects_put += pending.objects_put
        entries, packs = pending.packed
        self.deltas_packed += entries - pending.compacted
        self.delta_packs += packs
        self.pack_moved += pending.compacted
        # Stable from here on: what follows must not fail it. A crash
        # before the metadata says so is recovered (recovery.py adopts a
        # version the repository has as stable).
        self.core.snapshot_done(True)
        try:
            self.image._persisted(version)
        except Exception:
            LOG.exception('version %d of %s is stable, but its cache '
                          'metadata could not be updated', version,
                          self.image.id)
        LOG.info('version %d of %s persisted in %.2f s', version,
                 self.image.id, time.monotonic() - started)
        return None

    def _fail(self, pending, followers, error):
        why = 'persist failed: %s' % error
        LOG.error('persisting version %d of %s failed: %s', pending.version,
                  self.image.id, error)
        pending.abort(why)
        for follower in followers:
            follower.abort('version %d, which it follows, failed: %s'
                           % (pending.version, error))
        # Ends every snapshot in flight: their chunks are dirty again.
        self.core.snapshot_done(False)
        self.image._failed([pending.version] +
                           [f.version for f in followers], str(error))


def _journal_line(index, d, tracked):
    if d is None:
        return '%d -\n' % index
    if tracked is not None and tracked.base is not None:
        return '%d %s %s\n' % (index, d.hex(), tracked.base.hex())
    return '%d %s\n' % (index, d.hex())
