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

"""``blobcr-bench checkpoint --interval``: periodic checkpoints under a
writer that keeps writing (the workload the papers are about).

A writer writes random blocks of ``--write-size`` over an
``--image-size`` image without pause while a CHECKPOINT is requested
every ``--interval`` seconds, not waiting for the previous version to be
stable. The writer is one thread of buffered ``pwrite`` calls, or with
``--iodepth N`` fio (libaio, O_DIRECT, N writes in flight, data that
does not dedup), as a guest on ``cache=none`` writes. What is reported
is described in checkpoint.py's docstring (Interval workload).
"""

import contextlib
import json
import os
import random
import signal
import subprocess
import threading
import time

from blobcr_agent.repository import gc
from blobcr_bench import checkpoint as cp_mod
from blobcr_bench import common
from blobcr_lab import agents

# --interval also counts the COMMITs the core refused (buffer full, too
# many in flight), the checkpoints refused before registering a version
# (room check) or after (the version aborted), and the writers blocked
# for buffer space that a COMMIT ordered after its snapshot; and the
# versions registered ahead (mirror/reserve.py) that checkpoints took or
# that were aborted unused.
INTERVAL_COUNTERS = cp_mod.COUNTERS + (
    'busy_full', 'busy_gens', 'busy_prechecked', 'busy_aborted',
    'cut_writers', 'reservations_used', 'reservations_aborted',
    'log_entries', 'log_bytes', 'log_retries')
# The mirror's phases of a checkpoint's ack, in order (``core_wait``
# and ``drain``: parts of ``commit``; ``held``: the guest kept still,
# the core's lock held by the COMMIT, or any hold around it), and two the
# benchmark derives: ``reserved_wait`` (``register`` where the version
# was registered ahead: only the wait for that registration) and
# ``reply`` (the caller's ack minus the mirror's: the control socket's
# round trip and the reply).
PHASES = ('lock', 'room', 'gate', 'register', 'record', 'commit',
          'core_wait', 'drain', 'held', 'queue')
DERIVED_PHASES = ('reserved_wait', 'reply')
# Read by the mirror (blobcr_agent.mirror.image): register versions ahead.
RESERVE_AHEAD_ENV = 'BLOBCR_RESERVE_AHEAD'


class _RandomWriter(threading.Thread):
    def __init__(self, subject, write_size, seed):
        super().__init__(name='bench-writer', daemon=True)
        self.subject = subject
        self.write_size = write_size
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.bytes = 0
        self.writes = 0
        self.error = None
        self.elapsed = 0.0

    def run(self):
        n = self.subject.size // self.write_size
        epoch = self.subject.epoch
        t0 = time.perf_counter()
        try:
            while not self.stop.is_set():
                offset = self.rng.randrange(n) * self.write_size
                os.pwrite(self.subject.fd, self.subject.pattern.block(
                    offset, self.write_size, epoch + self.writes), offset)
                self.bytes += self.write_size
                self.writes += 1
        except Exception as e:
            self.error = e
        self.elapsed = time.perf_counter() - t0


class _FioWriter(object):
    """fio writing random blocks at ``iodepth`` with libaio and O_DIRECT
    (a guest on ``cache=none``) until stopped; fresh random data in every
    write (``refill_buffers``), so nothing dedups.
    """

    def __init__(self, subject, write_size, seed, iodepth, fsync=0):
        self.cmd = ['fio', '--name=busy-writer', '--fsync=%d' % fsync,
                    '--filename=%s' % subject.path, '--rw=randwrite',
                    '--bs=%d' % write_size, '--ioengine=libaio',
                    '--direct=1', '--iodepth=%d' % iodepth,
                    '--size=%d' % subject.size, '--time_based=1',
                    '--runtime=86400', '--randseed=%d' % seed,
                    '--refill_buffers=1', '--output-format=json']
        self.subject = subject
        self.proc = None
        self.bytes = self.writes = 0
        self.elapsed = 0.0
        self.error = None
        self.stop = self    # stop.set(), as the thread writer's Event

    def start(self, timeout=60):
        """Start fio; return once its writes reach the image (fio takes
        a while to start on a loaded machine: a checkpoint before that
        would find nothing written).
        """
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + timeout
        while not self.subject.stats()['dirty']:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.set()
                self.join()
                raise RuntimeError('fio writer wrote nothing: %s'
                                   % self.error)
            time.sleep(0.01)

    def set(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)    # fio ends its report

    def join(self):
        out, err = self.proc.communicate(timeout=120)
        self.elapsed = time.perf_counter() - self.t0
        try:
            report = json.loads(out[out.index('{'):])
            job = report['jobs'][0]['write']
            self.bytes, self.writes = job['io_bytes'], job['total_ios']
        except (ValueError, KeyError, IndexError) as e:
            self.error = RuntimeError('fio writer: %s: %s' % (e, err[-500:]))
            return
        if report['jobs'][0].get('error'):
            self.error = RuntimeError('fio writer failed: error %s: %s' % (
                report['jobs'][0]['error'], err[-500:]))


def _derive_phases(cp):
    """Add ``reserved_wait`` and ``reply`` (DERIVED_PHASES) to ``cp``."""
    phases = cp['phases_ms']
    if phases.get('reserved'):
        phases['reserved_wait'] = phases.get('register', 0)
    else:
        phases['reserved_wait'] = 0
    if cp.get('mirror_ack_ms') is not None:
        phases['reply'] = max(0.0, cp['ack_last_attempt_ms']
                              - cp['mirror_ack_ms'])


def _interval_run(repo, mirror, control, args, mode, pattern, r, log):
    subject = cp_mod.Subject(repo, mirror, 'interval-%s' % mode,
                             args.image_size, mode,
                             args.flush_order == 'adaptive',
                             args.cow_chunks, pattern)
    try:
        subject.write(range(0, args.image_size, args.block), args.block)
        subject.settle([subject.checkpoint()])
        before = subject.stats()
        if args.iodepth > 1:
            writer = _FioWriter(subject, args.write_size, args.seed + r,
                                args.iodepth, args.fsync)
        else:
            writer = _RandomWriter(subject, args.write_size, args.seed + r)
        writer.start()
        checkpoints = []
        t0 = time.perf_counter()
        for k in range(args.checkpoints):
            due = t0 + (k + 1) * args.interval
            late = time.perf_counter() - due
            if late < 0:
                time.sleep(-late)
            at = time.perf_counter() - t0
            scheduled = control.call('stats', image=subject.id)['scheduled']
            cp = subject.checkpoint(control)
            _derive_phases(cp)
            cp['scheduled_at_request'] = scheduled
            cp['late_s'] = max(late, 0.0)
            cp['at_s'] = at
            checkpoints.append(cp)
            log.event('checkpoint', run=r + 1, mode=mode, k=k + 1,
                      ack_ms=round(cp['ack_ms'], 2), held_ms=cp['held_ms'],
                      busy=cp['busy'], chunks=cp['chunks'],
                      written_mib=round(writer.bytes / common.MIB, 1))
        writer.stop.set()
        writer.join()
        if writer.error:
            raise writer.error
        last = subject.checkpoint(control)       # what the writer left
        drain_from = time.perf_counter()
        subject.settle(checkpoints + [last])
        drain = time.perf_counter() - drain_from
        counters = cp_mod._delta(subject.stats(), before, INTERVAL_COUNTERS)
    finally:
        subject.close()
    for cp in checkpoints:
        cp['backlog'] = sum(1 for o in checkpoints
                            if o['version'] < cp['version'] and
                            o['stable_at'] is not None and
                            o['stable_at'] > cp['requested'])
    return {'checkpoints': checkpoints, 'counters': counters,
            'writer_mib_s': writer.bytes / common.MIB /
            max(writer.elapsed, 1e-6),
            'writes': writer.writes, 'drain_s': drain,
            'flushes': writer.writes // args.fsync if args.fsync else 0}


@contextlib.contextmanager
def _environment(name, value):
    """``name=value`` in this process's environment (for the children
    it starts) while in the block.
    """
    previous = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if previous is None:
            del os.environ[name]
        else:
            os.environ[name] = previous


def run(repo, backend_args, args, log):
    checks = common.Checks()
    if args.image_size % args.block or args.image_size % args.write_size:
        raise SystemExit('--image-size must be a multiple of --block and '
                         '--write-size')
    modes = args.modes if args.modes_given else ['selective-cow']
    # The mirror registers each next version ahead (mirror/reserve.py),
    # unless told otherwise (BLOBCR_RESERVE_AHEAD=0); "both" runs a
    # mirror of each, taking turns in every run, each writing data of its
    # own (a deduplicating store would otherwise let the second write for
    # free).
    choice = getattr(args, 'reserve_ahead', None) or \
        os.environ.get(RESERVE_AHEAD_ENV, '1')
    settings = ['0', '1'] if choice == 'both' else [choice]
    mirrors, controls, patterns = {}, {}, {}
    per_mode = {}
    try:
        for setting in settings:
            # (a short name: the control socket's path must fit sun_path)
            mirrors[setting] = cp_mod.new_mirror(
                args.workdir, backend_args, args,
                'mirror' if len(settings) == 1 else 'mirror' + setting)
            with _environment(RESERVE_AHEAD_ENV, setting):
                mirrors[setting].start()
            controls[setting] = agents.MirrorProcess.client_class(
                mirrors[setting].control)
            patterns[setting] = common.Pattern(args.image_size)
        for r in range(args.runs):
            k = r % len(settings)
            for mode in modes:
                for setting in settings[k:] + settings[:k]:
                    name = mode if len(settings) == 1 else \
                        '%s/reserve-ahead-%s' % (mode, setting)
                    per_mode.setdefault(name, []).append(_interval_run(
                        repo, mirrors[setting], controls[setting], args,
                        mode, patterns[setting], r, log))
    finally:
        for control in controls.values():
            control.close()
        for mirror in mirrors.values():
            mirror.stop()
        gc.collect(repo, grace=0)
    out = {}
    for mode, runs in per_mode.items():
        cps = [c for r in runs for c in r['checkpoints']]
        ok = [c for c in cps if c['version'] is not None]
        out[mode] = {
            'ack_ms': common.summary([c['ack_ms'] for c in ok], 2),
            'ack_last_attempt_ms': common.summary(
                [c['ack_last_attempt_ms'] for c in ok], 2),
            'held_ms': common.summary([c['held_ms'] for c in ok], 2),
            'ack_ms_median_per_run': common.summary(
                [common.summary([c['ack_ms'] for c in r['checkpoints']])
                 ['median'] for r in runs], 2),
            'held_ms_median_per_run': common.summary(
                [common.summary([c['held_ms'] for c in r['checkpoints']])
                 ['median'] for r in runs], 2),
            'ack_ms_max_per_run': [round(max(c['ack_ms'] for c in
                                             r['checkpoints']), 2)
                                   for r in runs],
            'held_ms_max_per_run': [max(c['held_ms'] for c in
                                        r['checkpoints']) for r in runs],
            'ack_ms_p99_per_run': common.summary(
                [common.summary([c['ack_ms'] for c in r['checkpoints']])
                 ['p99'] for r in runs], 2),
            'busy_refusals': sum(c['busy'] for c in cps),
            'checkpoints': len(ok),
            'late_checkpoints': sum(1 for c in cps if c['late_s'] > 0.001),
            'backlog': common.summary([c['backlog'] for c in cps], 0),
            'backlog_max': max(c['backlog'] for c in cps),
            'backlog_chunks': common.summary(
                [c['scheduled_at_request'] for c in cps], 0),
            'to_stable_s': common.summary([c['to_stable_s'] for c in ok]),
            'chunks_per_checkpoint': common.summary(
                [c['chunks'] for c in ok], 0),
            'writer_mib_s': common.summary([r['writer_mib_s'] for r in runs],
                                           1),
            'drain_s': common.summary([r['drain_s'] for r in runs]),
            'counters': {k: [r['counters'][k] for r in runs]
                         for k in INTERVAL_COUNTERS},
            # Where the successful attempt's time went in the mirror.
            'phases_ms': {p: common.summary([c['phases_ms'].get(p, 0)
                                             for c in ok], 2)
                          for p in PHASES + DERIVED_PHASES},
            'runs': [{'ack_ms': [round(c['ack_ms'], 2)
                                 for c in r['checkpoints']],
                      'held_ms': [c['held_ms'] for c in r['checkpoints']],
                      'backlog': [c['backlog'] for c in r['checkpoints']],
                      'backlog_chunks': [c['scheduled_at_request']
                                         for c in r['checkpoints']],
                      'busy': [c['busy'] for c in r['checkpoints']],
                      'phases_ms': [c['phases_ms'] for c in r['checkpoints']],
                      'to_stable_s': [round(c['to_stable_s'] or 0, 3)
                                      for c in r['checkpoints']]}
                     for r in runs],
        }
        checks.require('%s: checkpoints acknowledged' % mode, len(ok),
                       'the workload must take checkpoints')
        checks.require('%s: bytes written by the writer (min over runs)'
                       % mode, min(r['writes'] for r in runs),
                       'the writer must write while checkpoints are taken')
        checks.require('%s: dirty chunks per CHECKPOINT (min)' % mode,
                       min(c['chunks'] or 0 for c in ok),
                       'every periodic CHECKPOINT must find written chunks')
        if args.fsync and args.durability != 'host' and \
                repo.backend.name != 'local':
            # Each flush with blocks written since the one before appends
            # one entry (concurrent flushes may share one): of the order
            # of the writer's flushes, not merely some.
            checks.require(
                '%s: write-log entries per 2 flushes (min over runs)' % mode,
                min(2 * r['counters']['log_entries'] //
                    max(r['flushes'], 1) for r in runs),
                'the writer\'s flushes must reach the write-ahead log')
        if mode.startswith('selective-cow'):
            checks.require(
                '%s: cow_copies + waits (min over runs)' % mode,
                min(r['counters']['cow_copies'] + r['counters']['waits']
                    for r in runs),
                'writes must race with persists (copies or waits); none did')
        elif mode.startswith('live-cow'):
            checks.require(
                '%s: redirects (min over runs)' % mode,
                min(r['counters']['redirects'] +
                    r['counters']['redirects_nocopy'] for r in runs),
                'writes must race with persists; none was redirected')
    ratios = {}
    if len(settings) == 2:
        # Per run: the median ack with versions registered ahead over
        # the median ack without, both in the same run.
        def median_ack(run):
            return common.summary([c['ack_ms']
                                   for c in run['checkpoints']])['median']
        for mode in modes:
            with_, without = (per_mode['%s/reserve-ahead-%s' % (mode, s)]
                              for s in ('1', '0'))
            ratios['%s_ack_reserve_ahead_over_not' % mode] = \
                common.summary([common.ratio(median_ack(a), median_ack(b))
                                for a, b in zip(with_, without)])
    result = {'workload': 'interval', 'interval_s': args.interval,
              'iodepth': args.iodepth, 'fsync_every': args.fsync,
              'durability': args.durability or (
                  'host' if repo.backend.name == 'local' else 'cluster'),
              'reserve_ahead': settings, 'ratios': ratios,
              'image_size': args.image_size, 'write_size': args.write_size,
              'checkpoints_per_run': args.checkpoints, 'runs': args.runs,
              'cow_chunks': args.cow_chunks,
              'cow_spill_mb': args.cow_spill_mb, 'modes': out,
              'checks': checks.as_list()}
    if args.plot:
        plot(result, per_mode, args.plot)
    return result


def plot(result, per_mode, path):
    """Ack time, the part of it spent registering the version in the
    repository, and held time of every checkpoint, by run, against time.
    """
    import matplotlib
    matplotlib.use('Agg')
    from matplotlib import pyplot

    fig, axes = pyplot.subplots(1, 3, figsize=(16, 4.5))
    series = (lambda c: c['ack_ms'],
              lambda c: c['phases_ms'].get('register', 0) or None,
              lambda c: c['held_ms'])
    for mode, runs in per_mode.items():
        for k, r in enumerate(runs):
            xs = [c['at_s'] for c in r['checkpoints']]
            for ax, value in zip(axes, series):
                ax.plot(xs, [value(c) for c in r['checkpoints']], 'o-',
                        ms=3, label='%s run %d' % (mode, k + 1))
    axes[0].set_title('request to ack, Busy retries included (ms)')
    axes[1].set_title('of which registering the version, or taking\n'
                      'the one registered ahead (ms)')
    axes[2].set_title('writes held (ms)')
    for ax in axes:
        ax.set_xlabel('requested at (s since the writer started)')
        ax.set_yscale('log')
        ax.legend(fontsize=7)
    writer = ('fio, %d O_DIRECT writes in flight' % result['iodepth']
              if result.get('iodepth', 1) > 1 else 'one buffered writer')
    fig.suptitle('blobcr-bench checkpoint --interval %g: %d MiB image, '
                 'random %d KiB writes (%s)'
                 % (result['interval_s'], result['image_size'] >> 20,
                    result['write_size'] >> 10, writer))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
