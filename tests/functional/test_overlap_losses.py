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

"""Loss paths that need two requests in flight at once (issue 32), each
driven to its window on purpose, on the real classes and the local
store:

* the CI walk's seed 1476000576, steps 114-117: a write, a guest
  checkpoint not waited for, the delete of the snapshot that was the
  head, then detach. The checkpoint turned stable between the delete's
  read of the header and the copy it made of the head; the copy turned
  stable later and became the head with the older content;
* a reservation failed by someone else (GC, another host) taken by a
  checkpoint anyway: acknowledged, never stable;
* an extend of a detached volume refused while a restarted agent still
  persisted its last version (the walk on Ceph, seed 377971407, step
  112): operations on a detached image wait for such persists.
"""

import threading
import time
import types

import pytest

from blobcr_agent.manager import volumes
from blobcr_agent.mirror import image as image_mod
from blobcr_agent.repository import image as repo_image
from blobcr_agent.repository import repository
# The image (NCHUNKS of CHUNK bytes), persists held at a gate, a store.
from tests.functional.test_mirror_pipeline import _apply
from tests.functional.test_mirror_pipeline import _plan
from tests.functional.test_mirror_pipeline import CHUNK
from tests.functional.test_mirror_pipeline import gated  # noqa: F401
from tests.functional.test_mirror_pipeline import NCHUNKS
from tests.functional.test_mirror_pipeline import store  # noqa: F401


class StorageAgent(volumes.Volumes):
    """The storage agent's Volumes on a Repository of its own (another
    process's view of the store). Its GC thread is left out: GC is not
    what these tests are about.
    """

    settle_timeout = 10

    def __init__(self, repo):
        self.repo = repo
        self.collector = types.SimpleNamespace(kick=lambda: None)
        self.mirror = types.SimpleNamespace(attached={})


def _write(a, k, image):
    for j, data in _plan(k).items():
        a.write(j * CHUNK, data)
    return _apply(image, _plan(k))


@pytest.fixture
def attached(store, gated):  # noqa: F811 (fixtures)
    """(repo, image id, AttachedImage, StorageAgent, persist gate), the
    image checkpointed once: its version is the head.
    """
    repo, image_id, cache = store
    gate, _ = gated
    gate.set()
    a = image_mod.AttachedImage(repo, image_id, None, cache, prefetch=False)
    storage = StorageAgent(repository.Repository(repo.backend,
                                                 chunk_size=CHUNK))
    try:
        image = _write(a, 1, bytes(NCHUNKS * CHUNK))
        snap, _, _ = a.checkpoint(wait=5)
        assert a.wait_persisted(30)
        yield types.SimpleNamespace(repo=repo, id=image_id, a=a,
                                    storage=storage, gate=gate, snap=snap,
                                    image=image)
    finally:
        gate.set()
        a.close(30)
        storage.repo.close()


def test_seed_1476000576_delete_of_the_head_during_a_checkpoint(attached):
    t = attached                                # t.snap: Cinder's, head
    t.gate.clear()
    image = _write(t.a, 2, t.image)             # step 114
    guest, _, _ = t.a.checkpoint(wait=5)        # 115: not waited for
    assert t.a.version_state(guest) == repo_image.PENDING

    # 116: the delete reads the header (snap is the head), then the
    # guest's checkpoint turns stable before the delete's first header
    # update: the window the seed's walk fell into.
    update = t.storage.repo.update_header
    first = []

    def update_header(image_ref, mutate):
        if not first:
            first.append(image_ref)
            t.gate.set()
            assert t.a.wait_persisted(30)
        return update(image_ref, mutate)
    t.storage.repo.update_header = update_header
    t.storage.delete_snapshot(t.id, t.snap)
    assert first, 'the delete never updated the header'

    t.a.close(30)                               # 117: detach
    header = t.storage.repo.image(t.id)
    head = header.head()
    assert t.repo.read(t.id, head.number, 0, len(image)) == image, \
        'head v%d (%s) lost the checkpoint v%d' % (
            head.number, head.made_by or 'checkpoint', guest)
    assert header.version(t.snap).state == repo_image.OBSOLETE


def test_deleting_the_head_while_idle_keeps_a_copy(attached):
    """No checkpoint in flight: the deleted head's content stays the
    image's, as a copy made in the same header update.
    """
    t = attached
    t.a.close(30)
    t.storage.delete_snapshot(t.id, t.snap)
    header = t.storage.repo.image(t.id)
    head = header.head()
    assert head.number != t.snap and head.made_by == 'kept'
    assert head.root == header.version(t.snap).root
    assert t.repo.read(t.id, head.number, 0, len(t.image)) == t.image


def test_a_reservation_failed_by_another_process_is_not_taken(
        store, gated):  # noqa: F811 (fixtures)
    """GC (or a take-over) in another process fails the version
    registered ahead while it is young: the checkpoint must register
    afresh, or its ack names a version that never turns stable.
    """
    repo, image_id, cache = store
    gate, _ = gated
    gate.set()
    a = image_mod.AttachedImage(repo, image_id, None, cache, prefetch=False,
                                reserve=True)
    other = repository.Repository(repo.backend, chunk_size=CHUNK)
    try:
        image = _write(a, 1, bytes(NCHUNKS * CHUNK))
        a.checkpoint(wait=5)
        assert a.wait_persisted(30)
        deadline = time.monotonic() + 30
        while a.meta.get('reserved') is None:
            assert time.monotonic() < deadline, 'nothing reserved'
            time.sleep(0.01)
        reserved = a.meta['reserved']
        other.mark_failed(image_id, reserved, 'failed by another process')
        image = _write(a, 2, image)
        second, _, _ = a.checkpoint(wait=5)
        assert second != reserved and a.last_phases['reserved'] == 0
        assert a.wait_persisted(30)
        assert a.version_state(second) == repo_image.STABLE
        assert repo.read(image_id, second, 0, len(image)) == image
    finally:
        a.close(30)
        other.close()


def test_operations_on_a_detached_image_wait_for_its_persists(
        store):  # noqa: F811 (fixtures)
    """A version of a detached image still pending (an agent resuming
    its persist after a restart): extend and snapshot wait for it, and
    the snapshot holds what it persisted.
    """
    repo, image_id, _ = store
    repo.commit(image_id, {0: b'\x01' * CHUNK})
    resumed = repo.begin_commit(image_id)
    resumed.put(1, b'\x02' * CHUNK)
    storage = StorageAgent(repository.Repository(repo.backend,
                                                 chunk_size=CHUNK))
    finisher = threading.Timer(1.0, resumed.finish)
    finisher.start()
    try:
        storage.extend_image(image_id, 2 * NCHUNKS * CHUNK)
        assert repo.image(image_id).version(resumed.version).state == \
            repo_image.STABLE
        snap = storage.snapshot(image_id)['version']
        assert repo.read(image_id, snap, 0, 2 * CHUNK) == \
            b'\x01' * CHUNK + b'\x02' * CHUNK
    finally:
        finisher.join()
        storage.repo.close()
