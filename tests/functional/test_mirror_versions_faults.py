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

"""versions/ failing must never take the guests' disks (images/) down.

pyfuse3 ends its loop on a handler exception; the service used to stop
the native loop serving images/ with it. These tests break versions/ in
real ways (a chunk object deleted from the store, a corrupt header, an
unmount from outside) on real mounts of a blobcr-mirror and of a
blobcr-agent process, while a writer keeps using an attached image.
"""

import errno
import os
import subprocess
import time

import pytest

from blobcr_agent.repository.backends import base
from blobcr_agent.repository import chunks
from blobcr_agent.repository import repository

CHUNK = 64 * 1024
NCHUNKS = 16
MISSING = 5         # the chunk whose object the store loses


@pytest.fixture
def images(backend_factory):
    """An image with one stable version, and a second image."""
    repo = repository.Repository(backend_factory(), chunk_size=CHUNK)
    content = os.urandom(NCHUNKS * CHUNK)
    made = []
    for name in ('disk', 'other'):
        header = repo.create_image(name, len(content))
        number = repo.commit(header.id, {
            i: content[i * CHUNK:(i + 1) * CHUNK] for i in range(NCHUNKS)})
        made.append((header.id, number))
    yield repo, made, content
    repo.close()


def _attach(service, image, version):
    path = service.client.call('attach', image=image, version=version)
    return path if isinstance(path, str) else path['path']    # the agent's


@pytest.fixture(params=['mirror', 'agent'])
def service(request, images, mirror_factory, agent_factory):
    repo = images[0]
    if request.param == 'mirror':
        return mirror_factory(repo.backend)
    return agent_factory(repo.backend, {'agent': {'quiesce': 'none'}})


def _lose_chunk(repo, image_id, number, index):
    header = repo.image(image_id)
    tree, root = repo.version_tree(header, number)
    name = chunks.object_name(tree.lookup(root, index))
    # Whatever its age: as if the store lost it.
    assert repo.backend.delete_if_older(base.CHUNK, name,
                                        time.time() + 3600) > 0


def _corrupt_header(repo, image_id):
    _, token = repo.backend.read_header(image_id)
    repo.backend.write_header(image_id, b'{not json', token)


def _use_disk(fd, rng_byte):
    """A guest's write and read-back on its disk (chunks other than
    MISSING, which the attached version cannot supply any more).
    """
    data = bytes([rng_byte]) * CHUNK
    for index in (1, 9):
        assert os.pwrite(fd, data, index * CHUNK) == CHUNK
        assert os.pread(fd, CHUNK, index * CHUNK) == data
    return data


def _errno_of(call, *args):
    with pytest.raises(OSError) as error:
        call(*args)
    return error.value.errno


def _wait_mounted(path, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.ismount(path):
            return True
        time.sleep(0.1)
    return False


def test_version_read_errors_are_errnos_and_disks_keep_serving(
        images, service):
    repo, [(disk, number), (other, _)], content = images
    path = _attach(service, disk, number)
    versions = os.path.join(service.mount, 'versions')
    fd = os.open(path, os.O_RDWR)
    try:
        _use_disk(fd, 1)
        _lose_chunk(repo, disk, number, MISSING)
        view = os.path.join(versions, disk, str(number))
        with open(view, 'rb', buffering=0) as f:
            # The rest of the version reads; the lost chunk is EIO.
            assert os.pread(f.fileno(), CHUNK, 0) == content[:CHUNK]
            assert _errno_of(os.pread, f.fileno(), CHUNK,
                             MISSING * CHUNK) == errno.EIO
        data = _use_disk(fd, 2)
        _corrupt_header(repo, other)
        assert _errno_of(os.stat, os.path.join(versions, other)) == \
            errno.EIO
        assert _errno_of(os.listdir, versions) == errno.EIO
        data = _use_disk(fd, 3)
        # The disk checkpoints; versions/ still serves the new version.
        version = service.client.call('checkpoint', image=disk)['version']
        assert service.client.call('wait_stable', image=disk,
                                   version=version) == 'stable'
        with open(os.path.join(versions, disk, str(version)), 'rb') as f:
            f.seek(9 * CHUNK)
            assert f.read(CHUNK) == data
    finally:
        os.close(fd)
    assert service.stop() == 0


def test_versions_is_mounted_again_if_its_loop_ends(images, service):
    repo, [(disk, number), _], content = images
    path = _attach(service, disk, number)
    versions = os.path.join(service.mount, 'versions')
    fd = os.open(path, os.O_RDWR)
    try:
        _use_disk(fd, 1)
        # Not the service's own stop: its pyfuse3 loop ends under it.
        subprocess.run(['fusermount3', '-u', '-z', versions], check=True)
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:      # across the remount
            _use_disk(fd, 2)
        assert _wait_mounted(versions), 'versions/ not mounted again'
        data = _use_disk(fd, 3)
        version = service.client.call('checkpoint', image=disk)['version']
        assert service.client.call('wait_stable', image=disk,
                                   version=version) == 'stable'
        with open(os.path.join(versions, disk, str(version)), 'rb') as f:
            f.seek(CHUNK)
            assert f.read(CHUNK) == data
    finally:
        os.close(fd)
    # Its stop still stops it (no remount then).
    assert service.stop() == 0
    assert not os.path.ismount(versions)
