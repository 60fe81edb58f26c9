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

"""``blobcr-bench flush``: what a guest's flush costs.

fio writes 4 KiB blocks at random with a flush after every write
(``--fsync=1``) and after every eight (``--fdatasync=8``): the psync
engine, O_DIRECT, one job at queue depth 1 (a flush waits for every
write before it, so a deeper queue would not overlap them). Targets,
taking turns job by job (which goes first rotates from run to run):

* ``mirror``: an image of a ``blobcr-mirror`` mount on the local store,
  written whole first (every chunk present: the flushes measured are the
  steady state, one fdatasync of the mirror file each; the first flush
  after a chunk becomes present also writes the flush record);
* ``plain``: a file of the same size beside the mirror's cache, on the
  same file system, written whole first (fio's own set-up for a file);
* ``rbd`` (with ``--rbd``): an image in a replicated pool of the
  ``--ceph-conf`` cluster through fio's librbd engine with
  ``rbd_cache = false`` (what Nova's ``cache=none`` gives librbd), a
  flush being ``rbd_aio_flush``.

Figures per target and job: IOPS and the flush latency (fio's ``sync``
latency, p50 and p99, ms). ``ratio`` is mirror / plain per run, median
over ``--runs``; the goal is at most 1.5 at p50 and p99. The run fails
if a job made no flush, or if the mirror's core counted no flush (the
path it claims to measure).
"""

import json
import os
import subprocess
import tempfile
import time

from blobcr_bench import common
from blobcr_bench import rbd_common
from blobcr_lab import agents

JOBS = (('fsync-every-write', ['--fsync=1']),
        ('fdatasync-every-8', ['--fdatasync=8']))


def _fio(target, name, extra, size, runtime):
    cmd = ['fio', '--name=%s' % name, '--rw=randwrite', '--bs=4k',
           '--iodepth=1', '--numjobs=1', '--size=%d' % size,
           '--time_based=1', '--runtime=%dms' % int(runtime * 1000),
           '--randrepeat=1', '--output-format=json'] + extra
    env = dict(os.environ)
    if target['kind'] == 'rbd':
        # librbd has one flush: fio's rbd engine refuses fdatasync.
        cmd = [a.replace('--fdatasync=', '--fsync=') for a in cmd]
        cmd += ['--ioengine=rbd', '--clientname=admin',
                '--pool=%s' % target['pool'],
                '--rbdname=%s' % target['image']]
        env['CEPH_CONF'] = target['conf']
        env['CEPH_ARGS'] = '--rbd_cache=false'
    else:
        cmd += ['--ioengine=psync', '--direct=1',
                '--filename=%s' % target['path']]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode:
        raise RuntimeError('%s: %s' % (' '.join(cmd), (
            proc.stderr or proc.stdout)[-500:]))
    report = json.loads(proc.stdout[proc.stdout.find('{'):])
    job = report['jobs'][0]
    sync = job.get('sync', {})
    lat = sync.get('lat_ns', {})
    pct = lat.get('percentile', {})
    return {'iops': job['write']['iops'],
            'writes': job['write']['total_ios'],
            # fio counts fdatasyncs in the latency's samples only
            'flushes': max(sync.get('total_ios', 0), lat.get('N', 0)),
            'flush_ms_p50': pct.get('50.000000', 0) / 1e6,
            'flush_ms_p99': pct.get('99.000000', 0) / 1e6}


def _fill(path, size):
    block = os.urandom(1 << 20)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for offset in range(0, size, len(block)):
            os.pwrite(fd, block[:min(len(block), size - offset)], offset)
        os.fdatasync(fd)
    finally:
        os.close(fd)


def _rbd_target(args, size):
    import rados
    import rbd
    rbd_common.ensure_rbd_pool(args.ceph_conf, args.rbd_pool)
    cluster = rados.Rados(conffile=args.ceph_conf)
    cluster.connect(timeout=10)
    name = 'blobcr-flush-%d-%d' % (os.getpid(), int(time.time()))
    ioctx = cluster.open_ioctx(args.rbd_pool)
    rbd.RBD().create(ioctx, name, size, old_format=False,
                     features=rbd.RBD_FEATURE_LAYERING |
                     rbd.RBD_FEATURE_EXCLUSIVE_LOCK)
    with rbd.Image(ioctx, name) as image:
        block = os.urandom(1 << 20)
        for offset in range(0, size, len(block)):
            image.write(block, offset)
        image.flush()

    def remove():
        rbd.RBD().remove(ioctx, name)
        ioctx.close()
        cluster.shutdown()
    return {'kind': 'rbd', 'pool': args.rbd_pool, 'image': name,
            'conf': args.ceph_conf}, remove


def run(repo, backend_args, args, log):
    checks = common.Checks()
    size = args.size
    header = repo.create_image('bench-flush', size, chunk_size=256 << 10)
    repo.commit(header.id, {})
    mirror = agents.MirrorProcess(tempfile.mkdtemp(dir=args.workdir),
                                  backend_args).start()
    cleanups = []
    try:
        path = mirror.client.call('attach', image=header.id)
        _fill(path, size)
        plain = os.path.join(mirror.cache, 'plain.raw')
        _fill(plain, size)
        targets = {'mirror': {'kind': 'file', 'path': path},
                   'plain': {'kind': 'file', 'path': plain}}
        if args.rbd:
            targets['rbd'], remove = _rbd_target(args, size)
            cleanups.append(remove)
        names = list(targets)
        flushes_before = mirror.client.call(
            'stats', image=header.id)['flushes']
        runs = []
        for k in range(args.runs):
            result = {name: {} for name in names}
            for j, (job, extra) in enumerate(JOBS):
                shift = (k + j) % len(names)
                for name in names[shift:] + names[:shift]:
                    result[name][job] = _fio(targets[name], job, extra,
                                             size, args.runtime)
            runs.append(result)
            log.event('run', run=k + 1, **{
                job.replace('-', '_'): round(
                    result['mirror'][job]['flush_ms_p50'] /
                    max(result['plain'][job]['flush_ms_p50'], 1e-9), 3)
                for job, _ in JOBS})
        counted = mirror.client.call('stats', image=header.id)['flushes'] \
            - flushes_before
        checks.require('flushes the mirror core counted', counted,
                       'the flushes must reach the mirror (FUSE fsync)')
        mirror.client.call('detach', image=header.id, discard=True)
    finally:
        mirror.stop()
        try:
            repo.delete_image(header.id)
        except Exception as e:      # not over the error that got here
            log('bench image %s left behind: %s' % (header.id, e))
        for cleanup in cleanups:
            cleanup()
    jobs = {}
    for job, _ in JOBS:
        entry = {}
        for name in names:
            for figure in ('iops', 'flush_ms_p50', 'flush_ms_p99'):
                entry['%s_%s' % (name, figure)] = common.summary(
                    [r[name][job][figure] for r in runs])
            checks.require('%s on %s: flushes (min over runs)' % (job, name),
                           min(r[name][job]['flushes'] for r in runs),
                           'fio must flush the %s' % name)
        for figure in ('flush_ms_p50', 'flush_ms_p99'):
            entry['ratio_%s' % figure] = common.summary(
                [r['mirror'][job][figure] / max(r['plain'][job][figure],
                                                1e-9) for r in runs])
            if 'rbd' in names:
                entry['ratio_rbd_%s' % figure] = common.summary(
                    [r['mirror'][job][figure] / max(r['rbd'][job][figure],
                                                    1e-9) for r in runs])
        jobs[job] = entry
    return {'size': size, 'runtime_s': args.runtime, 'runs': args.runs,
            'targets': names, 'mirror_flushes_counted': counted,
            'goal': 'ratio_flush_ms_p50 and _p99 <= 1.5 (mirror / plain)',
            'jobs': jobs, 'checks': checks.as_list()}
