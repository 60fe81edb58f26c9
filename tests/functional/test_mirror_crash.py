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

"""SIGKILL of the mirror while it persists a checkpoint.

After a restart on the same cache directory the interrupted version is
either finished (it then equals the image at its COMMIT) or reported
failed, never half-written; the local writes survive; the next checkpoint
carries everything, including what the failed one held; every stable
version still verifies. A persist whose snapshot content survived (no
write since the COMMIT) must resume and finish. Half of the rounds
overwrite snapshot chunks before the kill, so that their old content may
sit only in the (lost) in-memory copy-on-write buffer.
"""

import os
import random

from blobcr_agent.repository import repository
from blobcr_agent.repository import scrub

CHUNK = 64 * 1024
NCHUNKS = 256


def test_sigkill_during_persist(backend_factory, mirror_factory):
    repo = repository.Repository(backend_factory(), chunk_size=CHUNK)
    rng = random.Random(7)
    content = bytearray(NCHUNKS * CHUNK)
    header = repo.create_image('crash', len(content))
    repo.commit(header.id, {0: bytes(CHUNK)})
    mirror = mirror_factory(repo.backend)
    path = mirror.client.call('attach', image=header.id)
    outcomes = []
    stable = {}
    for round_ in range(4):
        fd = os.open(path, os.O_RDWR)
        for index in range(NCHUNKS):
            data = rng.randbytes(CHUNK)
            os.pwrite(fd, data, index * CHUNK)
            content[index * CHUNK:(index + 1) * CHUNK] = data
        snapshot = bytes(content)
        version = mirror.client.call('checkpoint', image=header.id)['version']
        if round_ % 2:
            for index in range(0, NCHUNKS, 7):
                data = rng.randbytes(CHUNK)
                os.pwrite(fd, data, index * CHUNK)
                content[index * CHUNK:(index + 1) * CHUNK] = data
        os.close(fd)
        mirror.kill()
        killed_pending = repo.image(header.id).version(version).state == \
            'pending'

        mirror.start()                   # same cache: recovery runs
        state = mirror.client.call('wait_stable', image=header.id,
                                   version=version)
        assert state in ('stable', 'failed')
        if round_ % 2 == 0:
            # Nothing overwrote the snapshot: the persist must resume.
            assert state == 'stable', 'round %d was not resumed' % round_
        outcomes.append((killed_pending, state))
        if state == 'stable':
            assert repo.read(header.id, version, 0, len(snapshot)) == snapshot
            stable[version] = snapshot
        # The local image lost nothing.
        with open(path, 'rb') as f:
            assert f.read() == bytes(content)
        # The next checkpoint carries everything written so far.
        follow = mirror.client.call('checkpoint', image=header.id)['version']
        assert mirror.client.call('wait_stable', image=header.id,
                                  version=follow) == 'stable'
        assert repo.read(header.id, follow, 0, len(content)) == bytes(content)
        stable[follow] = bytes(content)
    assert any(pending for pending, _ in outcomes), \
        'no kill landed during a persist: %s' % outcomes
    for version, expected in stable.items():
        assert scrub.verify(repo, header.id, version).ok
        assert repo.read(header.id, version, 0, len(expected)) == expected
    repo.close()
