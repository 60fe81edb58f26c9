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

"""fio workloads and the C passthrough baseline of ``blobcr-bench mirror``.

The mirror target (ARCHITECTURE.md §8) is at least 80% of a plain C
libfuse3 passthrough on the same backing file, for 1 MiB sequential and
4 KiB random I/O at iodepth 16. This module runs those workloads with fio
on any file (:func:`run_job`, :func:`compare`) and mounts the passthrough
(:class:`PassthroughMount`, built by tools/build-passthrough.sh from
native/bench/passthrough.c). Standard library only; fio is a subprocess.
"""

import collections
import json
import os
import subprocess
import tempfile
import time

MIB = 1 << 20
IODEPTH = 16
DEFAULT_RUNTIME = 10

Job = collections.namedtuple('Job', 'name rw bs')

# Writes come before reads so that the reads find written data rather
# than holes, which a sparse file serves without touching the disk.
JOBS = (
    Job('seq-write-1m', 'write', '1M'),
    Job('seq-read-1m', 'read', '1M'),
    Job('rand-write-4k', 'randwrite', '4k'),
    Job('rand-read-4k', 'randread', '4k'),
)


class FioError(Exception):
    pass


def engine(target):
    """fio's options and environment for ``target``: a path (libaio,
    O_DIRECT) or an RBD target of rbd_common.fio_targets (fio's rbd
    engine, librbd reading the target's ceph.conf).
    """
    env = dict(os.environ)
    if isinstance(target, dict) and target.get('kind') == 'rbd':
        env['CEPH_CONF'] = target['conf']
        return ['--ioengine=rbd', '--clientname=admin',
                '--pool=%s' % target['pool'],
                '--rbdname=%s' % target['image']], env
    path = target['path'] if isinstance(target, dict) else target
    return ['--ioengine=libaio', '--direct=1', '--filename=%s' % path], env


def fio_command(path, job, size, runtime=DEFAULT_RUNTIME, fio='fio'):
    """The fio command line of one job on ``path``, JSON output."""
    return [
        fio, '--name=%s' % job.name, '--filename=%s' % path,
        '--rw=%s' % job.rw, '--bs=%s' % job.bs,
        '--ioengine=libaio', '--direct=1', '--iodepth=%d' % IODEPTH,
        '--numjobs=1', '--size=%d' % size,
        # Seconds, fractions allowed: fio takes milliseconds.
        '--time_based=1', '--runtime=%dms' % int(runtime * 1000),
        # Identical random offsets on every target of a comparison.
        '--randrepeat=1',
        '--output-format=json',
    ]


def parse_report(job, text):
    """The figures of ``job`` from fio's JSON report ``text``."""
    # fio may print notes before the JSON document on stdout.
    start = text.find('{')
    if start < 0:
        raise FioError('no JSON in fio output: %r' % text[:200])
    report = json.loads(text[start:])
    result = report['jobs'][0]
    if result.get('error'):
        raise FioError('fio job %s failed: error %s'
                       % (job.name, result['error']))
    side = result['write' if 'write' in job.rw else 'read']
    clat = side.get('clat_ns', {}).get('percentile', {})
    return {
        'name': job.name,
        'rw': job.rw,
        'bs': job.bs,
        'iodepth': IODEPTH,
        'bw_mib_s': side['bw_bytes'] / MIB,
        'iops': side['iops'],
        'lat_ms_mean': side['lat_ns']['mean'] / 1e6,
        'lat_ms_p99': clat.get('99.000000', 0) / 1e6,
        'runtime_s': side['runtime'] / 1000.0,
        'total_ios': side['total_ios'],
    }


def run_job(path, job, size, runtime=DEFAULT_RUNTIME, fio='fio'):
    """Run one of :data:`JOBS` on ``path`` and return its figures.

    ``path`` should exist and hold at least ``size`` bytes: fio would
    otherwise lay the file out first, which a fixed-size FUSE file
    refuses.
    """
    cmd = fio_command(path, job, size, runtime, fio)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True)
    if proc.returncode != 0:
        raise FioError('%s exited with %d: %s'
                       % (' '.join(cmd), proc.returncode,
                          proc.stderr.strip() or proc.stdout[-500:]))
    return parse_report(job, proc.stdout)


def compare(paths_by_name, size, runtime=DEFAULT_RUNTIME, jobs=JOBS,
            fio='fio', rotate=0, servers=None, settle=None):
    """Run every job on every target; ``{target: {job name: figures}}``.

    Targets take turns job by job, so that a change of host conditions
    during the run (page cache, other tenants) falls on all of them
    rather than on whichever ran last; which target goes first changes
    from job to job, and with ``rotate`` (pass the run number) from run
    to run. With ``servers`` (``{target: pid}``), each job's figures also
    hold the CPU time that process spent serving it (``server_cpu_ms``,
    and ``server_cpu_us_per_io``). ``settle()``, if given, runs before
    every job (say, to write back what the previous job left dirty, so
    that its writeback does not land on the next job); each job records
    the host's dirty page cache when it started (``dirty_kib_at_start``).
    """
    names = list(paths_by_name)
    results = {name: {} for name in names}
    for k, job in enumerate(jobs):
        shift = (k + rotate) % len(names)
        for name in names[shift:] + names[:shift]:
            pid = (servers or {}).get(name)
            if settle:
                settle()
            dirty = dirty_kib()
            before = process_cpu_ms(pid) if pid else None
            figures = run_job(paths_by_name[name], job, size, runtime, fio)
            figures['dirty_kib_at_start'] = dirty
            if pid:
                figures['server_cpu_ms'] = process_cpu_ms(pid) - before
                figures['server_cpu_us_per_io'] = (
                    figures['server_cpu_ms'] * 1000.0 /
                    max(figures['total_ios'], 1))
            figures['order'] = names.index(name) == shift
            results[name][job.name] = figures
    return results


def dirty_kib():
    """Dirty plus under-writeback page cache of the host, in KiB."""
    total = 0
    with open('/proc/meminfo') as f:
        for line in f:
            if line.startswith(('Dirty:', 'Writeback:')):
                total += int(line.split()[1])
    return total


def process_cpu_ms(pid):
    """User plus system CPU time of a process, all its threads, in ms."""
    with open('/proc/%d/stat' % pid) as f:
        fields = f.read().rsplit(')', 1)[1].split()
    ticks = os.sysconf('SC_CLK_TCK')
    return (int(fields[11]) + int(fields[12])) * 1000.0 / ticks


def connection_info(path):
    """What the kernel negotiated for the FUSE mount holding ``path``:
    mount options, max_background, congestion_threshold, readahead.
    """
    path = os.path.realpath(path)
    best = None
    with open('/proc/self/mountinfo') as f:
        for line in f:
            fields = line.split()
            point = fields[4].encode().decode('unicode_escape')
            if (path == point or path.startswith(point.rstrip('/') + '/')) \
                    and (best is None or len(point) > len(best[1])):
                sep = fields.index('-')
                best = (fields[2], point, fields[sep + 1],
                        fields[sep + 3] if len(fields) > sep + 3 else '')
    if best is None or not best[2].startswith('fuse'):
        return None
    minor = best[0].split(':')[1]
    info = {'mountpoint': best[1], 'options': best[3]}
    for name in ('max_background', 'congestion_threshold'):
        try:
            with open('/sys/fs/fuse/connections/%s/%s' % (minor, name)) as f:
                info[name] = int(f.read())
        except OSError:
            info[name] = None
    try:
        with open('/sys/class/bdi/%s/read_ahead_kb' % best[0]) as f:
            info['read_ahead_kb'] = int(f.read())
    except OSError:
        info['read_ahead_kb'] = None
    return info


class PassthroughMount(object):
    """The C passthrough mounted on a fresh directory, as a context manager.

    ``with PassthroughMount(binary, backing) as m:`` exposes ``backing``
    as ``m.path``; leaving the block unmounts it and stops the process.
    """

    def __init__(self, binary, backing, options=(), timeout=10.0):
        self.binary = binary
        self.backing = os.path.abspath(backing)
        self.options = list(options)
        self.timeout = timeout
        self.mountpoint = None
        self.path = None
        self.proc = None
        self._stderr = None

    def __enter__(self):
        self.mountpoint = tempfile.mkdtemp(prefix='blobcr-passthrough-')
        self.path = os.path.join(self.mountpoint,
                                 os.path.basename(self.backing))
        # A file, not a pipe: nobody reads it while the mount runs, and a
        # full pipe would block the file system (with -d, for example).
        self._stderr = tempfile.TemporaryFile()
        try:
            self.proc = subprocess.Popen(
                [self.binary, self.backing, self.mountpoint] + self.options,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=self._stderr)
            self._wait_visible()
        except BaseException:
            self._stop()
            raise
        return self

    def __exit__(self, exc_type, exc, tb):
        self._stop()

    def _error_output(self):
        self._stderr.seek(0)
        return self._stderr.read().decode('utf-8', 'replace').strip()

    def _wait_visible(self):
        deadline = time.monotonic() + self.timeout
        while not os.path.exists(self.path):
            if self.proc.poll() is not None:
                raise RuntimeError('%s exited with %d: %s'
                                   % (self.binary, self.proc.returncode,
                                      self._error_output()))
            if time.monotonic() > deadline:
                raise RuntimeError('%s did not appear within %.0f s'
                                   % (self.path, self.timeout))
            time.sleep(0.02)

    def _stop(self):
        if self.mountpoint and _mounted(self.mountpoint):
            subprocess.run(['fusermount3', '-u', self.mountpoint],
                           stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        if self.proc is not None and self.proc.poll() is None:
            # Unmounting ends the session loop; if it did not (the mount
            # was busy), SIGTERM makes the process unmount on its way out.
            try:
                self.proc.wait(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=self.timeout)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
        if self.mountpoint and _mounted(self.mountpoint):
            # Still busy, or left behind by a dead process: detach it
            # lazily rather than leave it in the way.
            subprocess.run(['fusermount3', '-u', '-z', self.mountpoint],
                           stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        if self.mountpoint and not _mounted(self.mountpoint):
            # rmdir, never a recursive delete: if anything is still
            # mounted here, the backing file must survive.
            try:
                os.rmdir(self.mountpoint)
            except OSError:
                pass
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None


def _mounted(path):
    """Whether ``path`` is a mount point, even one whose FUSE server died.

    os.path.ismount() cannot tell: stat() of a dead FUSE mount fails.
    """
    path = os.path.realpath(path)
    with open('/proc/self/mountinfo') as f:
        for line in f:
            # Field 5 is the mount point, with octal escapes (\040).
            point = line.split()[4]
            if point.encode().decode('unicode_escape') == path:
                return True
    return False
