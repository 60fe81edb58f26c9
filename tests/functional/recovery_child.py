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

"""A child process for test_mirror_recovery_windows: attaches an image
on the local store, writes, checkpoints, and SIGKILLs itself at the
point a scenario names.

    python -m tests.functional.recovery_child SCENARIO DIR IMAGE_ID
"""

import os
import signal
import sys

from blobcr_agent.mirror import image as image_mod
from blobcr_agent.repository.backends import local
from blobcr_agent.repository import chunks
from blobcr_agent.repository import repository as repo_mod

CHUNK = 4096
NCHUNKS = 8


def content(k):
    return bytes([0x41 + k]) * CHUNK


def repo_at(directory):
    return repo_mod.Repository(
        local.LocalBackend(os.path.join(directory, 'store')),
        chunk_size=CHUNK, fanout=4, gc_grace=0)


def die():
    os.kill(os.getpid(), signal.SIGKILL)


def main(scenario, directory, image_id):
    repo = repo_at(directory)
    if scenario == 'stable-before-metadata':
        # Killed once the version is stable and its snapshot ended, before
        # the cache's metadata records it.
        image_mod.AttachedImage._persisted = lambda self, version: die()
    elif scenario == 'journal-before-durable':
        # The journal lists chunks whose writes were only queued: the
        # third put is killed before anything reaches the store.
        calls = []

        def put(self, index, data):
            calls.append(index)
            if len(calls) == 3:
                die()
            d = chunks.digest(data)
            self._changes[index] = d
            return d
        repo_mod.Commit.put = put
    elif scenario == 'recorded-before-commit':
        # Killed once the version is recorded in flight, before the COMMIT.
        real = image_mod.AttachedImage._set_in_flight

        def record(self, versions, **more):
            real(self, versions, **more)
            if versions:
                die()
        image_mod.AttachedImage._set_in_flight = record
    elif scenario == 'killed-in-persist':
        repo_mod.Commit.put = lambda self, index, data: die()
    image = image_mod.AttachedImage(repo, image_id, None,
                                    os.path.join(directory, 'cache'),
                                    prefetch=False, reserve=False)
    for k in range(NCHUNKS):
        image.write(k * CHUNK, content(k))
    image.checkpoint()
    image.wait_persisted()
    sys.exit('not killed')


if __name__ == '__main__':
    main(*sys.argv[1:])
