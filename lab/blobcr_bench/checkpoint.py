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

"""``blobcr-bench checkpoint``: the journal paper's synthetic benchmark,
and a workload of periodic checkpoints under continuous writes.

Synthetic benchmark (default). An application rewrites a region of its
image (``--size``) in blocks of ``--block``, calls CHECKPOINT, and at
once rewrites it again, so that its writes race with the persist of the
previous snapshot. The data is random and made before any timing (one
buffer, a new 4 KiB-shifted window per rewrite, see common.Pattern): the
persister gets no head start from a data generator. For every variant,
in the same run and taking turns (the order rotates from run to run):

* the four mirror modes (selective-cow, live-cow, live-precopy, offline)
  rewriting in ``--order`` (default sequential) as fast as they can
  (``--think-ms`` to pause after each block);
* selective-cow with the adaptive flush order (AI-Ckpt Algorithm 4) and
  with index order, rewriting in each ``--flush-workloads`` order
  (``random``: one fixed permutation of the blocks, the same in every
  epoch; ``reverse``), so the previous epoch's write order predicts the
  next one's, which the adaptive order exploits while index order meets
  the writer's chunks at random. These writers pause after each block
  so as to write at ``--flush-writer-share`` (0.6) of the persist
  throughput measured just before (the pause is the application's work:
  a write that waits delays the rest): a writer faster than the
  persister is throttled to it whatever the order (the copy-on-write
  buffer fills and every write waits), so only a slower one can show
  what the order does.

Reported per variant (medians over ``--runs`` with their spread):

* ``ack_ms``: CHECKPOINT request to acknowledgment, measured by the
  caller (it includes any wait for the previous persist);
* ``held_ms``: the part of it the mirror held writes still (the
  snapshot alone), as the mirror reports it (offline mode holds writes
  until the version is stable, which the mirror does not count as held:
  ``writes_held_ms`` is the ack time there);
* ``slowdown_s``: run time of the iterations minus that of the same
  iterations without checkpoints, measured just before (``run_s``,
  ``baseline_s``);
* ``to_stable_s``: CHECKPOINT to stable;
* the mirror's counters over the timed iterations: ``cow_copies``,
  ``redirects``, ``waits``, ``urgent``, ``avoided``; and
  ``overlapped_persists``, how many persists were still running when
  the next rewrite began.

Each variant proves its path ran: every persist but offline's must
overlap the next rewrite; selective-cow must have copied (and, with an
unthrottled writer, made writers wait), live-cow redirected, the index
order of a flush comparison met chunks not yet persisted, every
checkpoint held dirty chunks, offline returned only once stable. A zero
makes the run fail (``--head-start S`` waits S seconds after each
CHECKPOINT, which lets the persister finish first, as the old
benchmark's data generator did: it shows the checks firing).

``--downtime-sizes`` (default 64M and 1G): ack and held time of a
selective-cow CHECKPOINT with that much dirty, and their ratio.

Interval workload (``--interval [N]``, checkpoint_interval.py): a
writer writes random blocks of ``--write-size`` over a ``--image-size``
image without pause (one thread of buffered writes, or with
``--iodepth Q`` fio with Q O_DIRECT writes in flight, as a guest on
``cache=none``) while a CHECKPOINT is requested every N seconds
(default 2), for
``--checkpoints`` checkpoints. Per checkpoint: ack and held time, whether
it was refused Busy, how many earlier versions were still persisting when
it was requested (the persist backlog: versions, and the mirror's
``scheduled`` chunks not yet taken), and its time to stable; where the
mirror's time went (``phases_ms``: its checkpoint lock, the wait for
room in flight, registering the version in the repository, recording it
in the cache metadata, the snapshot itself, held; and, derived by the
benchmark, ``reserved_wait``, the wait for the version registered ahead,
and ``reply``, the caller's ack minus the mirror's); and the Busy counters
apart: refused by the room check before registering a version
(``busy_prechecked``), refused by the COMMIT after it (``busy_aborted``,
the version aborted), the core's refusals (``busy_full``,
``busy_gens``), and ``cut_writers``, writers blocked for copy-on-write
space that a COMMIT ordered after its snapshot instead of refusing;
``reservations_used``/``reservations_aborted``: versions registered
ahead that a checkpoint took, or that were aborted unused
(``phases_ms.reserved`` is 1 for a checkpoint that took one: its
``register`` is then only the wait for it, if it was still being
registered).
"""

import os
import random
import statistics
import time

from blobcr_agent.conf import agent as agent_conf
from blobcr_agent.repository import gc
from blobcr_bench import common
from blobcr_lab import agents

MODES = ('selective-cow', 'live-cow', 'live-precopy', 'offline')
ORDERS = ('sequential', 'reverse', 'random')
CHUNK = 256 * 1024
COUNTERS = ('cow_copies', 'redirects', 'redirects_nocopy', 'waits',
            'urgent', 'avoided', 'spilled', 'spill_full')


class Variant(object):
    def __init__(self, name, mode, adaptive, order):
        self.name = name
        self.mode = mode
        self.adaptive = adaptive
        self.order = order


def variants(args):
    out = [Variant(m, m, args.flush_order == 'adaptive', args.order)
           for m in args.modes]
    for order in args.flush_workloads:
        for adaptive in (True, False):
            out.append(Variant(
                'flush/%s/%s' % (order, 'adaptive' if adaptive
                                 else 'in-order'),
                'selective-cow', adaptive, order))
    return out


def block_order(nblocks, order, seed):
    blocks = list(range(nblocks))
    if order == 'reverse':
        blocks.reverse()
    elif order == 'random':
        random.Random(seed).shuffle(blocks)
    return blocks


def is_busy(error):
    text = str(error)
    return 'try again' in text or 'Busy' in text


class Subject(object):
    """One image attached in a mirror in one mode; writes go through the
    FUSE mount, CHECKPOINTs through the mirror's control socket.
    """

    def __init__(self, repo, mirror, name, size, mode, adaptive,
                 cow_chunks, pattern, stream=0):
        self.repo = repo
        self.mirror = mirror
        self.client = mirror.client
        self.size = size
        self.pattern = pattern
        self.stream = stream          # its own data (pattern's stream)
        self.header = repo.create_image('bench-' + name.replace('/', '-'),
                                        size, chunk_size=CHUNK)
        repo.commit(self.header.id, {})
        self.id = self.header.id
        path = self.client.call('attach', image=self.id, mode=mode,
                                adaptive=adaptive, cow_chunks=cow_chunks)
        self.path = path
        self.fd = os.open(path, os.O_RDWR)
        self.epoch = 0
        self.pace = None

    def write(self, offsets, block, think=0.0, rate=None):
        """Rewrite the blocks at ``offsets`` with data of a new epoch,
        pausing ``think`` s after each block (the application's work: a
        write that waits delays everything after it).
        """
        epoch = self.epoch
        self.epoch += 1
        for offset in offsets:
            os.pwrite(self.fd, self.pattern.block(offset, block, epoch,
                                                  self.stream), offset)
            if think:
                time.sleep(think)
            if rate is not None:
                rate.add(block)

    def checkpoint(self, client=None):
        """One CHECKPOINT, retried while Busy: ``ack_ms`` from the first
        request to the acknowledgment (what the caller waits),
        ``ack_last_attempt_ms`` the successful request alone, ``held_ms``
        as the mirror reports it.
        """
        client = client or self.client
        busy = 0
        requested = time.time()
        first = time.perf_counter()
        while True:
            t0 = time.perf_counter()
            try:
                reply = client.call('checkpoint', image=self.id)
                break
            except Exception as e:
                if not is_busy(e):
                    raise
                busy += 1
                time.sleep(0.02)
        now = time.perf_counter()
        return {'version': reply['version'], 'chunks': reply.get('chunks'),
                'ack_ms': (now - first) * 1000,
                'ack_last_attempt_ms': (now - t0) * 1000,
                'mirror_ack_ms': reply.get('downtime_ms'),
                'held_ms': reply.get('held_ms'), 'busy': busy,
                'phases_ms': reply.get('phases_ms') or {},
                'requested': requested, 'acked': time.time()}

    def settle(self, checkpoints):
        """Wait for every version to be stable; add ``to_stable_s``."""
        for cp in checkpoints:
            state = self.client.call('wait_stable', image=self.id,
                                     version=cp['version'])
            if state != 'stable':
                raise RuntimeError('version %d of %s is %s'
                                   % (cp['version'], self.id, state))
            t = self.client.call('timing', image=self.id,
                                 version=cp['version'])
            cp['to_stable_s'] = (t['done'] - t['committed']
                                 if 'done' in t and 'committed' in t
                                 else None)
            cp['stable_at'] = t.get('done')

    def stats(self):
        return self.client.call('stats', image=self.id)

    def close(self):
        os.close(self.fd)
        try:
            self.client.call('detach', image=self.id, discard=True)
        finally:
            self.repo.delete_image(self.id)


def add_buffer_arguments(p):
    """The copy-on-write buffer's options, as the agent's."""
    p.add_argument('--cow-chunks', type=int, default=64,
                   help='[agent] cow_chunks: copy-on-write slots in '
                        'memory (default 64)')
    p.add_argument('--cow-spill-mb', type=int,
                   default=agent_conf.DEFAULT_COW_SPILL_MB,
                   help='[agent] cow_spill_mb: MiB of disk for copies past '
                        'the memory ones (default %d; 0: memory only, as '
                        'before the spill file)'
                        % agent_conf.DEFAULT_COW_SPILL_MB)
    p.add_argument('--upload-ahead', type=float,
                   default=agent_conf.DEFAULT_UPLOAD_AHEAD_INTERVAL,
                   help='[agent] upload_ahead_interval: seconds between '
                        'rounds sending quiet dirty chunks ahead of the '
                        'next checkpoint (default %s; 0: only after it)'
                        % agent_conf.DEFAULT_UPLOAD_AHEAD_INTERVAL)


def new_mirror(workdir, backend_args, args, name='mirror'):
    path = os.path.join(workdir, name)
    os.makedirs(path, exist_ok=True)
    extra = ['--cow-chunks', str(args.cow_chunks),
             '--cow-spill-mb', str(args.cow_spill_mb),
             '--upload-ahead', str(getattr(
                 args, 'upload_ahead',
                 agent_conf.DEFAULT_UPLOAD_AHEAD_INTERVAL))]
    if getattr(args, 'delta_max_fraction', None) is not None:
        extra += ['--delta-max-fraction', str(args.delta_max_fraction)]
    if getattr(args, 'delta_pack_kb', None) is not None:
        extra += ['--delta-pack-kb', str(args.delta_pack_kb)]
    if getattr(args, 'durability', None):
        extra += ['--durability', args.durability]
    return agents.MirrorProcess(path, backend_args, extra)


def _delta(after, before, keys=COUNTERS):
    return {k: after.get(k, 0) - before.get(k, 0) for k in keys}


# -- the synthetic benchmark ------------------------------------------------

def _one_run(subject, variant, offsets, args, log):
    block = args.block
    think = args.block / subject.pace if subject.pace \
        else args.think_ms / 1000.0
    total = args.iterations * len(offsets) * block
    t0 = time.perf_counter()
    rate = log.rate('%s baseline' % variant.name, total)
    for _ in range(args.iterations):
        subject.write(offsets, block, think, rate)
    baseline = time.perf_counter() - t0
    rate.finish()
    cp = subject.checkpoint()
    subject.settle([cp])
    before = subject.stats()

    checkpoints = []
    rate = log.rate('%s timed' % variant.name, total)
    t0 = time.perf_counter()
    for _ in range(args.iterations):
        subject.write(offsets, block, think, rate)
        checkpoints.append(subject.checkpoint())
        if args.head_start:
            time.sleep(args.head_start)
    run = time.perf_counter() - t0 - args.head_start * args.iterations
    rate.finish()
    subject.settle(checkpoints)
    counters = _delta(subject.stats(), before)
    # The persist of a checkpoint raced with the next rewrite if it
    # ended after that rewrite began.
    overlapped = sum(1 for c in checkpoints[:-1]
                     if c['stable_at'] is not None and
                     c['stable_at'] > c['acked'] + args.head_start)
    return {
        'run_s': run, 'baseline_s': baseline, 'slowdown_s': run - baseline,
        'checkpoints': checkpoints, 'counters': counters,
        'overlapped_persists': overlapped,
        'stable_at_ack': all(c['stable_at'] is not None and
                             c['stable_at'] <= c['acked'] + 0.01
                             for c in checkpoints),
    }


def _per_run(runs, key):
    """Each run's median of a checkpoint figure: runs are the samples (a
    run's checkpoints share its conditions, so pooling them would weigh
    one noisy run as several).
    """
    medians = []
    for r in runs:
        values = [c[key] for c in r['checkpoints'] if c[key] is not None]
        medians.append(statistics.median(values) if values else None)
    return medians


def _aggregate(variant, runs, subject):
    cps = [c for r in runs for c in r['checkpoints']]
    out = {
        'mode': variant.mode, 'adaptive': variant.adaptive,
        'order': variant.order,
        'writer_pace_mib_s': round(subject.pace / common.MIB, 1)
        if subject.pace else None,
        # Summaries of the per-run medians.
        'ack_ms': common.summary(_per_run(runs, 'ack_ms'), 2),
        'held_ms': common.summary(_per_run(runs, 'held_ms'), 2),
        'mirror_ack_ms': common.summary(_per_run(runs, 'mirror_ack_ms'),
                                        2),
        'busy': sum(c['busy'] for c in cps),
        'to_stable_s': common.summary(_per_run(runs, 'to_stable_s')),
        'slowdown_s': common.summary([r['slowdown_s'] for r in runs]),
        'run_s': common.summary([r['run_s'] for r in runs]),
        'baseline_s': common.summary([r['baseline_s'] for r in runs]),
        'chunks_per_checkpoint': common.summary(_per_run(runs, 'chunks'),
                                                0),
        'counters': {k: [r['counters'][k] for r in runs] for k in COUNTERS},
        'overlapped_persists': [r['overlapped_persists'] for r in runs],
        'runs': [{'run_s': round(r['run_s'], 3),
                  'baseline_s': round(r['baseline_s'], 3),
                  'slowdown_s': round(r['slowdown_s'], 3),
                  'ack_ms': [round(c['ack_ms'], 2) for c in r['checkpoints']],
                  'held_ms': [c['held_ms'] for c in r['checkpoints']],
                  'counters': r['counters']} for r in runs],
    }
    if variant.mode == 'offline':
        # The core holds writes from the COMMIT until the version is
        # stable (checked: stable at acknowledgment), whatever part of
        # that the mirror counts as held.
        out['writes_held_ms'] = out['ack_ms']
    # Copied: chunks copied aside (selective-cow's buffer, live-cow's
    # redirects of a partial write); a whole-chunk write redirected by
    # live-cow copies nothing, so redirects are counted apart.
    c = [r['counters'] for r in runs]
    out['cow_bytes'] = [(x['cow_copies'] + x['redirects'] -
                         x['redirects_nocopy']) * CHUNK for x in c]
    out['redirected_bytes'] = [x['redirects'] * CHUNK for x in c]
    return out


def _check_variant(checks, variant, runs, args):
    name = variant.name
    counters = [r['counters'] for r in runs]
    chunks = min(c['chunks'] or 0 for r in runs for c in r['checkpoints'])
    checks.require('%s: dirty chunks per CHECKPOINT (min)' % name, chunks,
                   'every CHECKPOINT must snapshot the rewritten chunks')
    if variant.mode == 'offline':
        checks.require_true(
            '%s: stable at acknowledgment' % name,
            all(r['stable_at_ack'] for r in runs),
            'offline mode must return only once the version is stable')
        return
    checks.require(
        '%s: persists overlapping the next rewrite (min over runs)' % name,
        min(r['overlapped_persists'] for r in runs),
        'the rewrite must start while the previous version is still being '
        'persisted; every persist ended first')
    if name.startswith('flush/'):
        # Copies are what the adaptive order avoids: zero is its success.
        # Index order must meet chunks not yet persisted, or the two
        # orders cannot differ.
        if not variant.adaptive:
            checks.require(
                '%s: cow_copies + waits (min over runs)' % name,
                min(c['cow_copies'] + c['waits'] for c in counters),
                'in index order the writer must meet chunks not yet '
                'persisted; it never did, so the orders cannot differ')
    elif variant.mode == 'selective-cow':
        checks.require(
            '%s: cow_copies (min over runs)' % name,
            min(c['cow_copies'] for c in counters),
            'the writer must have rewritten chunks the persister had not '
            'taken yet; none were copied, so the copy-on-write path did not '
            'run (the persister finished first?)')
        memory = args.cow_chunks * CHUNK
        if args.expect_waits and not args.think_ms:
            if args.size > memory + (args.cow_spill_mb << 20):
                checks.require(
                    '%s: waits (min over runs)' % name,
                    min(c['waits'] for c in counters),
                    'an unthrottled writer rewriting more than the '
                    'copy-on-write buffer (memory and spill file) must '
                    'wait for the persister; it never did')
            elif args.size > memory and args.cow_spill_mb:
                checks.require(
                    '%s: spilled (min over runs)' % name,
                    min(c['spilled'] for c in counters),
                    'an unthrottled writer rewriting more than the memory '
                    'buffer must copy into the spill file; it never did')
    elif variant.mode == 'live-cow':
        checks.require(
            '%s: redirects (min over runs)' % name,
            min(c['redirects'] + c['redirects_nocopy'] for c in counters),
            'live-cow must redirect writes to chunks not yet persisted; '
            'none were')


def _downtime_pattern(args):
    """The downtime subject's data: its own random bytes (the local
    store's dedup would otherwise let it write the variants' for free),
    wrapped ``laps`` times over its largest size. Its epochs must not
    repeat a chunk either.
    """
    top = max(args.downtime_sizes)
    pattern = common.Pattern(args.size, laps=-(-top // args.size))
    epochs = 1 + args.runs * len(args.downtime_sizes)
    if epochs > pattern.epochs:
        raise SystemExit('--runs x --downtime-sizes too large: the '
                         'downtime subject would write %d epochs of up to '
                         '%d MiB, and a %d MiB pattern holds %d distinct '
                         'ones that large (raise --size or lower --runs)'
                         % (epochs, top >> 20, args.size >> 20,
                            pattern.epochs))
    return pattern


def _downtime(repo, mirror, args, pattern, log, checks):
    sizes = sorted(args.downtime_sizes)
    top = max(sizes)
    subject = Subject(repo, mirror, 'downtime', top, 'selective-cow', True,
                      args.cow_chunks, pattern)
    try:
        subject.write(range(0, top, args.block), args.block)
        subject.settle([subject.checkpoint()])
        samples = {s: [] for s in sizes}
        for r in range(args.runs):
            for size in (sizes if r % 2 == 0 else sizes[::-1]):
                rate = log.rate('downtime %d MiB' % (size >> 20), size)
                subject.write(range(0, size, args.block), args.block,
                              rate=rate)
                rate.finish()
                cp = subject.checkpoint()
                subject.settle([cp])
                samples[size].append(cp)
                log.event('downtime', dirty_mib=size >> 20,
                          ack_ms=round(cp['ack_ms'], 2),
                          held_ms=cp['held_ms'], chunks=cp['chunks'])
    finally:
        subject.close()
    out = {}
    for size in sizes:
        cps = samples[size]
        key = '%dmib' % (size >> 20)
        out[key] = {
            'ack_ms': common.summary([c['ack_ms'] for c in cps], 2),
            'held_ms': common.summary([c['held_ms'] for c in cps], 2),
            'chunks': [c['chunks'] for c in cps],
            'to_stable_s': common.summary([c['to_stable_s'] for c in cps]),
        }
        checks.require_true(
            'downtime %s: every chunk dirty' % key,
            all(c['chunks'] == size // CHUNK for c in cps),
            'a CHECKPOINT after rewriting %d MiB must hold %d chunks'
            % (size >> 20, size // CHUNK),
            value=[c['chunks'] for c in cps])
    if len(sizes) > 1:
        lo, hi = sizes[0], sizes[-1]
        per_run = [common.ratio(b['ack_ms'], a['ack_ms'])
                   for a, b in zip(samples[lo], samples[hi])]
        out['ack_ratio_%dmib_vs_%dmib' % (hi >> 20, lo >> 20)] = \
            common.summary(per_run)
        per_run = [common.ratio(b['held_ms'], a['held_ms'])
                   for a, b in zip(samples[lo], samples[hi])]
        out['held_ratio_%dmib_vs_%dmib' % (hi >> 20, lo >> 20)] = \
            common.summary(per_run)
    return out


def _paired(results, a, b, key):
    """Per-run ratio of ``key`` of variant a over variant b (same run)."""
    if a not in results or b not in results:
        return None
    values = [common.ratio(x[key], y[key])
              for x, y in zip(results[a], results[b])]
    return common.summary(values)


def run(repo, backend_args, args, log):
    if any(s % args.block for s in [args.size] + args.downtime_sizes):
        raise SystemExit('--size and --downtime-sizes must be multiples '
                         'of --block')
    workdir = args.workdir
    checks = common.Checks()
    log.event('generate', mib=args.size >> 20)
    chosen = variants(args)
    # Every variant writes data of its own (a stream), or the local
    # store's dedup would let all but the first write for free; and no
    # epoch of a subject repeats. The downtime subject has a pattern of
    # its own, wrapped over its largest size: wrapping this one would
    # divide the variants' distinct epochs by its laps.
    pattern = common.Pattern(args.size, streams=len(chosen))
    downtime_pattern = _downtime_pattern(args) \
        if args.downtime_sizes else None
    epochs = 1 + 2 * args.runs * args.iterations
    if epochs > pattern.epochs:
        raise SystemExit('--runs x --iterations too large: a variant would '
                         'write %d epochs, and the pattern holds %d distinct '
                         'ones' % (epochs, pattern.epochs))
    nblocks = args.size // args.block
    mirror = new_mirror(workdir, backend_args, args)
    subjects = {}
    persist_rates = []
    results = {v.name: [] for v in chosen}
    try:
        mirror.start()
        for v in chosen:
            s = subjects[v.name] = Subject(repo, mirror, v.name, args.size,
                                           v.mode, v.adaptive,
                                           args.cow_chunks, pattern,
                                           stream=len(subjects))
            s.write(range(0, args.size, args.block), args.block)
            cp = s.checkpoint()
            s.settle([cp])                        # every chunk present
            if v.name.startswith('flush/'):
                persist_rates.append(args.size / max(cp['to_stable_s'],
                                                     1e-3))
        if persist_rates and args.flush_writer_share:
            # Writes slower than the persist: the adaptive order can keep
            # the persister ahead of the writer. One pace for every flush
            # variant, so that their run times compare too.
            pace = args.flush_writer_share * statistics.median(persist_rates)
            for v in chosen:
                if v.name.startswith('flush/'):
                    subjects[v.name].pace = pace
            log.event('pace', persist_mib_s=round(
                statistics.median(persist_rates) / common.MIB, 1),
                writer_mib_s=round(pace / common.MIB, 1))
        for r in range(args.runs):
            k = r % len(chosen)
            for v in chosen[k:] + chosen[:k]:
                offsets = [b * args.block for b in
                           block_order(nblocks, v.order, args.seed)]
                res = _one_run(subjects[v.name], v, offsets, args, log)
                results[v.name].append(res)
                log.event('run', run=r + 1, variant=v.name,
                          slowdown_s=round(res['slowdown_s'], 3),
                          ack_ms=round(max(c['ack_ms'] for c in
                                           res['checkpoints']), 2),
                          **res['counters'])
        downtime = None
        if args.downtime_sizes:
            downtime = _downtime(repo, mirror, args, downtime_pattern, log,
                                 checks)
    finally:
        died = mirror.death()
        if died:
            log('the mirror died under the benchmark: %s' % died)
        for s in subjects.values():
            try:
                s.close()
            except Exception as e:
                log('cannot clean up %s: %s' % (s.id, e))
        mirror.stop()
        gc.collect(repo, grace=0)

    result = {
        'workload': 'synthetic', 'size': args.size, 'block': args.block,
        'iterations': args.iterations, 'runs': args.runs,
        'cow_chunks': args.cow_chunks,
        'cow_spill_mb': args.cow_spill_mb, 'think_ms': args.think_ms,
        'head_start_s': args.head_start,
        'flush_writer_share': args.flush_writer_share,
        'variants': {v.name: _aggregate(v, results[v.name],
                                        subjects[v.name]) for v in chosen},
    }
    for v in chosen:
        _check_variant(checks, v, results[v.name], args)
    ratios = {}
    for other in ('live-cow', 'offline'):
        value = _paired(results, 'selective-cow', other, 'slowdown_s')
        if value:
            ratios['slowdown_selective_vs_' + other.replace('-', '_')] = value
    for order in args.flush_workloads:
        a, b = 'flush/%s/adaptive' % order, 'flush/%s/in-order' % order
        for key in ('slowdown_s', 'run_s'):
            ratios['%s_%s_adaptive_vs_in_order' % (order, key)] = \
                _paired(results, a, b, key)
    result['ratios'] = ratios
    if downtime:
        result['downtime'] = downtime
    result['checks'] = checks.as_list()
    if args.plot:
        plot(result, args.plot)
    return result


# -- pictures ---------------------------------------------------------------

def _bars(ax, names, summaries, title, color):
    med = [s['median'] if s else 0 for s in summaries]
    lo = [m - (s['p10'] if s else 0) for m, s in zip(med, summaries)]
    hi = [(s['p90'] if s else 0) - m for m, s in zip(med, summaries)]
    bars = ax.bar(names, med, yerr=[lo, hi], capsize=3, color=color)
    ax.set_title(title, fontsize=10)
    ax.tick_params(axis='x', labelrotation=30, labelsize=8)
    for bar, value in zip(bars, med):
        ax.annotate('%.3g' % value, (bar.get_x() + bar.get_width() / 2,
                                     bar.get_height()),
                    ha='center', va='bottom', fontsize=7)


def plot(result, path):
    """Per variant: ack, held, slowdown, to stable (medians, p10-p90)."""
    import matplotlib
    matplotlib.use('Agg')
    from matplotlib import pyplot

    names = list(result['variants'])
    v = result['variants']
    panels = [('ack_ms', 'CHECKPOINT request to ack (ms)', '#2a7ab9'),
              ('held_ms', 'writes held (ms; offline: until stable)',
               '#8e6bbf'),
              ('slowdown_s', 'application slowdown (s)', '#d9822b'),
              ('to_stable_s', 'CHECKPOINT to stable (s)', '#999999')]
    fig, axes = pyplot.subplots(1, len(panels), figsize=(16, 4.5))
    for ax, (key, title, color) in zip(axes, panels):
        if key == 'held_ms':        # offline holds writes until stable
            values = [v[n].get('writes_held_ms') or v[n][key] for n in names]
        else:
            values = [v[n][key] for n in names]
        _bars(ax, names, values, title, color)
        if key in ('ack_ms', 'held_ms'):
            ax.set_yscale('log')
    fig.suptitle('blobcr-bench checkpoint: %d MiB rewritten per iteration, '
                 '%d iterations, %d runs (bars: median, whiskers: p10-p90)'
                 % (result['size'] >> 20, result['iterations'],
                    result['runs']))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
