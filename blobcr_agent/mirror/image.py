"""An image attached to this host: the local mirror of one repository image.

The hypervisor reads and writes the image through the FUSE file system;
every request is one call into the native core (``_native.Mirror``),
which keeps the chunk states. This module adds what needs the
repository: lazy fetch of absent chunks from the version the image was
attached from, CHECKPOINT (COMMIT) with its background persister, the
restart profile and prefetcher, and recovery after a crash of the agent.

Files in the image's cache directory::

    data.raw, redirect.raw, precopy.raw, state.bin   the native core's
    meta.json      image id, attached version, last committed version,
                   the version being persisted, the boot id (cache.py:
                   a cache from another boot is refused)
    journal        "index digest" of every chunk the persister handed to
                   the repository, for resuming after a crash
"""

import contextlib
import json
import logging
import os
import threading
import time

from blobcr_agent import _native
from blobcr_agent import exception
from blobcr_agent.mirror import cache
from blobcr_agent.repository.backends import base
from blobcr_agent.repository import chunks
from blobcr_agent.repository import image as image_mod

LOG = logging.getLogger(__name__)

MODES = ('selective-cow', 'live-cow', 'live-precopy', 'offline')
BusyError = _native.BusyError


class AttachedImage(object):

    def __init__(self, repo, image, version, cache_dir, mode='selective-cow',
                 cow_chunks=64, adaptive=True, prefetch=True):
        if mode not in MODES:
            raise exception.InvalidInput('unknown mirror mode %r (choose '
                                         'from %s)' % (mode, ', '.join(MODES)))
        self.repo = repo
        header = repo.image(image)
        self.id = header.id
        self.cache_dir = cache_dir
        os.makedirs(cache_dir, exist_ok=True)
        self._meta_path = os.path.join(cache_dir, 'meta.json')
        meta = cache.check_boot(self._load_meta(), cache_dir)
        if meta and meta['image'] != self.id:
            raise exception.InvalidInput(
                '%s holds the mirror of image %s, not %s'
                % (cache_dir, meta['image'], self.id))
        if meta and version is not None and version != meta['attached']:
            raise exception.InvalidInput(
                'image %s is already mirrored from version %d here; detach '
                'it before attaching version %d'
                % (self.id, meta['attached'], version))
        if not meta:
            # A blank image (no version yet) reads as zeros.
            attached = None
            if version is not None or any(
                    v.state == image_mod.STABLE for v in header.versions):
                attached = header.stable_version(version).number
            meta = cache.stamp({'image': self.id, 'attached': attached,
                                'last': attached, 'persisting': None,
                                'mode': mode})
        self.meta = meta
        self.header = header
        self.size = header.size
        self.chunk_size = header.chunk_size
        self.mode = mode
        self.core = _native.Mirror(cache_dir, header.size, header.chunk_size,
                                   mode, cow_chunks, adaptive)
        self._fetch_lock = threading.Lock()
        self._fetching = {}
        self._commit_lock = threading.Lock()
        self._persister = None
        self._closing = False
        self.fetched_chunks = 0
        self.fetched_bytes = 0
        self.versions = {}          # version -> 'pending'|'stable'|'failed'
        self.timing = {}            # version -> {committed, done} (time)
        self.last_error = None
        self._save_meta()
        self._recover()
        self._prefetcher = None
        if prefetch:
            self.start_prefetch()

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
        tmp = self._meta_path + '.tmp'
        with open(tmp, 'w') as f:
            json.dump(self.meta, f)
        os.replace(tmp, self._meta_path)

    @property
    def attached_version(self):
        return self.meta['attached']

    # -- I/O -------------------------------------------------------------

    def read(self, offset, length):
        while True:
            result = self.core.read(offset, length)
            if not isinstance(result, list):
                return result
            self.fetch(result)

    def write(self, offset, data, nonblock=False):
        while True:
            result = self.core.write(offset, data, nonblock)
            if not isinstance(result, list):
                return result
            self.fetch(result)

    def fetch(self, indices):
        """Make chunks present, fetching each from the attached version
        once even when several readers want it at the same time.
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
                self._fetch_from_repository(mine)
        finally:
            self._release(mine)        # the rest, on error
        for event in theirs:
            event.wait()

    def _release(self, indices):
        with self._fetch_lock:
            for index in indices:
                event = self._fetching.pop(index, None)
                if event is not None:
                    event.set()

    def _fetch_from_repository(self, indices):
        # Each chunk is installed and its waiters woken as soon as it
        # arrives, not when the whole batch has.
        done = set()
        if self.attached_version is not None:
            for index, data in self.repo.fetch(self.header,
                                               self.attached_version,
                                               set(indices)):
                self._install(index, data, len(data))
                done.add(index)
        for index in indices:
            if index not in done:
                # An all-zero chunk is not stored: nothing to fetch.
                self._install(index, bytes(self.header.chunk_len(index)), 0)

    def _install(self, index, data, fetched):
        self.core.install(index, data)
        self.fetched_chunks += 1
        self.fetched_bytes += fetched
        self._release([index])

    # -- CHECKPOINT ------------------------------------------------------

    def checkpoint(self, hold=None, wait=None):
        """COMMIT: snapshot the image now, persist it in the background.

        Returns ``(version, chunks, held_ms)`` as soon as the snapshot is
        taken. If the previous snapshot is still being persisted, waits
        for it first (at most ``wait`` s, then raises Busy with nothing
        committed), and registers the new version, before entering
        ``hold`` (a context manager that keeps the guest still: suspend
        or fsfreeze), so that the guest is held for the snapshot alone.
        In offline mode, returns (and releases the hold) once the version
        is stable.
        """
        if not self._commit_lock.acquire(
                timeout=-1 if wait is None else wait):
            raise exception.Busy('image %s is being checkpointed or '
                                 'detached; try again' % self.id)
        try:
            if self._closing:
                raise exception.InvalidInput('image %s is being detached'
                                             % self.id)
            if not self.wait_persisted(wait):
                raise exception.Busy(
                    'version %s of %s is still being persisted; try again'
                    % (self.meta['persisting'], self.id))
            pending = self.repo.begin_commit(self.id,
                                             parent=self.meta['last'])
            committed = persisting = False
            held_from = time.perf_counter()
            try:
                with hold or contextlib.nullcontext():
                    count = self.core.commit(self.mode == 'offline')
                    committed = True
                    self._persist_in_background(pending)
                    persisting = True
                    if self.mode == 'offline':
                        self.wait_persisted()
                        self.core.release_hold()
            except BaseException as e:
                if not committed:
                    pending.abort('snapshot not taken: %s' % e)
                elif not persisting:
                    # Snapshot taken but its persist never started (its
                    # journal could not be written): give its chunks back
                    # to the next checkpoint.
                    try:
                        self._give_up(pending.version, pending,
                                      'persist not started: %s' % e)
                    except exception.BlobCRError as again:
                        LOG.error('version %d of %s left pending: %s',
                                  pending.version, self.id, again)
                raise
            held_ms = (time.perf_counter() - held_from) * 1000
            return pending.version, count, held_ms
        finally:
            self._commit_lock.release()

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

    def _persist_in_background(self, pending):
        self.meta['persisting'] = pending.version
        self._save_meta()
        self.versions[pending.version] = image_mod.PENDING
        self.timing[pending.version] = {'committed': time.time()}
        self._start_persister(pending, journal_mode='w')

    def _start_persister(self, pending, journal_mode):
        journal = open(os.path.join(self.cache_dir, 'journal'), journal_mode)
        self._persister = threading.Thread(
            target=self._persist, args=(pending, journal),
            name='blobcr-persist-%s' % self.id[:8], daemon=True)
        self._persister.start()

    def _persist(self, pending, journal):
        started = time.monotonic()
        try:
            with journal:
                while True:
                    item = self.core.take()
                    if item is None:
                        break
                    index, data = item
                    d = pending.put(index, data)
                    # No fsync: the journal only has to survive the
                    # agent, and the page cache does that.
                    journal.write('%d %s\n' % (index, d.hex() if d else '-'))
                    journal.flush()
            version = pending.finish()
        except Exception as e:
            LOG.error('persisting version %d of %s failed: %s',
                      pending.version, self.id, e)
            pending.abort('persist failed: %s' % e)
            self.core.snapshot_done(False)
            self.versions[pending.version] = image_mod.FAILED
            self.last_error = str(e)
            self.meta['persisting'] = None
            self._save_meta()
            return
        self.core.snapshot_done(True)
        self.timing.setdefault(version, {})['done'] = time.time()
        self.versions[version] = image_mod.STABLE
        self.meta.update(last=version, persisting=None)
        self._save_meta()
        LOG.info('version %d of %s persisted in %.2f s', version, self.id,
                 time.monotonic() - started)

    def wait_persisted(self, timeout=None):
        """Wait for the background persist; True if none is running."""
        thread = self._persister
        if thread is not None:
            thread.join(timeout)
            return not thread.is_alive()
        return True

    def version_state(self, number):
        state = self.versions.get(number)
        if state is not None:
            return state
        return self.repo.image(self.id).version(number).state

    # -- recovery after a crash -------------------------------------------

    def _recover(self):
        number = self.meta.get('persisting')
        if number is None:
            return
        state = self.core.recovery()
        journal_path = os.path.join(self.cache_dir, 'journal')
        try:
            pending = self.repo.resume_commit(self.id, number)
        except exception.CommitAborted as e:
            LOG.warning('interrupted version %d of %s: %s', number, self.id,
                        e)
            self._give_up(number, None, str(e))
            return
        if state['lost']:
            self._give_up(number, pending, '%d snapshot chunks were only in '
                          'the copy-on-write buffer' % state['lost'])
            return
        # Chunks the journal shows in the repository are done; every other
        # chunk of the snapshot is persisted again from the mirror file,
        # which still holds it unless it was written since the COMMIT.
        done = {i: d for i, d in self._read_journal(journal_path).items()
                if self._durable(d)}
        snapshot = self.core.snapshot_chunks()
        lost = self.core.requeue([i for i in snapshot if i not in done])
        if lost:
            self._give_up(number, pending, '%d snapshot chunks were '
                          'overwritten before they were persisted'
                          % len(lost))
            return
        for index in snapshot:
            if index in done:
                pending.put_digest(index, done[index])
        count = self.core.resume()
        self.versions[number] = image_mod.PENDING
        LOG.warning('resuming the persist of version %d of %s (%d chunks '
                    'done, %d to go)', number, self.id, len(done), count)
        self._start_persister(pending, journal_mode='a')

    def _give_up(self, number, pending, why):
        if pending is not None:
            pending.abort(why)
        self.core.snapshot_done(False)
        self.versions[number] = image_mod.FAILED
        self.last_error = why
        self.meta['persisting'] = None
        self._save_meta()
        LOG.warning('version %d of %s is failed: %s', number, self.id, why)

    @staticmethod
    def _read_journal(path):
        taken = {}
        try:
            with open(path) as f:
                for line in f:
                    parts = line.split()
                    if len(parts) != 2 or not line.endswith('\n'):
                        continue        # torn last line
                    taken[int(parts[0])] = (None if parts[1] == '-'
                                            else bytes.fromhex(parts[1]))
        except FileNotFoundError:
            pass
        return taken

    def _durable(self, chunk_digest):
        """True if a chunk handed to the repository before a crash is
        there (content addressing: existing means complete and right).
        """
        if chunk_digest is None:
            return True
        try:
            self.repo.backend.stat(base.CHUNK,
                                   chunks.object_name(chunk_digest))
            return True
        except exception.ObjectNotFound:
            return False

    # -- restart profile and prefetch -------------------------------------

    def save_profile(self):
        """Store the first-read order since attach with the version."""
        order = self.core.read_order()
        if order and self.attached_version is not None:
            return self.repo.save_profile(self.id, self.attached_version,
                                          order)
        return None

    def start_prefetch(self):
        order = []
        if self.attached_version is None:
            return
        try:
            order = self.repo.load_profile(self.header, self.attached_version)
        except exception.BlobCRError as e:
            LOG.warning('no prefetch for %s: %s', self.id, e)
        if not order:
            return
        self._prefetcher = threading.Thread(
            target=self._prefetch, args=(order,), daemon=True,
            name='blobcr-prefetch-%s' % self.id[:8])
        self._prefetcher.start()

    def _prefetch(self, order, batch=32):
        # Ahead of the guest, a few chunks at a time, in recorded order.
        for k in range(0, len(order), batch):
            if self._closing:
                return
            todo = [i for i in order[k:k + batch]
                    if not self.core.is_present(i)]
            if todo:
                try:
                    self.fetch(todo)
                except exception.BlobCRError as e:
                    LOG.warning('prefetch of %s stopped: %s', self.id, e)
                    return

    def stats(self):
        s = self.core.stats()
        s.update(fetched_chunks=self.fetched_chunks,
                 fetched_bytes=self.fetched_bytes,
                 attached_version=self.attached_version,
                 last_version=self.meta['last'],
                 persisting=self.meta['persisting'])
        return s

    def close(self, timeout=None):
        """Stop serving; wait up to ``timeout`` s for the persist. True if
        closed; False if a persist is still running: it is left (parked)
        to resume from its journal at the next start.
        """
        self._closing = True
        if not self.wait_persisted(timeout):
            LOG.warning('persist of version %s of %s parked: it resumes '
                        'at the next start', self.meta['persisting'],
                        self.id)
            return False
        if self._prefetcher is not None:
            self._prefetcher.join()
        self.core.close()
        return True
