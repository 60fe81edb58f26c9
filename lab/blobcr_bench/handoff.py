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

"""``blobcr-bench handoff``: what a live migration's switch costs the
guest.

Two agents on one store (RPC over a private RabbitMQ, or
``--transport-url``) take turns as source and destination of one image,
``--migrations`` times, in Nova's order:

1. the guest writes ``--dirty`` chunks on the source (4 KiB O_DIRECT
   writes, one per chunk, then a flush): what it wrote since the last
   switch;
2. Nova's ``pre_live_migration`` connects the volume on the destination:
   ``attach(migrate_from=source)``, through a loop device as the default
   ``local`` connection does (``--connection file``: the mirror file).
   The destination's agent tells the source, which checkpoints what the
   guest wrote so far (agent API 1.10, ``prepare_handoff``);
3. the memory copy, ``--precopy-ms`` (default 1000; 0: the switch comes
   at once): the guest writes ``--during`` more chunks on the source,
   spread over it;
4. the switch: the guest's first request on the destination (a 4 KiB
   O_DIRECT read of the last chunk written on the source) waits for the
   source's handoff (commit, persist, detach: manager/handoff.py) and
   must read what the source wrote;
5. baseline, the same run: the next read on the destination, of
   another chunk the source wrote (no handoff left to wait for).

The agents ask libvirt's test driver, where no domain uses the image:
the source's guest counts as stopped, as QEMU leaves it at the switch
(the destination resumes it only once the source paused it). So the
figures are the handoff's own path, without a guest's migration around
it; tests/integration/test_nova_moves.py logs the same wait in a real
Nova live migration.

Figures: the first read's time (``first_read_ms``), the destination's
own account of its wait (``waited_ms``, mirror/handoff.py), the chunks
the source's last commit held (``handoff_chunks``), the source's phases
in it (``source_commit_ms``, ``source_persist_ms``,
``source_detach_ms``: manager/handoff.py) and the baseline read, each
p50/p90/max over the migrations, per dirty size;
``extra_ms`` = first read - baseline read, per migration. The goal is an
extra wait of at most 50 ms. The run is invalid if a migration did not
hand off (the destination's incoming state not done), or a read did not
return what the source wrote.
"""

import mmap
import os
import time

from blobcr_bench import common
from blobcr_common.rpc import api as rpc_api
from blobcr_lab import agent_rpc
from blobcr_lab import agents
from blobcr_lab import rabbitmq

BLOCK = 4096


def add_arguments(p, size):
    p.add_argument('--size', type=size, default=256 << 20)
    p.add_argument('--migrations', type=int, default=10,
                   help='migrations per dirty size, back and forth')
    p.add_argument('--dirty', type=int, nargs='+', default=[1, 16, 256],
                   help='chunks written on the source before each '
                        'migration (default 1 16 256)')
    p.add_argument('--precopy-ms', type=int, default=1000,
                   help="the migration's memory copy: time between the "
                        "destination's attach and the switch (default "
                        "1000; 0: none)")
    p.add_argument('--during', type=int, default=1,
                   help='chunks the guest writes during the memory copy '
                        '(default 1)')
    p.add_argument('--connection', choices=['local', 'file'],
                   default='local',
                   help='local: a loop device, as the default Cinder '
                        'connection; file: the mirror file')
    p.add_argument('--transport-url',
                   help='RabbitMQ to use (default: start a private one)')


class _Disk(object):
    """O_DIRECT 4 KiB reads and writes on an attached image."""

    def __init__(self, path):
        self.fd = os.open(path, os.O_RDWR | os.O_DIRECT)
        self.buf = mmap.mmap(-1, BLOCK)

    def write(self, offset, data):
        self.buf.seek(0)
        self.buf.write(data)
        os.pwrite(self.fd, self.buf, offset)

    def flush(self):
        os.fdatasync(self.fd)

    def read(self, offset):
        os.preadv(self.fd, [self.buf], offset)
        return bytes(self.buf[:BLOCK])

    def close(self):
        os.close(self.fd)
        self.buf.close()


def _path(attached):
    return attached.get('device') or attached['path']


def _record(migration, chunk, dirty):
    return ('handoff %d chunk %d of %d\n' % (migration, chunk, dirty)
            ).encode().ljust(BLOCK, b'.')


def _write(path, chunks, chunk_size, migration, first, total, pace=0.0):
    """Records ``first``.. of ``total`` on ``chunks``, ``pace`` s apart,
    then a flush.
    """
    disk = _Disk(path)
    try:
        for k, chunk in enumerate(chunks):
            time.sleep(pace)
            disk.write(chunk * chunk_size,
                       _record(migration, first + k, total))
        disk.flush()
    finally:
        disk.close()


def _migrate(api, hosts, source_path, image, migration, dirty, chunk_size,
             nchunks, block_device, precopy_s=0.0, during=0):
    """One migration from hosts[0] (the image at ``source_path`` there)
    to hosts[1]; its figures and the destination's path.
    """
    source, dest = hosts
    total = dirty + during
    start = (migration * total) % nchunks
    chunks = [(start + k) % nchunks for k in range(total)]
    _write(source_path, chunks[:dirty], chunk_size, migration, 0, total)
    attached = api.attach(dest, image, migrate_from=source,
                          block_device=block_device)
    if precopy_s:
        pace = precopy_s / (during + 1)
        _write(source_path, chunks[dirty:], chunk_size, migration, dirty,
               total, pace)
        time.sleep(pace)
    disk = _Disk(_path(attached))
    try:
        t0 = time.perf_counter()
        first = disk.read(chunks[-1] * chunk_size)
        first_ms = (time.perf_counter() - t0) * 1000
        t0 = time.perf_counter()
        second = disk.read(chunks[0] * chunk_size)
        baseline_ms = (time.perf_counter() - t0) * 1000
    finally:
        disk.close()
    incoming = api.status(dest)['attached'][image].get('incoming') or {}
    # Nova's post_live_migration deletes the source's attachment: the
    # handoff detached the image there already.
    left = image in api.status(source)['attached']
    phases = incoming.get('source_phases') or {}
    return {'first_read_ms': first_ms, 'baseline_ms': baseline_ms,
            'extra_ms': first_ms - baseline_ms,
            'waited_ms': incoming.get('waited_ms'),
            'source_commit_ms': phases.get('commit_ms'),
            'source_persist_ms': phases.get('persist_ms'),
            'source_detach_ms': phases.get('detach_ms'),
            'handoff_chunks': incoming.get('source_chunks'),
            'handed_off': bool(incoming.get('done')),
            'source_left_attached': left,
            'early_reads': incoming.get('early_reads', 0),
            'read_back': first == _record(migration, total - 1, total) and
            second == _record(migration, 0, total)}, _path(attached)


def run(repo, store_args, args, log):
    chunk_size = repo.chunk_size
    nchunks = args.size // chunk_size
    during = args.during if args.precopy_ms > 0 else 0
    if max(args.dirty) + during > nchunks or min(args.dirty) < 1 or \
            during < 0:
        raise ValueError('--dirty (+ --during): 1 to %d chunks of this '
                         'image' % nchunks)
    block_device = args.connection == 'local'
    broker = None if args.transport_url else \
        rabbitmq.private_broker(args.workdir, log)
    url = args.transport_url or broker.url
    hosts = ['bench-%s-%d' % (label, os.getpid()) for label in 'ab']
    processes = []
    api = None
    try:
        for host in hosts:
            workdir = os.path.join(args.workdir, host)
            os.makedirs(workdir)
            processes.append(agents.AgentProcess(
                workdir, repo.backend, agent_rpc.rpc_settings(
                    url, host, libvirt_uri='test:///default')).start())
        api = rpc_api.AgentAPI(transport_url=url, timeout=120)
        for host in hosts:
            agent_rpc.wait_rpc(api, host)
        image = api.create_image(hosts[0], 'handoff-bench', args.size)['id']
        path = _path(api.attach(hosts[0], image, block_device=block_device))
        result = {'size': args.size, 'chunk_size': chunk_size,
                  'connection': args.connection,
                  'precopy_ms': args.precopy_ms, 'during': during,
                  'migrations': args.migrations, 'runs': {}}
        samples = []
        migration = 0
        for dirty in args.dirty:
            runs = []
            for _ in range(args.migrations):
                figures, path = _migrate(api, hosts, path, image, migration,
                                         dirty, chunk_size, nchunks,
                                         block_device,
                                         args.precopy_ms / 1000.0, during)
                migration += 1
                hosts.reverse()
                runs.append(figures)
                log.event('migration', dirty=dirty, **{
                    k: round(v, 2) if isinstance(v, float) else v
                    for k, v in figures.items()})
            samples += runs
            entry = {name: common.summary([r[name] for r in runs])
                     for name in ('first_read_ms', 'baseline_ms',
                                  'extra_ms', 'waited_ms',
                                  'source_commit_ms', 'source_persist_ms',
                                  'source_detach_ms', 'handoff_chunks')}
            entry['early_reads'] = sum(r['early_reads'] for r in runs)
            result['runs'][str(dirty)] = entry
            log('dirty %4d chunks: extra wait p50 %.1f ms, p90 %.1f ms, max '
                '%.1f ms' % (dirty, entry['extra_ms']['median'],
                             entry['extra_ms']['p90'],
                             entry['extra_ms']['max']))
        api.detach(hosts[0], image, force=True)
        checks = common.Checks()
        checks.require('migrations handed off',
                       sum(r['handed_off'] for r in samples),
                       'each switch must wait for a handoff')
        checks.require_true('every migration handed off',
                            all(r['handed_off'] for r in samples),
                            'a destination never handed the image off',
                            value=sum(not r['handed_off'] for r in samples))
        checks.require_true('every read returned the source\'s writes',
                            all(r['read_back'] for r in samples),
                            'the destination read another version',
                            value=sum(not r['read_back'] for r in samples))
        checks.require_true('no source kept the image',
                            not any(r['source_left_attached']
                                    for r in samples),
                            'a handoff must detach the source',
                            value=sum(r['source_left_attached']
                                      for r in samples))
        if during:
            # The source checkpointed at the destination's attach: the
            # switch commits only what the guest wrote during the copy.
            late = sum(r['handoff_chunks'] is None or
                       r['handoff_chunks'] > during for r in samples)
            checks.require_true('the switch committed only the copy\'s '
                                'writes', not late,
                                'a source did not checkpoint at the '
                                'destination\'s attach', value=late)
        result['checks'] = checks.as_list()
        result['goal_extra_ms'] = 50
        return result
    finally:
        if api is not None:
            api.cleanup()
        agents.stop_all(processes)
        if broker is not None:
            broker.stop()
