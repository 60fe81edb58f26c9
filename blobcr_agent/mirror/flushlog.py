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

"""A `cluster` volume's flushes: each returns once the blocks written
before it are in its write-ahead log in the cluster
(repository/writelog.py), not only in this host's cache.

Flushes are serialized: one cut of the core's log map at a time, its
blocks read from the mirror, appended as one entry, then the next. A
flush that finds no block written since the last entry (another flush
took them) returns at once. An append that fails for lack of room or an
unreachable cluster is tried again until ``timeout`` (0: for ever, as
RBD's I/O waits); then the flush fails (EIO) and the blocks stay owed to
the next one. A fenced append (the image was taken over) fails it at
once. Never does a flush return success for a block not in the log.

A checkpoint's COMMIT and a cut are ordered by ``order``: the COMMIT
and the new base happen under it, so the next entry goes into a new
segment whose base is that version. Once a version is stable, the
segments it covers are dropped (``trim``, from the persister).
"""

import contextlib
import errno
import logging
import threading
import time

from blobcr_agent import crashpoint
from blobcr_agent.repository import writelog
from blobcr_common import exception

LOG = logging.getLogger(__name__)

DURABILITIES = ('cluster', 'host')
RETRY_SECONDS = 0.5
_UNKNOWN = object()
# An entry's most bytes of data: one RADOS op each, far below the OSDs'
# osd_max_write_size (90 MiB); a bigger cut is several entries.
MAX_ENTRY = 4 << 20


def batches(extents, limit=MAX_ENTRY):
    """``extents`` (``[(offset, length)]``) in groups of at most
    ``limit`` bytes, long extents cut.
    """
    group, size = [], 0
    for off, length in extents:
        while length:
            n = min(length, limit - size)
            group.append((off, n))
            size += n
            off += n
            length -= n
            if size == limit:
                yield group
                group, size = [], 0
    if group:
        yield group


def check_durability(backend, durability):
    """ValueError-free check of a volume's durability against a store:
    InvalidInput for an unknown one, or `cluster` on a store that keeps
    no log (the local store: nothing leaves the host).
    """
    if durability not in DURABILITIES:
        raise exception.InvalidInput(
            'unknown durability %r (choose from %s)'
            % (durability, ', '.join(DURABILITIES)))
    if durability == 'cluster' and not backend.supports_write_log:
        raise exception.InvalidInput(
            '`cluster` durability needs a store that replicates writes '
            'away from the host (RADOS); %s is local to it: choose '
            '`host` durability' % backend.describe())


def refuse_unfolded(backend, header):
    """Before a mirror of ``header``'s image starts from its newest
    stable version without a cache: refuse if its write log holds
    flushed writes that version may not (its host was lost and nobody
    took it over) or a take-over did not finish.
    """
    state, segments = backend.log_state(header.id)
    if state is None:
        return
    if state.startswith('sealed') or segments:
        raise exception.InvalidInput(
            'image %s has writes its guest flushed in its write-ahead log '
            '(log %s, %d segment(s)) that no stable version may hold: its '
            'host was lost; run "blobcr-manage take-over %s" to fold them '
            'into a version first' % (header.id, state, len(segments),
                                      header.id))


class FlushLog(object):

    def __init__(self, image, timeout=0.0):
        self.image = image
        self.backend = image.repo.backend
        self.timeout = timeout
        self._lock = threading.Lock()       # one flush at a time
        self._order = threading.Lock()      # COMMIT and cut
        # The version the next entry follows; a new segment when it
        # differs from the current segment's.
        self._base = image.meta.get('last')
        self._segment = None
        # Unknown until this log opens a segment: the first one opened
        # here (an attach, an agent restart) claims no COMMIT since the
        # segments before it, so it is "rolled" (writelog.py).
        self._segment_base = _UNKNOWN
        self._segment_bytes = 0
        self._seq = 0
        self.entries = 0
        self.bytes = 0
        self.retries = 0
        self._next_segment = self.backend.log_next_segment(image.id)

    @contextlib.contextmanager
    def order(self):
        """Held around a checkpoint's COMMIT (see the module)."""
        with self._order:
            yield self

    def committed(self, version):
        """Under ``order``: the COMMIT of ``version`` is done."""
        self._base = version

    def flush(self):
        """Append the blocks written since the last entry; OSError (EIO)
        if they could not be, ETIMEDOUT after ``timeout``.
        """
        core = self.image.core
        with self._lock:
            with self._order:
                extents = core.log_cut()
                base = self._base
            appended = False
            try:
                for group in batches(extents):
                    self._append(base, group)
                appended = True
            finally:
                core.log_done(appended)

    def _append(self, base, extents):
        writes = [(off, self.image.read(off, length))
                  for off, length in extents]
        self._seq += 1
        entry = writelog.encode(self._seq, writes)
        # A new segment after a COMMIT; after a full one, or first here,
        # a rolled one with the same base (writelog.py).
        by_commit = self._segment_base is not _UNKNOWN and \
            base != self._segment_base
        full = self._segment_bytes + len(entry) > writelog.MAX_SEGMENT
        new = self._segment is None or by_commit or full
        rolled = new and not by_commit
        segment = self._next_segment if new else self._segment
        deadline = time.monotonic() + self.timeout if self.timeout else None
        while True:
            try:
                self.backend.log_append(self.image.id, segment, entry,
                                        self.image.epoch, base_version=base,
                                        new=new, rolled=rolled)
                break
            except exception.Fenced as e:
                LOG.error('flush of %s refused: %s', self.image.id, e)
                raise OSError(errno.EIO, str(e))
            except (exception.BackendUnavailable, exception.BackendFull) as e:
                self.retries += 1
                if self.image._closing:
                    # The agent stops: the blocks stay owed (log.bin) to
                    # the next agent's first flush; this one fails.
                    raise OSError(errno.EIO, 'the agent is stopping: %s'
                                  % e)
                if deadline is not None and time.monotonic() >= deadline:
                    LOG.error('flush of %s failed after %.0f s: %s',
                              self.image.id, self.timeout, e)
                    raise OSError(errno.ETIMEDOUT, str(e))
                LOG.warning('flush of %s waits for the cluster: %s',
                            self.image.id, e)
                time.sleep(RETRY_SECONDS)
                if new:
                    # It may have been registered or made: never reuse
                    # a number (a made segment refuses another make).
                    self._next_segment += 1
                    segment = self._next_segment
        crashpoint.reached('log-appended')
        if new:
            self._segment, self._segment_base = segment, base
            self._next_segment = segment + 1
            self._segment_bytes = 0
        self._segment_bytes += len(entry)
        self.entries += 1
        self.bytes += len(entry)

    def trim(self, stable):
        """Drop the segments stable version ``stable`` covers (never the
        one being appended to). Flushes go on meanwhile.
        """
        _, segments = self.backend.log_state(self.image.id)
        current = self._segment
        drop = [s for s in writelog.covered(segments, stable)
                if s != current]
        if drop:
            self.backend.log_drop(self.image.id, drop, self.image.epoch)
            crashpoint.reached('log-dropped')

    def forget(self):
        """Drop every segment (a detach: nothing is owed any more)."""
        _, segments = self.backend.log_state(self.image.id)
        if segments:
            self.backend.log_drop(self.image.id, sorted(segments),
                                  self.image.epoch)
            crashpoint.reached('log-dropped')
        self._segment, self._segment_base = None, _UNKNOWN

    def stats(self):
        return {'entries': self.entries, 'bytes': self.bytes,
                'retries': self.retries}
