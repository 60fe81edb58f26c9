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

"""``blobcr-bench persist``: persist throughput through the mirror.

An image of ``--persist-mib`` is attached in a real blobcr-mirror and
written in full through its FUSE mount with fresh random data (made
before timing; new data every run, so nothing deduplicates); then one
CHECKPOINT, and the time from the snapshot to the version being stable,
as the mirror records it (``timing``: the persister takes every chunk
from the core, hashes it, writes it through the repository's write
batch, then the tree nodes and the header update). That is
``persist_mib_s``.

Baselines, measured in the same run and taking turns with it:

* ``backend_put_mib_s``: the same number of objects of the same size,
  put straight through the backend's write batch (``--in-flight`` at
  once), on every backend;
* ``rados_bench_mib_s`` (``--backend rados``): ``rados bench`` writing
  objects of the chunk size, as many in flight, on the same data pool.

Ratios are persist over each baseline, run by run (medians and spread).
The run fails if the CHECKPOINT did not hold every chunk written.
"""

import os
import re
import subprocess
import time
import uuid

from blobcr_agent.repository.backends import base
from blobcr_agent.repository import gc
from blobcr_bench import common
from blobcr_lab import agents

CHUNK = 256 * 1024


_PRINTED = (('mib_s', r'Bandwidth \(MB/sec\):\s+([\d.]+)'),
            ('ops_per_s', r'Average IOPS:\s+([\d.]+)'))


def rados_bench(args, seconds, read_back=False, pool=None):
    """``rados bench`` write with the chunk size (then, with
    ``read_back``, a sequential read of what it wrote): ``{'write_mib_s',
    'write_ops_per_s'[, 'read_mib_s', 'read_ops_per_s']}`` as it prints.
    """
    name = 'blobcr-bench-%d' % os.getpid()
    base = ['rados', '-c', args.ceph_conf, '-p', pool or args.data_pool]
    out = {}
    phases = [('write', ['write', '-b', str(CHUNK), '--no-cleanup'])]
    if read_back:
        phases.append(('read', ['seq']))
    try:
        for what, extra in phases:
            printed = subprocess.run(
                base + ['bench', str(int(seconds))] + extra +
                ['-t', str(args.in_flight), '--run-name', name],
                check=True, capture_output=True, text=True,
                timeout=seconds + 120).stdout
            for key, pattern in _PRINTED:
                match = re.search(pattern, printed)
                if not match:
                    raise RuntimeError('cannot read rados bench output:\n' +
                                       printed)
                out['%s_%s' % (what, key)] = float(match.group(1))
    finally:
        subprocess.run(base + ['cleanup', '--run-name', name],
                       check=True, capture_output=True, timeout=300)
    return out


def backend_put(repo, nchunks, pattern, epoch):
    """Put ``nchunks`` chunk-sized objects straight through the backend;
    MiB/s. The objects are unreferenced: GC removes them.
    """
    batch = repo.backend.batch()
    prefix = 'bench-put-%s-' % uuid.uuid4().hex[:12]
    t0 = time.perf_counter()
    for k in range(nchunks):
        batch.put(base.CHUNK, prefix + str(k),
                  bytes(pattern.block(k * CHUNK, CHUNK, epoch)))
    batch.wait()
    return nchunks * CHUNK / common.MIB / (time.perf_counter() - t0)


def mirror_args(backend_args, workdir, in_flight):
    """The store's arguments plus the same write concurrency as the
    baselines.
    """
    conf = os.path.join(workdir, 'persist.conf')
    agents.write_conf(conf, {'repository': {'max_in_flight': in_flight}})
    return list(backend_args) + ['--config-file', conf]


def run(repo, backend_args, args, log):
    checks = common.Checks()
    nchunks = args.persist_mib * common.MIB // CHUNK
    size = nchunks * CHUNK
    workdir = os.path.join(args.workdir, 'persist')
    os.makedirs(workdir, exist_ok=True)
    log.event('generate', mib=size >> 20)
    pattern = common.Pattern(size)
    header = repo.create_image('bench-persist', size, chunk_size=CHUNK)
    repo.commit(header.id, {})
    mirror = agents.MirrorProcess(
        workdir, mirror_args(backend_args, workdir, args.in_flight))
    persist, puts, bench, chunks = [], [], [], []
    try:
        mirror.start()
        client = mirror.client
        path = client.call('attach', image=header.id)
        fd = os.open(path, os.O_RDWR)
        epoch = 0
        try:
            for r in range(args.runs):
                steps = ['persist', 'put'] + (
                    ['rados'] if args.backend == 'rados' else [])
                if r % 2:
                    steps.reverse()
                for step in steps:
                    epoch += 1
                    if step == 'persist':
                        for off in range(0, size, common.MIB):
                            os.pwrite(fd, pattern.block(off, common.MIB,
                                                        epoch), off)
                        reply = client.call('checkpoint', image=header.id)
                        state = client.call('wait_stable', image=header.id,
                                            version=reply['version'])
                        if state != 'stable':
                            raise RuntimeError('version %d is %s'
                                               % (reply['version'], state))
                        t = client.call('timing', image=header.id,
                                        version=reply['version'])
                        seconds = t['done'] - t['committed']
                        persist.append(size / common.MIB / seconds)
                        chunks.append(reply['chunks'])
                    elif step == 'put':
                        puts.append(backend_put(repo, nchunks, pattern,
                                                epoch))
                    else:
                        rate = persist[-1] if persist else 100.0
                        seconds = max(3, int(size / common.MIB / rate) + 1)
                        bench.append(
                            rados_bench(args, seconds)['write_mib_s'])
                log.event('run', run=r + 1, persist_mib_s=round(persist[-1],
                                                                1),
                          backend_put_mib_s=round(puts[-1], 1),
                          rados_bench_mib_s=round(bench[-1], 1)
                          if bench else None)
                gc.collect(repo, grace=0)
        finally:
            os.close(fd)
        client.call('detach', image=header.id, discard=True)
    finally:
        mirror.stop()
        repo.delete_image(header.id)
        gc.collect(repo, grace=0)
    checks.require_true(
        'persist: chunks per CHECKPOINT', all(c == nchunks for c in chunks),
        'each CHECKPOINT must hold the %d chunks just written' % nchunks,
        value=chunks)
    checks.require('persist: MiB/s (min)', min(persist),
                   'the persister must have written the version')
    result = {
        'persist_mib': size >> 20, 'object_size': CHUNK,
        'in_flight': args.in_flight, 'runs': args.runs,
        'persist_mib_s': common.summary(persist, 1),
        'backend_put_mib_s': common.summary(puts, 1),
        'ratio_vs_backend_put': common.summary(
            [p / b for p, b in zip(persist, puts)]),
        'persist_runs': [round(x, 1) for x in persist],
        'backend_put_runs': [round(x, 1) for x in puts],
        'checks': checks.as_list(),
    }
    if bench:
        result.update(
            rados_bench_mib_s=common.summary(bench, 1),
            rados_bench_runs=[round(x, 1) for x in bench],
            ratio=common.summary([p / b for p, b in zip(persist, bench)]),
            ratio_of_medians=common.ratio(result['persist_mib_s']['median'],
                                          common.summary(bench)['median']))
    return result
