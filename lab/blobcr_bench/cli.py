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

"""blobcr-bench: benchmarks that print ratios against a same-run baseline.

Each sub-command prints one JSON object (indented unless ``--json``):

* ``repo``: COMMIT metadata time and tree overhead on a 1 TiB image; with
  ``--backend rados`` also ``persist``.
* ``persist``: persist throughput through a real mirror's persister
  against direct backend puts and (Ceph) ``rados bench``.
* ``checkpoint``: the journal's synthetic benchmark in the four mirror
  modes and two flush orders (ack and held time, slowdown, time to
  stable, copies and waits); ``--interval`` periodic checkpoints under
  continuous writes; ``--plot FILE.png`` draws either.
* ``restart``: N instances restarting from one checkpoint, lazily, with
  prefetch from another instance's profile, and after a full pre-copy.
* ``mirror``: fio through the mirror against a plain C libfuse3
  passthrough on the same backing file.
* ``flush``: what a guest's flush costs: fio's 4 KiB random writes with
  a flush after each, every 1 MiB, every 64 MiB and none, through BlobCR
  mirrors of `cluster` and `host` durability (``--backend rados``),
  on a plain file, and (``--rbd``) on RBD images (cache off, data
  erasure-coded, writeback cache).

Every benchmark counts what proves its own path ran (copies, waits,
fetches, bytes) and exits with status 3, after printing its result with
``"valid": false``, when one of those counts is zero.
* ``proxy``: CHECKPOINT round trip through the guest endpoint and RPC
  per quiesce mode, against the admin socket; forged-request refusals
  per second.
* ``cinder``: on an existing cloud, ``volume snapshot create`` to
  ``available`` of a BlobCR volume (attached, written live) and of a
  Cinder RBD volume with the same data written, and the agent's ack.
* ``peers``: BlobCR (local store, Ceph) against QEMU incremental backup,
  Ceph RBD snapshots and qcow2 external snapshots on the same workloads.
* ``handoff``: a live migration's switch: the guest's first request on
  the destination, waiting for the source's handoff, against the next
  one (two agents, ``--migrations`` back and forth per dirty size).
* ``scale``: M VMs on H hosts (network namespaces) take global
  checkpoints and restart on other hosts: lazy, with shared live
  prefetch hints, and after a pre-copy; curves against M and a model
  to 1,000 hosts.
* ``hosts``: with ``[blobcr_bus] host_vhosts``, a caller calling
  ``--hosts`` compute hosts (a vhost each on a private RabbitMQ): its
  broker connections, RSS and call latencies with and without a bound
  on its transports, and the figures at 1,000 hosts.

The Ceph backend needs a cluster: ``tools/ceph-cluster.sh start DIR``
starts a micro one; pass ``--ceph-conf DIR/ceph.conf``.
"""

import argparse
import importlib
import json
import os
import shutil
import sys
import tempfile
import time

from blobcr_bench import checkpoint
from blobcr_bench import cinder
from blobcr_bench import common as bench_common
from blobcr_bench import flush
from blobcr_bench import guest_io
from blobcr_bench import handoff
from blobcr_bench import host_loss
from blobcr_bench import many_hosts
from blobcr_bench import peers
from blobcr_bench import scale
from blobcr_lab import agents

TIB = 1 << 40


def _size(text):
    units = {'K': 1 << 10, 'M': 1 << 20, 'G': 1 << 30, 'T': 1 << 40}
    text = text.upper().rstrip('IB')
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def open_repository(args, scratch, **kw):
    """A repository on a fresh scratch store (local) or namespace."""
    from blobcr_agent.repository.backends import local
    from blobcr_agent.repository import repository
    if args.backend == 'local':
        backend = local.LocalBackend(os.path.join(scratch, 'store'),
                                     max_in_flight=args.in_flight)
    else:
        from blobcr_agent.repository.backends import rados
        backend = rados.RadosBackend(
            args.ceph_conf, args.data_pool, args.meta_pool,
            namespace='bench-%d-%d' % (os.getpid(), int(time.time())),
            max_in_flight=args.in_flight)
    return repository.Repository(backend, gc_grace=0, **kw)


def build_parser():
    parser = argparse.ArgumentParser(prog='blobcr-bench',
                                     description=__doc__.split('\n')[0])
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument('--backend', choices=['local', 'rados'],
                        default='local')
    common.add_argument('--workdir', default=None,
                        help='scratch directory (default: under /var/tmp)')
    common.add_argument('--ceph-conf', default='/etc/ceph/ceph.conf')
    common.add_argument('--data-pool', default='blobcr-data')
    common.add_argument('--meta-pool', default='blobcr-meta')
    common.add_argument('--in-flight', type=int, default=32,
                        help='store writes kept in flight (scale: by each '
                        'host\'s agent, its [repository] max_in_flight)')
    common.add_argument('--json', action='store_true',
                        help='print the result on one line')
    common.add_argument('--quiet', action='store_true')
    sub = parser.add_subparsers(dest='bench', required=True)

    p = sub.add_parser('repo', parents=[common],
                       help='repository metadata and persist')
    p.add_argument('--runs', type=int, default=5)
    p.add_argument('--dirty', type=int, default=4096)
    p.add_argument('--image-size', type=_size, default=TIB,
                   help='image whose tree is built (default 1T)')
    p.add_argument('--fanout', type=int, default=64)
    p.add_argument('--persist-mib', type=int, default=256)
    p.add_argument('--seed', type=int, default=42)

    p = sub.add_parser('persist', parents=[common],
                       help='persist throughput through the mirror against '
                            'rados bench and direct backend puts')
    p.add_argument('--runs', type=int, default=3)
    p.add_argument('--persist-mib', type=int, default=256)

    p = sub.add_parser('checkpoint', parents=[common],
                       help='synthetic checkpoint benchmark (four modes, '
                            'flush orders) or --interval workload')
    p.add_argument('--size', type=_size, default=128 << 20,
                   help='bytes rewritten per iteration (default 128M)')
    p.add_argument('--block', type=_size, default=1 << 20,
                   help='write size of the rewrite (default 1M)')
    p.add_argument('--iterations', type=int, default=3)
    p.add_argument('--runs', type=int, default=3,
                   help='runs per variant, taking turns (default 3)')
    checkpoint.add_buffer_arguments(p)
    p.add_argument('--plot', help='write a PNG of the results here')
    p.add_argument('--modes', nargs='+', default=None,
                   choices=checkpoint.MODES,
                   help='mirror modes (default: all four; selective-cow '
                        'alone with --interval)')
    p.add_argument('--order', choices=checkpoint.ORDERS,
                   default='sequential',
                   help='rewrite order of the mode comparison')
    p.add_argument('--flush-order', choices=['adaptive', 'in-order'],
                   default='adaptive',
                   help='flush order of the mode comparison')
    p.add_argument('--flush-workloads', nargs='*',
                   default=['random', 'reverse'], choices=checkpoint.ORDERS,
                   help='rewrite orders under which selective-cow runs '
                        'with the adaptive and the index flush order '
                        '(default: random reverse; none to skip)')
    p.add_argument('--think-ms', type=float, default=0.0,
                   help='pause after each block written (default 0)')
    p.add_argument('--flush-writer-share', type=float, default=0.6,
                   help='the flush-order workloads write at this share of '
                        'the persist throughput measured before them '
                        '(default 0.6; 0: as fast as they can)')
    p.add_argument('--head-start', type=float, default=0.0,
                   help='seconds to wait after each CHECKPOINT before '
                        'rewriting (lets the persister finish first: the '
                        'copy-on-write checks then fail)')
    p.add_argument('--no-expect-waits', dest='expect_waits',
                   action='store_false',
                   help='do not require selective-cow writers to wait')
    p.add_argument('--downtime-sizes', type=_size, nargs='*',
                   default=[64 << 20, 1 << 30],
                   help='dirty sizes whose CHECKPOINT ack and held time '
                        'are compared (default 64M 1G; none to skip)')
    p.add_argument('--seed', type=int, default=42)
    p.add_argument('--interval', type=float, nargs='?', const=2.0,
                   default=None,
                   help='periodic checkpoints every N s (default 2) under '
                        'continuous random writes, instead of the '
                        'synthetic benchmark')
    p.add_argument('--checkpoints', type=int, default=10,
                   help='checkpoints per --interval run (default 10)')
    p.add_argument('--image-size', type=_size, default=256 << 20,
                   help='image of the --interval workload (default 256M)')
    p.add_argument('--write-size', type=_size, default=64 << 10,
                   help='random write size of --interval (default 64K)')
    p.add_argument('--iodepth', type=int, default=1,
                   help='--interval: writes in flight; above 1 the writer '
                        'is fio (libaio, O_DIRECT, fresh random data), as a '
                        'guest on cache=none writes (default 1: one thread '
                        'of buffered pwrite)')
    p.add_argument('--fsync', type=int, default=0, metavar='N',
                   help='--interval with --iodepth above 1: fio flushes '
                        'after every N writes, as a database guest does '
                        '(default 0: never)')
    p.add_argument('--durability', choices=['cluster', 'host'],
                   default=None,
                   help='[agent] durability of the mirror: what a flush '
                        'waits for (default: the agent\'s, cluster on '
                        'RADOS)')
    p.add_argument('--reserve-ahead', choices=['0', '1', 'both'],
                   default=None,
                   help='--interval: the mirror registers each next '
                        'version ahead (1), or not (0), or "both": a '
                        'mirror of each, taking turns in every run '
                        '(default: $BLOBCR_RESERVE_AHEAD, else 1)')

    p = sub.add_parser('restart', parents=[common],
                       help='N instances restarting: lazy, lazy+prefetch '
                            'and pre-copy')
    p.add_argument('--size', type=_size, default=256 << 20)
    p.add_argument('--instances', type=int, default=4,
                   help='the first records its reads, the others restart '
                        'at once from its profile (default 4)')
    p.add_argument('--runs', type=int, default=3)
    p.add_argument('--think-ms', type=float, default=1.0,
                   help='work between two reads of the trace')
    p.add_argument('--touch', type=float, default=0.25,
                   help='fraction of the chunks a restart reads')
    p.add_argument('--divergence', type=float, default=0.1,
                   help='fraction of each instance\'s read runs that are '
                        'its own (elsewhere in the image)')
    p.add_argument('--window', type=int, default=8,
                   help='runs shuffled within windows of this many')
    p.add_argument('--readahead-chunks', type=int, default=64,
                   help='the mirrors\' [agent] readahead_chunks (0: off)')
    p.add_argument('--seed', type=int, default=42)

    p = sub.add_parser('mirror', parents=[common],
                       help='fio: mirror against a C passthrough')
    p.add_argument('--size', type=_size, default=1 << 30)
    p.add_argument('--runs', type=int, default=3)
    p.add_argument('--runtime', type=float, default=5,
                   help='seconds per fio job')
    p.add_argument('--passthrough-options',
                   default='allow_other,default_permissions',
                   help='-o options of the passthrough mount (default: '
                        'the mirror\'s; empty for none)')
    p.add_argument('--no-sync-between-jobs', dest='sync_between_jobs',
                   action='store_false',
                   help='do not write the backing file back before each '
                        'fio job')

    p = sub.add_parser('flush', parents=[common],
                       help='fio with flushes (every write, 1 MiB, 64 MiB, '
                            'none): BlobCR cluster and host durability '
                            'against a plain file, and RBD (--rbd)')
    p.add_argument('--size', type=_size, default=256 << 20)
    p.add_argument('--runs', type=int, default=3)
    p.add_argument('--runtime', type=float, default=5,
                   help='seconds per fio job (the commit loop: half)')
    p.add_argument('--targets', nargs='+', choices=flush.TARGETS,
                   help='default: blobcr-cluster (--backend rados), '
                        'blobcr-host, plain, and with --rbd rbd, rbd-ec, '
                        'rbd-writeback')
    p.add_argument('--jobs', nargs='+',
                   choices=[name for name, _ in flush.JOBS],
                   help='default: all four')
    p.add_argument('--checkpoint-every', type=float, default=0,
                   help='also a job without flushes whose targets of the '
                        'cluster are checkpointed every this many seconds: '
                        'bytes the OSDs received per byte written '
                        '(default 0: not run)')
    p.add_argument('--rbd', action='store_true',
                   help='also librbd on the --ceph-conf cluster: cache '
                        'off, data erasure-coded with cache off, and '
                        'writeback cache')
    p.add_argument('--rbd-pool', default='blobcr-rbd-bench',
                   help='replicated pool of the RBD images (made if '
                        'missing)')
    p.add_argument('--rbd-ec-pool', default='blobcr-rbd-bench-ec',
                   help='erasure-coded data pool of rbd-ec (made like '
                        '--data-pool if missing)')
    p.add_argument('--upload-ahead', type=float, default=0.0,
                   help='the mirrors\' --upload-ahead (default 0: off)')

    p = sub.add_parser('guest-io', parents=[common],
                       help='fio on the guest\'s path: the loop device '
                            'over the mirror file, the file, a plain file '
                            'and RBD (--rbd); idle, during a persist and '
                            'a lazy restart')
    p.add_argument('--size', type=_size, default=1 << 30,
                   help='the disk (default 1G: a persist of it outlasts '
                        'a job)')
    p.add_argument('--runs', type=int, default=3)
    p.add_argument('--runtime', type=float, default=5,
                   help='seconds per fio job')
    p.add_argument('--jobs', nargs='*',
                   help='some of the jobs (default: all eight)')
    p.add_argument('--rbd', action='store_true',
                   help='also librbd on the --ceph-conf cluster, cache off '
                        'and writeback')
    p.add_argument('--rbd-pool', default='blobcr-rbd-bench',
                   help='replicated pool of the RBD image (made if '
                        'missing)')
    p.add_argument('--persist-jobs', nargs='+',
                   default=list(guest_io.PERSIST_JOBS),
                   choices=[j[0] for j in guest_io.JOBS] + ['all'],
                   help='the jobs also run during a persist (default: %s; '
                        'all: every job)' % ' '.join(guest_io.PERSIST_JOBS))
    p.add_argument('--no-persist', action='store_true',
                   help='skip the jobs during a persist')
    p.add_argument('--no-restart', action='store_true',
                   help='skip the lazy restart\'s first reads')
    p.add_argument('--seed', type=int, default=42)

    p = sub.add_parser('protect', parents=[common],
                       help='fio random writes on an agent with and '
                            'without protection checkpoints')
    p.add_argument('--size', type=_size, default=256 << 20)
    p.add_argument('--runs', type=int, default=3)
    p.add_argument('--runtime', type=float, default=90,
                   help='seconds of fio per variant and run')
    p.add_argument('--interval', type=int, default=30,
                   help='[agent] protect_interval of the protected runs')

    p = sub.add_parser('proxy', parents=[common],
                       help='checkpoint round trip: HTTP, RPC, admin')
    p.add_argument('--size', type=_size, default=64 << 20)
    p.add_argument('--dirty', type=int, default=16,
                   help='chunks rewritten before each checkpoint')
    p.add_argument('--rounds', type=int, default=30)
    p.add_argument('--transport-url',
                   help='RabbitMQ to use (default: start a private one)')
    p.add_argument('--flooders', type=int, default=4)
    p.add_argument('--flood-seconds', type=float, default=5.0)
    p.add_argument('--plot', help='write a PNG of the results here')

    p = sub.add_parser('handoff', parents=[common],
                       help='live migration switch: the destination\'s '
                            'first request against the next one')
    handoff.add_arguments(p, _size)

    p = sub.add_parser('cinder', parents=[common],
                       help='Cinder snapshot to available: BlobCR against '
                            'the RBD driver (an existing cloud; '
                            '--ceph-conf is the RBD cluster\'s)')
    cinder.add_arguments(p)

    p = sub.add_parser('peers', parents=[common],
                       help='BlobCR against QEMU incremental backup, RBD '
                            'snapshots and qcow2 layers (--ceph-conf: the '
                            'cluster of blobcr-ceph and rbd-snap)')
    peers.add_arguments(p, _size)

    p = sub.add_parser('host-loss', parents=[common],
                       help='data at risk when a host is lost for good, '
                            'measured by losing it (--ceph-conf: the '
                            'cluster of the BlobCR and RBD peers)')
    host_loss.add_arguments(p)

    p = sub.add_parser('scale', parents=[common],
                       help='M VMs on H hosts (network namespaces): '
                            'global checkpoints, then a restart of all on '
                            'other hosts: lazy, shared hints, pre-copy')
    scale.add_arguments(p, _size)

    p = sub.add_parser('hosts', parents=[common],
                       help='a caller and many compute hosts\' vhosts: '
                            'broker connections, RSS, latency, with and '
                            'without a bound')
    many_hosts.add_arguments(p)
    return parser


def subcommands(parser):
    """The names of ``parser``'s benchmarks."""
    action, = [a for a in parser._actions
               if isinstance(a, argparse._SubParsersAction)]
    return sorted(action.choices)


def main(argv=None):
    args = build_parser().parse_args(argv)
    args.workdir = args.workdir or '/var/tmp'
    if args.bench == 'checkpoint':
        args.modes_given = args.modes is not None
        args.modes = args.modes or list(checkpoint.MODES)
    log = bench_common.Log(args.bench, quiet=args.quiet)

    scratch = tempfile.mkdtemp(prefix='blobcr-bench-', dir=args.workdir)
    try:
        if args.bench == 'cinder':
            result = {'bench': 'cinder'}
            result.update(cinder.run(args, log))
        elif args.bench == 'scale':
            args.workdir = scratch
            result = {'bench': 'scale'}
            result.update(scale.run(args, log, open_repository))
        elif args.bench == 'hosts':
            args.workdir = scratch
            result = {'bench': 'hosts'}
            result.update(many_hosts.run(args, log))
        elif args.bench == 'host-loss':
            result = {'bench': 'host-loss'}
            result.update(host_loss.run(args, log))
        elif args.bench == 'peers':
            args.workdir = scratch
            result = {'bench': 'peers'}
            result.update(peers.run(args, log, open_repository))
        elif args.bench == 'repo':
            from blobcr_bench import repo as bench
            repo = open_repository(args, scratch, chunk_size=bench.CHUNK,
                                   fanout=args.fanout,
                                   node_cache_bytes=TIB)
            try:
                result = {'backend': args.backend}
                result.update(bench.bench_commit(repo, args, log))
                if args.backend == 'rados':
                    from blobcr_bench import persist
                    args.workdir = scratch
                    result['persist'] = persist.run(
                        repo, agents.store_args(repo.backend), args, log)
                    result['checks'] += result['persist'].pop('checks')
            finally:
                repo.close()
        else:
            name = args.bench
            if name == 'checkpoint' and args.interval is not None:
                name = 'checkpoint_interval'
            bench = importlib.import_module('blobcr_bench.' + {
                'checkpoint': 'checkpoint', 'restart': 'restart',
                'checkpoint_interval': 'checkpoint_interval',
                'mirror': 'mirror_io', 'proxy': 'proxy', 'flush': 'flush',
                'protect': 'protect', 'handoff': 'handoff',
                'persist': 'persist', 'guest-io': 'guest_io'}[name])
            args.workdir = scratch
            repo = open_repository(args, scratch)
            try:
                result = {'backend': args.backend}
                result.update(bench.run(
                    repo, agents.store_args(repo.backend), args, log))
            finally:
                repo.close()
    except BaseException:
        # BLOBCR_BENCH_KEEP=1: the agents' logs of a failed run stay.
        if os.environ.get('BLOBCR_BENCH_KEEP') == '1':
            print('blobcr-bench: scratch kept in %s' % scratch,
                  file=sys.stderr)
            scratch = None
        raise
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    failed = [c for c in result.get('checks', ()) if not c['ok']]
    result['valid'] = not failed
    print(json.dumps(result, sort_keys=True) if args.json
          else json.dumps(result, indent=2, sort_keys=True))
    if failed:
        print(bench_common.failure_message(args.bench, failed),
              file=sys.stderr)
        return 3
    return 0


if __name__ == '__main__':
    sys.exit(main())
