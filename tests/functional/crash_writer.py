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

"""Child process of the crash test: COMMITs forever until SIGKILLed.

Version n changes a set of chunks chosen from n alone, so the parent can
recompute what every stable version must contain.
Usage: python -m tests.functional.crash_writer SPEC_JSON IMAGE_ID
"""

import hashlib
import json
import random
import sys

from blobcr_agent.repository import repository

CHUNK = 64 * 1024
NCHUNKS = 64


def changes(number):
    rng = random.Random(number)
    result = {}
    for index in rng.sample(range(NCHUNKS), rng.randint(1, NCHUNKS)):
        if rng.random() < 0.1:
            result[index] = bytes(CHUNK)
        else:
            result[index] = hashlib.shake_256(
                b'%d:%d' % (number, index)).digest(CHUNK)
    return result


def open_backend(spec):
    if spec['kind'] == 'local':
        from blobcr_agent.repository.backends import local
        return local.LocalBackend(spec['path'])
    from blobcr_agent.repository.backends import rados
    return rados.RadosBackend(spec['conffile'], 'blobcr-data', 'blobcr-meta',
                              namespace=spec['namespace'])


def main():
    spec, image_id = json.loads(sys.argv[1]), sys.argv[2]
    repo = repository.Repository(open_backend(spec), chunk_size=CHUNK,
                                 pack_max_bytes=4096)
    print('ready', flush=True)
    while True:
        pending = repo.begin_commit(image_id)
        for index, data in changes(pending.version).items():
            pending.put(index, data)
        pending.finish()


if __name__ == '__main__':
    main()
