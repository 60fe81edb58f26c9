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

"""``blobcr-bench repo``: repository metadata and persist throughput.

Measured:

* ``commit_ms`` (``commit_ms_4096_of_1tib`` with the defaults): metadata
  time of a COMMIT of ``--dirty`` (4096) dirty chunks at random places in
  a fully populated ``--image-size`` (1 TiB) image (4 Mi chunks of
  256 KiB): tree path copying, node packs made durable, and the
  atomic header update. Median of ``--runs``. Chunk objects are not
  written (that is the persist figure); the node cache holds the parent
  tree, as in an agent that has the image attached. The ``_cold`` figure
  starts with an empty cache, so every touched node is read back.
* ``tree_overhead``: tree bytes written by that COMMIT per byte of chunk
  data it describes.
* with ``--backend rados``: ``persist``, the persist throughput through
  a real mirror's persister against ``rados bench`` in the same run
  (see persist.py, also ``blobcr-bench persist``).
"""

import random
import statistics
import time

from blobcr_agent.repository import gc
from blobcr_bench import common

TIB = 1 << 40
CHUNK = 256 * 1024


def _random_digests(rng, n):
    blob = rng.randbytes(32 * n)
    return [blob[i * 32:(i + 1) * 32] for i in range(n)]


def bench_commit(repo, args, log):
    rng = random.Random(args.seed)
    header = repo.create_image('bench-tree', args.image_size,
                               chunk_size=CHUNK, fanout=args.fanout)
    nchunks = header.nchunks
    log('building a full %d GiB tree (%d chunks)...'
        % (args.image_size >> 30, nchunks))
    base = repo.begin_commit(header.id)
    for index, d in enumerate(_random_digests(rng, nchunks)):
        base.put_digest(index, d)
    base.finish()

    def one_commit():
        pending = repo.begin_commit(header.id)
        indices = rng.sample(range(nchunks), args.dirty)
        for index, d in zip(indices, _random_digests(rng, args.dirty)):
            pending.put_digest(index, d)
        t0 = time.perf_counter()
        pending.finish()
        elapsed = time.perf_counter() - t0
        v = repo.image(header.id).version(pending.version)
        return elapsed * 1000, v.stored_bytes

    # Warm: the cache holds the whole parent tree (it was just written).
    repo.nodes._cache_bytes = 1 << 40
    warm = [one_commit() for _ in range(args.runs)]
    cold = []
    for _ in range(args.runs):
        repo.nodes.clear()
        cold.append(one_commit())
    data_bytes = args.dirty * CHUNK
    # Leave the store as found: the base tree alone is ~134 MB of nodes.
    repo.delete_image(header.id)
    gc.collect(repo, grace=0)
    checks = common.Checks()
    checks.require('tree bytes written per COMMIT (min)',
                   min(b for _, b in warm + cold),
                   'each COMMIT must write its path-copied tree nodes')
    result = {
        'commit_ms': common.summary([ms for ms, _ in warm], 2),
        'commit_ms_cold': common.summary([ms for ms, _ in cold], 2),
        'commit_ms_runs': [round(ms, 2) for ms, _ in warm],
        'tree_overhead': round(statistics.median(
            b for _, b in warm) / data_bytes, 5),
        'dirty_chunks': args.dirty,
        'image_size': args.image_size,
        'fanout': args.fanout,
        'checks': checks.as_list(),
    }
    if args.image_size == TIB and args.dirty == 4096:
        # The names the targets and earlier results use.
        result['commit_ms_4096_of_1tib'] = result['commit_ms']['median']
        result['commit_ms_4096_of_1tib_cold'] = \
            result['commit_ms_cold']['median']
    return result
