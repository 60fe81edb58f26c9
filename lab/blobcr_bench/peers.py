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

"""``blobcr-bench peers``: BlobCR side by side with the live checkpoints
users have today, on the same workload, in one invocation.

Peers (``--peers``, default all; one that cannot run here says what
refused and the others run):

* ``blobcr-local``, ``blobcr-ceph``: BlobCR's selective copy-on-write
  mirror on the local store and on the micro Ceph cluster (data in its
  erasure-coded pool); writes through the FUSE mirror, CHECKPOINT on
  the mirror's control socket; durable when the version is stable.
* ``blobcr-ceph-loop``: ``blobcr-ceph`` written as a guest on stock Nova
  writes: O_DIRECT through a loop device (direct I/O) over the mirror
  file, the block device Nova hands QEMU (cache=none) for the driver's
  'local' connection.
* ``qemu-backup``: qemu-storage-daemon, a persistent dirty bitmap and
  ``blockdev-backup sync=incremental`` per checkpoint (peers_qemu.py).
* ``rbd-snap``, ``rbd-snap-rep``: an RBD image (its data in an EC pool
  shaped like BlobCR's, or all in a replicated pool), librbd's cache off
  as with Nova's cache=none (``--rbd-cache writeback``: on), ``rbd snap
  create`` per checkpoint and ``rbd export-diff`` as copy-out
  (peers_rbd.py).
* ``rbd-snap-wb``: ``rbd-snap-rep`` with librbd's writeback cache
  (QEMU's cache=writeback), whatever ``--rbd-cache`` says.
* ``qcow2-layers``: external qcow2 snapshots, each closed layer copied
  out (peers_qemu.py), the naive baseline.

Every peer but RBD keeps 256 KiB granularity (BlobCR's chunk, the
bitmap's granularity, the qcow2 clusters). RBD images have RBD's
default 4 MiB objects (``--rbd-object-size``), as its operators run it:
smaller objects made each 1 MiB write span several and each first write
after a snapshot pay an OSD clone of each (issue 55).

Workloads (``--workloads``): ``checkpoint``, the checkpoint benchmark's
(rewrite ``--size`` in ``--block`` blocks in order, pass after pass),
``random4k`` (``--random-writes`` 4 KiB writes at fixed random offsets,
pass after pass) and ``paced`` (the checkpoint workload's writes at a
fixed ``--paced-mib-s``, below the store's bandwidth, so that a pass,
and the interval between checkpoints, lasts a few seconds: where a
checkpoint can be safe early). The data is common.Pattern's, made before
any timing. On Ceph, each paced run also reports the bytes the OSDs received
from clients while the timed passes ran and were persisted
(``osd_in_bytes``, the OSDs' ``op_in_bytes`` counters, all clients of
the cluster), and their ratio to what the checkpoints stored.

The application keeps ``--queue-depth`` writes in flight (8, as QEMU
issues a guest's requests: librbd's aio for RBD, threads writing the
FUSE file for the others) and ends each pass when its writes completed.
One run of a peer: a fresh disk filled with incompressible data (a
used disk; ``--no-prefill``: left zero), one pass and a full checkpoint
(not timed), ``--iterations + 1`` passes without checkpoints (the baseline),
then as many with a checkpoint requested at the end of each pass but
the last while the application goes on writing, on a thread of its own.
Per checkpoint:

* ``ack_ms``: request to acknowledgment (the point in time is fixed);
* ``pause_ms``: the guest-visible pause, the longest write of the
  application that overlapped the request-to-ack window (beside
  ``baseline_write_p99_ms``, the same writes without checkpoints);
  ``pause_to_durable_ms`` and ``write_p99_to_durable_ms``: the longest
  write and the 99th percentile of the writes over the whole
  request-to-durable window (copy-before-write stalls, a full
  copy-on-write buffer);
* ``durable_s``: request to the copy being durable where the peer keeps
  it (``durable_at`` says where); RBD's ``copy_out_s`` apart;
* ``stored_bytes`` per checkpoint (the bytes the peer wrote to its
  store: BlobCR's objects as its repository counts them, the backup
  target's or layer copy's allocated bytes, the export-diff file) and
  in total with the first (full) copy; and per run ``slowdown_s`` (run
  time minus the baseline's), ``run_over_baseline`` (their ratio) and
  ``restart_s``: open the last checkpoint as a restart does and read
  every block the workload writes. What a restart finds running is
  started before the timing on every side (BlobCR: a second mirror,
  which attaches the version lazily; QEMU, qcow2: an empty daemon,
  which opens the copied chain and exports it; RBD: a connected client,
  which opens the image at its snapshot). The
  data read must be a point in time of the application's writes (every
  block of a pass, then a prefix of the next one), or the restart is
  counted inconsistent.

``ratios`` divide each peer's per-run medians by BlobCR's of the same
run (``vs_blobcr_local``, ``vs_blobcr_ceph``). The peers run in a random
order in each run and workload, drawn from ``--seed`` and recorded
(``order``). Each peer proves its
path ran: the bytes its copy-out copied (BlobCR's chunks, the backup
job's progress, the export-diff's bytes, the layer copied), writes
overlapping each checkpoint, a consistent restart, and BlobCR's
copy-on-write (copies or waits); a zero makes the run invalid.
"""

import argparse
import copy
import json
import mmap
import os
import random
import shutil
import threading
import time

from blobcr_agent.repository import gc
from blobcr_bench import checkpoint
from blobcr_bench import common
from blobcr_bench import peers_common
from blobcr_lab import agents
from blobcr_lab import ceph
from blobcr_lab import loopdev

PEERS = ('blobcr-local', 'blobcr-ceph', 'blobcr-ceph-loop', 'qemu-backup',
         'rbd-snap', 'rbd-snap-rep', 'rbd-snap-wb', 'qcow2-layers')
WORKLOADS = ('checkpoint', 'random4k', 'paced')
REFERENCES = ('blobcr-local', 'blobcr-ceph')
RATIO_KEYS = ('ack_ms', 'pause_ms', 'pause_to_durable_ms', 'slowdown_s',
              'run_over_baseline', 'durable_s', 'stored_bytes', 'restart_s')
SMALL_WRITE = 4096
# BlobCR's counters per run: copy-on-write, and the sub-chunk deltas its
# persister stored.
# ahead_*: chunks sent ahead of a checkpoint (mirror/upload_ahead.py),
# their bytes, those the persists linked instead of putting them, and of
# those, the ones known unchanged since (not hashed again).
# objects_put, deltas_packed, delta_packs, pack_moved: what the persists
# put (repository/chunkpacks.py).
COUNTERS = checkpoint.COUNTERS + ('deltas_stored', 'ahead_chunks',
                                  'ahead_bytes', 'ahead_used',
                                  'ahead_unhashed', 'objects_put',
                                  'deltas_packed', 'delta_packs',
                                  'pack_moved')
SUN_PATH = 108          # a Unix socket's path, its NUL included


def add_arguments(p, size_type=int):
    p.add_argument('--peers', nargs='+', choices=PEERS, default=list(PEERS))
    p.add_argument('--workloads', nargs='+', choices=WORKLOADS,
                   default=list(WORKLOADS))
    p.add_argument('--late-runs', choices=['drop', 'keep'], default='drop',
                   help='a run with a checkpoint acknowledged after the '
                        'workload\'s last write is invalid: dropped from '
                        'the figures and failing the checks (default), or '
                        'kept, still listed under invalid_runs (for '
                        'scaled-down passes too short to outlast an ack)')
    p.add_argument('--paced-mib-s', type=float, default=32.0,
                   help='write rate of the paced workload (default 32 MiB/s: '
                        'a 128 MiB pass every 4 s)')
    p.add_argument('--size', type=size_type, default=128 << 20,
                   help='disk size and bytes rewritten per pass of the '
                        'checkpoint workload (default 128M)')
    p.add_argument('--block', type=size_type, default=1 << 20,
                   help='write size of the checkpoint workload (1M)')
    p.add_argument('--random-writes', type=int, default=4096,
                   help='4 KiB writes per pass of random4k (default 4096)')
    p.add_argument('--iterations', type=int, default=3,
                   help='checkpoints per run (default 3)')
    p.add_argument('--runs', type=int, default=3)
    checkpoint.add_buffer_arguments(p)
    p.add_argument('--rbd-pool', default='blobcr-peers-rbd',
                   help='replicated pool of the RBD image (made if '
                        'missing)')
    p.add_argument('--rbd-data-pool', default='blobcr-peers-ec',
                   help='erasure-coded data pool of the RBD image, made '
                        'with overwrites on if missing (empty: none)')
    p.add_argument('--rbd-cache', choices=['writeback', 'off'],
                   default='off',
                   help='librbd cache of the application\'s client: off, '
                        'as with Nova\'s default cache mode none (the '
                        'default here), or on, as QEMU sets it with '
                        'cache=writeback')
    p.add_argument('--rbd-object-size', type=size_type, default=4 << 20,
                   help='object size of the RBD images (default 4M, RBD\'s '
                        'own default)')
    p.add_argument('--queue-depth', type=int, default=8,
                   help='the application\'s writes in flight at once, '
                        'as QEMU issues a guest\'s (default 8): librbd\'s '
                        'aio for RBD, threads writing the FUSE file for '
                        'BlobCR and the QEMU peers')
    p.add_argument('--readahead-chunks', type=int, default=64,
                   help='readahead of the BlobCR mirror that restarts '
                        '(the agent\'s [agent] readahead_chunks; 0: off)')
    p.add_argument('--prefill', action=argparse.BooleanOptionalAction,
                   default=True,
                   help='fill the whole disk with incompressible data '
                        'before the first pass, as a used disk is, so '
                        'that a small write lands among data (default; '
                        '--no-prefill: a fresh, zero disk)')
    p.add_argument('--delta-max-fraction', type=float, default=None,
                   help='BlobCR\'s [repository] delta_max_fraction (0: '
                        'whole chunks only; default: the option\'s)')
    p.add_argument('--delta-pack-kb', type=int, default=None,
                   help='BlobCR\'s [repository] delta_pack_max_kb (0: '
                        'each delta an object with a link; default: the '
                        'option\'s)')
    p.add_argument('--seed', type=int, default=42)
    p.add_argument('--plot', help='write a PNG of the results here')


class Workload(object):
    """``interval``: seconds from one write's submission to the next
    (a paced writer), None: as fast as the queue takes them.
    """

    def __init__(self, name, block, offsets, interval=None, stream=0):
        self.name = name
        self.block = block
        self.offsets = offsets
        self.interval = interval
        # Its own random data (common.Pattern's stream): the paced
        # workload writes where the checkpoint workload does, and a
        # deduplicating store must not get its chunks for free.
        self.stream = stream

    @property
    def bytes_per_pass(self):
        return self.block * len(self.offsets)


def workloads(args):
    out = []
    for name in args.workloads:
        if name in ('checkpoint', 'paced'):
            nblocks = args.size // args.block
            interval = None
            if name == 'paced':
                if args.paced_mib_s <= 0:
                    raise SystemExit('--paced-mib-s must be positive')
                interval = args.block / (args.paced_mib_s * (1 << 20))
            out.append(Workload(name, args.block, [
                b * args.block for b in
                checkpoint.block_order(nblocks, 'sequential', args.seed)],
                interval, stream=1 if name == 'paced' else 0))
        else:
            slots = args.size // SMALL_WRITE
            if args.random_writes > slots:
                raise SystemExit('--random-writes: at most %d in --size'
                                 % slots)
            picked = random.Random(args.seed).sample(range(slots),
                                                     args.random_writes)
            out.append(Workload(name, SMALL_WRITE,
                                [s * SMALL_WRITE for s in picked]))
    return out


# -- BlobCR ------------------------------------------------------------------

class BlobcrPeer(peers_common.Peer):
    """BlobCR's selective-cow mirror; a second mirror restarts."""

    durable_at = 'version stable in the store'

    def __init__(self, args, name, backend, open_repository):
        super().__init__(args)
        self.name = name
        if backend == 'rados' and not os.path.exists(args.ceph_conf):
            raise peers_common.PeerRefused('no Ceph cluster: %s is missing'
                                           % args.ceph_conf)
        ns = copy.copy(args)
        ns.backend = backend
        self.workdir = os.path.join(args.workdir, name)
        os.makedirs(self.workdir)
        self.repo = open_repository(ns, self.workdir)
        store = agents.store_args(self.repo.backend)
        self.mirror = checkpoint.new_mirror(self.workdir, store, args)
        self.mirror.start()
        restart_dir = os.path.join(self.workdir, 'restart')
        os.makedirs(restart_dir)
        self.restarter = agents.MirrorProcess(
            restart_dir, store,
            ['--readahead-chunks', str(args.readahead_chunks)])
        self.restarter.start()
        self.subject = None
        self.count = 0

    def open(self, workdir, size):
        self.count += 1
        self.subject = checkpoint.Subject(
            self.repo, self.mirror, '%s-%d' % (self.name, self.count), size,
            'selective-cow', True, self.args.cow_chunks, None)
        self.fd = self.subject.fd
        self.index = 0

    def write(self, offset, data):
        os.pwrite(self.fd, data, offset)

    def checkpoint(self):
        t0 = time.perf_counter()
        reply = self.subject.checkpoint()
        cp = self.acked(t0, index=self.index, version=reply['version'],
                        held_ms=reply['held_ms'], chunks=reply['chunks'],
                        requested=reply['requested'])
        self.index += 1
        return cp

    def settle(self, checkpoints):
        self.subject.settle(checkpoints)
        header = self.repo.image(self.subject.id)
        for cp in checkpoints:
            # Copied: the chunks the version persisted; stored: the bytes
            # of the objects it wrote (compressed chunks, tree nodes), as
            # the repository counted them.
            cp.update(durable_s=cp['stable_at'] - cp['requested'],
                      copied_bytes=(cp['chunks'] or 0) * checkpoint.CHUNK,
                      stored_bytes=header.version(cp['version'])
                      .stored_bytes)

    def counters(self):
        return self.subject.stats()

    def restart_open(self, cp):
        return _MirrorReader(self.restarter.client, self.subject.id,
                             cp['version'])

    def osd_counters(self):
        if self.repo.backend.name != 'rados':
            return None
        return ceph.osd_counters(self.args.ceph_conf)

    def check_runs(self, checks, workload, runs):
        # The checkpoint workload's restart reads the disk in order, in
        # 1 MiB blocks: the sequential reader readahead is for.
        if workload in ('checkpoint', 'paced') and \
                self.args.readahead_chunks:
            checks.require(
                '%s/%s: chunks read ahead by the restart, per run (min)'
                % (self.name, workload),
                min(r['restart_counters'].get('readahead_chunks', 0)
                    for r in runs),
                'a restart that reads the disk in order must have the '
                'mirror read ahead ([agent] readahead_chunks) in every '
                'run; one did not')
        # A pass must leave chunks quiet for some rounds before its
        # checkpoint (the CI form's 16 MiB at 64 MiB/s takes 0.25 s).
        pass_s = self.args.size / (self.args.paced_mib_s * (1 << 20))
        if workload == 'paced' and self.args.upload_ahead and \
                pass_s >= 20 * self.args.upload_ahead:
            checks.require(
                '%s/paced: chunks a persist linked after they were sent '
                'ahead, per run (min)' % self.name,
                min(r['counters'].get('ahead_used', 0) for r in runs),
                'a writer slower than the store leaves chunks quiet '
                'before each checkpoint: [agent] upload_ahead_interval '
                'must send some ahead in every run; a run linked none')

    def close(self):
        if self.subject is not None:
            self.subject.close()
            self.subject = None

    def shutdown(self):
        for m in (self.restarter, self.mirror):
            m.stop()
        gc.collect(self.repo, grace=0)
        self.repo.close()

    def describe(self):
        return {'backend': self.repo.backend.name,
                'chunk': checkpoint.CHUNK,
                'cow_chunks': self.args.cow_chunks,
                'cow_spill_mb': self.args.cow_spill_mb,
                'upload_ahead_interval': self.args.upload_ahead,
                'readahead_chunks': self.args.readahead_chunks}


class BlobcrLoopPeer(BlobcrPeer):
    """BlobCR written through a loop device over the mirror file, with
    O_DIRECT, as QEMU with cache=none writes the block device stock Nova
    opens for the driver's 'local' connection.
    """

    def __init__(self, args, name, backend, open_repository):
        if not loopdev.available():
            raise peers_common.PeerRefused('no loop devices on this host')
        super().__init__(args, name, backend, open_repository)
        self.device = self.device_fd = None
        self.buffers = threading.local()
        # Bytes the loop device wrote, by run (its work directory's name).
        self.device_written = {}

    def open(self, workdir, size):
        super().open(workdir, size)
        self.run_name = os.path.basename(workdir)
        self.device = loopdev.attach(self.subject.path)
        # (A loop device's counts go on from its earlier uses.)
        self.written_before = loopdev.written(self.device)
        self.device_fd = os.open(self.device, os.O_RDWR | os.O_DIRECT)

    def write(self, offset, data):
        # O_DIRECT wants an aligned buffer: one per writing thread.
        buf = getattr(self.buffers, 'buf', None)
        if buf is None or len(buf) < len(data):
            buf = self.buffers.buf = mmap.mmap(-1, max(len(data), 1 << 20))
        buf[:len(data)] = data
        with memoryview(buf) as view:
            os.pwrite(self.device_fd, view[:len(data)], offset)

    def close(self):
        if self.device_fd is not None:
            os.close(self.device_fd)
            self.device_fd = None
        if self.device is not None:
            self.device_written[self.run_name] = \
                loopdev.written(self.device) - self.written_before
            loopdev.detach(self.device)
            self.device = None
        super().close()

    def check_runs(self, checks, workload, runs):
        super().check_runs(checks, workload, runs)
        written = [n for run, n in self.device_written.items()
                   if run.startswith('%s-%s-' % (self.name, workload))]
        # Each run writes the whole disk at least once (its fill).
        checks.require_true(
            '%s/%s: bytes the loop device wrote, per run (min), at least '
            'the disk' % (self.name, workload),
            written and min(written) >= self.args.size,
            'the application must write through the loop device',
            value=min(written) if written else None)

    def describe(self):
        return dict(super().describe(), path='loop device, direct I/O, '
                    'written with O_DIRECT')


class _MirrorReader(object):
    def __init__(self, client, image, version):
        self.client = client
        self.image = image
        t0 = time.perf_counter()
        path = client.call('attach', image=image, version=version,
                           prefetch=False)
        self.attach_ms = (time.perf_counter() - t0) * 1000
        self.fd = os.open(path, os.O_RDONLY)

    def read(self, offset, length):
        return os.pread(self.fd, length, offset)

    def close(self):
        """Detach; this restart's trace: the attach, the mirror's
        readahead and fetch counters, and where its fetches' time went
        (``fetch_ms``: summed over the fetching threads, which overlap).
        """
        os.close(self.fd)
        stats = self.client.call('stats', image=self.image)
        self.client.call('detach', image=self.image, discard=True)
        return {'readahead_chunks': stats.get('readahead_chunks', 0),
                'attach_ms': round(self.attach_ms, 1),
                'read_fetches': stats.get('read_fetches', 0),
                'fetched_chunks': stats.get('fetched_chunks', 0),
                'fetch_ms': stats.get('fetch_ms', {})}


def make_peer(name, args, open_repository):
    if name == 'blobcr-local':
        return BlobcrPeer(args, name, 'local', open_repository)
    if name == 'blobcr-ceph':
        return BlobcrPeer(args, name, 'rados', open_repository)
    if name == 'blobcr-ceph-loop':
        return BlobcrLoopPeer(args, name, 'rados', open_repository)
    if name in ('rbd-snap', 'rbd-snap-rep', 'rbd-snap-wb'):
        from blobcr_bench import peers_rbd
        return {'rbd-snap': peers_rbd.RbdPeer,
                'rbd-snap-rep': peers_rbd.ReplicatedRbdPeer,
                'rbd-snap-wb': peers_rbd.WritebackRbdPeer}[name](args)
    from blobcr_bench import peers_qemu
    why = peers_qemu.refusal()
    if why:
        raise peers_common.PeerRefused(why)
    cls = {'qemu-backup': peers_qemu.QemuBackupPeer,
           'qcow2-layers': peers_qemu.Qcow2LayersPeer}[name]
    return cls(args)


# -- the application ---------------------------------------------------------

class Writer(threading.Thread):
    """The application: ``passes`` passes of the workload from epoch
    ``epoch`` with up to ``depth`` writes in flight (the peer's queue),
    each write timed from submission to completion; a pass ends when
    its writes completed (as an application syncs its checkpoint file),
    and ``ends`` gets its number (the orchestrator checkpoints then,
    while the next pass goes on).
    """

    def __init__(self, peer, workload, pattern, epoch, passes, rate=None,
                 depth=1):
        super().__init__(name='peers-writer', daemon=True)
        self.peer = peer
        self.workload = workload
        self.pattern = pattern
        self.epoch = epoch
        self.passes = passes
        self.rate = rate
        self.ends = []
        self.ended = threading.Condition()
        self.writes = []          # (start, seconds), perf_counter
        self.depth = depth
        self.error = None
        self.elapsed = None

    def _done(self, start):
        # From the peer's completion thread; list.append is atomic.
        self.writes.append((start, time.perf_counter() - start))

    def run(self):
        block = self.workload.block
        interval = self.workload.interval
        t0 = time.perf_counter()
        queue = self.peer.queue(self.depth)
        n = 0
        try:
            for p in range(self.passes):
                epoch = self.epoch + p
                for offset in self.workload.offsets:
                    data = self.pattern.block(offset, block, epoch,
                                              self.workload.stream)
                    if interval is not None:
                        # On a fixed schedule: a late write does not
                        # push the ones after it back.
                        ahead = t0 + n * interval - time.perf_counter()
                        if ahead > 0:
                            time.sleep(ahead)
                        n += 1
                    start = time.perf_counter()
                    queue.submit(offset, data,
                                 lambda start=start: self._done(start))
                    if self.rate is not None:
                        self.rate.add(block)
                queue.drain()
                with self.ended:
                    self.ends.append(p)
                    self.ended.notify_all()
        except Exception as e:
            self.error = e
            with self.ended:
                self.ended.notify_all()
        finally:
            try:
                queue.close()
            except Exception as e:
                self.error = self.error or e
        self.elapsed = time.perf_counter() - t0

    def wait_pass(self, p):
        with self.ended:
            while p not in self.ends and self.error is None:
                self.ended.wait()
        if self.error is not None:
            raise self.error

    def finish(self):
        self.join()
        if self.error is not None:
            raise self.error
        return self.elapsed

    def longest_in(self, t0, t1):
        """The longest write overlapping [t0, t1] (None if none did)."""
        hit = [d for s, d in self.writes if s < t1 and s + d > t0]
        return max(hit) if hit else None

    def p99_in(self, t0, t1):
        """The 99th percentile of the writes overlapping [t0, t1]."""
        hit = sorted(d for s, d in self.writes if s < t1 and s + d > t0)
        return common.percentile(hit, 99) if hit else None


def state_epoch(read_blocks, expected, window=1):
    """The epoch E such that the blocks read are a point in time of the
    application with up to ``window`` writes in flight. ``expected(k,
    epoch)`` is block k's data in that epoch; blocks are in write order.

    Every block after the last block of E holds E - 1. Before it, the
    blocks that do not hold E yet are writes that were in flight: they
    hold E - 1, or part of E page by page (a torn write), and they were
    in flight together with that last block, so there are at most
    ``window - 1`` of them (none with one write at a time: a prefix);
    the last block of E may itself be torn. None if the blocks are no
    such state.
    """
    n = len(read_blocks)
    for epoch in range(expected.low, expected.high + 1):
        new = [read_blocks[j] == expected(j, epoch) for j in range(n)]
        reached = [new[j] or _torn(read_blocks[j], expected(j, epoch),
                                   expected(j, epoch - 1))
                   for j in range(n)]
        written = [j for j in range(n) if new[j] or (
            reached[j] and read_blocks[j] != expected(j, epoch - 1))]
        if not written:
            continue
        last = written[-1]
        if any(read_blocks[j] != expected(j, epoch - 1)
               for j in range(last + 1, n)):
            continue
        holes = [j for j in range(last) if not new[j]]
        if len(holes) <= window - 1 and all(reached[j] for j in holes):
            return epoch
    return None


PAGE = 4096     # what a disk writes atomically (a sector's page)


def _torn(block, new, old):
    """``block`` is, page by page, either ``new`` or ``old``: a write in
    flight at the point in time that reached part of its pages.
    """
    block, new, old = bytes(block), bytes(new), bytes(old)
    return len(block) == len(new) and all(
        block[k:k + PAGE] in (new[k:k + PAGE], old[k:k + PAGE])
        for k in range(0, len(block), PAGE))


def describe_state(read_blocks, expected):
    """What each block read is, run-length coded: ``[(epoch or 'torn E'
    or '?', count), ...]``, to say why a restart was no point in time.
    """
    out = []
    epochs = range(expected.high, expected.low - 2, -1)
    for k, block in enumerate(read_blocks):
        what = next((e for e in epochs if block == expected(k, e)), None)
        if what is None:
            what = next(('torn %d' % e for e in epochs if _torn(
                block, expected(k, e), expected(k, e - 1))), '?')
        if out and out[-1][0] == what:
            out[-1][1] += 1
        else:
            out.append([what, 1])
    return out


class _Expected(object):
    def __init__(self, pattern, workload, low, high):
        self.pattern = pattern
        self.workload = workload
        self.low = low
        self.high = high

    def __call__(self, k, epoch):
        return self.pattern.block(self.workload.offsets[k],
                                  self.workload.block, epoch,
                                  self.workload.stream)


def _prefill(peer, size, block=1 << 20):
    """A used disk: incompressible data everywhere, made here (not
    timed) so that no store deduplicates it against another peer's.
    """
    for offset in range(0, size, block):
        peer.write(offset, os.urandom(min(block, size - offset)))


def one_run(peer, workload, pattern, args, epoch, run, log):
    """One run of ``peer``; ``epoch`` is the first epoch it may use
    (it uses ``2 * (iterations + 1) + 1``).
    """
    passes = args.iterations + 1
    workdir = os.path.join(args.workdir, 'runs', '%s-%s-%d'
                           % (peer.name, workload.name, run))
    os.makedirs(workdir)
    peer.open(workdir, args.size)
    try:
        depth = args.queue_depth
        if getattr(args, 'prefill', False):
            _prefill(peer, args.size)
        fill = Writer(peer, workload, pattern, epoch, 1, depth=depth)
        fill.start()
        fill.finish()
        full = peer.checkpoint()
        peer.settle([full])

        base = Writer(peer, workload, pattern, epoch + 1, passes,
                      log.rate('%s %s baseline' % (peer.name, workload.name),
                               passes * workload.bytes_per_pass),
                      depth=depth)
        base.start()
        baseline_s = base.finish()
        base.rate.finish()

        before = peer.counters()
        # Bytes sent, on the paced workload (where a checkpoint may be
        # safe early by sending ahead): each sample asks every OSD.
        osd_before = peer.osd_counters() \
            if workload.interval is not None else None
        first = epoch + 1 + passes
        timed = Writer(peer, workload, pattern, first, passes,
                       log.rate('%s %s timed' % (peer.name, workload.name),
                                passes * workload.bytes_per_pass),
                       depth=depth)
        timed.start()
        cps = []
        for p in range(passes - 1):
            timed.wait_pass(p)
            cp = peer.checkpoint()
            cp['after_epoch'] = first + p
            cps.append(cp)
        run_s = timed.finish()
        timed.rate.finish()
        done = max(start + d for start, d in timed.writes)
        peer.settle(cps)
        counters = checkpoint._delta(peer.counters(), before, COUNTERS) \
            if before else {}
        osd_in = None if osd_before is None else \
            peer.osd_counters()['op_in_bytes'] - osd_before['op_in_bytes']

        for cp in cps:
            cp['pause_ms'] = _ms(timed.longest_in(cp['t_req'], cp['t_ack']))
            # Over the whole request-to-durable window too: a copy-before-
            # write stall or a full copy-on-write buffer shows there.
            durable_at = cp['t_req'] + cp['durable_s']
            cp['pause_to_durable_ms'] = _ms(timed.longest_in(
                cp['t_req'], durable_at))
            cp['write_p99_to_durable_ms'] = _ms(timed.p99_in(
                cp['t_req'], durable_at))
        last = cps[-1]
        peer.restart_prepare(last)
        t0 = time.perf_counter()
        reader = peer.restart_open(last)
        try:
            data = [reader.read(off, workload.block)
                    for off in workload.offsets]
            restart_s = time.perf_counter() - t0
        finally:
            restart_counters = reader.close() or {}
        expected = _Expected(pattern, workload, first, first + passes - 1)
        got = state_epoch(data, expected, window=depth)
        state = describe_state(data, expected)
        torn = sum(n for what, n in state if str(what).startswith('torn'))
        if got is None:
            log.event('no point in time', peer=peer.name,
                      workload=workload.name, run=run + 1,
                      after_epoch=last['after_epoch'],
                      blocks=json.dumps(state))
    finally:
        peer.close()
    # Its figures are taken: its disks and copies go (the six peers' 54
    # runs of the defaults filled a 90 GB disk when kept to the end). A
    # failed run's stay until the scratch directory goes (cli.py keeps
    # it with BLOBCR_BENCH_KEEP=1).
    shutil.rmtree(workdir, ignore_errors=True)
    base_lat = sorted(d for _, d in base.writes)
    result = {
        'run_s': run_s, 'baseline_s': baseline_s,
        'slowdown_s': run_s - baseline_s,
        'baseline_write_p99_ms': _ms(common.percentile(base_lat, 99)),
        'checkpoints': cps, 'full': full, 'counters': counters,
        # Fixed after the application's last write: nothing to race with.
        'late_checkpoints': sum(1 for c in cps if c['t_ack'] >= done),
        'restart_s': restart_s,
        'restart_counters': restart_counters,
        # Bytes the OSDs received while the timed passes ran and their
        # checkpoints were persisted (Ceph peers; None otherwise).
        'osd_in_bytes': osd_in,
        # The restart read a point in time no earlier than the pass the
        # checkpoint was requested after.
        'restart_consistent': got is not None and
        got >= last['after_epoch'],
        'restart_epoch_lag': None if got is None else
        got - last['after_epoch'],
        # Blocks a write in flight had reached in part (page by page).
        'restart_torn_blocks': torn,
        'stored_total_bytes': (full['stored_bytes'] or 0) +
        sum(c['stored_bytes'] or 0 for c in cps),
    }
    log.event('run', peer=peer.name, workload=workload.name, run=run + 1,
              slowdown_s=round(result['slowdown_s'], 3),
              ack_ms=round(max(c['ack_ms'] for c in cps), 2),
              pause_ms=max(c['pause_ms'] or 0 for c in cps),
              restart_s=round(restart_s, 3),
              consistent=result['restart_consistent'])
    return result


def _run_or_record(peer, workload, pattern, args, epoch, run, log, failed):
    """one_run, or None with its error appended to ``failed``: one
    peer's failure (a store that times out) must not cost the runs of
    the others, nor this peer's next runs.
    """
    try:
        return one_run(peer, workload, pattern, args, epoch, run, log)
    except Exception as e:
        failed.append({'peer': peer.name, 'workload': workload.name,
                       'run': run + 1, 'error': '%s: %s'
                       % (type(e).__name__, e)})
        log.event('run failed', peer=peer.name, workload=workload.name,
                  run=run + 1, error=str(e))
        return None


def _valid_or_recorded(result, name, workload, run, log, invalid,
                       keep=False):
    """``result``, or None (and recorded in ``invalid``) when one of its
    checkpoints was acknowledged after the workload's last write: that
    checkpoint raced with nothing, and its run's figures would flatter
    the peer. ``keep``: recorded, and kept in the figures.
    """
    if result is None or not result['late_checkpoints']:
        return result
    invalid.append({'peer': name, 'workload': workload.name,
                    'run': run + 1, 'kept': keep,
                    'late_checkpoints': result['late_checkpoints']})
    log.event('run invalid', peer=name, workload=workload.name,
              run=run + 1, late_checkpoints=result['late_checkpoints'],
              kept=keep)
    return result if keep else None


def _ms(seconds):
    return None if seconds is None else round(seconds * 1000, 3)


# -- figures -----------------------------------------------------------------

def _median(values):
    s = common.summary(values, 6)
    return s and s['median']


def per_run_figures(r):
    """The per-run medians that ratios compare."""
    cps = r['checkpoints']
    return {'ack_ms': _median([c['ack_ms'] for c in cps]),
            'pause_ms': _median([c['pause_ms'] for c in cps]),
            'pause_to_durable_ms': _median([c['pause_to_durable_ms']
                                            for c in cps]),
            'slowdown_s': r['slowdown_s'],
            'run_over_baseline': common.ratio(r['run_s'], r['baseline_s']),
            'durable_s': _median([c['durable_s'] for c in cps]),
            'stored_bytes': _median([c['stored_bytes'] for c in cps]),
            'restart_s': r['restart_s']}


def aggregate(peer, runs):
    cps = [c for r in runs for c in r['checkpoints']]
    out = {
        'ack_ms': common.summary([c['ack_ms'] for c in cps], 2),
        'pause_ms': common.summary([c['pause_ms'] for c in cps], 2),
        'pause_to_durable_ms': common.summary(
            [c['pause_to_durable_ms'] for c in cps], 2),
        'write_p99_to_durable_ms': common.summary(
            [c['write_p99_to_durable_ms'] for c in cps], 3),
        'baseline_write_p99_ms': common.summary(
            [r['baseline_write_p99_ms'] for r in runs], 2),
        'slowdown_s': common.summary([r['slowdown_s'] for r in runs]),
        'run_over_baseline': common.summary(
            [common.ratio(r['run_s'], r['baseline_s']) for r in runs]),
        'run_s': common.summary([r['run_s'] for r in runs]),
        'baseline_s': common.summary([r['baseline_s'] for r in runs]),
        'durable_s': common.summary([c['durable_s'] for c in cps]),
        # Time to durable per MiB stored: what objects (not bytes) cost
        # shows as a workload of small deltas above one of whole chunks.
        'durable_s_per_stored_mib': common.summary(
            [_per_mib(c['durable_s'], c['stored_bytes']) for c in cps], 4),
        'stored_bytes_per_checkpoint': common.summary(
            [c['stored_bytes'] for c in cps], 0),
        'copied_bytes_per_checkpoint': common.summary(
            [c['copied_bytes'] for c in cps], 0),
        'full_bytes': common.summary([r['full']['stored_bytes']
                                      for r in runs], 0),
        'stored_total_bytes': common.summary(
            [r['stored_total_bytes'] for r in runs], 0),
        'restart_s': common.summary([r['restart_s'] for r in runs]),
        'restart_consistent': [r['restart_consistent'] for r in runs],
        'restart_epoch_lag': [r['restart_epoch_lag'] for r in runs],
        'restart_torn_blocks': [r['restart_torn_blocks'] for r in runs],
        'checkpoints': len(cps),
        'late_checkpoints': [r['late_checkpoints'] for r in runs],
        'durable_at': peer.durable_at,
        'runs': [{'slowdown_s': round(r['slowdown_s'], 3),
                  'ack_ms': [round(c['ack_ms'], 2) for c in
                             r['checkpoints']],
                  'pause_ms': [c['pause_ms'] for c in r['checkpoints']],
                  'pause_to_durable_ms': [c['pause_to_durable_ms']
                                          for c in r['checkpoints']],
                  'durable_s': [None if c['durable_s'] is None else
                                round(c['durable_s'], 3)
                                for c in r['checkpoints']],
                  'stored_bytes': [c['stored_bytes'] for c in
                                   r['checkpoints']],
                  'restart_s': round(r['restart_s'], 3),
                  # Where the restart's time went, as far as the peer
                  # tells (_MirrorReader, _ChainRestart).
                  'restart_trace': r['restart_counters'],
                  'counters': r['counters']} for r in runs],
    }
    sent = [r for r in runs if r.get('osd_in_bytes') is not None]
    if sent:
        # What crossed the network to the OSDs against what the
        # checkpoints stored, run by run.
        out['osd_in_bytes_per_checkpoint'] = common.summary(
            [r['osd_in_bytes'] / len(r['checkpoints']) for r in sent], 0)
        out['osd_in_over_stored'] = common.summary(
            [common.ratio(r['osd_in_bytes'],
                          sum(c['stored_bytes'] or 0
                              for c in r['checkpoints']))
             for r in sent])
    if any('copy_out_s' in c for c in cps):
        out['copy_out_s'] = common.summary([c.get('copy_out_s')
                                            for c in cps])
    if any('held_ms' in c for c in cps):
        out['held_ms'] = common.summary([c.get('held_ms') for c in cps], 2)
    if runs[0]['counters']:
        out['counters'] = {k: [r['counters'][k] for r in runs]
                           for k in COUNTERS if k in runs[0]['counters']}
    return out


def ratios(results, reference):
    """Per-run ratios of every peer's figures over ``reference``'s."""
    ref = results.get(reference)
    if not ref:
        return None
    out = {}
    for name, runs in results.items():
        # Run by run; a run that failed on either side pairs with none.
        pairs = [(per_run_figures(a), per_run_figures(b))
                 for a, b in zip(runs, ref)
                 if a is not None and b is not None]
        if name == reference or not pairs:
            continue
        out[name] = {k: common.summary([common.ratio(a[k], b[k])
                                        for a, b in pairs])
                     for k in RATIO_KEYS}
    return out


def check(checks, name, workload, runs, paced=False, pass_bytes=1):
    """``paced``: the writer waits between writes, so a quick
    checkpoint may well fall between two of them (no pause to measure).
    ``pass_bytes``: the distinct bytes a pass writes.
    """
    what = '%s/%s' % (name, workload)
    # Each checkpoint follows a whole pass. One acknowledged after the
    # application stopped writing may have nothing to copy (sent ahead);
    # every run's checkpoints together must copy half a pass at least.
    copied = min(sum(c['copied_bytes'] or 0 for c in r['checkpoints'])
                 for r in runs)
    checks.require_true(
        '%s: bytes copied out by the checkpoints of a run (min)' % what,
        copied >= max(pass_bytes // 2, 1),
        'the checkpoints must copy the written data out: at least half '
        'of the %d bytes a pass writes' % pass_bytes, value=copied)
    if not paced:
        checks.require('%s: checkpoints the application wrote through, '
                       'per run (min)' % what,
                       min(sum(1 for c in r['checkpoints']
                               if c['pause_ms'] is not None) for r in runs),
                       'the application must write while checkpoints are '
                       'taken in every run, or that run has no pause to '
                       'measure')
    checks.require_true('%s: restarts at a point in time' % what,
                        all(r['restart_consistent'] for r in runs),
                        'a restart must read every block of a pass and a '
                        'prefix of the next one',
                        value=[r['restart_epoch_lag'] for r in runs])


def check_cow(checks, name, runs):
    """BlobCR's copy-on-write ran in every run of the checkpoint
    workload (whole-chunk rewrites while the previous pass persists).
    """
    checks.require('%s/checkpoint: cow_copies + waits per run (min)' % name,
                   min(r['counters']['cow_copies'] + r['counters']['waits']
                       for r in runs),
                   'the application must rewrite chunks still being '
                   'persisted in every run; one never did, so selective '
                   'copy-on-write did not run there')


def check_deltas(checks, name, runs, packed):
    """Small writes into a used disk: BlobCR stored sub-chunk deltas,
    in every run, and with ``packed``, in delta packs.
    """
    checks.require('%s/random4k: deltas stored per run (min)' % name,
                   min(r['counters']['deltas_stored'] for r in runs),
                   '4 KiB writes into chunks full of data must be stored '
                   'as deltas (repository/deltas.py) in every run; a run '
                   'stored none')
    if packed:
        checks.require('%s/random4k: deltas put in packs per run (min)'
                       % name,
                       min(r['counters']['deltas_packed'] for r in runs),
                       'with [repository] delta_pack_max_kb on, a '
                       'version\'s deltas go into delta packs '
                       '(repository/chunkpacks.py) in every run; a run '
                       'packed none')


def run(args, log, open_repository):
    """Every peer on every workload; ``open_repository(args, scratch)``
    opens BlobCR's repositories (blobcr-bench's).
    """
    args.granularity = checkpoint.CHUNK
    if args.size % args.block or args.block % SMALL_WRITE or \
            args.size % checkpoint.CHUNK:
        raise SystemExit('--size must be a multiple of --block and of '
                         '256K; --block a multiple of 4K')
    if args.iterations < 1 or args.runs < 1 or args.queue_depth < 1:
        raise SystemExit('--iterations, --runs and --queue-depth must be '
                         'at least 1')
    # The deepest socket the peers make (a restart daemon's QMP).
    deepest = os.path.join(args.workdir, 'runs', 'qcow2-layers-random4k-%d'
                           % args.runs, 'restart-%d' % args.iterations,
                           'qmp.sock')
    if len(deepest) >= SUN_PATH:
        raise SystemExit('--workdir is too long: the sockets below it (up '
                         'to %s) must be shorter than %d bytes'
                         % (deepest, SUN_PATH))
    chosen = workloads(args)
    passes = args.iterations + 1
    epochs_per_run = 2 * passes + 1
    log.event('generate', mib=args.size >> 20)
    pattern = common.Pattern(args.size,
                             streams=1 + max(w.stream for w in chosen))
    peers, refused = {}, {}
    orders = []
    failed, invalid = [], []
    checks = common.Checks()
    results = {w.name: {} for w in chosen}
    try:
        for name in args.peers:
            try:
                peers[name] = make_peer(name, args, open_repository)
            except peers_common.PeerRefused as e:
                refused[name] = str(e)
                log.event('refused', peer=name, why=str(e))
        names = list(peers)
        for w in chosen:
            for name in names:
                results[w.name][name] = []
        # A random order per run and workload (from --seed, recorded),
        # not a rotation that keeps the same neighbours.
        shuffler = random.Random(args.seed)
        for r in range(args.runs):
            for w in chosen:
                order = shuffler.sample(names, len(names))
                orders.append({'run': r + 1, 'workload': w.name,
                               'order': order})
                log.event('order', run=r + 1, workload=w.name, order=order)
                for name in order:
                    epoch = r * epochs_per_run
                    results[w.name][name].append(_valid_or_recorded(
                        _run_or_record(peers[name], w, pattern, args,
                                       epoch, r, log, failed),
                        name, w, r, log, invalid,
                        keep=args.late_runs == 'keep'))
    finally:
        for peer in peers.values():
            shutdown = getattr(peer, 'shutdown', None)
            if shutdown:
                try:
                    shutdown()
                except Exception as e:
                    log('cannot shut %s down: %s' % (peer.name, e))

    out = {'size': args.size, 'block': args.block,
           'queue_depth': args.queue_depth,
           'random_writes': args.random_writes,
           'prefill': args.prefill,
           'delta_max_fraction': args.delta_max_fraction,
           'delta_pack_kb': args.delta_pack_kb,
           'iterations': args.iterations, 'runs': args.runs,
           'granularity': args.granularity,
           'peers': {n: (peers[n].describe()
                         if hasattr(peers[n], 'describe') else {})
                     for n in peers},
           'refused': refused, 'failed_runs': failed,
           'invalid_runs': invalid, 'workloads': {},
           'order': {'seed': args.seed, 'runs': orders}}
    checks.require_true('blobcr-local ran', 'blobcr-local' in peers or
                        'blobcr-local' not in args.peers,
                        'BlobCR on the local store is the reference',
                        value=refused.get('blobcr-local'))
    checks.require_true(
        'every run of every peer completed', not failed,
        'a run that failed is recorded under failed_runs and left out of '
        'the figures; the other runs and peers went on',
        value=['%(peer)s/%(workload)s run %(run)d' % f for f in failed])
    checks.require_true(
        'no run had a checkpoint acknowledged after its last write',
        not invalid or args.late_runs == 'keep',
        'such a checkpoint had nothing left to race with: its run is '
        'recorded under invalid_runs and left out of the figures',
        value=['%(peer)s/%(workload)s run %(run)d: %(late_checkpoints)d'
               % i for i in invalid])
    for w in chosen:
        res = results[w.name]
        done = {n: [r for r in res[n] if r is not None] for n in res}
        out['workloads'][w.name] = {
            'block': w.block, 'writes_per_pass': len(w.offsets),
            'peers': {n: aggregate(peers[n], done[n])
                      for n in done if done[n]},
            'ratios': {'vs_' + ref.replace('-', '_'): ratios(res, ref)
                       for ref in REFERENCES if ref in res},
        }
        for n in done:
            if done[n]:
                check(checks, n, w.name, done[n],
                      paced=w.interval is not None,
                      pass_bytes=w.bytes_per_pass)
                peers[n].check_runs(checks, w.name, done[n])
    for n in peers:
        cp = [r for r in results.get('checkpoint', {}).get(n, ())
              if r is not None]
        if n.startswith('blobcr') and cp:
            check_cow(checks, n, cp)
        r4k = [r for r in results.get('random4k', {}).get(n, ())
               if r is not None]
        if n.startswith('blobcr') and r4k and args.prefill and \
                args.delta_max_fraction != 0:
            check_deltas(checks, n, r4k, args.delta_pack_kb != 0)
    out['small_writes_per_stored_mib'] = small_writes_cost(out)
    out['checks'] = checks.as_list()
    if args.plot:
        try:
            plot(out, args.plot)
        except OSError as e:
            # The figures are worth more than their picture.
            log.event('plot failed', path=args.plot, error=str(e))
            out['plot_error'] = str(e)
    return out


def _per_mib(seconds, stored_bytes):
    if seconds is None or not stored_bytes:
        return None
    return seconds / (stored_bytes / (1 << 20))


def small_writes_cost(out):
    """Per peer run on both: random4k's time to durable per stored MiB
    over the checkpoint workload's (medians of the run's checkpoints),
    per run and their median; 1.0 means scattered 4 KiB writes cost
    what whole-chunk rewrites cost per byte kept.
    """
    both = {}
    wl = out['workloads']
    if 'checkpoint' not in wl or 'random4k' not in wl:
        return both
    for n, small in wl['random4k']['peers'].items():
        whole = wl['checkpoint']['peers'].get(n)
        if whole is None:
            continue
        per_run = []
        for a, b in zip(small['runs'], whole['runs']):
            per_run.append(common.ratio(
                _median_per_mib(a), _median_per_mib(b)))
        both[n] = {'per_run': per_run,
                   'median': _median([r for r in per_run
                                      if r is not None])}
    return both


def _median_per_mib(run):
    return _median([_per_mib(d, s) for d, s in zip(run['durable_s'],
                                                   run['stored_bytes'])])


def plot(result, path):
    """One row per workload: ack, pause, slowdown, to durable, bytes per
    checkpoint, restart (medians, p10-p90).
    """
    import matplotlib
    matplotlib.use('Agg')
    from matplotlib import pyplot

    panels = [('ack_ms', 'request to ack (ms)', '#2a7ab9', True),
              ('pause_ms', 'guest-visible pause (ms)', '#8e6bbf', True),
              ('slowdown_s', 'application slowdown (s)', '#d9822b', False),
              ('durable_s', 'request to durable (s)', '#999999', False),
              ('stored_mib', 'MiB stored per checkpoint', '#4f9a4f', False),
              ('restart_s', 'restart: open + read (s)', '#b94a48', False)]
    rows = list(result['workloads'])
    fig, axes = pyplot.subplots(len(rows), len(panels),
                                figsize=(20, 4.2 * len(rows)), squeeze=False)
    for row, wname in zip(axes, rows):
        peers = result['workloads'][wname]['peers']
        names = list(peers)
        for ax, (key, title, color, log_scale) in zip(row, panels):
            if key == 'stored_mib':
                values = [_scaled(peers[n]['stored_bytes_per_checkpoint'],
                                  common.MIB) for n in names]
            else:
                values = [peers[n][key] for n in names]
            checkpoint._bars(ax, names, values, '%s: %s' % (wname, title),
                             color)
            if log_scale:
                ax.set_yscale('log')
    fig.suptitle('blobcr-bench peers: %d MiB disk, %d checkpoints per run, '
                 '%d runs (bars: median, whiskers: p10-p90)'
                 % (result['size'] >> 20, result['iterations'],
                    result['runs']))
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def _scaled(s, scale):
    if not s:
        return s
    return {k: (v / scale if k != 'n' else v) for k, v in s.items()}
