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

"""``blobcr-bench restart``: N instances restarting from one checkpoint,
lazily, lazily with prefetch, and after a full pre-copy.

A version of ``--size`` random data is checkpointed. The restart of an
instance is modelled by a read trace: a quarter of the chunks
(``--touch``), in short runs, 64 KiB per read, ``--think-ms`` of work
between reads. Every instance has its own trace (its own seed): the same
runs in a locally shuffled order (windows of ``--window`` runs), and
``--divergence`` of them replaced by runs elsewhere (instance-specific
data). So a recorded profile never is the trace it is measured on.

* The first instance (the recorder) restarts alone from the checkpointed
  version, lazily; detaching stores its first-read order with the version
  (the mirror's profile).
* The other ``--instances`` - 1 then restart at the same time, each from a
  CLONE of the version on its own mirror (its own cache: a host of its
  own), three ways, with fresh clones each:

  - ``lazy``: no prefetch;
  - ``lazy_prefetch``: the mirror prefetches in the recorder's order
    (a clone's first version falls back on its origin's profile);
  - ``precopy``: each instance exports the whole version to a local
    file (one process per instance), then replays its trace on it.

For each instance: seconds from attach (or export) to the end of its
trace, and bytes read from the repository, from the mirror's own counter
(``fetched_bytes``) once its prefetcher is done (``bytes``), and at the
end of the trace (``bytes_at_end``); pre-copy counts the bytes the export
read. Ratios are lazy+prefetch over pre-copy, instance by instance (the
same trace), medians over instances and ``--runs``.

The run fails if a path did not run: no fetch by a lazy instance, no
chunk prefetched that its trace did not read (the prefetcher did not
run), a profile identical to a measured trace, or an empty pre-copy.
"""

import json
import mmap
import os
import random
import subprocess
import sys
import threading
import time

from blobcr_agent.repository import gc
from blobcr_bench import common
from blobcr_lab import agents

CHUNK = 256 * 1024
READ = 64 * 1024


# -- traces -----------------------------------------------------------------

def base_runs(nchunks, touch, seed):
    """Disjoint runs of 1-8 chunks covering ``touch`` of the image."""
    rng = random.Random(seed)
    runs, used = [], set()
    while len(used) < int(nchunks * touch):
        start = rng.randrange(nchunks)
        run = [c for c in range(start, min(start + rng.randint(1, 8),
                                           nchunks)) if c not in used]
        if run:
            used.update(run)
            runs.append(run)
    return runs


def instance_runs(runs, nchunks, seed, divergence, window):
    """One instance's runs: ``divergence`` of them replaced by runs of
    the same length elsewhere, then shuffled within windows of
    ``window`` runs (another timing and order).
    """
    rng = random.Random(seed)
    runs = [list(r) for r in runs]
    used = {c for r in runs for c in r}
    k = max(1, int(round(divergence * len(runs)))) if divergence else 0
    for i in rng.sample(range(len(runs)), min(k, len(runs))):
        length = len(runs[i])
        for _ in range(100):
            start = rng.randrange(max(1, nchunks - length))
            new = list(range(start, start + length))
            if not used.intersection(new):
                break
        else:
            continue
        used.difference_update(runs[i])
        used.update(new)
        runs[i] = new
    for w in range(0, len(runs), window):
        segment = runs[w:w + window]
        rng.shuffle(segment)
        runs[w:w + window] = segment
    return runs


def trace_of(runs):
    return [c * CHUNK + part for run in runs for c in run
            for part in range(0, CHUNK, READ)]


def first_read_order(runs):
    seen, order = set(), []
    for run in runs:
        for c in run:
            if c not in seen:
                seen.add(c)
                order.append(c)
    return order


def replay(path, trace, think):
    """Read the trace with O_DIRECT, as a hypervisor with cache=none
    does: no kernel readahead adds reads the trace did not make.
    """
    buf = mmap.mmap(-1, READ)            # page-aligned, as O_DIRECT wants
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        for offset in trace:
            if os.preadv(fd, [buf], offset) != READ:
                raise RuntimeError('short read at %d of %s' % (offset, path))
            if think:
                time.sleep(think)
    finally:
        os.close(fd)
        buf.close()


# -- one lazy instance --------------------------------------------------------

class Instance(object):
    """A mirror of its own (a host) restarting one image."""

    def __init__(self, workdir, backend_args, name, readahead_chunks=64):
        path = os.path.join(workdir, name)
        os.makedirs(path)
        self.mirror = agents.MirrorProcess(
            path, backend_args,
            ['--readahead-chunks', str(readahead_chunks)])

    def start(self):
        self.mirror.start()
        return self

    def restart(self, image, version, runs, think, prefetch, expect,
                wait_prefetch=60.0):
        """Attach, replay, measure; ``expect`` is the number of chunks
        present once the prefetcher is done.
        """
        client = self.mirror.client
        trace = trace_of(runs)
        t0 = time.perf_counter()
        path = client.call('attach', image=image, version=version,
                           prefetch=prefetch)
        replay(path, trace, think)
        elapsed = time.perf_counter() - t0
        stats = client.call('stats', image=image)
        at_end = stats['fetched_bytes']
        deadline = time.monotonic() + wait_prefetch
        while prefetch and stats['present'] < expect and \
                time.monotonic() < deadline:
            time.sleep(0.05)
            stats = client.call('stats', image=image)
        touched = len({c for r in runs for c in r})
        client.call('detach', image=image, discard=True)
        return {'seconds': elapsed, 'bytes': stats['fetched_bytes'],
                'bytes_at_end': at_end, 'chunks': stats['fetched_chunks'],
                'present': stats['present'], 'trace_chunks': touched,
                'not_read_by_trace': stats['present'] - touched}

    def stop(self):
        self.mirror.stop()


def _concurrently(jobs):
    """Run callables at the same time; their results, in order."""
    results = [None] * len(jobs)
    errors = []
    barrier = threading.Barrier(len(jobs))

    def one(k):
        try:
            barrier.wait()
            results[k] = jobs[k]()
        except Exception as e:
            errors.append(e)
    threads = [threading.Thread(target=one, args=(k,)) for k in
               range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


# -- pre-copy, one process per instance --------------------------------------

def _precopy_all(store_args, image_ids, version, traces, think, workdir):
    """Start one worker per instance; all start exporting at once."""
    procs = []
    for k, (image, trace) in enumerate(zip(image_ids, traces)):
        job = os.path.join(workdir, 'precopy-%d.json' % k)
        with open(job, 'w') as f:
            json.dump({'image': image, 'version': version,
                       'path': os.path.join(workdir, 'precopy-%d.raw' % k),
                       'trace': trace, 'think': think}, f)
        procs.append(subprocess.Popen(
            [sys.executable, '-m', 'blobcr_bench.restart', job] +
            list(store_args), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True))
    try:
        for p in procs:
            if p.stdout.readline().strip() != 'ready':
                raise RuntimeError('a pre-copy worker did not start')
        for p in procs:
            p.stdin.write('go\n')
            p.stdin.flush()
        results = []
        for p in procs:
            line = p.stdout.readline()
            if p.wait() != 0 or not line:
                raise RuntimeError('a pre-copy worker failed')
            results.append(json.loads(line))
        return results
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


class _Counter(object):
    """The progress interface of Repository.export, counting bytes."""

    def __init__(self):
        self.bytes = 0

    def start(self, total):
        pass

    def advance(self, n):
        self.bytes += n

    def finish(self):
        pass


def worker(argv):
    """``python -m blobcr_bench.restart JOB STORE-ARGS...``: export
    and replay one instance's trace once told to go; prints its figures.
    """
    import argparse
    from blobcr_agent import conf as blobcr_conf
    from blobcr_agent.repository import repository
    parser = argparse.ArgumentParser()
    parser.add_argument('job')
    parser.add_argument('--config-file', action='append', default=[])
    parser.add_argument('--backend')
    parser.add_argument('--store')
    args = parser.parse_args(argv)
    with open(args.job) as f:
        job = json.load(f)
    conf = blobcr_conf.CONF
    conf(['--config-file=%s' % c for c in args.config_file],
         project='blobcr', default_config_files=[])
    blobcr_conf.override_store(conf, args.backend, args.store)
    repo = repository.Repository.from_conf(conf)
    try:
        print('ready', flush=True)
        sys.stdin.readline()
        counter = _Counter()
        t0 = time.perf_counter()
        repo.export(job['image'], job['version'], job['path'],
                    progress=counter)
        replay(job['path'], job['trace'], job['think'])
        elapsed = time.perf_counter() - t0
        os.unlink(job['path'])
    finally:
        repo.close()
    print(json.dumps({'seconds': elapsed, 'bytes': counter.bytes}),
          flush=True)
    return 0


# -- the benchmark -----------------------------------------------------------

def run(repo, backend_args, args, log):
    if args.instances < 2:
        raise SystemExit('--instances must be at least 2 (one records, '
                         'the others are measured)')
    if args.divergence <= 0:
        raise SystemExit('--divergence must be positive: a profile from '
                         'another instance differs in chunks as well as '
                         'in order (and the prefetch check needs it)')
    workdir = args.workdir
    checks = common.Checks()
    nchunks = args.size // CHUNK
    pattern = common.Pattern(nchunks * CHUNK)
    header = repo.create_image('bench-restart', nchunks * CHUNK,
                               chunk_size=CHUNK)
    pending = repo.begin_commit(header.id)
    for index in range(nchunks):
        pending.put(index, bytes(pattern.block(index * CHUNK, CHUNK, 0)))
    version = pending.finish()
    think = args.think_ms / 1000.0
    base = base_runs(nchunks, args.touch, args.seed)
    measured = args.instances - 1
    modes = ('lazy', 'lazy_prefetch', 'precopy')
    results = {m: [] for m in modes}
    clones = []
    instances = []
    try:
        for k in range(args.instances):
            instances.append(Instance(workdir, backend_args, 'host-%d' % k,
                                      args.readahead_chunks))
        for inst in instances:
            inst.start()
        # The recorder: instance 0, from the version itself.
        rec_runs = instance_runs(base, nchunks, args.seed * 1000,
                                 args.divergence, args.window)
        recorder = instances[0].restart(header.id, version, rec_runs, think,
                                        False, 0)
        profile = repo.load_profile(repo.image(header.id), version)
        log.event('recorded', seconds=round(recorder['seconds'], 3),
                  bytes=recorder['bytes'], profile_chunks=len(profile))
        checks.require('recorder: profile chunks', len(profile),
                       'the first instance must leave a read profile')
        for r in range(args.runs):
            runs = [instance_runs(base, nchunks,
                                  args.seed * 1000 + 1 + r * measured + i,
                                  args.divergence, args.window)
                    for i in range(measured)]
            for i, own in enumerate(runs):
                checks.require_true(
                    'run %d instance %d: profile differs from its trace'
                    % (r + 1, i + 1), first_read_order(own) != profile,
                    'prefetch must not replay the trace it is measured on')
            expect = [len(set(profile) | {c for run in own for c in run})
                      for own in runs]
            order = modes if r % 2 == 0 else modes[::-1]
            for mode in order:
                if mode == 'precopy':
                    got = _precopy_all(
                        backend_args, [header.id] * measured, version,
                        [trace_of(own) for own in runs], think, workdir)
                else:
                    ids = []
                    for i in range(measured):
                        c = repo.clone(header.id, version,
                                       name='bench-restart-%s-%d-%d'
                                       % (mode, r, i))
                        clones.append(c.id)
                        ids.append(c.id)
                    prefetch = mode == 'lazy_prefetch'
                    got = _concurrently([
                        (lambda i=i: instances[i + 1].restart(
                            ids[i], 1, runs[i], think, prefetch, expect[i]))
                        for i in range(measured)])
                results[mode].append(got)
                log.event('restart', run=r + 1, mode=mode,
                          seconds=[round(g['seconds'], 3) for g in got],
                          mib=[round(g['bytes'] / common.MIB, 1)
                               for g in got])
    finally:
        for inst in instances:
            inst.stop()
        for c in clones:
            try:
                repo.delete_image(c)
            except Exception as e:
                log('cannot delete clone %s: %s' % (c, e))
        repo.delete_image(header.id)
        gc.collect(repo, grace=0)

    stored = nchunks * CHUNK
    out = {}
    for mode in modes:
        flat = [g for got in results[mode] for g in got]
        out[mode] = {
            'seconds': common.summary([g['seconds'] for g in flat]),
            'mib': common.summary([g['bytes'] / common.MIB for g in flat], 1),
            'per_run': [{'seconds': [round(g['seconds'], 3) for g in got],
                         'bytes': [g['bytes'] for g in got]}
                        for got in results[mode]],
        }
        if mode != 'precopy':
            out[mode]['mib_at_end_of_trace'] = common.summary(
                [g['bytes_at_end'] / common.MIB for g in flat], 1)
            out[mode]['chunks_not_read_by_trace'] = common.summary(
                [g['not_read_by_trace'] for g in flat], 0)
    pairs = [(p, c) for gp, gc_ in zip(results['lazy_prefetch'],
                                       results['precopy'])
             for p, c in zip(gp, gc_)]
    lazy_pairs = [(p, c) for gp, gc_ in zip(results['lazy'],
                                            results['precopy'])
                  for p, c in zip(gp, gc_)]
    for label, group in (('lazy', results['lazy']),
                         ('lazy_prefetch', results['lazy_prefetch'])):
        checks.require('%s: bytes fetched (min over instances)' % label,
                       min(g['bytes'] for got in group for g in got),
                       'a lazy restart must fetch the chunks it reads')
    checks.require(
        'lazy_prefetch: chunks prefetched that the trace never read (min)',
        min(g['not_read_by_trace'] for got in results['lazy_prefetch']
            for g in got),
        'the prefetcher must fetch the recorder\'s chunks, some of which '
        'this instance never reads; none were: it did not run')
    checks.require('precopy: bytes exported (min)',
                   min(g['bytes'] for got in results['precopy']
                       for g in got),
                   'a pre-copy must read the whole version')
    checks.require_true(
        'precopy: every stored byte', all(
            g['bytes'] == stored for got in results['precopy']
            for g in got),
        'a pre-copy reads the whole %d-byte version' % stored)
    return {
        'size': stored, 'instances': args.instances,
        'measured_instances': measured, 'runs': args.runs,
        'touch': args.touch, 'divergence': args.divergence,
        'window': args.window, 'think_ms': args.think_ms,
        'trace_reads': len(trace_of(base)), 'profile_chunks': len(profile),
        'recorder': {'seconds': round(recorder['seconds'], 3),
                     'bytes': recorder['bytes']},
        'modes': out,
        'bytes_ratio': common.summary(
            [p['bytes'] / c['bytes'] for p, c in pairs]),
        'bytes_ratio_at_end_of_trace': common.summary(
            [p['bytes_at_end'] / c['bytes'] for p, c in pairs]),
        'time_ratio': common.summary(
            [p['seconds'] / c['seconds'] for p, c in pairs]),
        'lazy_time_ratio': common.summary(
            [p['seconds'] / c['seconds'] for p, c in lazy_pairs]),
        'checks': checks.as_list(),
    }


if __name__ == '__main__':
    sys.exit(worker(sys.argv[1:]))
