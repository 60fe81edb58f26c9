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

"""The agent's volume calls (RPC API 1.3, what the Cinder driver uses)
end to end: real agents, real RabbitMQ, the local store and the micro
Ceph cluster.

A detached image's content is its newest stable version; snapshot,
revert, import and extend act on it and are refused, naming the host,
while a mirror holds the image.
"""

import os
import random

import pytest

from blobcr_common import exception
from tests.functional.test_agent import CHUNK
from tests.functional.test_agent import expected as apply
from tests.functional.test_agent import fill as write_at  # same CHUNK

NCHUNKS = 20


def test_volume_life_cycle(store, rpc_agent, api, export_dir):
    repo = store
    agent, host = rpc_agent(repo)
    rng = random.Random(11)
    size = NCHUNKS * CHUNK

    created = api.create_image(host, 'volume-1', size)
    image_id = created['id']
    # A blank volume is a version of zeros, written as no chunk.
    assert created['size'] == size and created['newest_stable'] == 1
    assert repo.read(image_id, 1, 0, size) == bytes(size)
    assert repo.image(image_id).version(1).chunks == 0

    # Import a raw file as its content (copy_image_to_volume).
    export_dir.mkdir()
    raw = export_dir / 'image.raw'
    content = rng.randbytes(size - CHUNK - 100)     # shorter than the image
    raw.write_bytes(content)
    v2 = api.import_file(host, image_id, str(raw))
    assert v2['version'] == 2 and v2['state'] == 'stable'
    content += bytes(size - len(content))
    assert repo.read(image_id, 2, 0, size) == content
    # Importing the same file again writes no chunk.
    again = api.import_file(host, image_id, str(raw))
    assert again['version'] == 3 and again['chunks'] == 0
    # Imports come from the export directory only.
    with pytest.raises(exception.InvalidInput, match='export_dir'):
        api.import_file(host, image_id, '/etc/hostname')

    # Attached: written through the mirror, checkpointed there; the
    # detached-image calls are refused, naming the host that pins it.
    path = api.attach(host, image_id)['path']
    w = write_at(path, rng, [0, 7, NCHUNKS - 1])
    cp = api.checkpoint(host, image_id)
    assert api.wait_stable(host, image_id, cp['version'], 60) == 'stable'
    for call in (lambda: api.snapshot(host, image_id),
                 lambda: api.revert(host, image_id, 1),
                 lambda: api.import_file(host, image_id, str(raw)),
                 lambda: api.extend_image(host, image_id, 2 * size),
                 lambda: api.delete_image(host, image_id)):
        with pytest.raises(exception.InvalidInput, match='attached'):
            call()
    api.detach(host, image_id)
    current = apply(content, w)
    assert repo.read(image_id, cp['version'], 0, size) == current

    # Detached: a snapshot is a new version equal to the newest, sharing
    # its tree (no chunk written).
    snap = api.snapshot(host, image_id)
    assert snap['version'] > cp['version']      # (after the reservation)
    assert snap['parent'] == cp['version'] and snap['chunks'] == 0
    assert repo.read(image_id, snap['version'], 0, size) == current

    # Revert to version 2: newest again equal to it; later ones stay.
    reverted = api.revert(host, image_id, 2)
    assert reverted['parent'] == 2
    assert repo.read(image_id, reverted['version'], 0, size) == content
    assert repo.read(image_id, snap['version'], 0, size) == current

    # Extend: every version grows with zeros (past the tree's depth: 20
    # to 300 chunks with the default fan-out of 64); attach sees it.
    big = 300 * CHUNK + 5
    assert api.extend_image(host, image_id, big)['size'] == big
    with pytest.raises(exception.InvalidInput, match='shrink'):
        api.extend_image(host, image_id, size)
    zeros = bytes(big - size)
    for number, data in ((2, content), (snap['version'], current),
                         (reverted['version'], content)):
        assert repo.read(image_id, number, 0, big) == data + zeros
    path = api.attach(host, image_id)['path']
    assert os.path.getsize(path) == big
    w2 = write_at(path, rng, [250])
    cp2 = api.checkpoint(host, image_id)
    assert api.wait_stable(host, image_id, cp2['version'], 60) == 'stable'
    api.detach(host, image_id)
    assert repo.read(image_id, cp2['version'], 0, big) == \
        apply(content + zeros, w2)

    # Deleting the snapshot that is the newest version keeps the
    # content: a copy takes its place. An older one just goes.
    # (The mirror's unused reservation ended failed: not a version.)
    newest = cp2['version']
    after = [v for v in api.delete_snapshot(host, image_id,
                                            newest)['versions']
             if v['state'] != 'failed']
    assert [v['state'] for v in after[-2:]] == ['obsolete', 'stable']
    assert after[-1]['parent'] == newest and after[-1]['chunks'] == 0
    assert repo.read(image_id, after[-1]['version'], 0, big) == \
        apply(content + zeros, w2)
    api.delete_snapshot(host, image_id, 2)
    api.gc(host, grace=0)
    assert repo.read(image_id, after[-1]['version'], 0, big) == \
        apply(content + zeros, w2)
    assert repo.read(image_id, snap['version'], 0, big) == current + zeros

    # Capacity: the store's room and what its images provision.
    room = api.capacity(host)
    assert room['total_bytes'] >= room['free_bytes'] > 0
    assert room['provisioned_bytes'] >= big and room['images'] >= 1
    assert room['backend'] == repo.backend.describe()

    # Delete with a clone of it alive: the clone keeps its data.
    clone = api.clone(host, image_id, snap['version'])
    api.delete_image(host, image_id)
    with pytest.raises(exception.ImageNotFound):
        api.list_versions(host, image_id)
    api.gc(host, grace=0)
    assert repo.read(clone['id'], 1, 0, big) == current + zeros


def test_deleting_the_last_checkpoint_of_an_attached_image_keeps_it(
        store, rpc_agent, api, monkeypatch):
    """The newest checkpoint of an attached image is deleted while the
    mirror has the next version registered ahead (pending): that pending
    version may still fail (it does, at the detach), so a stable copy
    must take the deleted one's place, or the detached image would fall
    back to older content.
    """
    repo = store
    monkeypatch.setenv('BLOBCR_RESERVE_AHEAD', '1')     # for the agent
    agent, host = rpc_agent(repo)
    image_id = api.create_image(host, 'volume-2', NCHUNKS * CHUNK)['id']
    path = api.attach(host, image_id)['path']
    w = write_at(path, random.Random(5), [1, 2, 3])
    cp = api.checkpoint(host, image_id)
    assert api.wait_stable(host, image_id, cp['version'], 60) == 'stable'
    api.delete_snapshot(host, image_id, cp['version'])
    api.detach(host, image_id)
    api.gc(host, grace=0)
    header = repo.image(image_id)
    newest = header.stable_version()
    assert newest.number != cp['version']
    assert repo.read(image_id, newest.number, 0, NCHUNKS * CHUNK) == \
        apply(bytes(NCHUNKS * CHUNK), w)
