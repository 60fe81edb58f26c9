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

"""Live snapshots under concurrent writers, in every mirror mode.

Writer threads keep writing random patterns through the FUSE mount, all
of them on the same chunks, while CHECKPOINTs are taken and persisted in
the background and the prefetcher fetches the attached version (a saved
read profile) in a shuffled order, so that writes race fetches and land
on chunks that are absent, scheduled, pending and copied. Small writes
go to each writer's own 4 KiB stripes of every chunk (concurrent writes
to disjoint bytes of one chunk); whole-chunk and chunk-spanning writes
hold their chunks alone (two racing writes to the same bytes are the
application's problem, and the model could not know their order). A
checkpoint is taken with the writers quiesced for an instant (as a
guest's fsfreeze would), which fixes the model's image at the COMMIT;
writing resumes as soon as the version id is back, while the persist
runs. Every version must equal the model at its COMMIT, byte for byte.
A 4-chunk copy-on-write buffer makes writers fill it and wait.
"""

import os
import random
import threading

import pytest

from blobcr_agent.repository import repository
from blobcr_agent.repository import scrub

CHUNK = 64 * 1024
NCHUNKS = 48
WRITERS = 3
STRIPE = 4096                  # stripe k of a chunk: writer k % WRITERS
MODES = ['selective-cow', 'live-cow', 'live-precopy', 'offline']
# The copy-on-write buffer: 4 slots in memory, no spill file, so that
# writers wait for the persister; or 1 in memory and 4 in the spill file
# (1 MiB: 16 slots), whose copies and takes run unlocked.
BUFFERS = {'memory': ['--cow-chunks', '4', '--cow-spill-mb', '0'],
           'spill': ['--cow-chunks', '1', '--cow-spill-mb', '1']}


class SharedLock(object):
    """Many holders for disjoint stripes, or one for a whole range."""

    def __init__(self):
        self._cond = threading.Condition()
        self._shared = 0
        self._alone = False

    def acquire(self, alone):
        with self._cond:
            while self._alone or (alone and self._shared):
                self._cond.wait()
            if alone:
                self._alone = True
            else:
                self._shared += 1

    def release(self, alone):
        with self._cond:
            if alone:
                self._alone = False
            else:
                self._shared -= 1
            self._cond.notify_all()


class Quiesce(object):
    """Writers share it; a checkpoint takes it alone (a freeze)."""

    def __init__(self):
        self._cond = threading.Condition()
        self._writers = 0
        self._frozen = False

    def enter(self):
        with self._cond:
            while self._frozen:
                self._cond.wait()
            self._writers += 1

    def leave(self):
        with self._cond:
            self._writers -= 1
            self._cond.notify_all()

    def freeze(self):
        with self._cond:
            self._frozen = True
            while self._writers:
                self._cond.wait()

    def thaw(self):
        with self._cond:
            self._frozen = False
            self._cond.notify_all()


@pytest.mark.parametrize('mode,buffer',
                         [(m, 'memory') for m in MODES] +
                         [('selective-cow', 'spill')])
def test_versions_equal_the_image_at_their_commit(backend_factory,
                                                  mirror_factory, mode,
                                                  buffer):
    repo = repository.Repository(backend_factory(), chunk_size=CHUNK)
    rng = random.Random(hash(mode) & 0xffff)
    content = bytearray(rng.randbytes(NCHUNKS * CHUNK))
    header = repo.create_image('live', len(content))
    attached = repo.commit(header.id,
                           {i: bytes(content[i * CHUNK:(i + 1) * CHUNK])
                            for i in range(NCHUNKS)})
    # A read profile makes the attach prefetch every chunk, racing the
    # writers from the first instant.
    order = list(range(NCHUNKS))
    rng.shuffle(order)
    repo.save_profile(header.id, attached, order)
    mirror = mirror_factory(repo.backend, '--mode', mode, *BUFFERS[buffer])
    path = mirror.client.call('attach', image=header.id)

    model_lock = threading.Lock()
    chunk_locks = [SharedLock() for _ in range(NCHUNKS)]
    quiesce = Quiesce()
    stop = threading.Event()
    errors = []

    def pick(r, seed):
        """(offset, length, alone): a piece of one of this writer's
        stripes, or a whole or spanning range of chunks.
        """
        if r.random() < 0.7:
            chunk = r.randrange(NCHUNKS)
            stripe = r.randrange(seed, CHUNK // STRIPE, WRITERS)
            offset = chunk * CHUNK + stripe * STRIPE
            length = r.choice([512, STRIPE])
            return offset + r.randrange(0, STRIPE - length + 1, 512), \
                length, False
        offset = r.randrange(NCHUNKS) * CHUNK
        if r.random() < 0.5:
            offset += r.randrange(0, CHUNK, 512)
        length = min(r.choice([CHUNK, 3 * CHUNK // 2]), len(content) - offset)
        return offset, length, True

    def writer(seed):
        r = random.Random(seed)
        fd = os.open(path, os.O_RDWR)
        try:
            while not stop.is_set():
                offset, length, alone = pick(r, seed)
                data = bytes([r.randrange(256)]) * length
                held = range(offset // CHUNK,
                             (offset + length - 1) // CHUNK + 1)
                quiesce.enter()
                for c in held:
                    chunk_locks[c].acquire(alone)
                try:
                    assert os.pwrite(fd, data, offset) == length
                    with model_lock:
                        content[offset:offset + length] = data
                finally:
                    for c in held:
                        chunk_locks[c].release(alone)
                    quiesce.leave()
        except Exception as e:       # reported by the main thread
            errors.append(e)
        finally:
            os.close(fd)

    threads = [threading.Thread(target=writer, args=(s,))
               for s in range(WRITERS)]
    for t in threads:
        t.start()
    snapshots = {}
    try:
        for _ in range(6):
            stop.wait(0.3)
            quiesce.freeze()
            try:
                with model_lock:
                    expected = bytes(content)
                result = mirror.client.call('checkpoint', image=header.id)
            finally:
                quiesce.thaw()
            snapshots[result['version']] = expected
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors

    for version, expected in sorted(snapshots.items()):
        assert mirror.client.call('wait_stable', image=header.id,
                                  version=version) == 'stable'
        got = repo.read(header.id, version, 0, len(expected))
        assert got == expected, 'version %d differs from its COMMIT' % version
        assert scrub.verify(repo, header.id, version).ok
    stats = mirror.client.call('stats', image=header.id)
    if mode == 'selective-cow':
        assert stats['cow_copies'] > 0      # the test did exercise CoW
        assert (stats['spilled'] > 0) == (buffer == 'spill')
    if mode == 'live-cow':
        assert stats['redirects'] > 0
    repo.close()
