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

"""Dirty chunks sent ahead of the checkpoint (mirror/upload_ahead.py),
AttachedImage driven directly (no FUSE) on the local store and on the
micro Ceph cluster:

* chunks quiet for a round go ahead, and the persist links them instead
  of putting them (its chunk puts counted), without hashing them again
  when they were not written since; the version reads back right and
  counts their bytes as stored;
* a chunk rewritten after the COMMIT (its snapshot content copied
  aside) is not taken for the content that went ahead;
* a chunk rewritten after it went ahead, or written all the time while
  it is read for the upload, is stored with its last content;
* uploads in flight at the checkpoint are adopted: not put twice, the
  version stable only once they are durable, and put by the persist if
  they fail;
* a randomized walk (replayable seeds) of writes, checkpoints and waits
  with a garbage collection running all along, gc_grace 0: every stable
  version reads back as the model says, also after a last collection.
"""

import os
import random
import threading
import time

import pytest

from blobcr_agent.mirror import image as image_mod
from blobcr_agent.repository.backends import base
from blobcr_agent.repository import gc
from blobcr_agent.repository import repository
from tests.conftest import make_backend

CHUNK = 64 * 1024
NCHUNKS = 16
ROUND = 0.05


@pytest.fixture
def store(backend_kind, tmp_path, request):
    backend = make_backend(backend_kind, tmp_path, request)
    repo = repository.Repository(backend, chunk_size=CHUNK, gc_grace=0)
    header = repo.create_image('disk', NCHUNKS * CHUNK)
    yield repo, header.id, str(tmp_path / 'cache')
    repo.close()


def _attach(store, interval=ROUND):
    repo, image_id, cache = store
    return image_mod.AttachedImage(repo, image_id, None, cache,
                                   prefetch=False, reserve=True,
                                   upload_ahead=interval)


def _wait(predicate, timeout=30, what='condition'):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, 'timed out waiting for ' + what
        time.sleep(0.01)


class PersistPuts(object):
    """Counts the chunk objects the persister's thread puts."""

    def __init__(self, backend, monkeypatch):
        self.count = 0
        submit = backend._submit_put

        def counted(kind, name, data, callback):
            if kind == base.CHUNK and threading.current_thread().name \
                    .startswith('blobcr-persist'):
                self.count += 1
            return submit(kind, name, data, callback)
        monkeypatch.setattr(backend, '_submit_put', counted)


def _checkpoint(a):
    version, _, _ = a.checkpoint(wait=10)
    assert a.wait_persisted(60)
    assert a.version_state(version) == 'stable'
    return version


def _read_all(repo, image_id, version):
    return repo.read(image_id, version, 0, NCHUNKS * CHUNK)


def _all_sent_ahead(store):
    """An image whose chunks were all written, then all sent ahead."""
    a = _attach(store)
    content = os.urandom(NCHUNKS * CHUNK)
    a.write(0, content)
    _wait(lambda: a.uploader.chunks == NCHUNKS, what='the uploads')
    return a, content


def test_quiet_chunks_go_ahead_and_the_persist_links_them(store,
                                                          monkeypatch):
    repo, image_id, _ = store
    puts = PersistPuts(repo.backend, monkeypatch)
    a, content = _all_sent_ahead(store)
    try:
        version = _checkpoint(a)
        stats = a.stats()
        assert puts.count == 0, 'the persist put %d chunks again' % puts.count
        assert stats['ahead_used'] == NCHUNKS
        # Not written since they went: linked without hashing them.
        assert stats['ahead_unhashed'] == NCHUNKS
        assert _read_all(repo, image_id, version) == content
        # What went ahead is what the version stores.
        v = repo.image(image_id).version(version)
        assert v.stored_bytes >= stats['ahead_bytes'] > 0
    finally:
        assert a.close(30)


def test_a_chunk_rewritten_after_it_went_ahead_keeps_its_last_content(
        store, monkeypatch):
    repo, image_id, _ = store
    puts = PersistPuts(repo.backend, monkeypatch)
    a, first = _all_sent_ahead(store)
    try:
        second = os.urandom(CHUNK)
        a.write(3 * CHUNK, second)
        version = _checkpoint(a)
        expected = first[:3 * CHUNK] + second + first[4 * CHUNK:]
        assert _read_all(repo, image_id, version) == expected
        assert puts.count == 1
        assert a.stats()['ahead_used'] == NCHUNKS - 1
        assert a.stats()['ahead_unhashed'] == NCHUNKS - 1
    finally:
        assert a.close(30)


def test_a_chunk_rewritten_after_the_commit_is_not_the_one_sent(
        store, monkeypatch):
    """The persist is held until chunk 2 has been rewritten after the
    COMMIT: the snapshot holds what was sent, the image the new content,
    and the persist may not link by the write clock alone.
    """
    repo, image_id, _ = store
    a, first = _all_sent_ahead(store)
    gate = threading.Event()
    take = a.core.take

    def held_take():
        gate.wait(30)
        return take()
    monkeypatch.setattr(a.persister, 'core', _Proxy(a.core, take=held_take))
    try:
        version, _, _ = a.checkpoint(wait=10)
        later = os.urandom(CHUNK)
        a.write(2 * CHUNK, later)
        gate.set()
        assert a.wait_persisted(60)
        assert _read_all(repo, image_id, version) == first
        assert a.read(2 * CHUNK, CHUNK) == later
        # The copied-aside chunk is hashed: its digest is still the one
        # sent, so it is linked all the same.
        stats = a.stats()
        assert stats['ahead_used'] == NCHUNKS
        assert stats['ahead_unhashed'] == NCHUNKS - 1
    finally:
        gate.set()
        assert a.close(30)


class _Proxy(object):
    """``target`` with some attributes replaced."""

    def __init__(self, target, **replaced):
        self._target = target
        self.__dict__.update(replaced)

    def __getattr__(self, name):
        return getattr(self._target, name)


def test_a_chunk_rewritten_and_quiet_again_goes_again(store, monkeypatch):
    repo, image_id, _ = store
    puts = PersistPuts(repo.backend, monkeypatch)
    a, first = _all_sent_ahead(store)
    try:
        second = os.urandom(CHUNK)
        a.write(5 * CHUNK, second)
        _wait(lambda: a.uploader.chunks == NCHUNKS + 1, what='the resend')
        version = _checkpoint(a)
        expected = first[:5 * CHUNK] + second + first[6 * CHUNK:]
        assert _read_all(repo, image_id, version) == expected
        assert puts.count == 0
    finally:
        assert a.close(30)


def _rounds_to_send(uploader, limit=40):
    """Rounds run by hand until ``uploader`` sends a chunk."""
    before = uploader.chunks
    for n in range(1, limit + 1):
        uploader.round()
        if uploader.chunks > before:
            return n
    raise AssertionError('nothing sent in %d rounds' % limit)


def test_a_rewritten_chunk_waits_by_its_recent_sends_only(store):
    """Rounds run by hand (the thread's interval is 1000 s). A chunk
    rewritten as soon as it went waits 2, 4, then 8 quiet rounds; one
    rewritten only after WINDOW quiet rounds goes as soon as it is
    quiet, however often it went before (a paced writer's chunks in a
    long epoch without checkpoints).
    """
    from blobcr_agent.mirror import upload_ahead
    a = _attach(store, interval=1000)
    try:
        _wait(lambda: a.reserver.peek() is not None,
              what='the version registered ahead')
        u = a.uploader
        u.round()
        hot = []
        for _ in range(5):
            a.write(0, os.urandom(CHUNK))
            hot.append(_rounds_to_send(u))
        assert hot == sorted(hot) and hot[-1] - hot[0] >= 6, hot
        for _ in range(upload_ahead.WINDOW):
            u.round()
        rare = []
        for _ in range(5):
            a.write(CHUNK, os.urandom(CHUNK))
            rare.append(_rounds_to_send(u))
            for _ in range(upload_ahead.WINDOW):
                u.round()
        assert rare == [hot[0]] * 5, (hot, rare)
    finally:
        assert a.close(30)


def test_a_chunk_rewritten_all_the_time_is_sent_log_times(store):
    """Rewritten every 2.5 rounds for 100 rounds: sent again after 2,
    4, 8, ... quiet rounds only (upload_ahead.MAX_RESENDS) as the sends
    of the last WINDOW (32) rounds grow, not after each rewrite.
    """
    a = _attach(store, interval=0.02)
    try:
        a.write(CHUNK, os.urandom((NCHUNKS - 1) * CHUNK))
        _wait(lambda: a.uploader.chunks == NCHUNKS - 1, what='the uploads')
        for _ in range(40):
            a.write(0, os.urandom(CHUNK))
            time.sleep(0.05)
        sends = a.uploader.chunks - (NCHUNKS - 1)
        # Per 32 rounds, a send and resends after 2 and 4 rounds of
        # quiet: the rewrites come every 2.5 rounds, so none after 8
        # (loose: rounds drift). 40 rewrites, at most 10 sends.
        assert 1 <= sends <= 10, sends
    finally:
        assert a.close(30)


def test_a_chunk_written_while_it_is_read_for_upload(store):
    """A writer rewrites chunk 0 all the time, in two halves (so that an
    upload may read one half new and one old): whatever went ahead, the
    checkpoint holds what the writer wrote last before it.
    """
    repo, image_id, _ = store
    a = _attach(store, interval=0.01)
    stop = threading.Event()
    last = {}

    def writer():
        n = 0
        while not stop.is_set():
            n += 1
            data = n.to_bytes(4, 'big') * (CHUNK // 4)
            a.write(0, data[:CHUNK // 2])
            a.write(CHUNK // 2, data[CHUNK // 2:])
            last['data'] = data
    try:
        a.write(CHUNK, os.urandom((NCHUNKS - 1) * CHUNK))
        thread = threading.Thread(target=writer)
        thread.start()
        # The writer races the uploads until the quiet chunks went ahead
        # (at least 0.5 s; on a loaded machine, more).
        began = time.monotonic()
        time.sleep(0.5)
        while a.uploader.chunks < NCHUNKS - 1 and \
                time.monotonic() - began < 60:
            time.sleep(0.05)
        stop.set()
        thread.join()
        before = a.uploader.chunks
        version = _checkpoint(a)
        assert repo.read(image_id, version, 0, CHUNK) == last['data']
        assert before >= NCHUNKS - 1, 'the quiet chunks never went ahead'
    finally:
        stop.set()
        assert a.close(30)


@pytest.mark.parametrize('seed', [11, 12])
def test_a_walk_with_gc_running_all_along(store, seed, monkeypatch):
    repo, image_id, _ = store
    # Grace 0 would let the stale-tmp sweep take files being written
    # (header writes), which its grace is there for: that sweep is left
    # out, the chunks' cut-off is the one under test.
    if hasattr(repo.backend, 'remove_stale_tmp'):
        monkeypatch.setattr(repo.backend, 'remove_stale_tmp',
                            lambda cutoff: 0)
    rng = random.Random(seed)
    a = _attach(store, interval=0.02)
    model = bytearray(NCHUNKS * CHUNK)
    stable = {}
    stop = threading.Event()
    collections = []

    def collector():
        while not stop.is_set():
            collections.append(gc.collect(repo, grace=0))
    thread = threading.Thread(target=collector, daemon=True)
    thread.start()
    try:
        for step in range(40):
            what = rng.choice(['write', 'write', 'write', 'wait',
                               'checkpoint'])
            if what == 'write':
                index = rng.randrange(NCHUNKS)
                length = rng.choice([CHUNK, CHUNK // 2, 4096])
                offset = index * CHUNK + rng.randrange(
                    0, CHUNK - length + 1, 4096)
                data = rng.randbytes(length)
                a.write(offset, data)
                model[offset:offset + length] = data
            elif what == 'wait':
                time.sleep(rng.choice([0.01, 0.05, 0.1, 0.3]))
            else:
                stable[_checkpoint(a)] = bytes(model)
        stable[_checkpoint(a)] = bytes(model)
        newest = max(stable)
        assert _read_all(repo, image_id, newest) == stable[newest], \
            'seed %d: version %d' % (seed, newest)
        stop.set()
        thread.join()
        assert collections, 'no collection ran'
        gc.collect(repo, grace=0)
        # The last checkpoint is pinned by the mirror; older ones are
        # kept while stable (not obsoleted here).
        for version, content in sorted(stable.items()):
            assert _read_all(repo, image_id, version) == content, \
                'seed %d: version %d' % (seed, version)
        assert a.uploader.chunks > 0, 'seed %d: nothing went ahead' % seed
        assert a.stats()['ahead_used'] > 0, \
            'seed %d: nothing sent ahead was linked' % seed
    finally:
        stop.set()
        thread.join()
        assert a.close(30)


class HeldUploads(object):
    """Holds the uploader threads' chunk puts until :meth:`release`
    (``fail=True``: they then fail instead of being written).
    """

    def __init__(self, backend, monkeypatch):
        self.held = []
        self._lock = threading.Lock()
        submit = backend._submit_put

        def held(kind, name, data, callback):
            if not threading.current_thread().name.startswith(
                    'blobcr-ahead'):
                return submit(kind, name, data, callback)
            with self._lock:
                self.held.append((kind, name, data, callback))
        self._submit = submit
        monkeypatch.setattr(backend, '_submit_put', held)

    def release(self, fail=False):
        with self._lock:
            held, self.held = self.held, []
        for kind, name, data, callback in held:
            if fail:
                callback(OSError(5, 'Input/output error (test)'))
            else:
                self._submit(kind, name, data, callback)
        return len(held)


@pytest.mark.parametrize('fail', [False, True], ids=['durable', 'failed'])
def test_a_checkpoint_adopts_the_uploads_in_flight(store, monkeypatch,
                                                   fail):
    """Every chunk's upload is in flight (held) when the checkpoint
    comes: the persist does not put them again, and the version is not
    stable before they are durable; if they fail, it puts them itself.
    """
    repo, image_id, _ = store
    puts = PersistPuts(repo.backend, monkeypatch)
    uploads = HeldUploads(repo.backend, monkeypatch)
    a = _attach(store)
    try:
        content = os.urandom(NCHUNKS * CHUNK)
        a.write(0, content)
        _wait(lambda: len(uploads.held) == NCHUNKS, what='the uploads')
        version, _, _ = a.checkpoint(wait=10)
        time.sleep(0.5)
        assert a.version_state(version) == 'pending'
        assert puts.count == 0
        assert uploads.release(fail=fail) == NCHUNKS
        assert a.wait_persisted(60)
        assert a.version_state(version) == 'stable'
        assert _read_all(repo, image_id, version) == content
        if fail:
            assert puts.count == NCHUNKS
            assert a.stats()['ahead_used'] == 0
        else:
            assert puts.count == 0, 'put %d chunks twice' % puts.count
            assert a.stats()['ahead_used'] == NCHUNKS
    finally:
        uploads.release(fail=True)
        assert a.close(30)


def test_a_checkpoint_adopts_a_resend_in_flight(store, monkeypatch):
    """A chunk that went, was rewritten and is going again (held) when
    the checkpoint comes: the persist adopts the resend, not the older
    content that is durable, and puts nothing itself.
    """
    repo, image_id, _ = store
    puts = PersistPuts(repo.backend, monkeypatch)
    a, first = _all_sent_ahead(store)
    uploads = HeldUploads(repo.backend, monkeypatch)
    try:
        second = os.urandom(CHUNK)
        a.write(5 * CHUNK, second)
        _wait(lambda: len(uploads.held) == 1, what='the resend')
        version, _, _ = a.checkpoint(wait=10)
        time.sleep(0.3)
        assert a.version_state(version) == 'pending'
        assert uploads.release() == 1
        assert a.wait_persisted(60)
        assert a.version_state(version) == 'stable'
        assert _read_all(repo, image_id, version) == \
            first[:5 * CHUNK] + second + first[6 * CHUNK:]
        assert puts.count == 0, 'put %d chunks itself' % puts.count
    finally:
        uploads.release(fail=True)
        assert a.close(30)


def test_uploads_that_fail_cost_nothing_but_speed(store, monkeypatch):
    """Every upload ahead fails (the store refuses them, the persist's
    puts pass): rounds back off, the checkpoint persists every chunk
    itself, and a second close is harmless.
    """
    repo, image_id, _ = store
    from blobcr_agent.repository import commits

    calls = []

    def refused(self, batch, index, data, written, hashes=None):
        calls.append(index)
        raise OSError(28, 'No space left on device (test)')
    monkeypatch.setattr(commits.Commit, 'upload_ahead', refused)
    a = _attach(store, interval=0.01)
    try:
        content = os.urandom(NCHUNKS * CHUNK)
        a.write(0, content)
        time.sleep(0.5)
        version = _checkpoint(a)
        assert _read_all(repo, image_id, version) == content
        assert a.uploader.chunks == 0
        assert a.stats()['ahead_used'] == 0
        # 10 ms rounds, doubling after each failure: about 6 rounds in
        # the half second, not 50.
        assert 1 <= len(calls) <= 12, len(calls)
    finally:
        assert a.close(30)
    a.uploader.stop()
