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

"""Pipelined checkpoints in an attached image (selective-cow), without
FUSE: AttachedImage driven directly on the local store.

* checkpoints taken while earlier persists are held back are
  acknowledged at once; the versions turn stable in order and each reads
  back as its predecessor plus its own writes;
* a persist failure in version k fails k and every version queued behind
  it; earlier ones stay stable; the next checkpoint carries all their
  chunks;
* a SIGKILL of the agent with several versions in flight: after the
  restart every one of them is stable and right, or failed; earlier
  stable versions are intact; the next checkpoint carries everything.
"""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from blobcr_agent.mirror import image as image_mod
from blobcr_agent.repository.backends import local
from blobcr_agent.repository import image as repo_image
from blobcr_agent.repository import repository

CHUNK = 64 * 1024
NCHUNKS = 16
ROUNDS = 3


def _plan(k):
    """Round k's writes: {chunk: its new content}."""
    return {j: bytes([(16 * k + j) % 251 + 1]) * CHUNK
            for j in range(NCHUNKS) if (j + k) % 3}


def _apply(image, writes):
    image = bytearray(image)
    for j, data in writes.items():
        image[j * CHUNK:(j + 1) * CHUNK] = data
    return bytes(image)


@pytest.fixture
def store(tmp_path):
    repo = repository.Repository(local.LocalBackend(str(tmp_path / 'store')),
                                 chunk_size=CHUNK)
    header = repo.create_image('disk', NCHUNKS * CHUNK)
    yield repo, header.id, str(tmp_path / 'cache')
    repo.close()


@pytest.fixture
def gated(monkeypatch):
    """Persists wait at each chunk until the gate opens; a version in
    ``fail`` fails there.
    """
    gate = threading.Event()
    fail = set()
    put = repository.Commit.put

    def slow_put(self, index, data):
        gate.wait(60)
        if self.version in fail:
            raise OSError(5, 'injected failure of version %d'
                          % self.version)
        return put(self, index, data)
    monkeypatch.setattr(repository.Commit, 'put', slow_put)
    return gate, fail


def _checkpoints(a, rounds):
    """Write and checkpoint ``rounds`` times; [(version, image at its
    COMMIT)] and the ack times (s).
    """
    image = bytes(NCHUNKS * CHUNK)
    out, acks = [], []
    for k in range(1, rounds + 1):
        for j, data in _plan(k).items():
            a.write(j * CHUNK, data)
        image = _apply(image, _plan(k))
        t0 = time.monotonic()
        version, count, _ = a.checkpoint(wait=5)
        acks.append(time.monotonic() - t0)
        out.append((version, image))
    return out, acks


def test_checkpoints_do_not_wait_for_earlier_persists(store, gated):
    repo, image_id, cache = store
    gate, _ = gated
    a = image_mod.AttachedImage(repo, image_id, None, cache,
                                prefetch=False)
    try:
        assert a.max_in_flight > 1
        taken, acks = _checkpoints(a, ROUNDS)
        # Every persist is held at its first chunk, yet each checkpoint
        # was acknowledged without waiting for the one before.
        assert a.persister.versions() == [v for v, _ in taken]
        assert max(acks) < 1.0, acks
        assert a.core.stats()['generations'] == ROUNDS
        assert a.core.stats()['copies_older'] + \
            a.core.stats()['multi_gen'] > 0
        gate.set()
        assert a.wait_persisted(60)
        done = [a.timing[v]['done'] for v, _ in taken]
        assert done == sorted(done), 'not stable in order'
        previous = bytes(NCHUNKS * CHUNK)
        for k, (version, image) in enumerate(taken, 1):
            assert a.version_state(version) == repo_image.STABLE
            assert image == _apply(previous, _plan(k))
            assert repo.read(image_id, version, 0, len(image)) == image
            previous = image
    finally:
        gate.set()
        a.close(30)


def test_a_failure_fails_its_followers_and_the_next_carries_all(
        store, gated):
    repo, image_id, cache = store
    gate, fail = gated
    a = image_mod.AttachedImage(repo, image_id, None, cache,
                                prefetch=False)
    try:
        taken, _ = _checkpoints(a, ROUNDS + 1)
        versions = [v for v, _ in taken]
        fail.add(versions[1])             # the second one fails
        gate.set()
        assert a.wait_persisted(60)
        states = [repo.image(image_id).version(v).state for v in versions]
        assert states == [repo_image.STABLE] + [repo_image.FAILED] * ROUNDS
        assert repo.read(image_id, versions[0], 0, NCHUNKS * CHUNK) == \
            taken[0][1]
        assert a.core.stats()['scheduled'] == 0
        # Everything written since the stable one is dirty again.
        changed = {j for k in range(2, ROUNDS + 2) for j in _plan(k)}
        assert a.core.stats()['dirty'] == len(changed)
        version, count, _ = a.checkpoint()
        assert count == len(changed)
        assert a.wait_persisted(60)
        assert a.version_state(version) == repo_image.STABLE
        assert repo.read(image_id, version, 0, NCHUNKS * CHUNK) == \
            taken[-1][1]
    finally:
        gate.set()
        a.close(30)


CHILD = r'''
import sys, time
from blobcr_agent.mirror import image as image_mod
from blobcr_agent.repository.backends import local
from blobcr_agent.repository import repository
sys.path.insert(0, sys.argv[5])
import test_mirror_pipeline as t
store, cache, image_id, rounds = sys.argv[1:5]
repo = repository.Repository(local.LocalBackend(store), chunk_size=t.CHUNK)
put = repository.Commit.put
def slow_put(self, index, data):
    time.sleep(0.03)
    return put(self, index, data)
repository.Commit.put = slow_put
a = image_mod.AttachedImage(repo, image_id, None, cache, prefetch=False)
taken, _ = t._checkpoints(a, int(rounds))
print(' '.join(str(v) for v, _ in taken), flush=True)
time.sleep(600)
'''


@pytest.mark.parametrize('delay', [0.0, 0.6])
def test_sigkill_with_several_versions_in_flight(store, delay):
    repo, image_id, cache = store
    child = subprocess.Popen(
        [sys.executable, '-c', CHILD, repo.backend.root, cache, image_id,
         str(ROUNDS), os.path.dirname(__file__)],
        stdout=subprocess.PIPE, text=True)
    try:
        versions = [int(v) for v in child.stdout.readline().split()]
        assert len(versions) == ROUNDS
        time.sleep(delay)            # 0.6 s: the first one may be stable
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    images = []
    image = bytes(NCHUNKS * CHUNK)
    for k in range(1, ROUNDS + 1):
        image = _apply(image, _plan(k))
        images.append(image)
    before = {v: repo.image(image_id).version(v).state for v in versions}
    a = image_mod.AttachedImage(repo, image_id, None, cache,
                                prefetch=False)    # recovery runs
    try:
        assert a.wait_persisted(60)
        failed = False
        for version, expected in zip(versions, images):
            state = repo.image(image_id).version(version).state
            assert state in (repo_image.STABLE, repo_image.FAILED)
            if before[version] == repo_image.STABLE:
                assert state == repo_image.STABLE
            if state == repo_image.STABLE:
                assert not failed, 'stable after a failed one'
                assert repo.read(image_id, version, 0, len(expected)) == \
                    expected
            failed = failed or state == repo_image.FAILED
        assert a.read(0, NCHUNKS * CHUNK) == images[-1]
        version, _, _ = a.checkpoint()
        assert a.wait_persisted(60)
        assert a.version_state(version) == repo_image.STABLE
        assert repo.read(image_id, version, 0, NCHUNKS * CHUNK) == \
            images[-1]
    finally:
        a.close(30)
