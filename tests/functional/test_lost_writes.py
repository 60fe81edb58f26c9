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

"""Data-loss paths found by review (issue 19), each shown by the steps
that reached it:

* a snapshot of an attached volume deleted (or the temporary one of a
  clone) made a copy whose number was higher than the next checkpoint's,
  and "newest" went by number: the detach's checkpoint, with the guest's
  writes, was superseded by the older content (a real agent, its FUSE
  mirror, the local store);
* a version turning stable while the next checkpoint was being taken
  rewrote the cache's metadata without that checkpoint: after a crash
  its writes were in no version and not dirty;
* a checkpoint of an image attached for an incoming live migration
  published a version of the old base as the newest.
"""

import json
import os
import random

import pytest

from blobcr_agent.mirror import handoff
from blobcr_agent.mirror import image as image_mod
from blobcr_agent.mirror import persister as persister_mod
from blobcr_agent.repository.backends import local
from blobcr_agent.repository import repository
from blobcr_common import exception
from tests.functional.test_agent import fill
# The image (NCHUNKS of CHUNK bytes) and the persists held at a gate.
from tests.functional.test_mirror_pipeline import CHUNK
from tests.functional.test_mirror_pipeline import gated  # noqa: F401
from tests.functional.test_mirror_pipeline import NCHUNKS
from tests.functional.test_mirror_pipeline import store  # noqa: F401


def test_deleting_a_snapshot_of_an_attached_image_keeps_later_writes(
        tmp_path, agent_factory):
    """The driver's steps for ``volume create --source ATTACHED`` and for
    deleting a snapshot of an attached volume, then the guest's writes,
    the detach, the driver's clean-up of superseded versions and GC.
    """
    backend = local.LocalBackend(str(tmp_path / 'store'))
    agent = agent_factory(backend, {'agent': {'quiesce': 'none'},
                                    'repository': {'chunk_size': CHUNK}})
    call = agent.client.call
    rng = random.Random(19)
    image = call('create_image', name='vol', size=NCHUNKS * CHUNK)['id']
    path = call('attach', image=image)['path']
    content = bytearray(NCHUNKS * CHUNK)
    for index, data in fill(path, rng, [0, 1, 2]).items():
        content[index * CHUNK:(index + 1) * CHUNK] = data
    snap = call('checkpoint', image=image, label='cinder')['version']
    assert call('wait_stable', image=image, version=snap) == 'stable'
    call('delete_snapshot', image=image, version=snap)
    for index, data in fill(path, rng, range(4, 12)).items():
        content[index * CHUNK:(index + 1) * CHUNK] = data
    last = call('checkpoint', image=image, label='cinder')['version']
    assert call('wait_stable', image=image, version=last) == 'stable'
    call('detach', image=image)
    repo = repository.Repository(backend)
    try:
        # A detached image's content: its newest stable version.
        header = repo.image(image)
        assert repo.read(image, header.stable_version().number, 0,
                         len(content)) == content
    finally:
        repo.close()

    listed = call('list_versions', image=image)
    assert listed['head'] == last, listed
    # The driver obsoletes every stable version but the head that it
    # made only to hold the content (blobcr_cinder.driver
    # _forget_superseded), then GC runs.
    old = [v['version'] for v in listed['versions']
           if v['state'] == 'stable' and v['version'] != listed['head']]
    assert old, 'the deleted snapshot left no copy in its place'
    call('obsolete', image=image, versions=old)
    call('gc', grace=0)
    repo = repository.Repository(backend)
    try:
        header = repo.image(image)
        newest = header.stable_version().number
        assert newest == last
        assert repo.read(image, newest, 0, len(content)) == content
    finally:
        repo.close()


def test_a_version_turning_stable_keeps_the_next_in_the_metadata(
        store, gated):  # noqa: F811 (fixtures)
    """Version N turns stable while checkpoint N+1 is between recording
    itself in flight and its COMMIT (the guest held): the metadata must
    still name N+1, or a crash then loses its writes.
    """
    repo, image_id, cache = store
    gate, _ = gated
    a = image_mod.AttachedImage(repo, image_id, None, cache, prefetch=False)
    seen = {}

    class Hold(object):
        """Entered after N+1 is recorded, before its COMMIT: lets N
        finish and reads what the metadata says then.
        """
        def __enter__(self):
            gate.set()
            assert a.persister.wait(30)
            with open(os.path.join(cache, 'meta.json')) as f:
                seen['meta'] = json.load(f)

        def __exit__(self, *exc):
            return False
    try:
        a.write(0, b'\1' * CHUNK)
        first, _, _ = a.checkpoint()
        a.write(CHUNK, b'\2' * CHUNK)
        second, _, _ = a.checkpoint(hold=Hold())
        assert seen['meta']['last'] == first
        assert persister_mod.in_flight(seen['meta']) == [second], seen
        assert a.wait_persisted(30)
        assert repo.read(image_id, second, 0, 2 * CHUNK) == \
            b'\1' * CHUNK + b'\2' * CHUNK
    finally:
        gate.set()
        a.close(30)


def test_an_incoming_image_refuses_a_checkpoint_until_its_handoff(
        store):  # noqa: F811 (a fixture)
    repo, image_id, cache = store
    repo.commit(image_id, {0: b'\3' * CHUNK})
    a = image_mod.AttachedImage(repo, image_id, None, cache, prefetch=False,
                                incoming=True)
    try:
        a.incoming = handoff.Incoming(
            a, 'source-host', lambda wait, timeout: {'running': True})
        before = [v.number for v in repo.image(image_id).versions]
        with pytest.raises(exception.InvalidInput, match='source-host'):
            a.checkpoint()
        assert [v.number for v in repo.image(image_id).versions] == before
    finally:
        a.close(30)
