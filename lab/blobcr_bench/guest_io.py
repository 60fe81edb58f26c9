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

"""``blobcr-bench guest-io``: a guest's disk on the path stock Nova uses.

With the driver's 'local' connection, stock Nova hands QEMU the agent's
loop device over the mirror file, and QEMU (cache=none) opens it with
O_DIRECT. fio (libaio, O_DIRECT, fresh random data in every write, the
same offsets on every target) runs the same jobs on:

* ``loop``: a loop device with direct I/O over the mirror file, as the
  agent sets it up (manager/loopdevs.py);
* ``mirror``: the mirror file itself;
* ``plain``: a file on the file system of the mirror's cache, filled
  with data: what a local disk gives;
* with ``--rbd`` (``--backend rados``): ``rbd`` and ``rbd-writeback``,
  an image of RBD's default 4 MiB objects in a replicated pool through
  librbd (fio's rbd engine), cache off (Nova's cache=none) and
  writeback.

Jobs: 4 KiB random reads and writes at queue depth 1 and 16, 1 MiB
sequential reads and writes at queue depth 16; and, for equal
durability with RBD, 4 KiB random writes each flushed (``fsync``: fio's
rbd engine has no fdatasync) and 1 MiB sequential writes flushed every
16: IOPS, MiB/s, and the completion latency's p50 and p99. The
targets take turns job by job, which goes first rotating from job to
job and run to run.

Conditions:

* ``idle``: every target, the image's chunks all in the mirror;
* ``persist``: ``loop`` and ``mirror`` while a checkpoint of the whole
  image (every chunk rewritten just before) persists, for the jobs of
  ``--persist-jobs`` (default PERSIST_JOBS, 4 of the 8); each job records
  how much of it the persist overlapped (``persist_overlap``), and
  ``persist_over_idle`` compares it with the same job idle;
* ``restart``: the image's version attached again on a second mirror
  with nothing cached (a lazy restart, prefetch off), a loop device
  over it, and 4 KiB random reads at queue depth 1 at chunk-aligned
  offsets: each a first read of an unfetched chunk; p50 and p99, and
  the reads that fetched (the mirror's ``read_fetches``).

Ratios, per run: loop over mirror, loop over plain, loop over each RBD
target, persist over idle. Targets (issue 55): the loop device at least
0.9x the mirror file on every job; BlobCR at least RBD's at equal
durability (``cluster`` against RBD cache off); during a persist at
least 0.8x idle. The JSON says which are met.
"""

import json
import os
import random
import subprocess
import tempfile
import time

from blobcr_bench import common
from blobcr_bench import fio
from blobcr_bench import rbd_common
from blobcr_lab import agents
from blobcr_lab import loopdev

CHUNK = 256 << 10
# (name, fio rw, block size, queue depth, writes per flush or 0)
JOBS = (('rand-read-4k-qd1', 'randread', '4k', 1, 0),
        ('rand-write-4k-qd1', 'randwrite', '4k', 1, 0),
        ('rand-read-4k-qd16', 'randread', '4k', 16, 0),
        ('rand-write-4k-qd16', 'randwrite', '4k', 16, 0),
        ('seq-read-1m', 'read', '1M', 16, 0),
        ('seq-write-1m', 'write', '1M', 16, 0),
        # Equal durability: a write is safe from a host loss on RBD (cache
        # off) once acknowledged, on BlobCR ('cluster') once a flush
        # covered it (its blocks in the write-ahead log). A database
        # flushing each commit, a file system each journal commit.
        ('rand-write-4k-qd1-flush', 'randwrite', '4k', 1, 1),
        ('seq-write-1m-flush16', 'write', '1M', 16, 16))
RBD_TARGETS = ('rbd', 'rbd-writeback')
# The jobs run during a persist by default: reads and writes at both
# queue depths' ends, sequential writes and flushed writes. Each waits
# for a persist of the whole image (16 jobs, every one: over 15 minutes
# a run on the micro cluster).
PERSIST_JOBS = ('rand-read-4k-qd1', 'rand-write-4k-qd16', 'seq-write-1m',
                'rand-write-4k-qd1-flush')
LOOP_OVER_MIRROR_TARGET = 0.9
PERSIST_OVER_IDLE_TARGET = 0.8


def run_job(target, job, size, runtime, extra=()):
    """One fio job on ``target`` (a path or an RBD target): its
    figures.
    """
    name, rw, bs, depth, per_flush = job
    options, env = fio.engine(target)
    if per_flush:
        extra = ['--fsync=%d' % per_flush] + list(extra)
    cmd = ['fio', '--name=%s' % name, '--rw=%s' % rw, '--bs=%s' % bs,
           '--iodepth=%d' % depth, '--numjobs=1', '--size=%d' % size,
           '--time_based=1', '--runtime=%dms' % int(runtime * 1000),
           '--randrepeat=1', '--refill_buffers=1',
           '--output-format=json'] + options + list(extra)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode:
        raise fio.FioError('%s: %s' % (' '.join(cmd), (
            proc.stderr or proc.stdout)[-500:]))
    result = json.loads(proc.stdout[proc.stdout.find('{'):])['jobs'][0]
    if result.get('error'):
        raise fio.FioError('fio %s: error %s' % (name, result['error']))
    side = result['write' if 'write' in rw else 'read']
    clat = side.get('clat_ns', {}).get('percentile', {})
    return {'iops': side['iops'], 'mib_s': side['bw_bytes'] / common.MIB,
            'ios': side['total_ios'],
            'lat_ms_p50': clat.get('50.000000', 0) / 1e6,
            'lat_ms_p99': clat.get('99.000000', 0) / 1e6}


def figure(name, result):
    """The job's figure that ratios compare: MiB/s for the 1 MiB jobs,
    IOPS for the others.
    """
    return result['mib_s'] if name.startswith('seq') else result['iops']


class BlobcrDisk(object):
    """An image attached in a mirror, written in full, with a loop
    device over its file.
    """

    def __init__(self, repo, backend_args, workdir, size):
        self.repo = repo
        header = repo.create_image('bench-guest-io', size, chunk_size=CHUNK)
        repo.commit(header.id, {})
        self.id = header.id
        self.size = size
        self.loop = self.restarter = None
        self.attached = self.restarted = False
        self.mirror = agents.MirrorProcess(tempfile.mkdtemp(dir=workdir),
                                           backend_args).start()
        try:
            self.path = self.mirror.client.call('attach', image=self.id)
            self.attached = True
            common.fill(self.path, size)
            self.loop = loopdev.attach(self.path)
        except BaseException:
            self.close()
            raise

    def stats(self):
        return self.mirror.client.call('stats', image=self.id)

    def checkpoint_dirty(self):
        """Rewrite the whole image, then checkpoint it without waiting:
        a persist of every chunk starts. Its version.
        """
        common.fill(self.path, self.size)
        return self.mirror.client.call('checkpoint',
                                       image=self.id)['version']

    def stable_at(self, version):
        """When ``version`` turned stable (time.time()), waiting for it."""
        state = self.mirror.client.call('wait_stable', image=self.id,
                                        version=version)
        if state != 'stable':
            raise RuntimeError('version %d is %s' % (version, state))
        return self.mirror.client.call('timing', image=self.id,
                                       version=version)['done']

    def restart(self, workdir, version):
        """The image detached here (its write log emptied), then
        ``version`` attached on a second mirror with nothing cached,
        prefetch off, a loop device over it: (device, stats()).
        """
        loopdev.detach(self.loop)
        self.loop = None
        self.mirror.client.call('detach', image=self.id, discard=True)
        self.attached = False
        self.restarter = agents.MirrorProcess(
            tempfile.mkdtemp(dir=workdir), agents.store_args(
                self.repo.backend)).start()
        path = self.restarter.client.call('attach', image=self.id,
                                          version=version, prefetch=False)
        self.restarted = True
        device = loopdev.attach(path)
        return device, lambda: self.restarter.client.call(
            'stats', image=self.id)

    def close(self):
        """Everything stopped and deleted, whatever fails on the way
        (the first error raised at the end).
        """
        errors = []
        if self.loop is not None:
            loopdev.detach(self.loop)
        for mirror, attached in ((self.restarter, self.restarted),
                                 (self.mirror, self.attached)):
            if mirror is None:
                continue
            try:
                if attached:
                    mirror.client.call('detach', image=self.id,
                                       discard=True)
            except Exception as e:
                errors.append(e)
            mirror.stop()
        self.repo.delete_image(self.id)
        if errors:
            raise errors[0]


def flush_before(target):
    """Flush a file or device target, untimed, before a flushed job: the
    first flush after unflushed jobs would otherwise append everything
    they wrote to the write-ahead log (up to the whole disk) inside the
    job, and whichever target went first would pay for all (the first
    runs measured 1/2254 and 1/0.001 loop over mirror that way).
    """
    if isinstance(target, str):
        fd = os.open(target, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _idle(targets, jobs, size, runtime, rotate):
    """Every job on every target, taking turns."""
    names = list(targets)
    out = {name: {} for name in names}
    for k, job in enumerate(jobs):
        shift = (k + rotate) % len(names)
        for name in names[shift:] + names[:shift]:
            if job[4]:
                flush_before(targets[name])
            out[name][job[0]] = run_job(targets[name], job, size, runtime)
    return out


def _during_persist(disk, jobs, size, runtime, rotate):
    """Each job on the loop device and the mirror file, each while a
    persist of the whole image runs; the share of the job it overlapped.
    """
    targets = {'loop': disk.loop, 'mirror': disk.path}
    names = list(targets)
    out = {name: {} for name in names}
    for k, job in enumerate(jobs):
        shift = (k + rotate) % len(names)
        for name in names[shift:] + names[:shift]:
            version = disk.checkpoint_dirty()
            if job[4]:
                flush_before(targets[name])
            began = time.time()
            result = run_job(targets[name], job, size, runtime)
            ended = time.time()
            stable = disk.stable_at(version)
            result['persist_overlap'] = round(
                max(0.0, min(stable, ended) - began) / (ended - began), 3)
            out[name][job[0]] = result
    return out


def _restart(disk, workdir, size, seed):
    """First reads of unfetched chunks through a loop device over a
    lazily restarted image.
    """
    version = disk.mirror.client.call('checkpoint', image=disk.id)['version']
    disk.stable_at(version)
    device, stats = disk.restart(workdir, version)
    # Each chunk read once, in a random order, a 4 KiB page of it at
    # random: every read is the first of its chunk (fio replays the
    # list, as fast as the reads complete).
    rng = random.Random(seed)
    chunks = list(range(size // CHUNK))
    rng.shuffle(chunks)
    iolog = os.path.join(workdir, 'restart.iolog')
    with open(iolog, 'w') as f:
        f.write('fio version 2 iolog\n%s add\n%s open\n' % (device, device))
        for c in chunks:
            f.write('%s read %d 4096\n' % (
                device, c * CHUNK + rng.randrange(CHUNK // 4096) * 4096))
        f.write('%s close\n' % device)
    try:
        before = stats()
        # (Not cut short by --runtime: the list is the job.)
        result = run_job(device, ('restart-read-4k-qd1', 'randread', '4k', 1,
                                  0),
                         size, 3600,
                         extra=['--read_iolog=%s' % iolog,
                                '--replay_no_stall=1', '--time_based=0'])
        after = stats()
    finally:
        loopdev.detach(device)
    result['read_fetches'] = (after.get('read_fetches', 0) -
                              before.get('read_fetches', 0))
    return result


def _ratios(runs, over, under, condition='idle', under_condition=None):
    """Per job, the summary over runs of ``over``'s figure over
    ``under``'s.
    """
    under_condition = under_condition or condition
    jobs = runs[0][condition][over]
    out = {}
    for job in jobs:
        values = [common.ratio(figure(job, r[condition][over][job]),
                               figure(job, r[under_condition][under][job]))
                  for r in runs
                  if under in r.get(under_condition, {})]
        if values:
            out[job] = common.summary(values)
    return out


def run(repo, backend_args, args, log):
    checks = common.Checks()
    size = args.size
    if size % CHUNK:
        raise SystemExit('--size must be a multiple of 256K')
    if not loopdev.available():
        raise SystemExit('guest-io needs loop devices (/dev/loop-control)')
    jobs = [j for j in JOBS if not args.jobs or j[0] in args.jobs]
    # Each persist job waits for a persist of the whole image: a subset
    # by default (PERSIST_JOBS), every job with --persist-jobs all.
    persist_jobs = [j for j in jobs if 'all' in args.persist_jobs
                    or j[0] in args.persist_jobs]
    cleanups = []
    disk = None
    runs = []
    described = {}
    try:
        log.event('fill', target='mirror')
        disk = BlobcrDisk(repo, backend_args, args.workdir, size)
        plain = os.path.join(os.path.dirname(disk.mirror.cache), 'plain.raw')
        cleanups.append(lambda: os.unlink(plain))
        log.event('fill', target='plain')
        common.fill(plain, size)
        targets = {'loop': disk.loop, 'mirror': disk.path, 'plain': plain}
        if args.rbd:
            log.event('fill', target='rbd')
            rbd_targets, described = rbd_common.fio_targets(
                args, size, list(RBD_TARGETS), checks, cleanups)
            targets.update(rbd_targets)
        written = loopdev.written(disk.loop)
        logged = disk.stats().get('log_entries')
        for k in range(args.runs):
            result = {'idle': _idle(targets, jobs, size, args.runtime, k)}
            if not args.no_persist:
                result['persist'] = _during_persist(disk, persist_jobs,
                                                    size, args.runtime, k)
            runs.append(result)
            log.event('run', run=k + 1, **{
                job[0].replace('-', '_'): round(common.ratio(
                    figure(job[0], result['idle']['loop'][job[0]]),
                    figure(job[0], result['idle']['mirror'][job[0]])), 3)
                for job in jobs})
        written = loopdev.written(disk.loop) - written
        if logged is not None:
            logged = disk.stats()['log_entries'] - logged
        restart = None if args.no_restart else _restart(
            disk, args.workdir, size, args.seed)
    finally:
        if disk is not None:
            disk.close()
        for cleanup in reversed(cleanups):
            try:
                cleanup()
            except Exception as e:      # not over the error that got here
                log('cleanup failed: %s' % e)
    return _report(args, runs, jobs, restart, written, logged, described,
                   checks)


def _flush_check(checks, runs, jobs, logged):
    """The flushed jobs' flushes reached the write-ahead log: about one
    entry per flush on the loop device and the mirror file.
    """
    flushes = sum(r[c][name][job[0]]['ios'] // job[4]
                  for r in runs for c in ('idle', 'persist') if c in r
                  for name in ('loop', 'mirror') for job in jobs
                  if job[4] and job[0] in r[c][name])
    if not flushes:
        return
    checks.require_true(
        'flush: write-ahead log entries the flushed jobs appended, at least '
        'half their flushes', logged >= flushes // 2,
        'a flush of a cluster-durable volume must append its blocks to the '
        'log in RADOS before it returns',
        value={'log_entries': logged, 'flushes': flushes})


def _report(args, runs, jobs, restart, written, logged, described,
            checks):
    names = list(runs[0]['idle'])
    figures = {}
    for condition in ('idle', 'persist'):
        if condition not in runs[0]:
            continue
        figures[condition] = {
            name: {job[0]: {key: common.summary(
                [r[condition][name][job[0]][key] for r in runs], 3)
                for key in runs[0][condition][name][job[0]]}
                for job in jobs if job[0] in runs[0][condition][name]}
            for name in runs[0][condition]}
    ratios = {'loop_over_mirror': _ratios(runs, 'loop', 'mirror'),
              'loop_over_plain': _ratios(runs, 'loop', 'plain'),
              'mirror_over_plain': _ratios(runs, 'mirror', 'plain')}
    for name in RBD_TARGETS:
        if name in names:
            ratios['loop_over_' + name.replace('-', '_')] = _ratios(
                runs, 'loop', name)
    if 'persist' in runs[0]:
        for name in ('loop', 'mirror'):
            ratios['%s_persist_over_idle' % name] = _ratios(
                runs, name, name, 'persist', 'idle')
    goals = {'loop_over_mirror': all(
        s['median'] >= LOOP_OVER_MIRROR_TARGET
        for s in ratios['loop_over_mirror'].values())}
    if 'loop_over_rbd' in ratios:
        goals['loop_over_rbd'] = all(s['median'] >= 1.0 for s in
                                     ratios['loop_over_rbd'].values())
        # Reads, and writes a flush covered: what a host loss leaves
        # alike on both (unflushed writes are on the host only here).
        equal = [job[0] for job in jobs if job[4] or 'read' in job[1]]
        goals['loop_over_rbd_equal_durability'] = all(
            ratios['loop_over_rbd'][name]['median'] >= 1.0
            for name in equal if name in ratios['loop_over_rbd'])
    if 'persist' in runs[0]:
        goals['persist_over_idle'] = all(
            s['median'] >= PERSIST_OVER_IDLE_TARGET
            for s in ratios['loop_persist_over_idle'].values())
    for name in names:
        checks.require('%s: I/Os of every job (min over runs)' % name,
                       min(r['idle'][name][job[0]]['ios']
                           for r in runs for job in jobs),
                       'fio must complete I/O on the %s' % name)
    # The loop device's jobs went through it: at least what fio wrote.
    block = {'4k': 4096, '1M': common.MIB}
    wrote = sum(r[c]['loop'][job[0]]['ios'] * block[job[2]]
                for r in runs for c in ('idle', 'persist') if c in r
                for job in jobs
                if 'write' in job[0] and job[0] in r[c]['loop'])
    checks.require_true(
        'loop: bytes its block statistics counted written, at least '
        'what fio wrote through it', written >= wrote,
        'the loop device must carry the guest\'s writes',
        value={'device': written, 'fio': wrote})
    if logged is not None:
        _flush_check(checks, runs, jobs, logged)
    if 'persist' in runs[0]:
        overlap = [r['persist'][name][job]['persist_overlap']
                   for r in runs for name in ('loop', 'mirror')
                   for job in r['persist'][name]]
        checks.require_true(
            'persist: share of each job a persist overlapped (median), at '
            'least half', common.summary(overlap)['median'] >= 0.5,
            'the persist condition must measure I/O during a persist; a '
            'smaller --size persists before the job is done',
            value=common.summary(overlap))
    if restart is not None:
        checks.require_true(
            'restart: reads that fetched their chunk, at least 9 in 10',
            restart['read_fetches'] >= 0.9 * restart['ios'],
            'each read of the restart must be a first read of an '
            'unfetched chunk', value={'reads': restart['ios'],
                                      'fetched': restart['read_fetches']})
    return {'size': args.size, 'runtime_s': args.runtime,
            'runs': args.runs, 'targets': names, 'rbd': described,
            # BlobCR's: 'cluster' if its flushes append to the log.
            'durability': 'host' if logged is None else 'cluster',
            'log_entries': logged,
            'jobs': [list(j) for j in jobs],
            'persist_jobs': sorted(runs[0].get('persist', {}).get('loop',
                                                                  {})),
            'figures': figures,
            'ratios': ratios, 'goals': goals, 'restart': restart,
            'per_run': runs, 'checks': checks.as_list()}
