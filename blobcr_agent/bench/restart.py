"""``blobcr-bench restart``: lazy, lazy+prefetch and pre-copy restarts.

A version of ``--size`` random data is checkpointed. A first instance
attaches it, replays a read trace (a quarter of the chunks, in runs, as a
boot and a job restore would, with ``--think-ms`` of work between reads)
and detaches, which stores its first-read order with the version. Then,
each on a fresh cache:

* ``lazy``: attach without prefetch and replay the trace;
* ``lazy_prefetch``: attach (the prefetcher follows the stored order
  ahead of the guest) and replay the trace;
* ``precopy``: export the whole version to a local file first, then
  replay the trace on it.

For each: bytes read from the repository and seconds from attach to the
end of the trace. Ratios are lazy+prefetch over pre-copy.
"""

import os
import random
import tempfile
import time

from blobcr_agent.bench import harness

CHUNK = 256 * 1024


def make_trace(nchunks, seed):
    """Reads of 64 KiB over a quarter of the chunks, in short runs."""
    rng = random.Random(seed)
    trace, chosen = [], set()
    while len(chosen) < nchunks // 4:
        start = rng.randrange(nchunks)
        for c in range(start, min(start + rng.randint(1, 8), nchunks)):
            if c not in chosen:
                chosen.add(c)
                for part in range(0, CHUNK, 64 * 1024):
                    trace.append(c * CHUNK + part)
    return trace


def replay(path, trace, think):
    fd = os.open(path, os.O_RDONLY)
    try:
        for offset in trace:
            os.pread(fd, 64 * 1024, offset)
            if think:
                time.sleep(think)
    finally:
        os.close(fd)


def run(repo, backend_args, args, log):
    workdir = args.workdir
    nchunks = args.size // CHUNK
    header = repo.create_image('bench-restart', nchunks * CHUNK,
                               chunk_size=CHUNK)
    version = repo.commit(header.id, {i: os.urandom(CHUNK)
                                      for i in range(nchunks)})
    trace = make_trace(nchunks, args.seed)
    think = args.think_ms / 1000.0
    results = {}

    def attached_run(name, prefetch):
        mirror = harness.MirrorProcess(tempfile.mkdtemp(dir=workdir),
                                       backend_args).start()
        try:
            t0 = time.perf_counter()
            path = mirror.client.call('attach', image=header.id,
                                      version=version, prefetch=prefetch)
            replay(path, trace, think)
            elapsed = time.perf_counter() - t0
            fetched = mirror.client.call('stats',
                                         image=header.id)['fetched_bytes']
            mirror.client.call('detach', image=header.id, discard=True)
        finally:
            mirror.stop()
        results[name] = {'bytes': fetched, 'seconds': round(elapsed, 3)}
        log('%s: %s' % (name, results[name]))

    attached_run('recording', prefetch=False)     # stores the read order
    attached_run('lazy', prefetch=False)
    attached_run('lazy_prefetch', prefetch=True)

    local = os.path.join(workdir, 'precopy.raw')
    t0 = time.perf_counter()
    repo.export(header.id, version, local)
    replay(local, trace, think)
    elapsed = time.perf_counter() - t0
    stored = sum(len(data) for _, data in repo.fetch(repo.image(header.id),
                                                     version))
    os.unlink(local)
    results['precopy'] = {'bytes': stored, 'seconds': round(elapsed, 3)}
    log('precopy: %s' % results['precopy'])
    del results['recording']
    repo.delete_image(header.id)
    lp, pc = results['lazy_prefetch'], results['precopy']
    return {'size': nchunks * CHUNK, 'trace_reads': len(trace),
            'think_ms': args.think_ms, 'modes': results,
            'bytes_ratio': round(lp['bytes'] / pc['bytes'], 3),
            'time_ratio': round(lp['seconds'] / pc['seconds'], 3)}
