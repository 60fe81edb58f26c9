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

"""Dirty chunks sent to the store before the checkpoint that needs them.

A checkpoint is safe once its chunks are durable; sent only after the
ack, a whole pass of a paced writer crosses to the store then. Between
checkpoints, one thread per image sends the chunks that are dirty and
were not written for one round (``interval`` seconds: the core's write
clock, Mirror.quiet_dirty) into the store, BATCH at a time, as the
objects the next checkpoint's persist would write, and tells that
version's Commit they are durable (Commit.add_uploaded). The persist
then links a chunk whose content has that digest instead of putting it
(Commit._put_whole); a chunk whose upload is still in flight when the
checkpoint comes is adopted, not sent twice: the version's finish waits
for that upload, and puts the chunk itself if it failed.

Why nothing can be lost:

* Content addressing: an object's name is its content's digest. A chunk
  read while the guest writes it gives an object nobody links (its
  digest is not the snapshot's), never a wrong one.
* GC: uploads go only under the version registered ahead (reserve.py),
  started after its registration, and only for that version's Commit.
  While it is pending, GC's cut-off is at most its registration time
  (gc.py), so every object uploaded for it is kept; a reservation not
  used (failed, put aside) takes its uploads with it, and they are
  garbage. A digest is added only once its put is durable.
* A crash loses the set of uploaded digests: the persist resumed from
  the journal puts every chunk again.

Bytes: a chunk rewritten after it was sent is sent again once it has
been quiet for 2, 4, then 8 rounds (MAX_RESENDS) when it went 1, 2, 3
times in the last WINDOW rounds, or by the persist (the waste the paced
benchmark counts); one the delta tracker would store as
a delta (deltas.py) is left to the persist. The thread waits while a
persist runs: the older version is safe first.
"""

import collections
import logging
import os
import threading
import time

from blobcr_agent import _native
from blobcr_agent.repository import commits
from blobcr_agent.repository import deltas

LOG = logging.getLogger(__name__)

# Chunks per durability wait: what went ahead is linkable batch by batch
# (a checkpoint meanwhile adopts the batches in flight: its finish waits
# for them, Commit.sent_unchanged); DEPTH batches in flight, so that
# the round is not bound by one batch's latency (8 x 256 KiB a wait kept
# up with 32 MiB/s, barely).
BATCH = 8
DEPTH = 4
# A chunk rewritten after it was sent is sent again once quiet for 2, 4
# and then 8 rounds (MAX_RESENDS) when it went 1, 2, 3 times in the last
# WINDOW rounds: a guest that rewrites one chunk more often than that
# costs about 3 sends of it per WINDOW, not one per rewrite, and a chunk
# quiet for 8 rounds goes again however often it went before. Sends
# older than WINDOW do not count: a writer that rewrites its disk once
# every few seconds, for a long epoch without checkpoints, had its
# chunks waiting 8 rounds each, and the first checkpoint after it had
# 0.8 s of writes (100 chunks at 32 MiB/s) left to send. With waits of
# up to 32 rounds (3.2 s), that checkpoint sent almost nothing ahead.
# Small rewrites of a chunk stored before are left to the persist's
# deltas anyway (_page_hashes).
MAX_RESENDS = 3
WINDOW = 32

# Env override of [agent] upload_ahead_interval (benchmarks compare on
# and off in one run): seconds, 0 off.
UPLOAD_AHEAD_ENV = 'BLOBCR_UPLOAD_AHEAD'


def interval_from_env(default):
    value = os.environ.get(UPLOAD_AHEAD_ENV)
    return default if value in (None, '') else float(value)


class UploadAhead(object):
    """Sends the quiet dirty chunks of ``image`` (an AttachedImage) under
    its reservation every ``interval`` seconds.
    """

    def __init__(self, image, interval):
        self.image = image
        self.interval = interval
        self._stop = threading.Event()
        self._version = None        # the reservation being filled
        # chunk -> (write clock of the content sent, the rounds of its
        # last MAX_RESENDS sends)
        self._sent = {}
        self._round = 0
        # the core's write clock at the last rounds, newest last
        self._clocks = collections.deque(maxlen=2 ** MAX_RESENDS + 1)
        self.chunks = 0             # chunks sent ahead
        self.bytes = 0              # object bytes sent ahead
        self.skipped_deltas = 0     # left to the persist as deltas
        self._fd = os.open(os.path.join(image.cache_dir, 'data.raw'),
                           os.O_RDONLY | os.O_CLOEXEC)
        self._thread = threading.Thread(
            target=self._run, daemon=True,
            name='blobcr-ahead-%s' % image.id[:8])
        self._thread.start()

    def stop(self):
        """Stop sending (idempotent: close() may run twice)."""
        self._stop.set()
        self._thread.join()
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def stats(self):
        return {'ahead_chunks': self.chunks, 'ahead_bytes': self.bytes,
                'ahead_skipped_deltas': self.skipped_deltas}

    def _run(self):
        # Rounds start every interval (a long round's uploads count in
        # it), so that "quiet for a round" stays about one interval.
        wait = self.interval
        failures = 0
        while not self._stop.wait(wait):
            started = time.monotonic()
            try:
                self.round()
                failures = 0
            except Exception as e:
                # The persist puts what was not sent: nothing depends on
                # this thread but speed. A store that stays unreachable
                # is tried (and logged) less and less often.
                failures += 1
                if failures == 1:
                    LOG.exception('uploading chunks of %s ahead',
                                  self.image.id)
                else:
                    LOG.warning('uploading chunks of %s ahead failed %d '
                                'times in a row: %s', self.image.id,
                                failures, e)
            wait = max(0.0, self.interval * 2 ** min(failures, 9) -
                       (time.monotonic() - started))

    def round(self):
        """One round: send what has been quiet since the last one; the
        number of chunks sent.
        """
        image = self.image
        since = self._clocks[-1] if self._clocks else None
        clock, quiet, writes = image.core.quiet_dirty(since)
        self._clocks.append(clock)
        self._round += 1
        commit = image.reserver.peek()
        if commit is None or since is None or image.persister.versions():
            return 0
        if commit.version != self._version:
            self._version, self._sent = commit.version, {}
        todo = [(c, w) for c, w in zip(quiet, writes) if self._due(c, w)]
        in_flight = collections.deque()     # (batch, {digest: bytes})
        sent = 0
        try:
            for at in range(0, len(todo), BATCH):
                # Taken by a checkpoint meanwhile: its persist adopts the
                # batches in flight and sends the rest.
                if self._stop.is_set() or \
                        image.reserver.peek() is not commit:
                    break
                in_flight.append(self._start(commit, todo[at:at + BATCH]))
                if len(in_flight) >= DEPTH:
                    sent += self._finish(commit, *in_flight.popleft())
            while in_flight:
                sent += self._finish(commit, *in_flight.popleft())
        finally:
            # After a failure: a persist that adopted any of these must
            # not wait for them.
            for batch, uploaded in in_flight:
                batch.drain()
                commit.drop_uploads(uploaded)
        return sent

    def _due(self, index, written):
        """Chunk ``index``, last written at clock ``written`` and quiet
        for a round, is to be sent: never sent for this version, or
        rewritten since and quiet for 2**k rounds after k sends in the
        last WINDOW rounds.
        """
        sent = self._sent.get(index)
        if sent is None:
            return True
        if sent[0] == written:
            return False
        recent = sum(1 for r in sent[1] if self._round - r < WINDOW)
        if not recent:
            return True
        rounds = 2 ** min(recent, MAX_RESENDS)
        if rounds > len(self._clocks) - 1:
            return False
        # wrap-safe: written at or before the clock that many rounds ago
        return commits.clock_at_or_before(written,
                                          self._clocks[-1 - rounds])

    def _start(self, commit, todo):
        image = self.image
        batch = image.repo.backend.batch()
        uploaded = {}
        try:
            for index, written in todo:
                sends = self._sent.get(index, (None, ()))[1]
                self._sent[index] = (written, (sends + (self._round,))
                                     [-MAX_RESENDS:])
                data = os.pread(self._fd, image.header.chunk_len(index),
                                index * image.chunk_size)
                if _native.is_zero(data):
                    continue
                hashes = self._page_hashes(index, data)
                if hashes is False:
                    continue
                uploaded[index] = commit.upload_ahead(batch, index, data,
                                                      written, hashes)
        except Exception:
            batch.drain()
            commit.drop_uploads(uploaded)
            raise
        return batch, uploaded

    def _finish(self, commit, batch, uploaded):
        try:
            batch.wait()
        except Exception:
            commit.drop_uploads(uploaded)
            raise
        commit.add_uploaded(uploaded)
        self.chunks += len(uploaded)
        self.bytes += sum(u[1] for u in uploaded.values())
        return len(uploaded)

    def _page_hashes(self, index, data):
        """What the delta tracker stages for the chunk if it is stored
        whole (None: no tracking); False if it would be stored as a
        delta: the persist does that.
        """
        tracker = self.image.tracker
        fraction = self.image.repo.delta_max_fraction
        if not (tracker.max_entries and fraction):
            return None
        hashes = deltas.page_hashes(data)
        prior = tracker.get(index)
        if prior is not None and deltas.choose(prior, hashes,
                                               fraction) is not None:
            self.skipped_deltas += 1
            return False
        return hashes
