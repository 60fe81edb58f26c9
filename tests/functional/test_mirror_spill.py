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

"""The copy-on-write buffer's spill file on a real, small file system.

A guest that rewrites more than the memory buffer holds gets its old
chunks copied into the spill file instead of waiting for the store; when
the file system fills up, the writes wait for the store as they would
without a spill file, and nothing is lost: every chunk the persister
takes is the snapshot's, every read the guest's last write.
"""

import os
import subprocess
import threading
import time

import pytest

from blobcr_agent import _native

CHUNK = 64 * 1024
NCHUNKS = 16


@pytest.fixture
def small_fs(tmp_path):
    """A tmpfs with room for the mirror file and about two more chunks."""
    if os.geteuid() != 0:
        pytest.skip('mounting a tmpfs needs root')
    where = tmp_path / 'fs'
    where.mkdir()
    size = (NCHUNKS + 2) * CHUNK + 64 * 1024   # + the state files
    subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=%d' % size,
                    'tmpfs', str(where)], check=True)
    try:
        yield str(where)
    finally:
        subprocess.run(['umount', '-l', str(where)], check=True)


def _spill_blocks(directory):
    """512-byte blocks of this process's nameless file in directory."""
    for fd in os.listdir('/proc/self/fd'):
        try:
            target = os.readlink('/proc/self/fd/' + fd)
        except OSError:
            continue
        if target.startswith(directory + '/') and \
                target.endswith('(deleted)'):
            return os.stat('/proc/self/fd/' + fd).st_blocks
    raise AssertionError('no spill file open in %s' % directory)


def _filled(directory, spill):
    m = _native.Mirror(directory, NCHUNKS * CHUNK, CHUNK, 'selective-cow',
                       1, spill_chunks=spill)
    for c in range(NCHUNKS):
        m.install(c, bytes([c + 1]) * CHUNK)
    return m


def test_a_rewrite_larger_than_memory_is_copied_not_waited_for(tmp_path):
    m = _filled(str(tmp_path), NCHUNKS)
    before = m.read(0, NCHUNKS * CHUNK)
    m.write(0, before)                  # every chunk dirty
    assert m.commit() == NCHUNKS
    new = bytes([0xee]) * (NCHUNKS * CHUNK)
    # Non-blocking: a write that would wait for the store raises Busy.
    assert m.write(0, new, True) == len(new)
    stats = m.stats()
    assert stats['waits'] == 0
    assert stats['cow_copies'] == NCHUNKS
    assert stats['spilled'] == NCHUNKS - 1      # one memory slot
    assert _spill_blocks(str(tmp_path)) >= (NCHUNKS - 1) * CHUNK // 512
    taken = {}
    while (item := m.take()) is not None:
        taken[item[0]] = item[1]
    m.snapshot_done(True)
    assert taken == {c: before[c * CHUNK:(c + 1) * CHUNK]
                     for c in range(NCHUNKS)}
    assert m.read(0, NCHUNKS * CHUNK) == new
    # Taken slots are punched out: the file keeps no blocks.
    assert _spill_blocks(str(tmp_path)) == 0
    m.close()


def test_a_full_file_system_makes_writes_wait_and_loses_nothing(small_fs):
    m = _filled(small_fs, NCHUNKS)
    before = m.read(0, NCHUNKS * CHUNK)
    m.write(0, before)
    assert m.commit() == NCHUNKS
    new = bytes(range(256)) * (NCHUNKS * CHUNK // 256)
    taken = {}
    wrote = threading.Event()

    def persister():
        # Slower than the writer, as a store is: the writer outruns it
        # until the file system is full, then waits for it.
        while (item := m.take()) is not None:
            taken[item[0]] = item[1]
            time.sleep(0.02)

    writer = threading.Thread(
        target=lambda: (m.write(0, new), wrote.set()))
    writer.start()
    time.sleep(0.05)
    takes = threading.Thread(target=persister)
    takes.start()
    writer.join(30)
    takes.join(30)
    assert wrote.is_set(), 'the write never finished'
    m.snapshot_done(True)
    stats = m.stats()
    assert stats['spill_full'] >= 1, stats
    assert stats['waits'] >= 1, stats
    assert 1 <= stats['spilled'] < NCHUNKS - 1, stats
    assert taken == {c: before[c * CHUNK:(c + 1) * CHUNK]
                     for c in range(NCHUNKS)}
    assert m.read(0, NCHUNKS * CHUNK) == new
    m.close()


def test_a_kill_leaves_no_spill_file(tmp_path):
    """The spill file has no name: a killed agent leaves nothing behind
    in the cache directory, and the next open counts the copies that
    were only there as lost (the version fails; the data is dirty).
    """
    directory = str(tmp_path)
    child = (
        'import os, sys\n'
        'from blobcr_agent import _native\n'
        'm = _native.Mirror(sys.argv[1], %d, %d, "selective-cow", 1,\n'
        '                   spill_chunks=4)\n'
        'for c in range(%d): m.install(c, bytes([c + 1]) * %d)\n'
        'm.write(0, bytes(%d)); m.commit()\n'
        'm.write(0, b"x" * %d, True)\n'
        'os.kill(os.getpid(), 9)\n'
        % (NCHUNKS * CHUNK, CHUNK, NCHUNKS, CHUNK, NCHUNKS * CHUNK,
           3 * CHUNK))
    done = subprocess.run([os.sys.executable, '-c', child, directory])
    assert done.returncode == -9
    names = sorted(os.listdir(directory))
    assert not [n for n in names if 'spill' in n], names
    again = _native.Mirror(directory, NCHUNKS * CHUNK, CHUNK,
                           'selective-cow', 1, spill_chunks=4)
    # 3 chunks copied aside (1 in memory, 2 spilled): all lost.
    assert again.recovery()['lost'] == 3
    assert again.read(0, 3 * CHUNK) == b'x' * 3 * CHUNK
    again.close()
