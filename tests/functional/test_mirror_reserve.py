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

"""The next version registered ahead (mirror/reserve.py), without FUSE:
AttachedImage driven directly on the local store.

* a checkpoint with a version reserved writes no image header before
  its ack (counted, and timed with slow header writes);
* a persist failure fails the reservation that follows it; the next
  checkpoint gets a right version all the same;
* a reservation is kept alive past GC's pending_timeout by heartbeats;
  one that could not be (older than the safe fraction) is never used,
  even once GC has marked it failed;
* Busy before the COMMIT keeps the reservation for the next try (the
  checkpoint's own, once it has waited for room);
* close (detach, agent stop) fails the reservation at once;
* a SIGKILL with a reservation outstanding: recovery fails it at the
  next start (it is not taken for a version in flight);
* a reservation whose metadata record could not be saved is never
  taken (a checkpoint records a taken one without a sync of its own),
  and an older metadata edit never overwrites a newer one whose sync
  failed;
* the modes without pipelining reserve nothing, nor selective-cow when
  switched off (``reserve=False``, or BLOBCR_RESERVE_AHEAD=0 in the
  environment; on by default).
"""

import errno
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from blobcr_agent import _native
from blobcr_agent.mirror import image as image_mod
from blobcr_agent.repository.backends import local
from blobcr_agent.repository import gc
from blobcr_agent.repository import repository
from blobcr_common import exception

CHUNK = 64 * 1024
NCHUNKS = 16


@pytest.fixture
def store(tmp_path):
    repo = repository.Repository(local.LocalBackend(str(tmp_path / 'store')),
                                 chunk_size=CHUNK)
    header = repo.create_image('disk', NCHUNKS * CHUNK)
    yield repo, header.id, str(tmp_path / 'cache')
    repo.close()


def _attach(store, **kwargs):
    repo, image_id, cache = store
    kwargs.setdefault('prefetch', False)
    kwargs.setdefault('reserve', True)
    return image_mod.AttachedImage(repo, image_id, None, cache, **kwargs)


def _fill(a, seed, chunks=range(NCHUNKS)):
    for j in chunks:
        a.write(j * CHUNK, bytes([seed]) * CHUNK)


def _wait(predicate, timeout=30, what='condition'):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, 'timed out waiting for ' + what
        time.sleep(0.01)


def _reserved(a, timeout=30):
    _wait(lambda: a.meta.get('reserved') is not None, timeout, 'a reservation')
    return a.meta['reserved']


def _checkpoint_stable(a, seed):
    """Write everything, checkpoint, wait until stable: the version."""
    _fill(a, seed)
    version, _, _ = a.checkpoint(wait=5)
    assert a.wait_persisted(30)
    assert a.version_state(version) == 'stable'
    return version


def _states(repo, image_id):
    return {v.number: v.state for v in repo.image(image_id).versions}


class HeaderWrites(object):
    """Counts (and delays by ``delay`` s) the image header writes made
    by the thread ``watch`` names.
    """

    def __init__(self, backend, monkeypatch):
        self.watch = None
        self.count = 0
        self.delay = 0.0
        write = backend.write_header

        def write_header(name, data, token):
            if threading.get_ident() == self.watch:
                self.count += 1
            if self.delay:
                time.sleep(self.delay)
            return write(name, data, token)
        monkeypatch.setattr(backend, 'write_header', write_header)


def test_no_header_write_before_the_ack(store, monkeypatch):
    repo, image_id, _ = store
    a = _attach(store)
    try:
        _fill(a, 1)
        first, _, _ = a.checkpoint(wait=5)
        time.sleep(0.5)         # time to register the next version ahead
        reserved = a.meta.get('reserved')
        writes = HeaderWrites(repo.backend, monkeypatch)
        # A header write now takes 0.5 s: the first version's persist
        # (finish) and the next reservation are slow, the ack must not be.
        writes.delay = 0.5
        writes.watch = threading.get_ident()
        _fill(a, 2, range(4))
        t0 = time.monotonic()
        second, count, _ = a.checkpoint(wait=5)
        ack = time.monotonic() - t0
        assert writes.count == 0, 'the image header was written in the ack'
        assert ack < 0.25, ack
        assert (second, count) == (first + 1, 4) and reserved == second
        assert a.last_phases['reserved'] == 1
        writes.delay = 0
        assert a.wait_persisted(60)
        assert a.version_state(first) == a.version_state(second) == 'stable'
        assert repo.image(image_id).version(second).parent == first
        assert repo.read(image_id, second, 0, NCHUNKS * CHUNK) == \
            bytes([2]) * (4 * CHUNK) + bytes([1]) * (12 * CHUNK)
        assert a.stats()['reservations_used'] == 2     # attach's too
    finally:
        a.close(30)


def test_a_failed_persist_fails_the_reservation_behind_it(store,
                                                          monkeypatch):
    repo, image_id, _ = store
    gate, fail = threading.Event(), set()
    put = repository.Commit.put

    def gated_put(self, index, data):
        gate.wait(60)
        if self.version in fail:
            raise OSError(5, 'injected failure of version %d' % self.version)
        return put(self, index, data)
    monkeypatch.setattr(repository.Commit, 'put', gated_put)
    a = _attach(store)
    try:
        _fill(a, 1)
        first, _, _ = a.checkpoint(wait=5)
        fail.add(first)
        reserved = _reserved(a)
        assert repo.image(image_id).version(reserved).parent == first
        gate.set()
        assert a.wait_persisted(30)
        assert a.version_state(first) == 'failed'
        # Failed with the version it follows, and dropped; a new one is
        # built on what is stable (nothing here).
        _wait(lambda: _states(repo, image_id)[reserved] == 'failed',
              what='the reservation failed')
        again = _reserved(a)
        assert again != reserved
        assert repo.image(image_id).version(again).parent is None
        _fill(a, 3, range(2))
        second, count, _ = a.checkpoint(wait=5)
        assert second == again and count == NCHUNKS  # all chunks again
        assert a.wait_persisted(30)
        assert a.version_state(second) == 'stable'
        assert repo.read(image_id, second, 0, NCHUNKS * CHUNK) == \
            bytes([3]) * (2 * CHUNK) + bytes([1]) * (14 * CHUNK)
    finally:
        gate.set()
        a.close(30)


def test_a_stale_reservation_is_not_used(store):
    """Registered to follow a version that is no longer the newest (as
    left by a checkpoint that registered its own version meanwhile):
    aborted, and the checkpoint registers afresh.
    """
    repo, image_id, _ = store
    a = _attach(store)
    try:
        _fill(a, 1)
        first, _, _ = a.checkpoint(wait=5)
        assert a.wait_persisted(30)
        reserved = _reserved(a)
        # Another version is taken with the reservation out of the way.
        with a.reserver._cond:
            r, a.reserver._slot = a.reserver._slot, None
        _fill(a, 2, range(1))
        second, _, _ = a.checkpoint(wait=5)
        assert second != reserved
        assert a.wait_persisted(30)
        # Back in the slot: it follows first, no longer the successor.
        _reserved(a)
        with a.reserver._cond:
            stray, a.reserver._slot = a.reserver._slot, r
        stray.commit.abort('test')
        _fill(a, 3, range(1, 2))
        third, _, _ = a.checkpoint(wait=5)
        assert third != reserved and a.last_phases['reserved'] == 0
        assert a.wait_persisted(30)
        assert repo.image(image_id).version(third).parent == second
        _wait(lambda: _states(repo, image_id)[reserved] == 'failed',
              what='the stale reservation failed')
        assert repo.read(image_id, third, 0, 3 * CHUNK) == \
            b'\x02' * CHUNK + b'\x03' * CHUNK + b'\x01' * CHUNK
    finally:
        a.close(30)


def _aged(store, pending_timeout, age):
    """Attach with GC's ``pending_timeout``; once a version is reserved
    and ``age`` s later, GC fails the abandoned versions. The image, the
    reserved version and its state then.
    """
    repo, image_id, _ = store
    repo.pending_timeout = pending_timeout
    a = _attach(store)
    reserved = _reserved(a)
    time.sleep(age)
    gc.fail_abandoned(repo, pending_timeout, gc.Report())
    return a, reserved, _states(repo, image_id)[reserved]


def test_heartbeats_keep_a_reservation_past_pending_timeout(store):
    a, reserved, state = _aged(store, 2, 2.6)
    try:
        assert state == 'pending'
        assert _checkpoint_stable(a, 4) == reserved
        assert a.last_phases['reserved'] == 1
    finally:
        a.close(30)


def test_a_reservation_too_old_is_never_used(store, monkeypatch):
    """Its heartbeat could not be renewed: past the safe fraction of
    pending_timeout it may be failed already (here GC did fail it): the
    checkpoint registers afresh.
    """
    from blobcr_agent.mirror import reserve
    repo, image_id, _ = store

    def no_beat(self):
        raise exception.Conflict('injected: header keeps changing')
    monkeypatch.setattr(repository.Commit, '_beat', no_beat)
    # No second try either: the one there ages.
    monkeypatch.setattr(reserve.Reserver, '_refresh_after',
                        lambda self: 3600)
    a, reserved, state = _aged(store, 1, 1.3)
    try:
        assert state == 'failed'
        version = _checkpoint_stable(a, 5)
        assert version != reserved and a.last_phases['reserved'] == 0
        assert repo.read(image_id, version, 0, NCHUNKS * CHUNK) == \
            b'\x05' * (NCHUNKS * CHUNK)
    finally:
        a.close(30)


def test_a_failed_heartbeat_registers_another(store, monkeypatch):
    repo, image_id, _ = store
    repo.pending_timeout = 2
    a = _attach(store)
    try:
        reserved = _reserved(a)
        # Marked failed behind its back: the next heartbeat finds it.
        repo.mark_failed(image_id, reserved, 'test')
        _wait(lambda: a.meta.get('reserved') not in (None, reserved),
              what='another reservation')
        version = _checkpoint_stable(a, 6)
        assert version != reserved and a.last_phases['reserved'] == 1
    finally:
        a.close(30)


class BusyOnce(object):
    """The core, whose COMMIT is refused Busy once (the room gone between
    the room check and the COMMIT).
    """

    def __init__(self, core):
        self._core = core
        self.refused = False

    def commit(self, *args):
        if not self.refused:
            self.refused = True
            raise _native.BusyError('injected: copy-on-write buffer is full')
        return self._core.commit(*args)

    def __getattr__(self, name):
        return getattr(self._core, name)


def test_busy_before_the_commit_keeps_the_reservation(store, monkeypatch):
    repo, image_id, _ = store
    a = _attach(store)
    try:
        reserved = _reserved(a)
        registered = []
        begin_commit = repo.begin_commit

        def counting(*args, **kwargs):
            registered.append(threading.get_ident())
            return begin_commit(*args, **kwargs)
        monkeypatch.setattr(repo, 'begin_commit', counting)
        a.core = BusyOnce(a.core)
        _fill(a, 7)
        # Refused once, the checkpoint waits for room and tries again
        # with the same reservation.
        version, count, _ = a.checkpoint(wait=5)
        assert a.busy_aborted == 1 and a.room_waits == 1
        assert (version, count) == (reserved, NCHUNKS)
        assert a.wait_persisted(30)
        assert a.version_state(version) == 'stable'
        assert repo.read(image_id, version, 0, NCHUNKS * CHUNK) == \
            b'\x07' * (NCHUNKS * CHUNK)
        # Neither try registered a version itself.
        assert threading.get_ident() not in registered
        assert a.reserver.aborted == 0
    finally:
        a.core = getattr(a.core, '_core', a.core)
        a.close(30)


def test_marks_of_a_refused_try_do_not_stick_to_the_reservation(store):
    """A labelled group checkpoint takes the reservation and is refused
    Busy before its COMMIT: the reservation is put back. The next
    checkpoint, a plain one, takes it: its version turns stable with no
    label nor tag (they were the refused try's). A labelled one after
    it gets its own marks in its stable update.
    """
    repo, image_id, _ = store
    a = _attach(store)
    tag = {'id': 'job', 'members': 1, 'project': None}
    try:
        reserved = _reserved(a)
        a.core = BusyOnce(a.core)
        _fill(a, 8)
        with pytest.raises(exception.Busy):
            a.checkpoint(wait=0, made_by='cinder', group=tag)
        assert a.meta['reserved'] == reserved and not a.marks_in_flight()
        plain, _, _ = a.checkpoint(wait=5)
        assert plain == reserved and a.wait_persisted(30)
        v = repo.image(image_id).version(plain)
        assert (v.state, v.made_by, v.group) == ('stable', '', None)
        _fill(a, 9)
        _reserved(a)
        marked, _, _ = a.checkpoint(wait=5, made_by='cinder', group=tag)
        assert a.last_phases['reserved'] == 1
        assert a.marks_in_flight() in ({}, {marked: {'made_by': 'cinder',
                                                     'group': tag}})
        assert a.wait_persisted(30)
        v = repo.image(image_id).version(marked)
        assert (v.state, v.made_by, v.group) == ('stable', 'cinder', tag)
        assert not a.marks_in_flight()
    finally:
        a.core = getattr(a.core, '_core', a.core)
        a.close(30)


def test_close_fails_the_reservation_at_once(store):
    repo, image_id, _ = store
    a = _attach(store)
    closed = False
    try:
        _fill(a, 8)
        first, _, _ = a.checkpoint(wait=5)
        assert a.wait_persisted(30)
        reserved = _reserved(a)
        t0 = time.monotonic()
        closed = a.close(30)
        assert closed and time.monotonic() - t0 < 1.0
        assert _states(repo, image_id) == {first: 'stable',
                                           reserved: 'failed'}
        assert a.meta['reserved'] is None
    finally:
        if not closed:
            a.close(30)


def test_close_during_a_slow_registration_leaves_nothing_pending(
        store, monkeypatch):
    """A detach while the next version is being registered (its header
    write landed, the registration not yet back): once close returns,
    that version is failed, not left pending to refuse an extend or a
    delete made right after the detach (failed on a close that waited
    only 2 s for the registration).
    """
    repo, image_id, _ = store
    a = _attach(store)
    closed = False
    try:
        _fill(a, 9)
        first, _, _ = a.checkpoint(wait=5)
        assert a.wait_persisted(30)
        _reserved(a)
        write = repo.backend.write_header
        slowed = []

        def write_header(name, data, token):
            result = write(name, data, token)
            if threading.current_thread().name.startswith(
                    'blobcr-reserve') and not slowed:
                slowed.append(name)
                time.sleep(4.0)         # written, not yet back
            return result
        monkeypatch.setattr(repo.backend, 'write_header', write_header)
        _fill(a, 10, range(2))
        a.checkpoint(wait=5)                    # registers the next one
        assert a.wait_persisted(30)
        _wait(lambda: slowed, what='the registration')
        closed = a.close(60)
        assert closed
        states = _states(repo, image_id)
        assert 'pending' not in states.values(), states
    finally:
        if not closed:
            a.close(30)


@pytest.mark.parametrize('mode', ['offline', 'live-cow', 'live-precopy',
                                  'selective-cow, switched off'])
def test_the_modes_without_pipelining_reserve_nothing(store, mode,
                                                      monkeypatch):
    repo, image_id, _ = store
    monkeypatch.setenv(image_mod.RESERVE_AHEAD_ENV, '0')
    if mode.startswith('selective-cow'):
        a = _attach(store, reserve=None)    # the environment says off
    else:
        a = _attach(store, mode=mode)
    try:
        for k in range(2):
            _fill(a, 10 + k)
            version, _, _ = a.checkpoint(wait=5)
            assert a.wait_persisted(30)
            assert a.last_phases['reserved'] == 0
        time.sleep(0.2)
        assert a.meta.get('reserved') is None
        assert _states(repo, image_id) == {1: 'stable', 2: 'stable'}
    finally:
        a.close(30)


CHILD = r'''
import sys, time
sys.path.insert(0, sys.argv[4])
import test_mirror_reserve as t
from blobcr_agent.mirror import image as image_mod
from blobcr_agent.repository.backends import local
from blobcr_agent.repository import repository
store, cache, image_id, _, orphan = sys.argv[1:6]
repo = repository.Repository(local.LocalBackend(store), chunk_size=t.CHUNK)
a = image_mod.AttachedImage(repo, image_id, None, cache, prefetch=False,
                            reserve=orphan == 'reserve')
t._fill(a, 9)
version, _, _ = a.checkpoint(wait=5)
a.wait_persisted(30)
if orphan == 'reserve':
    print(version, t._reserved(a), flush=True)
else:
    # Registered, and killed before any record names it.
    print(version, repo.begin_commit(image_id).version, flush=True)
time.sleep(600)
'''


def _killed_child(store, what, wrap=()):
    """Run CHILD (``what``: 'reserve', or 'orphan': a version registered
    and never recorded), SIGKILL it once it has; (its last checkpoint,
    the version left pending).
    """
    repo, image_id, cache = store
    child = subprocess.Popen(
        list(wrap) + [sys.executable, '-c', CHILD, repo.backend.root, cache,
                      image_id, os.path.dirname(__file__), what],
        stdout=subprocess.PIPE, text=True)
    try:
        return tuple(map(int, child.stdout.readline().split()))
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()


def test_sigkill_with_a_reservation_outstanding(store):
    repo, image_id, _ = store
    version, reserved = _killed_child(store, 'reserve')
    assert _states(repo, image_id) == {version: 'stable',
                                       reserved: 'pending'}
    a = _attach(store)      # recovery runs
    try:
        # Failed at once, not resumed as a version in flight.
        assert _states(repo, image_id)[reserved] == 'failed'
        assert a.persister.versions() == [] and a.meta['persisting'] is None
        assert a.meta['last'] == version
        again = _reserved(a)
        assert again not in (version, reserved)
        _fill(a, 10, range(1))
        second, count, _ = a.checkpoint(wait=5)
        assert (second, count) == (again, 1)
        assert a.wait_persisted(30)
        assert repo.image(image_id).version(second).parent == version
        assert repo.read(image_id, second, 0, 2 * CHUNK) == \
            b'\x0a' * CHUNK + b'\x09' * CHUNK
    finally:
        a.close(30)


def test_a_version_registered_and_never_recorded_is_failed_at_restart(
        store):
    """The agent before (here in a PID namespace of its own, as in a
    container, so that no GC here can judge its writer) was killed
    between registering a version and recording it: its successor on
    the same cache fails it at once.
    """
    repo, image_id, _ = store
    version, orphan = _killed_child(
        store, 'orphan',
        ['unshare', '--pid', '--fork', '--mount-proc', '--kill-child'])
    report = gc.Report()
    gc.fail_abandoned(repo, 3600, report)
    assert _states(repo, image_id) == {version: 'stable', orphan: 'pending'}
    a = _attach(store, reserve=False)      # recovery runs
    try:
        assert _states(repo, image_id)[orphan] == 'failed'
        assert a.meta['owner'] == repo.owner
        version2 = _checkpoint_stable(a, 3)
        assert version2 not in (version, orphan)
    finally:
        a.close(30)


def test_the_version_followed_turns_stable_during_the_registration(
        store, monkeypatch):
    """Registered to follow version N, which became stable before the
    compare-and-set (the Commit then has no ``after``): still the
    successor, taken, not aborted.
    """
    repo, image_id, _ = store
    a = _attach(store)
    try:
        _reserved(a)
        begin_commit = repo.begin_commit

        def after_the_persist(*args, **kwargs):
            assert a.wait_persisted(30)
            return begin_commit(*args, **kwargs)
        monkeypatch.setattr(repo, 'begin_commit', after_the_persist)
        first = _checkpoint_stable(a, 1)
        second = _checkpoint_stable(a, 2)
        assert a.last_phases['reserved'] == 1 and a.reserver.aborted == 0
        assert repo.image(image_id).version(second).parent == first
    finally:
        a.close(30)


def test_a_reservation_whose_record_failed_is_never_taken(store,
                                                          monkeypatch):
    """meta.json could not name the reservation (ENOSPC): a checkpoint,
    which records a reserved version without a sync of its own
    (taken.py), must not take it, or a SIGKILL would leave an
    acknowledged version nobody knows of. It is failed, and the
    checkpoint registers its own version, recorded synced.
    """
    repo, image_id, _ = store
    real = image_mod.AttachedImage._write_meta

    def write_meta(self, text, edit):
        if threading.current_thread().name.startswith('blobcr-reserve'):
            raise OSError(errno.ENOSPC, 'injected: no space left')
        return real(self, text, edit)
    monkeypatch.setattr(image_mod.AttachedImage, '_write_meta', write_meta)
    a = _attach(store)
    try:
        _wait(lambda: a.reserver.aborted >= 1, what='the reservation failed')
        unsaved = [v for v, s in _states(repo, image_id).items()
                   if s == 'failed']
        assert unsaved and a.meta.get('reserved') is None
        version = _checkpoint_stable(a, 7)
        assert a.last_phases['reserved'] == 0 and version not in unsaved
    finally:
        monkeypatch.setattr(image_mod.AttachedImage, '_write_meta', real)
        a.close(30)


def test_an_older_edit_never_overwrites_a_newer_one(store, monkeypatch):
    """A newer meta.json edit whose directory sync failed after its
    rename: an older edit saved next must not write its text over it;
    it syncs the newer one instead.
    """
    a = _attach(store, reserve=False)
    try:
        older = a._meta_text()
        a.meta['probe'] = 'newer'
        newer = a._meta_text()
        real_fsync = os.fsync
        failed = []

        def fsync(fd):
            if not failed:
                failed.append(fd)
                raise OSError(errno.EIO, 'injected: directory sync')
            return real_fsync(fd)
        monkeypatch.setattr(os, 'fsync', fsync)
        with pytest.raises(OSError):
            a._write_meta(*newer)
        a._write_meta(*older)
        with open(os.path.join(store[2], 'meta.json')) as f:
            assert json.load(f).get('probe') == 'newer'
        assert len(failed) == 1
    finally:
        monkeypatch.undo()
        a.close(30)
