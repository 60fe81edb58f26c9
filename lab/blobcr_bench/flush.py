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

"""``blobcr-bench flush``: what a guest's flush costs, per durability.

fio writes 4 KiB blocks at random, O_DIRECT, the psync engine (librbd's
for RBD), one job at queue depth 1 (a flush waits for every write before
it, so a deeper queue would not overlap them), ``--runtime`` seconds per
job, in four jobs (``JOBS``):

* ``fsync-every-write`` (``--fsync=1``): a database's commits. Besides
  fio's figures, a commit loop of ``--runtime / 2`` seconds on the same
  target times each write and its flush together (``commit_ms``, the
  distribution fio cannot give: it times the two apart);
* ``fsync-every-1m`` (``--fsync=256``) and ``fsync-every-64m``
  (``--fsync=16384``): throughput with flushes now and then (a job that
  writes fewer than 16384 blocks makes no flush, and says so);
* ``no-flush``: throughput alone (the goal: BlobCR ``cluster`` within
  10% of ``host``, ``goals``).

Targets, taking turns job by job (which goes first rotates from job to
job and from run to run); ``--targets`` picks some:

* ``blobcr-cluster``: an image of a ``blobcr-mirror --durability
  cluster`` on the repository of ``--backend rados`` (data pool erasure-
  coded, metadata pool replicated): a flush returns once the blocks
  written since the previous one are in the image's write-ahead log in
  the metadata pool (and the mirror file fdatasync'ed);
* ``blobcr-host``: the same with ``--durability host``: a flush is the
  mirror file's fdatasync. On ``--backend local`` (which keeps no write
  log) it is the only BlobCR target: it replaces the former ``mirror``
  target (the local store's mirror), whose flush path it is (the store
  under the mirror is not on it);
* ``plain``: a file beside the mirror's cache, on the same file system:
  the local baseline;
* with ``--rbd`` (``--ceph-conf``'s cluster): ``rbd``, an image in the
  replicated pool ``--rbd-pool`` with ``rbd_cache = false`` (Nova's
  ``cache=none``: RBD's best case, a flush is ``rbd_aio_flush`` and
  every write is in the OSDs' journals when acknowledged); ``rbd-ec``,
  an image whose data is in the erasure-coded pool ``--rbd-ec-pool``
  (shaped like BlobCR's data pool, overwrites on: rbd_common), cache off;
  ``rbd-writeback``, the first image with ``rbd_cache = true``,
  ``rbd_cache_policy = writeback`` and
  ``rbd_cache_writethrough_until_flush = false`` (as a guest that has
  sent its first flush sees it), shown beside.

Each image is written whole first (the flushes measured are the steady
state); each BlobCR image is then checkpointed and the version waited
for (and again after each run, not timed), so that the write log holds
one run at most. Upload-ahead is off (``--upload-ahead``): the flush
path alone is compared, no background persist competing with it.
The cluster keeps its defaults: the fill alone is a whole image in one
flush, and a job appends hundreds of MiB to the write log, so a run
also checks that the log's segments stay under the OSDs'
``osd_max_object_size`` (128 MiB; before segments rolled, appends past
it failed with EFBIG, retried for ever, and the bench hung).

Figures per target and job (median and spread over ``--runs``): IOPS,
MiB/s, flush latency (fio's ``sync`` latency) p50 and p99, write latency
(fio's ``lat``, the write alone) p50 and p99, and for
``fsync-every-write`` the commit (write + flush) p50 and p99. Ratios,
run by run, against each side's own baseline of the same run
(``blobcr-*`` / ``plain``, ``rbd-*`` / ``rbd``) and across
(``blobcr-cluster`` / ``rbd`` and / ``rbd-ec``: both replicated in the
cluster before the flush returns; ``blobcr-cluster`` / ``blobcr-host``).
Across BlobCR and RBD, compare ``commit_ms`` and throughput, not the
flush alone: with the cache off librbd acknowledges a write once it is
in the OSDs, so its flush has nothing left to wait for (the cost is in
its writes), whereas a mirror's write returns from the host's page
cache and its flush carries the cost.

With ``--checkpoint-every N`` (off by default), one more job,
``no-flush-checkpoint-every-Ns``: fio without flushes on each target of
the cluster while it is checkpointed every N seconds (a version of a
BlobCR image; a snapshot of an RBD image, by another client), and
``osd_in_per_written``: the bytes the OSDs received from clients
(``op_in_bytes`` of all of the cluster's OSDs, blobcr_lab.ceph, as
``blobcr-bench peers`` counts them) from before the job until its last
version is stable (one more checkpoint at the end for BlobCR), per byte
fio wrote. ``--jobs`` picks some of the other jobs.

Each run checks that it measured what it claims: every job wrote; each
flushing job made the flushes its interval asks (writes // interval) and
``no-flush`` none; a BlobCR mirror's core counted at least fio's flushes
(FUSE fsync reached it) and none in ``no-flush``; ``blobcr-cluster``'s
write log (the ``wlog.IMAGE`` index's segments in the metadata pool,
read with the rados module) grew by at least 4 KiB per flush of
``fsync-every-write`` and not in ``no-flush``, and ``blobcr-host`` has
no log; librbd reads the cache setting each RBD target claims.
"""

import json
import mmap
import os
import random
import subprocess
import tempfile
import threading
import time

from blobcr_bench import common
from blobcr_bench import fio
from blobcr_bench import rbd_common
from blobcr_lab import agents

MIB = 1 << 20
BLOCK = 4096

# (name, writes per flush; 0: no flush)
JOBS = (('fsync-every-write', 1),
        ('fsync-every-1m', 256),
        ('fsync-every-64m', 16384),
        ('no-flush', 0))

TARGETS = ('blobcr-cluster', 'blobcr-host', 'plain', 'rbd', 'rbd-ec',
           'rbd-writeback')
BLOBCR = {'blobcr-cluster': 'cluster', 'blobcr-host': 'host'}
# Ratios (numerator, denominator): each side's baseline, then across.
PAIRS = (('blobcr-cluster', 'plain'), ('blobcr-host', 'plain'),
         ('rbd-ec', 'rbd'), ('rbd-writeback', 'rbd'),
         ('blobcr-cluster', 'rbd'), ('blobcr-cluster', 'rbd-ec'),
         ('blobcr-cluster', 'blobcr-host'))
FIGURES = ('iops', 'mib_s', 'flush_ms_p50', 'flush_ms_p99', 'write_ms_p50',
           'write_ms_p99', 'commit_ms_p50', 'commit_ms_p99')
EXTRA_FIGURES = ('writes', 'flushes', 'checkpoints', 'osd_in_per_written')
CHECKPOINT_JOB = 'no-flush-checkpoint-every-%gs'


def _pct(lat, p):
    value = lat.get('percentile', {}).get('%.6f' % p)
    return None if value is None else value / 1e6


def _fio(target, name, every, size, runtime):
    cmd = ['fio', '--name=%s' % name, '--rw=randwrite', '--bs=4k',
           '--iodepth=1', '--numjobs=1', '--size=%d' % size,
           '--time_based=1', '--runtime=%dms' % int(runtime * 1000),
           '--randrepeat=1', '--lat_percentiles=1',
           # fresh random data in every write, as a guest's: nothing
           # dedups in a checkpoint (fio reuses its buffer otherwise)
           '--refill_buffers=1', '--output-format=json']
    if every:
        cmd.append('--fsync=%d' % every)
    options, env = fio.engine(target)
    # (Queue depth 1: psync, not libaio, for the files.)
    cmd += [o.replace('=libaio', '=psync') for o in options]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode:
        raise RuntimeError('%s: %s' % (' '.join(cmd), (
            proc.stderr or proc.stdout)[-500:]))
    # fio may print notes before the JSON document on stdout.
    job = json.loads(proc.stdout[proc.stdout.find('{'):])['jobs'][0]
    if job.get('error'):
        raise RuntimeError('fio %s on %s: error %s'
                           % (name, target['name'], job['error']))
    write = job['write']
    sync = job.get('sync', {})
    lat = sync.get('lat_ns', {})
    # fio counts some flushes in the latency's samples only
    flushes = max(sync.get('total_ios', 0), lat.get('N', 0))
    return {'iops': write['iops'], 'mib_s': write['bw_bytes'] / MIB,
            'writes': write['total_ios'], 'flushes': flushes,
            'written': write['io_bytes'],
            'flush_ms_p50': _pct(lat, 50) if flushes else None,
            'flush_ms_p99': _pct(lat, 99) if flushes else None,
            'write_ms_p50': _pct(write['lat_ns'], 50),
            'write_ms_p99': _pct(write['lat_ns'], 99)}


def _commits(target, size, seconds, seed):
    """Write a random block and flush it, again and again: each
    commit's time (write + flush), as a database sees it.
    """
    rng = random.Random(seed)
    blocks = size // BLOCK
    buf = mmap.mmap(-1, BLOCK)          # aligned, as O_DIRECT needs
    buf.write(os.urandom(BLOCK))
    times = []
    if target['kind'] == 'rbd':
        import rados
        import rbd
        cluster = rados.Rados(conffile=target['conf'], rados_id='admin')
        cluster.connect(timeout=10)
        try:
            with cluster.open_ioctx(target['pool']) as ioctx, \
                    rbd.Image(ioctx, target['image']) as image:
                data = bytes(buf)

                def commit(offset):
                    image.write(data, offset)
                    image.flush()
                times = _loop(commit, rng, blocks, seconds)
        finally:
            cluster.shutdown()
    else:
        fd = os.open(target['path'], os.O_WRONLY | os.O_DIRECT)
        try:
            def commit(offset):
                os.pwrite(fd, buf, offset)
                os.fsync(fd)
            times = _loop(commit, rng, blocks, seconds)
        finally:
            os.close(fd)
    buf.close()
    return {'commits': len(times),
            'commit_ms_p50': common.percentile(times, 50) * 1e3,
            'commit_ms_p99': common.percentile(times, 99) * 1e3}


def _loop(commit, rng, blocks, seconds):
    times = []
    end = time.perf_counter() + seconds
    while True:
        offset = rng.randrange(blocks) * BLOCK
        t0 = time.perf_counter()
        commit(offset)
        t1 = time.perf_counter()
        times.append(t1 - t0)
        if t1 >= end:
            return times


class WriteLogProbe(object):
    """An image's write-ahead log as RADOS holds it: the ``wlog.IMAGE``
    index's omap (``state``, ``seg.N`` keys) and the size of each
    segment object (rados_log.py), read apart from the mirror.
    """

    def __init__(self, backend):
        import rados
        self.rados = rados
        self.cluster = rados.Rados(conffile=backend.conffile)
        self.cluster.connect(timeout=10)
        self.ioctx = self.cluster.open_ioctx(backend.meta_pool)
        if backend.namespace:
            self.ioctx.set_namespace(backend.namespace)
        self.largest = 0            # the largest segment seen

    def object_size_limit(self):
        """The OSDs' ``osd_max_object_size``: no segment may reach it."""
        return int(rbd_common.mon(self.cluster, prefix='config get',
                                  who='osd', key='osd_max_object_size'))

    def read(self, image):
        """``{'state': ..., 'segments': {n: bytes}}`` (state None: no
        log).
        """
        rados = self.rados
        with rados.ReadOpCtx() as op:
            it, _ = self.ioctx.get_omap_vals(op, '', '', 100000)
            try:
                self.ioctx.operate_read_op(op, 'wlog.' + image)
            except rados.ObjectNotFound:
                return {'state': None, 'segments': {}}
            omap = dict(it)
        segments = {}
        for key in omap:
            if key.startswith('seg.'):
                n = int(key[4:])
                try:
                    segments[n] = self.ioctx.stat(
                        'wlog.%s.%012d' % (image, n))[0]
                except rados.ObjectNotFound:
                    segments[n] = 0
        self.largest = max([self.largest] + list(segments.values()))
        return {'state': omap.get('state', b'').decode(),
                'segments': segments}

    @staticmethod
    def appended(before, after):
        """Bytes appended between two reads (a segment dropped meanwhile,
        covered by a stable version, was not appended to).
        """
        old = before['segments']
        return sum(size - old.get(n, 0)
                   for n, size in after['segments'].items())

    def close(self):
        self.ioctx.close()
        self.cluster.shutdown()


def _names(args, backend):
    wanted = list(args.targets or TARGETS)
    if not args.targets:
        if backend.name != 'rados' or not backend.supports_write_log:
            wanted.remove('blobcr-cluster')
        if not args.rbd:
            wanted = [n for n in wanted if n not in rbd_common.RBD_SETTINGS]
    elif 'blobcr-cluster' in wanted and backend.name != 'rados':
        raise ValueError('blobcr-cluster needs --backend rados')
    return wanted


def _jobs(args):
    """``[(name, writes per flush, checkpoint interval)]`` of this run."""
    jobs = [(name, every, None) for name, every in JOBS
            if not args.jobs or name in args.jobs]
    if args.checkpoint_every:
        jobs.append((CHECKPOINT_JOB % args.checkpoint_every, 0,
                     args.checkpoint_every))
    if not jobs:
        raise ValueError('no job: --jobs names none and no '
                         '--checkpoint-every')
    return jobs


def run(repo, backend_args, args, log):
    checks = common.Checks()
    size = args.size
    names = _names(args, repo.backend)
    jobs = _jobs(args)
    commit_s = max(args.runtime / 2.0, 0.1)
    targets, mirrors, images, cleanups = {}, {}, {}, []
    probe = None
    runs = []
    try:
        for name in names:
            if name not in BLOBCR:
                continue
            header = repo.create_image('bench-flush-%s' % name, size,
                                       chunk_size=256 << 10)
            repo.commit(header.id, {})
            images[name] = header.id
            mirror = agents.MirrorProcess(
                tempfile.mkdtemp(dir=args.workdir), backend_args,
                ['--durability', BLOBCR[name],
                 '--upload-ahead', str(args.upload_ahead)]).start()
            mirrors[name] = mirror
            path = mirror.client.call('attach', image=header.id)
            targets[name] = {'name': name, 'kind': 'file', 'path': path,
                             'mirror': mirror, 'image': header.id}
        if 'blobcr-cluster' in names:
            probe = WriteLogProbe(repo.backend)
        if 'plain' in names:
            where = next(iter(mirrors.values())).cache if mirrors \
                else tempfile.mkdtemp(dir=args.workdir)
            os.makedirs(where, exist_ok=True)
            targets['plain'] = {'name': 'plain', 'kind': 'file',
                                'path': os.path.join(where, 'plain.raw')}
        for name, target in targets.items():
            log.event('fill', target=name)
            common.fill(target['path'], size)
        rbd_names = [n for n in names if n in rbd_common.RBD_SETTINGS]
        described = {}
        if rbd_names:
            log.event('fill', target=','.join(rbd_names))
            rbd_targets, described = rbd_common.fio_targets(
                args, size, rbd_names, checks, cleanups)
            targets.update(rbd_targets)
        if probe:       # the fill's flush: the whole image in the log
            probe.read(images['blobcr-cluster'])
        _checkpoint(mirrors, images)
        for k in range(args.runs):
            result = {name: {} for name in names}
            for j, (job, every, interval) in enumerate(jobs):
                shift = (k + j) % len(names)
                for name in names[shift:] + names[:shift]:
                    target = targets[name]
                    if interval and (name == 'plain' or (
                            name in BLOBCR and
                            repo.backend.name != 'rados')):
                        continue        # nothing of it reaches the OSDs
                    if interval:
                        figures = _measure_checkpoints(
                            target, args, job, interval, size)
                    else:
                        figures = _measure(
                            target, probe if name == 'blobcr-cluster'
                            else None, job, every, size, args.runtime,
                            commit_s if every == 1 else None, seed=k)
                    result[name][job] = figures
            runs.append(result)
            log.event('run', run=k + 1, **{
                '%s_%s' % (name, job.replace('-', '_')):
                    round(result[name][job]['iops'])
                for name in names for job, _, _ in jobs
                if job in result[name]})
            _checkpoint(mirrors, images)
        logs = {}
        if probe:
            logs['blobcr-cluster'] = probe.read(images['blobcr-cluster'])
            limit = probe.object_size_limit()
            logs['blobcr-cluster'].update(largest_segment=probe.largest,
                                          object_size_limit=limit)
            checks.require_true(
                'blobcr-cluster: write-log segments below the OSDs\' '
                'osd_max_object_size', probe.largest < limit,
                'an append past it fails (EFBIG)', value=probe.largest)
        if 'blobcr-host' in names and probe:
            logs['blobcr-host'] = probe.read(images['blobcr-host'])
            checks.require_true(
                'blobcr-host: no write log in RADOS',
                logs['blobcr-host']['state'] is None,
                'a host volume\'s flush must not append to a log',
                value=logs['blobcr-host']['state'])
        for name, mirror in mirrors.items():
            mirror.client.call('detach', image=images[name], discard=True)
    finally:
        for mirror in mirrors.values():
            mirror.stop()
        for image in images.values():
            try:
                repo.delete_image(image)
            except Exception as e:      # not over the error that got here
                log('bench image %s left behind: %s' % (image, e))
        if probe:
            probe.close()
        for cleanup in cleanups:
            cleanup()
    _check_runs(checks, names, jobs, runs)
    out = {}
    for job, every, interval in jobs:
        measured = [n for n in names if job in runs[0][n]]
        per_target = {
            name: {figure: common.summary([r[name][job].get(figure)
                                           for r in runs])
                   for figure in FIGURES + EXTRA_FIGURES}
            for name in measured}
        out[job] = {
            'writes_per_flush': every or None,
            'checkpoint_every_s': interval,
            'targets': {n: {f: s for f, s in figs.items() if s is not None}
                        for n, figs in per_target.items()},
            'ratios': _ratios(runs, measured, job)}
    goals = {}
    mib = out.get('no-flush', {}).get('ratios', {}).get(
        'blobcr-cluster/blobcr-host', {}).get('mib_s')
    if mib:
        goals['no_flush_cluster_over_host_mib_s'] = {
            'median': mib['median'], 'at_least': 0.9,
            'met': mib['median'] >= 0.9}
    return {'size': size, 'runtime_s': args.runtime,
            'commit_runtime_s': commit_s, 'runs': args.runs,
            'targets': names, 'upload_ahead': args.upload_ahead,
            'rbd': described,
            'write_log_at_end': {n: dict(
                v, segments=len(v['segments']),
                bytes=sum(v['segments'].values()))
                for n, v in logs.items()},
            'jobs': out, 'goals': goals, 'per_run': runs,
            'checks': checks.as_list()}


def _checkpoint(mirrors, images):
    """Checkpoint each BlobCR image and wait for the version: its write
    log is then trimmed to what comes after.
    """
    for name, mirror in mirrors.items():
        _wait_stable(mirror, images[name], mirror.client.call(
            'checkpoint', image=images[name])['version'])


def _wait_stable(mirror, image, version):
    state = mirror.client.call('wait_stable', image=image, version=version)
    if state != 'stable':
        raise RuntimeError('version %s of bench image %s is %s'
                           % (version, image, state))


def _measure(target, probe, job, every, size, runtime, commit_s, seed):
    mirror = target.get('mirror')
    image = target.get('image')
    before = mirror.client.call('stats', image=image)['flushes'] \
        if mirror else None
    log_before = probe.read(image) if probe else None
    figures = _fio(target, job, every, size, runtime)
    if mirror:
        figures['mirror_flushes'] = mirror.client.call(
            'stats', image=image)['flushes'] - before
    if probe:
        figures['log_bytes'] = probe.appended(log_before, probe.read(image))
    if commit_s:
        figures.update(_commits(target, size, commit_s, seed))
    return figures


class _Checkpointer(threading.Thread):
    """A checkpoint of ``target`` every ``interval`` seconds until
    stopped: a version of a BlobCR image (its own control connection),
    a snapshot of an RBD image (another client's, as an orchestrator's).
    """

    def __init__(self, target, interval):
        super().__init__(name='flush-checkpoints', daemon=True)
        self.target = target
        self.interval = interval
        self.stopping = threading.Event()
        self.done = []
        self.error = None
        self._close = lambda: None

    def run(self):
        try:
            take = self._opener()
            while not self.stopping.wait(self.interval):
                self.done.append(take(len(self.done)))
        except Exception as e:          # reported by the caller
            self.error = e
        finally:
            self._close()

    def _opener(self):
        target = self.target
        if target['kind'] == 'file':
            client = agents.MirrorProcess.client_class(
                target['mirror'].control)
            return lambda k: client.call('checkpoint',
                                         image=target['image'])['version']
        import rados
        import rbd
        cluster = rados.Rados(conffile=target['conf'], rados_id='admin')
        cluster.connect(timeout=10)
        ioctx = cluster.open_ioctx(target['pool'])
        image = rbd.Image(ioctx, target['image'])

        def close():
            image.close()
            ioctx.close()
            cluster.shutdown()
        self._close = close

        def snap(k):
            name = 'flush-cp-%d' % k
            image.create_snap(name)
            return name
        return snap

    def stop(self):
        self.stopping.set()
        self.join()
        if self.error:
            raise self.error
        return self.done


def _measure_checkpoints(target, args, job, interval, size):
    """fio without flushes while ``target`` is checkpointed every
    ``interval`` s: bytes the OSDs received from clients (all of the
    cluster's: ``op_in_bytes``) per byte fio wrote, from before the
    job until the last version is stable (BlobCR persists at its
    checkpoints, and one more at the end for what came after the last).
    """
    from blobcr_lab import ceph as lab_ceph
    before = lab_ceph.osd_counters(args.ceph_conf)
    checkpointer = _Checkpointer(target, interval)
    checkpointer.start()
    try:
        figures = _fio(target, job, 0, size, args.runtime)
    finally:
        taken = checkpointer.stop()
    mirror = target.get('mirror')
    if mirror:
        version = mirror.client.call('checkpoint',
                                     image=target['image'])['version']
        _wait_stable(mirror, target['image'], version)
        for v in taken:
            _wait_stable(mirror, target['image'], v)
    after = lab_ceph.osd_counters(args.ceph_conf)
    if not mirror:
        _drop_snapshots(target, taken)
    osd_in = after['op_in_bytes'] - before['op_in_bytes']
    figures.update(checkpoints=len(taken), osd_in_bytes=osd_in,
                   osd_in_per_written=osd_in / max(figures['written'], 1))
    return figures


def _drop_snapshots(target, names):
    import rados
    import rbd
    cluster = rados.Rados(conffile=target['conf'], rados_id='admin')
    cluster.connect(timeout=10)
    try:
        with cluster.open_ioctx(target['pool']) as ioctx, \
                rbd.Image(ioctx, target['image']) as image:
            for name in names:
                image.remove_snap(name)
    finally:
        cluster.shutdown()


def _check_runs(checks, names, jobs, runs):
    for name in names:
        for job, every, interval in jobs:
            got = [r[name][job] for r in runs if job in r[name]]
            if not got:
                continue
            checks.require('%s on %s: writes (min over runs)' % (job, name),
                           min(g['writes'] for g in got),
                           'fio must write to the %s' % name)
            # fio's last write may come after its last flush
            want = [max(g['writes'] - 1, 0) // every if every else 0
                    for g in got]
            checks.require_true(
                '%s on %s: flushes as asked (every run)' % (job, name),
                all(g['flushes'] >= w and (every or not g['flushes'])
                    for g, w in zip(got, want)),
                'fio must flush every %s writes' % every if every
                else 'fio must not flush',
                value=[g['flushes'] for g in got])
            if 'mirror_flushes' in got[0]:
                checks.require_true(
                    '%s on %s: flushes the mirror core counted' % (job, name),
                    all(g['mirror_flushes'] >= g['flushes'] and
                        (every or not g['mirror_flushes']) for g in got),
                    'the flushes must reach the mirror (FUSE fsync)',
                    value=[g['mirror_flushes'] for g in got])
            if 'log_bytes' in got[0]:
                least = BLOCK if every == 1 else 1
                checks.require_true(
                    '%s on %s: bytes appended to the write log in RADOS'
                    % (job, name),
                    all((g['log_bytes'] >= least * g['flushes'])
                        if g['flushes'] else not g['log_bytes']
                        for g in got),
                    'a cluster flush must append its blocks to the log',
                    value=[g['log_bytes'] for g in got])
            if interval:
                checks.require('%s on %s: checkpoints (min over runs)'
                               % (job, name),
                               min(g['checkpoints'] for g in got),
                               'the job must checkpoint the %s' % name)
                checks.require('%s on %s: bytes the OSDs received (min '
                               'over runs)' % (job, name),
                               min(g['osd_in_bytes'] for g in got),
                               'the %s\'s writes must reach the OSDs'
                               % name)


def _ratios(runs, names, job):
    out = {}
    for a, b in PAIRS:
        if a not in names or b not in names:
            continue
        entry = {}
        for figure in FIGURES + ('osd_in_per_written',):
            entry[figure] = common.summary(
                [common.ratio(r[a][job].get(figure), r[b][job].get(figure))
                 for r in runs])
        out['%s/%s' % (a, b)] = {f: s for f, s in entry.items()
                                 if s is not None}
    return out
