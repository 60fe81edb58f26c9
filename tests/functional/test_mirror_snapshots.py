"""Live snapshots under concurrent writers, in every mirror mode.

Writer threads (each in its own third of the image) keep writing random
patterns (some spanning chunks, some partial) through the FUSE mount
while CHECKPOINTs are taken and persisted in the background, so writes
land on chunks that are scheduled, pending and copied. A checkpoint is
taken with the writers quiesced for an instant (as a guest's fsfreeze
would), which fixes the model's image at the COMMIT; writing resumes as
soon as the version id is back, while the persist runs. Every version
must equal the model at its COMMIT, byte for byte. A 4-chunk
copy-on-write buffer makes writers fill it and wait.
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
MODES = ['selective-cow', 'live-cow', 'live-precopy', 'offline']


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


@pytest.mark.parametrize('mode', MODES)
def test_versions_equal_the_image_at_their_commit(backend_factory,
                                                  mirror_factory, mode):
    repo = repository.Repository(backend_factory(), chunk_size=CHUNK)
    rng = random.Random(hash(mode) & 0xffff)
    content = bytearray(rng.randbytes(NCHUNKS * CHUNK))
    header = repo.create_image('live', len(content))
    repo.commit(header.id, {i: bytes(content[i * CHUNK:(i + 1) * CHUNK])
                            for i in range(NCHUNKS)})
    mirror = mirror_factory(repo.backend, '--mode', mode, '--cow-chunks', '4')
    path = mirror.client.call('attach', image=header.id)

    model_lock = threading.Lock()
    quiesce = Quiesce()
    stop = threading.Event()
    errors = []

    def writer(seed):
        # Each writer owns a range of chunks: the order of two racing
        # writes to the same bytes is the application's problem, and the
        # model could not know it.
        r = random.Random(seed)
        lo, hi = seed * len(content) // WRITERS, \
            (seed + 1) * len(content) // WRITERS
        fd = os.open(path, os.O_RDWR)
        try:
            while not stop.is_set():
                offset = r.randrange(lo, hi - 1)
                length = min(r.choice([512, 4096, CHUNK, 3 * CHUNK // 2]),
                             hi - offset)
                data = bytes([r.randrange(256)]) * length
                quiesce.enter()
                try:
                    assert os.pwrite(fd, data, offset) == length
                    with model_lock:
                        content[offset:offset + length] = data
                finally:
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
    if mode == 'live-cow':
        assert stats['redirects'] > 0
    repo.close()
