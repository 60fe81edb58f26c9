"""blobcr-bench: benchmarks that print ratios against a same-run baseline.

Each sub-command prints one JSON object (indented unless ``--json``):

* ``repo``: COMMIT metadata time and tree overhead on a 1 TiB image; with
  ``--backend rados`` also persist throughput against ``rados bench``.
* ``checkpoint``: the journal's synthetic benchmark in the four mirror
  modes (downtime, slowdown, completion, copy-on-write bytes);
  ``--plot FILE.png`` draws it.
* ``restart``: lazy, lazy+prefetch and full pre-copy restart of a
  checkpointed version, replaying a recorded read trace.
* ``mirror``: fio through the mirror against a plain C libfuse3
  passthrough on the same backing file.
* ``proxy``: CHECKPOINT round trip through the guest endpoint and RPC
  per quiesce mode, against the admin socket; forged-request refusals
  per second.

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

from blobcr_agent.bench import checkpoint
from blobcr_agent.bench import harness

TIB = 1 << 40


def _size(text):
    units = {'K': 1 << 10, 'M': 1 << 20, 'G': 1 << 30}
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


def main(argv=None):
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
    common.add_argument('--in-flight', type=int, default=32)
    common.add_argument('--json', action='store_true',
                        help='print the result on one line')
    common.add_argument('--quiet', action='store_true')
    sub = parser.add_subparsers(dest='bench', required=True)

    p = sub.add_parser('repo', parents=[common],
                       help='repository metadata and persist')
    p.add_argument('--runs', type=int, default=5)
    p.add_argument('--dirty', type=int, default=4096)
    p.add_argument('--fanout', type=int, default=64)
    p.add_argument('--persist-mib', type=int, default=256)
    p.add_argument('--seed', type=int, default=42)

    p = sub.add_parser('checkpoint', parents=[common],
                       help='synthetic checkpoint benchmark, four modes')
    p.add_argument('--size', type=_size, default=1 << 30,
                   help='bytes rewritten per iteration (default 1G)')
    p.add_argument('--iterations', type=int, default=3)
    p.add_argument('--cow-chunks', type=int, default=64)
    p.add_argument('--plot', help='write a PNG of the results here')
    p.add_argument('--modes', nargs='+', default=list(checkpoint.MODES),
                   choices=checkpoint.MODES)
    p.add_argument('--flush-order', choices=['adaptive', 'in-order'],
                   default='adaptive')

    p = sub.add_parser('restart', parents=[common],
                       help='lazy, lazy+prefetch and pre-copy restart')
    p.add_argument('--size', type=_size, default=256 << 20)
    p.add_argument('--think-ms', type=float, default=1.0,
                   help='work between two reads of the trace')
    p.add_argument('--seed', type=int, default=42)

    p = sub.add_parser('mirror', parents=[common],
                       help='fio: mirror against a C passthrough')
    p.add_argument('--size', type=_size, default=1 << 30)
    p.add_argument('--runs', type=int, default=3)
    p.add_argument('--runtime', type=int, default=5,
                   help='seconds per fio job')

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

    args = parser.parse_args(argv)
    args.workdir = args.workdir or '/var/tmp'

    def log(text):
        if not args.quiet:
            print(text, file=sys.stderr, flush=True)

    scratch = tempfile.mkdtemp(prefix='blobcr-bench-', dir=args.workdir)
    try:
        if args.bench == 'repo':
            from blobcr_agent.bench import repo as bench
            repo = open_repository(args, scratch, chunk_size=bench.CHUNK,
                                   fanout=args.fanout,
                                   node_cache_bytes=TIB)
            try:
                result = {'backend': args.backend}
                result.update(bench.bench_commit(repo, args, log))
                if args.backend == 'rados':
                    result.update(bench.bench_persist(repo, args, log))
            finally:
                repo.close()
        else:
            bench = importlib.import_module('blobcr_agent.bench.' + {
                'checkpoint': 'checkpoint', 'restart': 'restart',
                'mirror': 'mirror_io', 'proxy': 'proxy'}[args.bench])
            args.workdir = scratch
            repo = open_repository(args, scratch)
            try:
                result = {'backend': args.backend}
                result.update(bench.run(
                    repo, harness.store_args(repo.backend), args, log))
            finally:
                repo.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(json.dumps(result, sort_keys=True) if args.json
          else json.dumps(result, indent=2, sort_keys=True))
    return 0


if __name__ == '__main__':
    sys.exit(main())
