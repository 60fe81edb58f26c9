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

"""``blobcr-bench host-loss``: the data at risk when a host is lost for
good, measured by losing it, peer by peer, on the same micro cluster.

A guest-like writer (blobcr_lab.flush_writer: 4 KiB writes at random
blocks of a 64 MiB volume, a flush after every ``--every``) runs for
``--seconds``; then its host is lost, and the volume is read back as the
peer's recovery gives it. What counts is the writes a returned flush
covered that the volume no longer holds (``lost_flushed``: blocks, and
bytes at 4 KiB each), beside the flushed blocks in all.

Peers:

* ``blobcr-cluster``, ``blobcr-host``: a BlobCR volume on the micro
  Ceph cluster (its agents' store), durability ``cluster`` or ``host``,
  written through the FUSE mirror file; lost = the writer and the agent
  SIGKILLed and the cache directory deleted; recovery = ``take_over`` on
  a second agent, then an attach there;
* ``rbd``, ``rbd-writeback``: an RBD image in a replicated pool written
  through librbd, its cache off (Nova's cache=none) or in write-back;
  lost = the writer (and its librbd) SIGKILLed; recovery = the image as
  the cluster holds it;
* ``local-file``: a file on the host's disk, as qemu-backup and the qcow2
  peers keep their disks, backed up (copied) before the run; lost = the
  file gone with the host; recovery = the last backup.

No checkpoint or backup is taken during the run: the window is
``--seconds`` long, as if the host were lost that long after the last
one (BlobCR's protection checkpoints bound it at 300 s by default).
"""

import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

from blobcr_bench import common
from blobcr_bench import rbd_common
from blobcr_lab import agents
from blobcr_lab import flush_writer

PEERS = ('blobcr-cluster', 'blobcr-host', 'rbd', 'rbd-writeback',
         'local-file')
SIZE = 64 << 20
BLOCKS = SIZE // flush_writer.BLOCK
RBD_POOL = 'rbd'


def _start_writer(journal, every, *target):
    writer = subprocess.Popen(
        [sys.executable, '-m', 'blobcr_lab.flush_writer', str(BLOCKS),
         str(every), journal] + list(target), stdout=subprocess.PIPE,
        text=True)
    if writer.stdout.readline().strip() != 'ready':
        writer.kill()
        raise RuntimeError('the writer did not start: %s' % (target,))
    return writer


def _kill(process):
    process.send_signal(signal.SIGKILL)
    process.wait()


def _blobcr(args, workdir, durability, journal):
    from blobcr_agent.repository.backends import rados
    backend = rados.RadosBackend(args.ceph_conf, args.data_pool,
                                 args.meta_pool,
                                 namespace='loss-' + uuid.uuid4().hex[:12])
    settings = {'agent': {'quiesce': 'none', 'durability': durability}}
    made = []
    try:
        for name in ('a', 'b'):
            os.makedirs(os.path.join(workdir, name))
            made.append(agents.AgentProcess(os.path.join(workdir, name),
                                            backend, settings).start())
        a, b = made
        image = a.client.call('create_image', name='loss',
                              size=SIZE)['id']
        path = a.client.call('attach', image=image)['path']
        writer = _start_writer(journal, args.every, 'file', path)
        time.sleep(args.seconds)
        _kill(writer)
        a.kill()
        shutil.rmtree(os.path.join(a.state_path, 'cache', image))
        b.client.call('take_over', image=image, why='host lost (bench)')
        path = b.client.call('attach', image=image)['path']
        with open(path, 'rb') as f:
            volume = f.read()
        b.client.call('detach', image=image, discard=True)
        return volume
    finally:
        agents.stop_all(made)
        backend.close()


def _rbd(args, cache, journal):
    import rados
    import rbd
    rbd_common.ensure_rbd_pool(args.ceph_conf, RBD_POOL)
    name = 'loss-' + uuid.uuid4().hex[:12]
    cluster = rados.Rados(conffile=args.ceph_conf)
    cluster.connect(timeout=10)
    ioctx = cluster.open_ioctx(RBD_POOL)
    try:
        rbd.RBD().create(ioctx, name, SIZE)
        writer = _start_writer(journal, args.every, 'rbd', args.ceph_conf,
                               RBD_POOL, name, cache)
        time.sleep(args.seconds)
        _kill(writer)
        with rbd.Image(ioctx, name) as image:
            volume = image.read(0, SIZE)
        rbd.RBD().remove(ioctx, name)
        return volume
    finally:
        ioctx.close()
        cluster.shutdown()


def _local_file(args, workdir, journal):
    path = os.path.join(workdir, 'disk.raw')
    with open(path, 'wb') as f:
        f.truncate(SIZE)
    backup = path + '.backup'
    shutil.copyfile(path, backup)
    writer = _start_writer(journal, args.every, 'file', path)
    time.sleep(args.seconds)
    _kill(writer)
    os.unlink(path)                 # gone with the host
    with open(backup, 'rb') as f:
        return f.read()


def _one(args, peer, workdir):
    journal = os.path.join(workdir, 'journal')
    if peer.startswith('blobcr-'):
        volume = _blobcr(args, workdir, peer.split('-', 1)[1], journal)
    elif peer.startswith('rbd'):
        volume = _rbd(args, 'writeback' if peer == 'rbd-writeback'
                      else 'false', journal)
    else:
        volume = _local_file(args, workdir, journal)
    floor, later, flushed_through, failed = flush_writer.promised(
        journal, BLOCKS)
    kept = flush_writer.check(volume, bytes(SIZE), floor, later)
    return {'writes_flushed': flushed_through,
            'flushed_blocks': kept['flushed_blocks'],
            'lost_flushed_blocks': kept['lost_blocks'],
            'lost_flushed_bytes': kept['lost_blocks'] * flush_writer.BLOCK,
            'foreign_blocks': len(kept['bad']) - kept['lost_blocks'],
            'failed_flushes': len(failed)}


def run(args, log):
    peers = args.peers.split(',') if args.peers else list(PEERS)
    unknown = set(peers) - set(PEERS)
    if unknown:
        raise SystemExit('unknown peers: %s' % ', '.join(sorted(unknown)))
    runs = {peer: [] for peer in peers}
    checks = common.Checks()
    top = tempfile.mkdtemp(prefix='blobcr-bench-loss-', dir=args.workdir or
                           '/var/tmp')
    try:
        for k in range(args.runs):
            # Which peer goes first rotates from run to run.
            order = peers[k % len(peers):] + peers[:k % len(peers)]
            for peer in order:
                workdir = os.path.join(top, '%s-%d' % (peer, k))
                os.makedirs(workdir)
                result = _one(args, peer, workdir)
                log.event('run', peer=peer, run=k, **result)
                runs[peer].append(result)
    finally:
        shutil.rmtree(top, ignore_errors=True)
    table = {}
    for peer, results in runs.items():
        table[peer] = {key: statistics.median(r[key] for r in results)
                       for key in results[0]}
        table[peer]['lost_flushed_bytes_max'] = max(
            r['lost_flushed_bytes'] for r in results)
        checks.require('%s flushed blocks' % peer,
                       min(r['flushed_blocks'] for r in results),
                       'the writer flushed in every run: something was '
                       'promised')
        checks.require_true('%s foreign blocks' % peer,
                            all(r['foreign_blocks'] == 0 for r in results),
                            'no block holds a value never written there',
                            value=max(r['foreign_blocks'] for r in results))
    return {'seconds': args.seconds, 'every': args.every,
            'runs': args.runs, 'volume_bytes': SIZE, 'peers': table,
            'per_run': runs, 'checks': checks.as_list()}


def add_arguments(p):
    p.add_argument('--runs', type=int, default=3)
    p.add_argument('--seconds', type=float, default=8.0,
                   help='how long the writer runs before the loss')
    p.add_argument('--every', type=int, default=16,
                   help='writes between two flushes')
    p.add_argument('--peers', default=None,
                   help='comma-separated, of %s (default: all)'
                        % ', '.join(PEERS))
