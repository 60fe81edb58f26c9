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

"""A full cache file system loses nothing acknowledged (issue 53, item
5), on ext4, XFS (reflinks on) and tmpfs, each a small file system of
its own.

A mirror with a spill file persists an acknowledged checkpoint to a slow
store (each put sleeps: a store slower than the guest, as the spill is
there for) while its guest rewrites every chunk. The spill fills the
file system down to the agent's reserve ([agent] cache_reserve_mb),
never below: the persister's journal and the cache's metadata still
have room, so the checkpoint turns stable; the guest's writes wait and
none fails (on XFS a copy that shared the mirror file's blocks would
have made them fail later, ENOSPC); once there is room again, spill
slots are used again. Without the reserve (0) the same run takes the
room the agent's writes need: the test of the test (whether one of them
then fails, and with it the checkpoint, depends on when it comes).
"""

import os
import subprocess
import threading
import time

import pytest

from blobcr_agent.mirror import image as image_mod
from blobcr_agent.repository.backends import local
from blobcr_agent.repository import repository

CHUNK = 64 * 1024
NCHUNKS = 48
MiB = 1 << 20


class SlowStore(local.LocalBackend):
    """The local store, each put 30 ms late: a store slower than the
    guest (the only thing not real here).
    """

    def _submit_put(self, kind, name, data, callback):
        time.sleep(0.03)
        return super()._submit_put(kind, name, data, callback)


def _run(*args):
    subprocess.run(list(args), check=True, capture_output=True)


@pytest.fixture(params=['ext4', 'xfs', 'tmpfs'])
def small_fs(request, tmp_path):
    """A file system of its own, filled so that about 6 MiB stay free."""
    if os.geteuid() != 0:
        pytest.skip('mounting needs root')
    kind = request.param
    where = tmp_path / 'fs'
    where.mkdir()
    if kind == 'tmpfs':
        _run('mount', '-t', 'tmpfs', '-o', 'size=24m', 'tmpfs', str(where))
    else:
        image = tmp_path / 'fs.img'
        # XFS wants 300 MiB at least.
        with open(image, 'wb') as f:
            f.truncate((320 if kind == 'xfs' else 48) * MiB)
        # ext4: no blocks kept for root (the agent runs as a user of
        # its own; this test as root would use them).
        _run('mkfs.%s' % kind, '-q', *(['-f'] if kind == 'xfs' else
                                       ['-m', '0']), str(image))
        _run('mount', '-o', 'loop', str(image), str(where))
    try:
        yield kind, str(where)
    finally:
        subprocess.run(['umount', '-l', str(where)], capture_output=True)


def _fill(directory, leave):
    """A filler file that leaves ``leave`` bytes free."""
    st = os.statvfs(directory)
    free = st.f_bavail * st.f_frsize
    path = os.path.join(directory, 'filler')
    with open(path, 'wb') as f:
        left = free - leave
        block = b'\xff' * MiB
        while left > 0:
            f.write(block[:min(left, MiB)])
            left -= MiB
        f.flush()
        os.fsync(f.fileno())
    return path


def _free(directory):
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize


def _round(attached, rng_byte, directory=None):
    """A checkpoint (acknowledged), then the guest rewrites every chunk
    while it persists: (version, its state, the guest's write errors,
    what it wrote, the least room the file system had meanwhile).
    """
    version = attached.checkpoint()[0]
    errors, least = [], [None]
    data = bytes([rng_byte]) * (NCHUNKS * CHUNK)
    done = threading.Event()

    def guest():
        try:
            for c in range(NCHUNKS):
                attached.write(c * CHUNK, data[c * CHUNK:(c + 1) * CHUNK])
        except OSError as e:
            errors.append(e)

    def sampler():
        while not done.is_set():
            free = _free(directory)
            least[0] = free if least[0] is None else min(least[0], free)
            time.sleep(0.002)
    threads = [threading.Thread(target=guest)]
    if directory is not None:
        threads.append(threading.Thread(target=sampler))
    for t in threads:
        t.start()
    threads[0].join(120)
    assert not threads[0].is_alive(), 'the guest\'s writes never finished'
    attached.wait_persisted(120)
    done.set()
    threads[-1].join()
    return version, attached.version_state(version), errors, data, least[0]


@pytest.mark.parametrize('reserve_mb', [4, 0])
def test_a_full_cache_file_system_fails_no_acknowledged_checkpoint(
        small_fs, tmp_path, reserve_mb):
    kind, directory = small_fs
    repo = repository.Repository(SlowStore(str(tmp_path / 'store')),
                                 chunk_size=CHUNK)
    image = repo.create_image('full-%s' % kind, NCHUNKS * CHUNK).id
    repo.commit(image, {c: bytes([1]) * CHUNK for c in range(NCHUNKS)})
    attached = image_mod.AttachedImage(
        repo, image, None, os.path.join(directory, 'cache'),
        cow_chunks=1, cow_spill_mb=NCHUNKS * CHUNK // MiB,
        cache_reserve_mb=reserve_mb, reserve=False, prefetch=False,
        durability='host')
    try:
        # Every chunk present: the guest's rewrites allocate nothing in
        # the mirror file (ext4, tmpfs; XFS's copies are by hand).
        attached.write(0, bytes([2]) * (NCHUNKS * CHUNK))
        version, state, errors, _, _ = _round(attached, 2)
        assert state == 'stable' and not errors
        # Room for the reserve and 8 spill copies, not for 47.
        filler = _fill(directory, reserve_mb * MiB + 8 * CHUNK)
        spilled = attached.stats()['spilled']
        version, state, errors, data, least = _round(attached, 3, directory)
        stats = attached.stats()
        assert stats['spill_full'] >= 1, stats
        if reserve_mb == 0:
            # The test of the test: without a reserve, the spill takes
            # the room the agent's own writes need (whether one of them
            # then fails depends on when it comes).
            assert least < 2 * CHUNK, (least, stats)
            return
        # One copy may be under way beside the check of another.
        assert least >= reserve_mb * MiB - 2 * CHUNK, (least, stats)
        assert not errors, errors
        assert state == 'stable', (state, attached.last_error, stats)
        assert stats['spilled'] > spilled, stats
        assert repo.read(image, version, 0, NCHUNKS * CHUNK) == \
            bytes([2]) * (NCHUNKS * CHUNK)
        assert attached.read(0, NCHUNKS * CHUNK) == data
        # Room again: spill slots are used again.
        os.unlink(filler)
        spilled = stats['spilled']
        version, state, errors, _, _ = _round(attached, 4)
        assert state == 'stable' and not errors
        assert attached.stats()['spilled'] >= spilled + NCHUNKS // 2
    finally:
        attached.close(timeout=60)
