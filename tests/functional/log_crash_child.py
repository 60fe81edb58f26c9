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

"""Child process of the write log's crash-point sweep
(test_host_loss.py), on RADOS; BLOBCR_CRASH_AT kills it at a point.

``write``: a `cluster` mirror of IMAGE in CACHE takes rounds of writes
(``content(n)`` at a block chosen from n), each ended by a flush, with a
checkpoint made stable every third round (the log is trimmed); its
journal (as blobcr_lab.flush_writer's) says what each flush covered.
``take-over``: the image taken over (its log sealed and folded).
Usage: python -m tests.functional.log_crash_child MODE SPEC_JSON IMAGE
[CACHE JOURNAL]
"""

import json
import random
import sys

from blobcr_agent.mirror import image as image_mod
from blobcr_agent.repository.backends import rados
from blobcr_agent.repository import repository
from blobcr_lab import flush_writer

CHUNK = 64 * 1024
BLOCKS = 64
ROUNDS = 9


def repo_of(spec):
    return repository.Repository(rados.RadosBackend(
        spec['conffile'], 'blobcr-data', 'blobcr-meta',
        namespace=spec['namespace']), chunk_size=CHUNK)


def write(repo, image_id, cache, journal):
    image = image_mod.AttachedImage(repo, image_id, None, cache,
                                    durability='cluster', reserve=False,
                                    prefetch=False)
    n = 0
    with open(journal, 'w', buffering=1) as log:
        for round_ in range(1, ROUNDS + 1):
            for _ in range(3):
                n += 1
                block = random.Random(n).randrange(BLOCKS)
                log.write('W %d %d\n' % (n, block))
                image.write(block * flush_writer.BLOCK,
                            flush_writer.content(n))
            image.flush()
            log.write('F %d\n' % n)
            if round_ % 3 == 0:
                image.checkpoint()
                image.wait_persisted(60)
    image.close()


def main():
    mode, spec, image_id = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    repo = repo_of(spec)
    if mode == 'write':
        write(repo, image_id, sys.argv[4], sys.argv[5])
    else:
        print(json.dumps(repo.take_over(image_id, 'crash sweep')))
    repo.close()


if __name__ == '__main__':
    main()
