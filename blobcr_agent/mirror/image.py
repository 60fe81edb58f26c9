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

"""An image attached to this host: the local mirror of one repository image.

The hypervisor reads and writes the image through the FUSE file system;
every request is one call into the native core (``_native.Mirror``),
which keeps the chunk states. This module adds what needs the
repository: lazy fetch of absent chunks from the version the image was
attached from, and CHECKPOINT (COMMIT); persister.py persists the
versions in flight, recovery.py resumes them after a crash of the agent,
prefetch.py keeps restart profiles and prefetches.

Files in the image's cache directory::

    data.raw, redirect.raw, precopy.raw, state.bin   the native core's
    meta.json      image id, attached version, last committed version,
                   the versions in flight (``persisting``, the oldest,
                   and ``following``), the version registered ahead for
                   the next checkpoint, unused (``reserved``,
                   reserve.py), the boot id (cache.py: a cache from
                   another boot is refused)
    journal        "index digest" of every chunk of the oldest version
                   in flight the persister handed to the repository, for
                   resuming after a crash
"""

import collections
import contextlib
import json
import logging
import os
import threading
import time

from blobcr_agent import _native
from blobcr_agent import crashpoint
from blobcr_agent.mirror import cache
from blobcr_agent.mirror import flushlog as flushlog_mod
from blobcr_agent.mirror import hints as hints_mod
from blobcr_agent.mirror import persister as persister_mod
from blobcr_agent.mirror import prefetch as prefetch_mod
from blobcr_agent.mirror import readahead as readahead_mod
from blobcr_agent.mirror import recovery
from blobcr_agent.mirror import reserve as reserve_mod
from blobcr_agent.mirror import taken as taken_mod
from blobcr_agent.mirror import upload_ahead as upload_ahead_mod
from blobcr_agent.repository import deltas
from blobcr_agent.repository import image as image_mod
from blobcr_common import exception

LOG = logging.getLogger(__name__)

MODES = ('selective-cow', 'live-cow', 'live-precopy', 'offline')
BusyError = _native.BusyError
# Register the next version ahead (reserve.py), off the checkpoint's ack
# path: on unless this is 0/no/false/off (or an AttachedImage is told
# reserve=False). An unused reservation is one pending entry while the
# image is attached, failed at the detach (GC prunes it later).
RESERVE_AHEAD_ENV = 'BLOBCR_RESERVE_AHEAD'


def reserve_ahead_default():
    return os.environ.get(RESERVE_AHEAD_ENV, '1').lower() not in (
        '0', 'no', 'false', 'off')


class AttachedImage(object):

    def __init__(self, repo, image, version, cache_dir, mode='selective-cow',
                 cow_chunks=64, adaptive=True, prefetch=True, cow_spill_mb=0,
                 reserve=None, incoming=False, readahead_chunks=64,
                 delta_tracking_mb=64, hints=None, upload_ahead=0.0,
                 durability='host', flush_timeout=0.0, cache_reserve_mb=64):
        if mode not in MODES:
            raise exception.InvalidInput('unknown mirror mode %r (choose '
                                         'from %s)' % (mode, ', '.join(MODES)))
        self.repo = repo
        header = repo.image(image)
        self.id = header.id
        self.cache_dir = cache_dir
        os.makedirs(cache_dir, exist_ok=True)
        self._meta_path = os.path.join(cache_dir, 'meta.json')
        meta = self._load_meta()
        if meta and meta['image'] != self.id:
            raise exception.InvalidInput(
                '%s holds the mirror of image %s, not %s'
                % (cache_dir, meta['image'], self.id))
        if meta and version is not None and version != meta['attached']:
            raise exception.InvalidInput(
                'image %s is already mirrored from version %d here; detach '
                'it before attaching version %d'
                % (self.id, meta['attached'], version))
        if meta:
            # Taken over by another host (this one was lost): nothing of
            # this cache may be served or published any more.
            cache.check_epoch(meta, cache_dir, header)
        # From another boot: rebuilt from its flush record (power loss).
        meta = cache.recover(repo, meta, cache_dir, header)
        # Chosen at the first attach (the volume type's), kept across
        # restarts of the agent.
        durability = (meta or {}).get('durability', durability)
        flushlog_mod.check_durability(repo.backend, durability)
        if not meta and not incoming:
            flushlog_mod.refuse_unfolded(repo.backend, header)
        if not meta:
            # A blank image (no version yet) reads as zeros.
            attached = None
            if version is not None or any(
                    v.state == image_mod.STABLE for v in header.versions):
                attached = header.stable_version(version).number
            meta = cache.stamp({'image': self.id, 'attached': attached,
                                'last': attached, 'persisting': None,
                                'mode': mode, 'epoch': header.epoch,
                                'durability': durability})
        self.holder = os.path.abspath(cache_dir)
        # GC keeps what untouched chunks are fetched from, and the last
        # checkpoint the next one is built on, while the image is
        # attached here (service.detach releases them).
        for number in {meta['attached'], meta['last']} - {None}:
            repo.pin(self.id, number, self.holder)
        self.meta = meta
        # The header's epoch at the attach: every version this mirror
        # registers or finishes is refused once it moved on (take-over).
        self.epoch = meta.get('epoch', 0)
        self.header = header
        self.size = header.size
        self.chunk_size = header.chunk_size
        self.mode = mode
        self.core = _native.Mirror(
            cache_dir, header.size, header.chunk_size, mode, cow_chunks,
            adaptive, spill_chunks=(cow_spill_mb << 20) // header.chunk_size)
        # Room the spill leaves for this agent's durable writes and the
        # other caches (core_spill.c).
        self.core.set_spill_reserve(cache_reserve_mb << 20)
        # The flush record matches what was opened (a recovery after a
        # power loss folded its redirected chunks back).
        self.core.flush()
        self.durability = durability
        # `cluster`: a guest's flush also appends to the image's
        # write-ahead log in the cluster (flushlog.py).
        self.flushlog = flushlog_mod.FlushLog(self, flush_timeout) \
            if durability == 'cluster' else None
        self._fetch_lock = threading.Lock()
        self._fetching = {}
        # Held by a checkpoint, by exclusive() and by close(); close()
        # may run inside exclusive() (a detach): reentrant.
        self._commit_lock = threading.RLock()
        # meta.json is saved from checkpoints and from the persister:
        # edits under the lock, writes in the order of the edits
        # (_write_meta), each synced outside the lock.
        self._meta_lock = threading.Lock()
        self._meta_write_lock = threading.Lock()
        self._meta_edits = self._meta_written = self._meta_replaced = 0
        # Held from registering a version to queueing its persist (see
        # Persister): a failure is handled under it.
        self._gate = threading.Lock()
        # What the persister stored, for sub-chunk deltas (deltas.py).
        self.tracker = deltas.Tracker(delta_tracking_mb << 20)
        self.persister = persister_mod.Persister(self, self._gate)
        # Snapshots the core keeps in flight at once (1: a checkpoint
        # waits for the previous persist).
        self.max_in_flight = getattr(self.core, 'max_snapshots', 1)
        # The next version registered ahead, off the checkpoint's ack
        # path, where checkpoints are pipelined (selective-cow): the
        # other modes register it in the checkpoint, as before.
        if reserve is None:
            reserve = reserve_ahead_default()
        # Incoming (handoff.py): nothing is registered or prefetched
        # from a base the handoff replaces; rebase() starts both.
        self._wanted = {'reserve': self.max_in_flight > 1 and reserve,
                        'prefetch': prefetch}
        self.reserver = reserve_mod.Reserver(
            self, enabled=self._wanted['reserve'] and not incoming)
        self._closing = False
        self._closed = False        # close() was called (and returned)
        self.attached_at = time.time()
        self.fetched_chunks = 0
        # Guest reads that fetched a chunk themselves (none on its way).
        self.read_fetches = 0
        self.fetched_bytes = 0
        # Bytes fetched, by what asked: 'read' (a guest's read waited for
        # them), 'write', 'readahead', 'profile', 'hint'.
        self.fetched_by = collections.Counter()
        # Where the fetches' time went, summed over the threads that
        # fetch (concurrent fetches overlap): a restart's trace.
        self.fetch_times = collections.Counter()
        self._phases = {}
        self.last_phases = {}
        # Checkpoints refused Busy by the room check, before registering
        # a version (busy_aborted: registered, then refused by the COMMIT
        # itself, the version aborted).
        self.busy_prechecked = 0
        self.busy_aborted = 0
        # Checkpoints that waited for room in the copy-on-write buffer.
        self.room_waits = 0
        self.incoming = None        # handoff.Incoming, set by the service
        self.versions = {}          # version -> 'pending'|'stable'|'failed'
        self.timing = {}            # version -> {committed, done} (time)
        self.last_error = None
        # A checkpoint that took its reserved version and was killed
        # before meta.json recorded it (taken.py): in flight.
        taken_mod.fold(self.meta, cache_dir,
                       persister_mod.in_flight(self.meta))
        self._taken = taken_mod.Slot(cache_dir)
        self._save_meta()
        recovery.recover(self)
        # Who registers this cache's versions from now on: the next start
        # fails what it registered and never recorded (recovery.py).
        with self._meta_lock:
            self.meta['owner'] = repo.owner
            self._save_meta()
        self.readahead = readahead_mod.ReadAhead(self,
                                                 maximum=readahead_chunks)
        self._prefetcher = prefetch_mod.start(self) \
            if prefetch and not incoming else None
        # Restarted from a group checkpoint: share reads with the other
        # members restarting (hints.py).
        self.hints = hints
        self.hint_scope = None
        self.hint_follower = None
        if hints is not None and prefetch and not incoming:
            self.hint_scope = hints_mod.scope_of(repo, header,
                                                 self.attached_version)
            if self.hint_scope is not None:
                self.hint_follower = hints.join(self)
        self.reserver.request()
        # Dirty chunks sent under the reservation before the checkpoint
        # (upload_ahead.py): only where versions are registered ahead.
        upload_ahead = upload_ahead_mod.interval_from_env(upload_ahead)
        self.uploader = upload_ahead_mod.UploadAhead(self, upload_ahead) \
            if upload_ahead > 0 and self._wanted['reserve'] else None

    # -- metadata --------------------------------------------------------

    def _load_meta(self):
        try:
            with open(self._meta_path) as f:
                return json.load(f)
        except FileNotFoundError:
            return None
        except ValueError as e:
            raise exception.CorruptObject('mirror', self._meta_path, str(e))

    def _save_meta(self):
        """Save ``self.meta``, synced; the caller holds ``_meta_lock``
        (or is alone: at attach). Where an edit runs beside checkpoints,
        ``edit_meta`` syncs outside the lock instead.
        """
        self._write_meta(*self._meta_text())

    def edit_meta(self, change):
        """Apply ``change(meta)`` under the lock; unless it returns
        False, save the result, synced, outside the lock: another edit
        (a checkpoint's, in memory) never waits for this one's sync.
        Returns whether it saved.
        """
        with self._meta_lock:
            if change(self.meta) is False:
                return False
            saved = self._meta_text()
        self._write_meta(*saved)
        return True

    def _meta_text(self):
        # Under _meta_lock: the edit's number orders the writes.
        self._meta_edits += 1
        return json.dumps(self.meta), self._meta_edits

    def _write_meta(self, text, edit):
        # Synced: after a power loss the flush record (cache.py) is read
        # with the base, the last checkpoint and the versions in flight
        # this file names. A few per checkpoint, never per guest write.
        with self._meta_write_lock:
            if self._meta_written >= edit:
                # A later edit, which holds this one, is saved and synced.
                return
            if self._meta_replaced >= edit:
                # A later edit's text is in place, its sync failed: never
                # written over with this older one; synced again.
                self._sync_meta()
                self._meta_written = self._meta_replaced
                return
            tmp = self._meta_path + '.tmp'
            with open(tmp, 'w') as f:
                f.write(text)
                f.flush()
                os.fdatasync(f.fileno())
            os.replace(tmp, self._meta_path)
            self._meta_replaced = edit
            self._sync_meta(data=False)
            self._meta_written = edit
        crashpoint.reached('meta')

    def _sync_meta(self, data=True):
        if data:
            fd = os.open(self._meta_path, os.O_RDONLY)
            try:
                os.fdatasync(fd)
            finally:
                os.close(fd)
        dir_fd = os.open(self.cache_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    @property
    def attached_version(self):
        return self.meta['attached']

    # -- I/O -------------------------------------------------------------

    def read_base(self, offset, length):
        """Bytes of the version attached from, read from the repository
        and not installed (an incoming image's early reads).
        """
        if self.attached_version is None:
            return bytes(length)
        # Pinned: obsoleted meanwhile, it is still whole for this mirror.
        return self.repo.read(self.id, self.attached_version, offset, length,
                              pinned=True)

    def record_detaching(self, detaching):
        """Remember that a detach waits for this image's persists (the
        service's background detach), so that a restarted agent resumes
        it; or that it does not any more.
        """
        # The pins first: other hosts wait while they say so.
        self.repo.mark_detaching(self.id, self.holder, bool(detaching))
        with self._meta_lock:
            self.meta['detaching'] = bool(detaching)
            self._save_meta()

    def record_incoming(self, source):
        """Remember that the image waits for ``source``'s handoff, so
        that a restarted agent keeps it incoming (rebase() forgets it).
        """
        with self._meta_lock:
            self.meta['incoming'] = source
            self._save_meta()

    def rebase(self, version):
        """Take stable ``version`` as the base of an image nothing was
        written to, fetched into or checkpointed since its attach (the
        handoff of a live migration): its chunks are read from there on,
        and the image is no longer incoming. Refused (InvalidInput) once
        the image is being detached or closed.
        """
        # Called in a FUSE request, which a detach waits for while it
        # holds the commit lock (the native loop's remove()): stop
        # waiting for the lock once the image closes.
        locked = False
        while not (locked or self._closing):
            locked = self._commit_lock.acquire(timeout=0.05)
        try:
            if self._closing:
                raise exception.InvalidInput(
                    'image %s is being detached: it takes no new base'
                    % self.id)
            with self._fetch_lock:
                stats = self.core.stats()
                if stats['present'] or stats['dirty'] or self._fetching or \
                        self.persister.versions() or \
                        self.meta['last'] != self.meta['attached']:
                    raise exception.InvalidInput(
                        'image %s was used since its attach (%d chunks '
                        'present): it cannot take version %s as its base'
                        % (self.id, stats['present'], version))
                header = self.repo.image(self.id)
                number = header.stable_version(version).number
                old = self.meta['attached']
                self.repo.pin(self.id, number, self.holder)
                with self._meta_lock:
                    # One write: a restart after it finds the new base
                    # and does not wait for a handoff any more.
                    self.meta.update(attached=number, last=number,
                                     incoming=None)
                    self._save_meta()
                self.header = header
                self.tracker.forget()
                if old not in (None, number):
                    self.repo.unpin_quietly(self.id, old, self.holder)
        finally:
            if locked:
                self._commit_lock.release()
        self.reserver.enabled = self._wanted['reserve']
        self.reserver.request()
        if self._wanted['prefetch'] and self._prefetcher is None:
            self._prefetcher = prefetch_mod.start(self)

    def read(self, offset, length):
        while True:
            result = self.core.read(offset, length)
            if not isinstance(result, list):
                return result
            self.fetch_missed(result)

    def flush(self, datasync=True):
        """A guest's flush: what it wrote before survives a power loss of
        the host and, `cluster`, the loss of the host (flushlog.py).
        """
        self.core.flush(datasync)
        if self.flushlog is not None:
            self.flushlog.flush()

    def _log_order(self):
        return self.flushlog.order() if self.flushlog is not None \
            else contextlib.nullcontext()

    def forget_log(self):
        """At a detach, once its last version is stable (or its writes
        discarded): the write log holds nothing owed any more.
        """
        if self.flushlog is not None:
            self.flushlog.forget()

    def write(self, offset, data, nonblock=False):
        while True:
            result = self.core.write(offset, data, nonblock)
            if not isinstance(result, list):
                return result
            self.fetch(result)

    def fetch_missed(self, indices):
        """A guest's read missed ``indices`` (the core's callback): fetch
        them, and what comes after them when the reads are sequential
        (readahead.py), in the background.
        """
        self.readahead.missed(indices)
        if self.hint_follower is not None:
            # Its guest reads: the hints waiting for that go now.
            self.hint_follower.activate()
        if self.fetch(indices, reason='read'):
            self.read_fetches += 1

    def fetch(self, indices, reason='write'):
        """Make chunks present, fetching each from the attached version
        once even when several readers want it at the same time; returns
        how many this call fetched itself (not already on their way).
        ``reason`` names what asked, for the stats.
        """
        mine, theirs = [], []
        with self._fetch_lock:
            for index in indices:
                if self.core.is_present(index):
                    continue
                event = self._fetching.get(index)
                if event is None:
                    self._fetching[index] = threading.Event()
                    mine.append(index)
                else:
                    theirs.append(event)
        try:
            if mine:
                self._fetch_from_repository(mine, reason)
        finally:
            self._release(mine)        # the rest, on error
        for event in theirs:
            event.wait()
        return len(mine)

    def _release(self, indices):
        with self._fetch_lock:
            for index in indices:
                event = self._fetching.pop(index, None)
                if event is not None:
                    event.set()

    def _fetch_from_repository(self, indices, reason):
        # Each chunk is installed and its waiters woken as soon as it
        # arrives, not when the whole batch has (_install).
        done = set()
        times = {}
        started = time.perf_counter()
        if self.attached_version is not None:
            for index, data in self.repo.fetch(self.header,
                                               self.attached_version,
                                               set(indices), times):
                mark = time.perf_counter()
                self._install(index, data, len(data))
                times['install'] = times.get('install', 0.0) + \
                    time.perf_counter() - mark
                self.fetched_by[reason] += len(data)
                done.add(index)
        for index in indices:
            if index not in done:
                # An all-zero chunk is not stored: nothing to fetch.
                self._install(index, bytes(self.header.chunk_len(index)), 0)
        times['total'] = time.perf_counter() - started
        times['calls'] = 1
        with self._fetch_lock:
            self.fetch_times.update(times)     # (adds: a Counter)

    def _install(self, index, data, fetched):
        self.core.install(index, data)
        self.fetched_chunks += 1
        self.fetched_bytes += fetched
        self._release([index])

    # -- CHECKPOINT ------------------------------------------------------

    def checkpoint(self, hold=None, wait=None, made_by='', group=None):
        """COMMIT: snapshot the image now, persist it in the background.

        Returns ``(version, chunks, held_ms)`` as soon as the snapshot is
        taken. Versions still being persisted do not delay it while the
        core has room for another snapshot in flight (``max_in_flight``);
        otherwise it waits for room, as it does while the copy-on-write
        buffer is full (at most ``wait`` s, then Busy with nothing
        committed). The version is registered before entering
        ``hold`` (a context manager that keeps the guest still: suspend
        or fsfreeze), so that the guest is held for the snapshot alone.
        In offline mode, returns (and releases the hold) once the version
        is stable. ``last_phases`` tells where the time of the last one
        went (ms): ``lock`` (this image's checkpoint lock), ``room`` (the
        wait for room in flight), ``gate``, ``register`` (the version in
        the repository), ``record`` (the cache metadata), ``commit`` (the
        COMMIT itself, as this thread saw it), ``core_wait`` and
        ``drain`` (of it, the wait for the core's lock, and the drain of
        the writes in flight under it), ``held`` (the guest kept still:
        the core's lock held by the COMMIT, or with a ``hold`` from its
        entry to its release), ``queue`` (queueing the persist, after
        the hold). ``made_by`` (Version.made_by) and
        ``group``
        (Version.group) cost no header update of their own (_snapshot).
        """
        deadline = None if wait is None else time.monotonic() + wait
        phases = self._phases = {}
        mark = time.perf_counter()
        if not self._commit_lock.acquire(
                timeout=-1 if wait is None else wait):
            raise exception.Busy('image %s is being checkpointed or '
                                 'detached; try again' % self.id)
        mark = self._phase('lock', mark)
        try:
            if self._closing:
                raise exception.InvalidInput('image %s is being detached'
                                             % self.id)
            if self.incoming is not None and not self.incoming.done.is_set():
                # Its base is replaced at the handoff: a version built on
                # it now would be an old state published as the newest.
                raise exception.InvalidInput(
                    'image %s is live-migrating from %s: checkpoint it '
                    'there until its handoff' % (self.id,
                                                 self.incoming.source))
            left = None if deadline is None else \
                max(0, deadline - time.monotonic())
            if not self.persister.wait(left, room=self.max_in_flight - 1):
                raise exception.Busy(
                    'versions %s of %s are still being persisted; try again'
                    % (', '.join(map(str, self.persister.versions())),
                       self.id))
            mark = self._phase('room', mark)
            while True:
                with self._gate:
                    self._phase('gate', mark)
                    try:
                        version, count, held_ms = self._snapshot(
                            hold, None if deadline is None
                            else max(0, deadline - time.monotonic()),
                            made_by, group)
                        break
                    except exception.Busy:
                        if deadline is not None and \
                                time.monotonic() >= deadline:
                            raise
                # Under load, the copy-on-write buffer is full until the
                # persister takes copied chunks: wait for room, never
                # refuse a checkpoint because of load alone.
                mark = self._wait_for_buffer(deadline, phases)
            # The next version, registered while this one's persist
            # starts: off the next checkpoint's ack path.
            self.reserver.request()
            self.last_phases = phases
            if self.mode == 'offline':
                # The core holds writes until the version is stable.
                waited = time.perf_counter()
                self.persister.wait()
                held_ms += (time.perf_counter() - waited) * 1000
            return version, count, held_ms
        finally:
            if self.mode == 'offline':
                self.core.release_hold()    # on every path
            self._commit_lock.release()

    def _wait_for_buffer(self, deadline, phases):
        """Wait until the core has room for a COMMIT (or ``deadline``);
        the time goes to the ``room`` phase. Returns now.
        """
        start = time.perf_counter()
        self.room_waits += 1
        while self.core.commit_busy() is not None and (
                deadline is None or time.monotonic() < deadline):
            time.sleep(0.005)
        now = time.perf_counter()
        phases['room'] = phases.get('room', 0) + (now - start) * 1000
        return now

    def _snapshot(self, hold, wait=None, made_by='', group=None):
        """Register the version (or take the one registered ahead,
        reserve.py) and record it in flight (before the guest is held:
        nothing after the COMMIT may fail), COMMIT under ``hold``, queue
        the persist; the gate is held. ``wait``: how long a registration
        ahead under way may be waited for. ``made_by`` and ``group`` go
        into the registration, or, for a version registered ahead, into
        the update that makes it stable (Commit.mark), kept until then in
        the cache's metadata (``marks``) for a recovery to resume it with.
        """
        # Room first: a COMMIT the core would refuse now (its
        # copy-on-write buffer full) must not register a version in the
        # repository only to abort it. The room can still go before the
        # COMMIT (then it is Busy and the version aborted, as before).
        busy = self.core.commit_busy()
        if busy is not None:
            self.busy_prechecked += 1
            raise exception.Busy('image %s: %s; try again' % (self.id, busy))
        mark = time.perf_counter()
        after = self.persister.newest()
        last = self.meta['last']
        reserved = self.reserver.take(after, last, 30 if wait is None
                                      else wait)
        marks = {}
        if reserved is not None:
            pending = reserved.commit
            # Replaces the marks of an earlier try that was refused Busy
            # and put this reservation back (none: no marks).
            pending.mark(made_by, group)
            if made_by or group is not None:
                marks = {pending.version: {'made_by': made_by,
                                           'group': group}}
            self._phases['reserved'] = 1
        else:
            parent, after = reserve_mod.successor_of(after, last)
            pending = self.repo.begin_commit(self.id, epoch=self.epoch,
                                             parent=parent, after=after,
                                             made_by=made_by, group=group)
            self._phases['reserved'] = 0
        mark = self._phase('register', mark)
        # Taken: no longer reserved, in the same record that names it in
        # flight (recovery tells the two apart). A reserved version is
        # recorded without a sync on the ack's path (taken.py).
        in_slot = reserved is not None and \
            self._taken.fits(pending.version, marks)
        try:
            if in_slot:
                self._take_reserved(pending.version, marks)
            else:
                self._add_in_flight(pending.version, marks, **(
                    {'reserved': None} if reserved is not None else {}))
        except BaseException as e:
            pending.abort('snapshot not taken: %s' % e)
            raise
        held_from = self._phase('record', mark)
        committed = False
        try:
            try:
                with hold or contextlib.nullcontext():
                    # Before the COMMIT: a write in between only makes
                    # the persist hash a chunk sent ahead
                    # (Commit.sent_unchanged).
                    pending.commit_clock = self.core.write_clock()
                    before = time.perf_counter()
                    try:
                        with self._log_order():
                            count = self.core.commit(self.mode == 'offline')
                            if self.flushlog is not None:
                                self.flushlog.committed(pending.version)
                    except BusyError as e:
                        self.busy_aborted += 1
                        raise exception.Busy('image %s: %s; try again'
                                             % (self.id, e))
                    committed = True
                    self._phase('commit', before)
            finally:
                # After the hold (a quiesced guest runs again first), and
                # even if its release failed: the COMMIT is done, its
                # persist must be queued.
                if committed:
                    held_until = time.perf_counter()
                    self.versions[pending.version] = image_mod.PENDING
                    self.timing[pending.version] = {
                        'committed': time.time()}
                    self.persister.submit(pending)
                    self._phase('queue', held_until)
        except BaseException as e:
            if not committed:
                kept = {}
                # Busy before the COMMIT: the reservation is kept for the
                # next try (no abort and register again).
                if reserved is not None and isinstance(e, exception.Busy) \
                        and self.reserver.put_back(reserved):
                    kept = {'reserved': reserved.version}
                else:
                    pending.abort('snapshot not taken: %s' % e)
                try:
                    self._drop_in_flight(pending.version, **kept)
                except OSError as again:
                    # Recovery finds it failed in the repository.
                    LOG.error('cache metadata of %s not updated: %s',
                              self.id, again)
                if in_slot:
                    try:
                        self._taken.record(None)
                    except OSError as again:
                        # A restart folds it in flight only while it is
                        # the one reserved: failed then (no snapshot).
                        LOG.error('slot of %s not cleared: %s', self.id,
                                  again)
            raise
        # Held: a guest kept still by ``hold`` (suspend, fsfreeze) from
        # entering it to its release, both included; without one, the
        # guest's writes wait only while the COMMIT holds the core's lock
        # (timed by the core: not the wait for the lock, nor this
        # thread's wait for the GIL after it).
        try:
            core = self.core.commit_times()
        except Exception:       # a figure only: never fail a checkpoint
            core = {'wait_ms': 0.0, 'drain_ms': 0.0,
                    'held_ms': self._phases['commit']}
        self._phases.update(core_wait=core['wait_ms'],
                            drain=core['drain_ms'])
        held = ((held_until - held_from) * 1000 if hold is not None
                else core['held_ms'])
        self._phases['held'] = held
        return pending.version, count, held

    def _phase(self, name, since):
        """Record ``name`` as the time since ``since``; return now."""
        now = time.perf_counter()
        self._phases[name] = (now - since) * 1000
        return now

    def _record_in_flight(self, versions, **more):
        """Save the versions in flight (oldest first) in the cache's
        metadata, with ``more`` fields.
        """
        self.edit_meta(lambda meta: self._set_in_flight(versions, **more))

    def _set_in_flight(self, versions, marks=None, **more):
        # In self.meta (under _meta_lock). Marks (made_by, group) of
        # versions in flight: only theirs.
        kept = {k: v for k, v in (self.meta.get('marks') or {}).items()
                if int(k) in versions}
        kept.update((str(k), v) for k, v in (marks or {}).items())
        self.meta.update(persisting=versions[0] if versions else None,
                         following=versions[1:], marks=kept, **more)

    def _take_reserved(self, version, marks):
        """Record ``version``, taken from its reservation, in flight:
        in the slot (taken.py), then in memory; meta.json gets it with
        its next save, synced off the ack's path.
        """
        self._taken.record(version, marks)
        crashpoint.reached('taken')
        with self._meta_lock:
            self._set_in_flight(
                persister_mod.in_flight(self.meta) + [version],
                marks=marks, reserved=None)

    # A checkpoint (under the gate) and the persister (not under it)
    # change the list at the same time: each edits the list the
    # metadata holds, under its lock, rather than saving one it built
    # before (which could drop a version the other just recorded).

    def marks_in_flight(self):
        """``{version: {"made_by", "group"}}`` of the versions in flight
        that get them when they turn stable (Commit.mark).
        """
        with self._meta_lock:
            return {int(k): dict(v) for k, v in
                    (self.meta.get('marks') or {}).items()}

    def _add_in_flight(self, version, marks=None, **more):
        self.edit_meta(lambda meta: self._set_in_flight(
            persister_mod.in_flight(meta) + [version], marks=marks, **more))

    def _drop_in_flight(self, version, **more):
        self.edit_meta(lambda meta: self._set_in_flight(
            [v for v in persister_mod.in_flight(meta) if v != version],
            **more))

    def _persisted(self, version):
        """From the persister: ``version`` is stable (and pinned for this
        mirror by its finish), the next one's base: the previous base's
        pin is released.
        """
        self.timing.setdefault(version, {})['done'] = time.time()
        self.versions[version] = image_mod.STABLE
        previous = self.meta['last']
        self._drop_in_flight(version, last=version)
        if previous not in (None, version, self.attached_version):
            self.repo.unpin_quietly(self.id, previous, self.holder)
        if self.flushlog is not None:
            try:
                self.flushlog.trim(version)
            except exception.BlobCRError as e:
                # The next stable version drops them.
                LOG.warning('write log of %s not trimmed: %s', self.id, e)

    def _failed(self, versions, why):
        """From the persister or recovery: ``versions`` (all in flight)
        failed, and the core has made their chunks dirty again.
        """
        for version in versions:
            self.versions[version] = image_mod.FAILED
        self.last_error = why
        # The version registered ahead to follow them fails with them.
        self.reserver.followed_failed(versions)
        LOG.warning('versions %s of %s failed: %s',
                    ', '.join(map(str, versions)), self.id, why)
        self._record_in_flight([])

    def exclusive(self, closing=False):
        """Hold off checkpoints (a context manager); with ``closing``,
        refuse every later one.
        """
        image = self

        class _Exclusive(object):
            def __enter__(self):
                image._commit_lock.acquire()
                if closing:
                    image._closing = True

            def __exit__(self, *exc):
                image._commit_lock.release()
        return _Exclusive()

    def wait_persisted(self, timeout=None):
        """Wait for the background persists; True if none is running."""
        return self.persister.wait(timeout)

    def version_state(self, number):
        state = self.versions.get(number)
        if state is not None:
            return state
        return self.repo.image(self.id).version(number).state

    # -- restart profile and prefetch -------------------------------------

    def save_profile(self):
        """Store the first-read order since attach with the version."""
        return prefetch_mod.save_profile(self)

    def stats(self):
        s = self.core.stats()
        s.update(fetched_chunks=self.fetched_chunks,
                 read_fetches=self.read_fetches,
                 readahead_chunks=self.readahead.issued,
                 deltas_stored=self.tracker.deltas_stored,
                 fetched_bytes=self.fetched_bytes,
                 fetched_by=dict(self.fetched_by),
                 fetch_ms={k: (v if k == 'calls' else round(v * 1000, 1))
                           for k, v in self.fetch_times.items()},
                 hint_scope=self.hint_scope,
                 **(self.hints.stats(self.id) if self.hint_scope else {}),
                 busy_prechecked=self.busy_prechecked,
                 busy_aborted=self.busy_aborted,
                 room_waits=self.room_waits,
                 reserved=self.meta.get('reserved'),
                 reservations_used=self.reserver.used,
                 reservations_aborted=self.reserver.aborted,
                 ahead_used=self.persister.ahead_used,
                 ahead_unhashed=self.persister.ahead_unhashed,
                 objects_put=self.persister.objects_put,
                 deltas_packed=self.persister.deltas_packed,
                 delta_packs=self.persister.delta_packs,
                 pack_moved=self.persister.pack_moved,
                 **(self.uploader.stats() if self.uploader else {}),
                 **({'log_' + k: v for k, v in self.flushlog.stats().items()}
                    if self.flushlog is not None else {}),
                 attached_version=self.attached_version,
                 last_version=self.meta['last'],
                 persisting=self.meta['persisting'],
                 in_flight=self.persister.versions(),
                 incoming=None if self.incoming is None
                 else self.incoming.status())
        return s

    def close(self, timeout=None):
        """Stop serving; wait up to ``timeout`` s for a checkpoint being
        taken, then for the persists. True if closed; False if a
        checkpoint or a persist is still running: it is left (parked) to
        resume from its journal at the next start.
        """
        self._closing = True
        self._closed = True
        if self.uploader is not None:
            self.uploader.stop()
        # No version is registered ahead any more; the one that was is
        # failed (one header write): it must not stay pending.
        self.reserver.stop()
        # A checkpoint past its "closing?" check would otherwise COMMIT
        # (or queue a persist) after the wait below, into a closed core.
        if not self._commit_lock.acquire(
                timeout=-1 if timeout is None else timeout):
            LOG.warning('%s closed while a checkpoint is being taken: its '
                        'version resumes or fails at the next start',
                        self.id)
            return False
        try:
            if not self.wait_persisted(timeout):
                LOG.warning('persist of version %s of %s parked: it resumes '
                            'at the next start', self.meta['persisting'],
                            self.id)
                return False
            if self._prefetcher is not None:
                self._prefetcher.join()
            if self.hint_scope is not None:
                self.hints.leave(self)
            self.readahead.stop()
            self.core.close()
            self._taken.close()
            return True
        finally:
            self._commit_lock.release()
