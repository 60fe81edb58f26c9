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

"""The mirror through a real FUSE mount: lazy fetch, partial writes,
version views, qemu-io with cache=none.
"""

import errno
import os
import shutil
import subprocess
import threading

import pytest

from blobcr_agent.repository import repository

CHUNK = 64 * 1024


@pytest.fixture
def base_image(backend_factory):
    repo = repository.Repository(backend_factory(), chunk_size=CHUNK)
    content = os.urandom(64 * CHUNK)
    header = repo.create_image('base', len(content))
    number = repo.commit(header.id, {i: content[i * CHUNK:(i + 1) * CHUNK]
                                     for i in range(64)})
    yield repo, header.id, number, content
    repo.close()


def test_lazy_fetch_touches_only_what_is_read(base_image, mirror_factory):
    repo, image, number, content = base_image
    mirror = mirror_factory(repo.backend)
    path = mirror.client.call('attach', image=image, version=number)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert os.pread(fd, 100, 3 * CHUNK + 7) == \
            content[3 * CHUNK + 7:3 * CHUNK + 107]
        span = os.pread(fd, CHUNK, 10 * CHUNK + CHUNK // 2)   # 10 and 11
        assert span == content[10 * CHUNK + CHUNK // 2:11 * CHUNK + CHUNK // 2]
        assert mirror.client.call('stats', image=image)['fetched_chunks'] == 3
        # Concurrent readers of one absent chunk: one fetch.
        results = []
        threads = [threading.Thread(target=lambda: results.append(
            os.pread(fd, CHUNK, 20 * CHUNK))) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results == [content[20 * CHUNK:21 * CHUNK]] * 8
        # Reads never go remote twice.
        os.pread(fd, 2 * CHUNK, 10 * CHUNK)
        assert mirror.client.call('stats', image=image)['fetched_chunks'] == 4
    finally:
        os.close(fd)


@pytest.mark.parametrize('readahead', [64, 0])
def test_a_sequential_reader_is_read_ahead(base_image, mirror_factory,
                                           readahead):
    """Read in order, chunk by chunk: with readahead the chunks after
    the ones missed are fetched in the background, so the reads find
    their chunk present or on its way; without it every read the kernel
    sends fetches its own (the kernel's readahead merges two 64 KiB
    chunks a request: 32). Each chunk is fetched once either way, and
    the data is the version's.
    """
    repo = base_image[0]
    nchunks = 256
    content = os.urandom(nchunks * CHUNK)
    image = repo.create_image('sequential', len(content)).id
    number = repo.commit(image, {i: content[i * CHUNK:(i + 1) * CHUNK]
                                 for i in range(nchunks)})
    mirror = mirror_factory(repo.backend, '--readahead-chunks',
                            str(readahead))
    path = mirror.client.call('attach', image=image, version=number,
                              prefetch=False)
    fd = os.open(path, os.O_RDONLY)
    try:
        # A short run first (a small file): never read ahead.
        for k in (100, 101, 102):
            assert os.pread(fd, CHUNK, k * CHUNK) == \
                content[k * CHUNK:(k + 1) * CHUNK], k
        assert mirror.client.call('stats', image=image)[
            'readahead_chunks'] == 0
        for k in range(nchunks):
            assert os.pread(fd, CHUNK, k * CHUNK) == \
                content[k * CHUNK:(k + 1) * CHUNK], k
    finally:
        os.close(fd)
    stats = mirror.client.call('stats', image=image)
    assert stats['fetched_chunks'] == nchunks
    if readahead:
        # Until 16 chunks in a row were read, then ahead of the reader
        # (on a loaded host the reader still catches up at times).
        assert stats['readahead_chunks'] > nchunks // 2, stats
        assert stats['read_fetches'] <= nchunks // 4, stats
    else:
        assert stats['readahead_chunks'] == 0
        assert stats['read_fetches'] >= (nchunks - 3) // 2, stats


def test_writes_racing_the_readahead_are_kept(base_image, mirror_factory):
    """A sequential reader starts the readahead while a second thread
    writes whole and partial chunks ahead of it, on the chunks the
    readahead is fetching: no fetched chunk is installed over a write,
    every write reads back, every other chunk is the version's.
    """
    repo = base_image[0]
    nchunks = 256
    content = os.urandom(nchunks * CHUNK)
    image = repo.create_image('race', len(content)).id
    number = repo.commit(image, {i: content[i * CHUNK:(i + 1) * CHUNK]
                                 for i in range(nchunks)})
    mirror = mirror_factory(repo.backend)
    path = mirror.client.call('attach', image=image, version=number,
                              prefetch=False)
    expected = bytearray(content)
    writes = []
    for k in range(40, nchunks, 7):
        whole = k % 2 == 0
        offset = k * CHUNK + (0 if whole else 1000)
        data = os.urandom(CHUNK if whole else 3000)
        writes.append((offset, data))
        expected[offset:offset + len(data)] = data
    fd = os.open(path, os.O_RDWR)
    errors = []

    def writer():
        try:
            for offset, data in writes:
                os.pwrite(fd, data, offset)
        except Exception as e:
            errors.append(e)
    try:
        for k in range(20):            # past the trigger: readahead on
            os.pread(fd, CHUNK, k * CHUNK)
        thread = threading.Thread(target=writer)
        thread.start()
        for k in range(20, nchunks):
            os.pread(fd, CHUNK, k * CHUNK)
        thread.join()
        assert errors == []
        for k in range(nchunks):
            assert os.pread(fd, CHUNK, k * CHUNK) == \
                bytes(expected[k * CHUNK:(k + 1) * CHUNK]), k
    finally:
        os.close(fd)
    stats = mirror.client.call('stats', image=image)
    assert stats['readahead_chunks'] > 0, stats


def test_partial_write_to_an_absent_chunk_fills_the_rest(base_image,
                                                         mirror_factory):
    repo, image, number, content = base_image
    mirror = mirror_factory(repo.backend)
    path = mirror.client.call('attach', image=image)
    with open(path, 'r+b', buffering=0) as f:
        f.seek(5 * CHUNK + 100)
        f.write(b'patch')
        f.seek(5 * CHUNK)
        chunk = f.read(CHUNK)
    expected = bytearray(content[5 * CHUNK:6 * CHUNK])
    expected[100:105] = b'patch'
    assert chunk == bytes(expected)
    version = mirror.client.call('checkpoint', image=image)['version']
    assert mirror.client.call('wait_stable', image=image,
                              version=version) == 'stable'
    view = os.path.join(mirror.mount, 'versions', image, str(version))
    with open(view, 'rb') as f:
        got = f.read()
    assert got == content[:5 * CHUNK] + bytes(expected) + \
        content[6 * CHUNK:]
    assert repo.read(image, version, 0, len(content)) == got
    with pytest.raises(OSError) as error:
        open(view, 'r+b')
    assert error.value.errno == errno.EROFS


@pytest.mark.skipif(not shutil.which('qemu-io'), reason='qemu-utils absent')
def test_qemu_io_with_cache_none(base_image, mirror_factory):
    repo, image, number, content = base_image
    mirror = mirror_factory(repo.backend)
    path = mirror.client.call('attach', image=image)

    def qemu_io(*commands):
        args = ['qemu-io', '-f', 'raw', '-t', 'none']
        for c in commands:
            args += ['-c', c]
        return subprocess.run(args + [path], capture_output=True, text=True,
                              timeout=120)
    run = qemu_io('write -P 0xab 65536 1M', 'read -P 0xab 65536 1M')
    assert run.returncode == 0, run.stdout + run.stderr
    # qemu-io's check can fail: outside the pattern it must.
    run = qemu_io('read -P 0xab 1114112 4k')
    assert 'Pattern verification failed' in run.stdout
    with open(path, 'rb') as f:
        data = f.read()
    assert data[65536:65536 + (1 << 20)] == b'\xab' * (1 << 20)
    assert data[:65536] == content[:65536]
    assert data[65536 + (1 << 20):] == content[65536 + (1 << 20):]
