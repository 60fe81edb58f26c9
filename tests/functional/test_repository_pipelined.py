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

"""Versions that follow a pending one (pipelined checkpoints), on both
backends: the follower's tree is built on its predecessor's once that
one is stable, it fails if the predecessor fails, and it can be resumed.
"""

import pytest

from blobcr_common import exception

CHUNK = 4096


def _image(repo, chunks=8):
    header = repo.create_image('pipelined', chunks * CHUNK, chunk_size=CHUNK)
    repo.commit(header.id, {i: bytes([i + 1]) * CHUNK
                            for i in range(chunks)})
    return header.id


def _read(repo, image, number):
    return repo.read(image, number, 0, repo.image(image).size)


def test_a_follower_is_built_on_its_predecessor(repo):
    image = _image(repo)
    first = repo.begin_commit(image)
    second = repo.begin_commit(image, after=first.version)
    assert repo.image(image).version(second.version).parent == first.version
    # The follower's chunks may be written before its predecessor is
    # done; only its finish waits for the predecessor's root.
    second.put(1, b'b' * CHUNK)
    first.put(0, b'a' * CHUNK)
    first.put(1, b'x' * CHUNK)
    assert first.finish() == 2
    assert second.finish() == 3
    v1 = b''.join(bytes([i + 1]) * CHUNK for i in range(8))
    assert _read(repo, image, 2) == b'a' * CHUNK + b'x' * CHUNK + v1[
        2 * CHUNK:]
    assert _read(repo, image, 3) == b'a' * CHUNK + b'b' * CHUNK + v1[
        2 * CHUNK:]
    assert _read(repo, image, 1) == v1


def test_a_follower_finishing_first_or_after_a_failure_fails(repo):
    image = _image(repo)
    first = repo.begin_commit(image)
    second = repo.begin_commit(image, after=first.version)
    second.put(2, b'c' * CHUNK)
    with pytest.raises(exception.CommitAborted, match='pending'):
        second.finish()
    first.abort('the store went away')
    with pytest.raises(exception.CommitAborted, match='failed'):
        second.finish()
    second.abort('its predecessor failed')
    with pytest.raises(exception.CommitAborted):
        repo.begin_commit(image, after=first.version)
    states = [(v.number, v.state) for v in repo.image(image).versions]
    assert states == [(1, 'stable'), (2, 'failed'), (3, 'failed')]
    # The chain goes on from the newest stable version.
    assert repo.commit(image, {0: b'd' * CHUNK}) == 4
    assert repo.image(image).version(4).parent == 1


def test_a_resumed_follower_still_follows(repo):
    image = _image(repo)
    first = repo.begin_commit(image)
    second = repo.begin_commit(image, after=first.version)
    resumed = repo.resume_commit(image, second.version)
    assert resumed.after == first.version
    resumed.put(3, b'r' * CHUNK)
    first.finish()
    assert resumed.finish() == 3
    assert repo.read(image, 3, 3 * CHUNK, CHUNK) == b'r' * CHUNK
