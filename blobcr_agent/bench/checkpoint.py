"""``blobcr-bench checkpoint``: the journal paper's synthetic benchmark.

A process fills a buffer with fresh data, writes it over a region of the
image through the FUSE mount, calls CHECKPOINT, and at once starts the
next iteration over the same region, so its writes race with the persist
of the previous snapshot. For each mirror mode (selective-cow, live-cow,
live-precopy, offline), in the same run:

* ``downtime_ms``: CHECKPOINT request to acknowledgment (median);
* ``slowdown_s``: run time of the iterations minus that of the same
  iterations without checkpoints, measured right before (``run_s``,
  ``baseline_s``);
* ``completion_s``: CHECKPOINT to stable (median);
* ``cow_bytes``: bytes the mirror copied to keep snapshots consistent.

For selective-cow it also measures the downtime with only 64 MiB dirty.
"""

import os
import statistics
import tempfile
import time

from blobcr_agent.bench import harness
from blobcr_agent.repository import gc

MODES = ('selective-cow', 'live-cow', 'live-precopy', 'offline')
CHUNK = 256 * 1024
BLOCK = 1 << 20


class Workload(object):
    """One iteration: fill a buffer with random data, then write it."""

    def __init__(self, fd, size):
        self.fd = fd
        self.size = size

    def run(self, length=None):
        buf = os.urandom(length or self.size)
        view = memoryview(buf)
        for offset in range(0, len(buf), BLOCK):
            os.pwrite(self.fd, view[offset:offset + BLOCK], offset)


def _one_mode(repo, backend_args, workdir, mode, args, log):
    header = repo.create_image('bench-%s' % mode, args.size,
                               chunk_size=CHUNK)
    repo.commit(header.id, {})
    mirror = harness.MirrorProcess(
        tempfile.mkdtemp(prefix=mode + '-', dir=workdir), backend_args,
        ['--mode', mode, '--cow-chunks', str(args.cow_chunks)] +
        (['--in-order'] if args.flush_order == 'in-order' else [])).start()
    try:
        path = mirror.client.call('attach', image=header.id)
        fd = os.open(path, os.O_RDWR)
        work = Workload(fd, args.size)
        work.run()                               # every chunk present
        version = mirror.client.call('checkpoint', image=header.id)['version']
        mirror.client.call('wait_stable', image=header.id, version=version)

        t0 = time.perf_counter()
        for _ in range(args.iterations):
            work.run()
        baseline = time.perf_counter() - t0
        version = mirror.client.call('checkpoint', image=header.id)['version']
        mirror.client.call('wait_stable', image=header.id, version=version)
        cow_before = mirror.client.call('stats', image=header.id)

        downtimes, versions = [], []
        t0 = time.perf_counter()
        for _ in range(args.iterations):
            work.run()
            c0 = time.perf_counter()
            versions.append(mirror.client.call(
                'checkpoint', image=header.id)['version'])
            downtimes.append((time.perf_counter() - c0) * 1000)
        run = time.perf_counter() - t0
        completion = []
        for v in versions:
            state = mirror.client.call('wait_stable', image=header.id,
                                       version=v)
            if state != 'stable':
                raise RuntimeError('version %d of %s is %s' % (v, mode,
                                                               state))
            t = mirror.client.call('timing', image=header.id, version=v)
            completion.append(t['done'] - t['committed'])
        stats = mirror.client.call('stats', image=header.id)
        result = {
            'downtime_ms': round(statistics.median(downtimes), 2),
            'downtime_ms_runs': [round(d, 2) for d in downtimes],
            'run_s': round(run, 3), 'baseline_s': round(baseline, 3),
            'slowdown_s': round(run - baseline, 3),
            'slowdown_ratio': round(run / baseline, 3),
            'completion_s': round(statistics.median(completion), 3),
            'cow_bytes': stats['cow_bytes'] - cow_before['cow_bytes'] +
            (stats['redirects'] - cow_before['redirects']) * CHUNK,
            'writer_waits': stats['waits'] - cow_before['waits'],
        }
        if mode == 'selective-cow':
            small = []
            for _ in range(args.iterations):
                work.run(64 << 20)
                c0 = time.perf_counter()
                v = mirror.client.call('checkpoint', image=header.id)
                small.append((time.perf_counter() - c0) * 1000)
                mirror.client.call('wait_stable', image=header.id,
                                   version=v['version'])
            result['downtime_ms_64mib'] = round(statistics.median(small), 2)
        os.close(fd)
        mirror.client.call('detach', image=header.id, discard=True)
        log('%s: %s' % (mode, result))
        return result
    finally:
        mirror.stop()
        repo.delete_image(header.id)
        gc.collect(repo, grace=0)


def run(repo, backend_args, args, log):
    workdir = tempfile.mkdtemp(prefix='blobcr-bench-ckpt-',
                               dir=args.workdir)
    modes = {m: _one_mode(repo, backend_args, workdir, m, args, log)
             for m in args.modes}
    result = {
        'size': args.size, 'iterations': args.iterations,
        'cow_chunks': args.cow_chunks, 'flush_order': args.flush_order,
        'modes': modes,
    }
    sel = modes.get('selective-cow')
    if sel:
        result.update(
            selective_downtime_ms=sel['downtime_ms'],
            selective_downtime_ms_64mib=sel['downtime_ms_64mib'],
            downtime_ratio_vs_64mib=round(
                sel['downtime_ms'] / max(sel['downtime_ms_64mib'], 1e-3), 3))
        for other in ('live-cow', 'offline'):
            if other in modes:
                result['slowdown_vs_' + other.replace('-', '_')] = _ratio(
                    sel, modes[other])
    if args.plot:
        plot(result, args.plot)
    return result


def _ratio(a, b):
    return round(a['slowdown_s'] / b['slowdown_s'], 3) \
        if b['slowdown_s'] > 0 else None


def plot(result, path):
    """Bars per mode, like the paper's figures: downtime, slowdown,
    completion.
    """
    import matplotlib
    matplotlib.use('Agg')
    from matplotlib import pyplot

    modes = list(result['modes'])
    panels = [('downtime_ms', 'CHECKPOINT downtime (ms)'),
              ('slowdown_s', 'application slowdown (s)'),
              ('completion_s', 'CHECKPOINT to stable (s)')]
    fig, axes = pyplot.subplots(1, 3, figsize=(13, 4))
    for ax, (key, title) in zip(axes, panels):
        values = [result['modes'][m][key] for m in modes]
        bars = ax.bar(modes, values, color=['#2a7ab9', '#d9822b', '#8e6bbf',
                                            '#999999'][:len(modes)])
        ax.set_title(title)
        ax.tick_params(axis='x', labelrotation=20)
        for bar, value in zip(bars, values):
            ax.annotate('%g' % value, (bar.get_x() + bar.get_width() / 2,
                                       bar.get_height()),
                        ha='center', va='bottom', fontsize=8)
    fig.suptitle('blobcr-bench checkpoint: %d MiB rewritten per iteration, '
                 '%d iterations' % (result['size'] >> 20,
                                    result['iterations']))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
