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

"""The guards around CHECKPOINT in an attached image, without FUSE
(AttachedImage driven directly; the agent tests cover the mount):

* a checkpoint that would wait too long for the previous persist raises
  Busy and commits nothing;
* a snapshot whose persist cannot start (its journal cannot be written,
  as on a full disk) fails its version and gives its chunks back to the
  next checkpoint, which then holds everything;
* an image being detached takes no more checkpoints.

The images here register no version ahead (``reserve=False``): these
tests count the versions in the header; test_mirror_reserve.py covers
the reservations.
"""

import errno
import os
import threading
import time

import pytest

from blobcr_agent.mirror import image as image_mod
from blobcr_agent.repository.backends import local
from blobcr_agent.repository import repository
from blobcr_common import exception

CHUNK = 64 * 1024
NCHUNKS = 16


@pytest.fixture
def attached(tmp_path):
    repo = repository.Repository(local.LocalBackend(str(tmp_path / 'store')),
                                 chunk_size=CHUNK)
    header = repo.create_image('disk', NCHUNKS * CHUNK)
    a = image_mod.AttachedImage(repo, header.id, None,
                                str(tmp_path / 'cache'), prefetch=False,
                                reserve=False)
    yield repo, header.id, a
    a.close()
    repo.close()


def _fill(a, seed):
    data = bytes([seed]) * (NCHUNKS * CHUNK)
    a.write(0, data)
    return data


def test_busy_instead_of_an_unbounded_wait(attached, monkeypatch):
    repo, image_id, a = attached
    gate = threading.Event()
    slow_put = repository.Commit.put

    def put(self, index, data):
        gate.wait(30)                  # the persist cannot finish yet
        return slow_put(self, index, data)
    monkeypatch.setattr(repository.Commit, 'put', put)
    # As many snapshots in flight as the core keeps (selective-cow
    # pipelines them): each acknowledged without waiting.
    first = []
    for k in range(a.max_in_flight):
        _fill(a, 1 + k)
        first.append(a.checkpoint(wait=0.3)[0])
    _fill(a, 9)
    t0 = time.monotonic()
    with pytest.raises(exception.Busy, match='still being persisted'):
        a.checkpoint(wait=0.3)
    assert time.monotonic() - t0 < 5
    assert [v.number for v in repo.image(image_id).versions] == first
    gate.set()
    second, _, _ = a.checkpoint(wait=30)
    assert a.wait_persisted(30)
    assert repo.read(image_id, second, 0, NCHUNKS * CHUNK) == \
        bytes([9]) * (NCHUNKS * CHUNK)


def test_a_persist_that_cannot_start_gives_its_chunks_back(
        attached, monkeypatch):
    repo, image_id, a = attached
    data = _fill(a, 3)

    def full(self, versions, **more):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), 'meta.json')
    # The versions in flight are recorded before the COMMIT, so that
    # nothing after it can fail: a full cache disk refuses the checkpoint
    # and the writes stay dirty.
    monkeypatch.setattr(image_mod.AttachedImage, '_set_in_flight', full)
    with pytest.raises(OSError):
        a.checkpoint()
    failed = repo.image(image_id).versions[-1]
    assert failed.state == 'failed' and 'snapshot not taken' in failed.error
    assert a.stats()['dirty'] == NCHUNKS
    monkeypatch.undo()
    version, count, _ = a.checkpoint()
    assert count == NCHUNKS            # what the failed one held, too
    assert a.wait_persisted(30)
    assert repo.read(image_id, version, 0, len(data)) == data


def test_no_checkpoint_while_detaching(attached):
    repo, image_id, a = attached
    _fill(a, 4)
    with a.exclusive(closing=True):
        pass
    with pytest.raises(exception.InvalidInput, match='being detached'):
        a.checkpoint()
    assert repo.image(image_id).versions == []


def test_offline_holds_writes_until_stable_and_says_so(tmp_path,
                                                       monkeypatch):
    repo = repository.Repository(local.LocalBackend(str(tmp_path / 'store')),
                                 chunk_size=CHUNK)
    header = repo.create_image('disk', NCHUNKS * CHUNK)
    a = image_mod.AttachedImage(repo, header.id, None,
                                str(tmp_path / 'cache'), mode='offline',
                                prefetch=False, reserve=False)
    try:
        data = _fill(a, 7)
        real_finish = repository.Commit.finish

        def slow_finish(self, *args, **kwargs):
            time.sleep(0.3)
            return real_finish(self, *args, **kwargs)
        monkeypatch.setattr(repository.Commit, 'finish', slow_finish)
        version, count, held_ms = a.checkpoint()
        # Stable at the acknowledgment, and the hold covered the persist.
        assert a.version_state(version) == 'stable' and count == NCHUNKS
        assert held_ms >= 300, held_ms
        assert repo.read(header.id, version, 0, len(data)) == data
        a.write(0, b'\x01' * CHUNK)         # writes flow again
    finally:
        a.close()
        repo.close()


def _full_buffer(tmp_path, monkeypatch):
    """An image with a one-slot copy-on-write buffer, full: its first
    checkpoint's persist is stuck (until the gate is set) on chunk 0,
    and a write to the last chunk copied that chunk's snapshot content
    into the slot. Returns (repo, header, image, gate, first version).
    """
    repo = repository.Repository(local.LocalBackend(str(tmp_path / 'store')),
                                 chunk_size=CHUNK)
    header = repo.create_image('disk', NCHUNKS * CHUNK)
    a = image_mod.AttachedImage(repo, header.id, None,
                                str(tmp_path / 'cache'), cow_chunks=1,
                                prefetch=False, reserve=False)
    gate, taken = threading.Event(), threading.Event()
    slow_put = repository.Commit.put

    def put(self, index, data):
        taken.set()
        gate.wait(30)                  # the persist cannot go on yet
        return slow_put(self, index, data)
    monkeypatch.setattr(repository.Commit, 'put', put)
    _fill(a, 5)
    first, _, _ = a.checkpoint(wait=1)
    assert taken.wait(30)
    a.write((NCHUNKS - 1) * CHUNK, b'\x06' * CHUNK)
    assert 'full' in a.core.commit_busy()
    return repo, header, a, gate, first


def test_busy_with_a_full_buffer_registers_no_version(tmp_path, monkeypatch):
    """The core's room is asked before the version is registered: a
    checkpoint refused because the copy-on-write buffer is full leaves
    no aborted version in the repository (and no gap in the numbering).
    """
    repo, header, a, gate, first = _full_buffer(tmp_path, monkeypatch)
    try:
        with pytest.raises(exception.Busy, match='buffer is full'):
            a.checkpoint(wait=1)
        assert [(v.number, v.state) for v in
                repo.image(header.id).versions] == [(first, 'pending')]
        stats = a.stats()
        # Refused before registering, again after waiting out its wait.
        assert (stats['busy_prechecked'], stats['busy_aborted']) == (2, 0)
        assert stats['room_waits'] == 1
        gate.set()
        assert a.wait_persisted(30)
        assert a.core.commit_busy() is None
        second, count, _ = a.checkpoint(wait=1)
        assert (second, count) == (first + 1, 1)
        assert a.wait_persisted(30)
        assert repo.read(header.id, second, 0, NCHUNKS * CHUNK) == \
            bytes([5]) * ((NCHUNKS - 1) * CHUNK) + b'\x06' * CHUNK
    finally:
        gate.set()
        a.close()
        repo.close()


def test_close_waits_for_a_checkpoint_being_taken(attached, monkeypatch):
    """close() takes the checkpoint lock: a checkpoint already past its
    "being detached?" check finishes (and its version is persisted)
    before the core closes, instead of committing into a closed core.
    """
    repo, image_id, a = attached
    data = _fill(a, 2)
    registering, go = threading.Event(), threading.Event()
    begin_commit = repo.begin_commit

    def slow_begin_commit(*args, **kwargs):
        registering.set()
        go.wait(30)
        return begin_commit(*args, **kwargs)
    monkeypatch.setattr(repo, 'begin_commit', slow_begin_commit)
    result = {}
    checkpoint = threading.Thread(
        target=lambda: result.update(checkpoint=a.checkpoint()))
    checkpoint.start()
    assert registering.wait(30)
    closer = threading.Thread(
        target=lambda: result.update(closed=a.close(timeout=30)))
    closer.start()
    closer.join(0.3)
    assert closer.is_alive(), 'closed under a checkpoint being taken'
    go.set()
    checkpoint.join(30)
    closer.join(30)
    assert result['closed'] is True
    version = result['checkpoint'][0]
    assert repo.image(image_id).version(version).state == 'stable'
    assert repo.read(image_id, version, 0, len(data)) == data


def test_a_checkpoint_waits_for_room_in_a_full_buffer(tmp_path, monkeypatch):
    """Load alone never refuses a checkpoint: with the copy-on-write
    buffer full (the persister slow), it waits until the persister frees
    a slot, within its wait, and is taken.
    """
    repo, header, a, gate, first = _full_buffer(tmp_path, monkeypatch)
    try:
        threading.Timer(0.5, gate.set).start()
        second, count, _ = a.checkpoint(wait=30)
        assert second == first + 1 and count == 1
        assert a.stats()['room_waits'] == 1
        assert a.last_phases['room'] >= 400
        assert a.wait_persisted(30)
        assert repo.read(header.id, second, 0, NCHUNKS * CHUNK) == \
            bytes([5]) * ((NCHUNKS - 1) * CHUNK) + b'\x06' * CHUNK
    finally:
        gate.set()
        a.close()
        repo.close()
