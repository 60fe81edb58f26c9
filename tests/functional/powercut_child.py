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

"""A guest-like writer for test_power_cut: attaches an image whose cache
is on the lazy file system (blobcr_lab/lazyfs.py) and writes forever,
flushing and checkpointing at random, until it is killed. Its log, on a
real disk and synced line by line, says what it was promised:

    F i      every write up to number i was flushed (the flush returned)
    c i      a checkpoint is asked after write i
    C v i    ... it was taken: version v
    B i      ... it was refused Busy (nothing taken)

The writes are a function of the seed alone (``plan``), so the test
knows what each write put where without logging it.

    python -m tests.functional.powercut_child DIR CACHE IMAGE_ID SEED
"""

import os
import random
import sys

from blobcr_agent.mirror import image as image_mod
from blobcr_agent.repository.backends import local
from blobcr_agent.repository import repository as repo_mod
from blobcr_common import exception

BLOCK = 4096
CHUNK = 4 * BLOCK
NCHUNKS = 16
NBLOCKS = NCHUNKS * CHUNK // BLOCK
FLUSH, CHECKPOINT = 0.15, 0.04      # after a write, the chance of each


def repo_at(directory):
    return repo_mod.Repository(
        local.LocalBackend(os.path.join(directory, 'store')),
        chunk_size=CHUNK, fanout=4, gc_grace=0)


def block_data(seed, i, block):
    """What write i puts into ``block`` (i = -1: the base version)."""
    rng = random.Random('%d:%d:%d' % (seed, i, block))
    return (i.to_bytes(8, 'little', signed=True) +
            block.to_bytes(8, 'little') + rng.randbytes(BLOCK - 16))


def who_wrote(data):
    """(i, block) that ``data`` names; the caller checks it is theirs."""
    return (int.from_bytes(data[:8], 'little', signed=True),
            int.from_bytes(data[8:16], 'little'))


def plan(seed):
    """Writes in order, forever: (i, first block, block count, then)
    with ``then`` in [0, 1): below FLUSH a flush, below FLUSH +
    CHECKPOINT a checkpoint, else nothing.
    """
    rng = random.Random(seed)
    i = 0
    while True:
        if rng.random() < 0.1:        # a whole chunk at once
            first, count = rng.randrange(NCHUNKS) * CHUNK // BLOCK, \
                CHUNK // BLOCK
        else:
            first, count = rng.randrange(NBLOCKS), 1
        yield i, first, count, rng.random()
        i += 1


def main(directory, cache_dir, image_id, seed):
    repo = repo_at(directory)
    # One copy-on-write slot in memory, the rest in the spill file: the
    # cuts find copies there too (they are scratch: lost with the power).
    image = image_mod.AttachedImage(repo, image_id, None, cache_dir,
                                    prefetch=False, cow_chunks=1,
                                    cow_spill_mb=1)
    log = open(os.path.join(directory, 'log'), 'a')

    def say(line):
        log.write(line + '\n')
        log.flush()
        os.fsync(log.fileno())

    say('started')
    for i, first, count, then in plan(seed):
        image.write(first * BLOCK, b''.join(
            block_data(seed, i, b) for b in range(first, first + count)))
        if then < FLUSH:
            image.core.flush()
            say('F %d' % i)
        elif then < FLUSH + CHECKPOINT:
            say('c %d' % i)
            try:
                version = image.checkpoint(wait=5)[0]
            except exception.Busy:
                say('B %d' % i)
            else:
                say('C %d %d' % (version, i))
            say('S %d' % image.core.stats()['spilled'])


if __name__ == '__main__':
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
