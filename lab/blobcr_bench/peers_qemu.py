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

"""The QEMU peers of ``blobcr-bench peers``, on a qemu-storage-daemon
that exports the disk as a file through FUSE (the application writes to
it with pwrite, as it writes to BlobCR's FUSE mirror):

* :class:`QemuBackupPeer`: a persistent dirty bitmap on the disk and one
  ``blockdev-backup sync=incremental`` per checkpoint (copy-before-write:
  the point in time is the job's start, the copy runs while the
  application writes) into a qcow2 target whose backing file is the
  previous target; durable once the job completed, the target was closed
  (flushed) and fsync'ed.
* :class:`Qcow2LayersPeer`, the naive baseline: ``blockdev-snapshot``
  onto a new external overlay per checkpoint, then a copy of the closed
  layer (fsync'ed) into a backup directory, where the copies form the
  same chain.

Both restart by opening the checkpoint's chain in a new daemon and
reading through its FUSE export.
"""

import json
import os
import queue
import shutil
import socket
import subprocess
import threading
import time

from blobcr_bench import peers_common

QSD = 'qemu-storage-daemon'
QEMU_IMG = 'qemu-img'


class QMPError(RuntimeError):
    pass


class QMP(object):
    """A QMP client: commands from any thread (one at a time), events
    collected by a reader thread.
    """

    def __init__(self, path, timeout=30):
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.sock = socket.socket(socket.AF_UNIX)
                self.sock.connect(path)
                break
            except OSError:
                self.sock.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
        self.file = self.sock.makefile('rwb')
        self.replies = queue.Queue()
        self.events = []
        self.cond = threading.Condition()
        self.lock = threading.Lock()
        json.loads(self.file.readline())            # the greeting
        self.reader = threading.Thread(target=self._read, daemon=True,
                                       name='qmp-reader')
        self.reader.start()
        self.call('qmp_capabilities')

    def _read(self):
        try:
            for line in self.file:
                msg = json.loads(line)
                if 'event' in msg:
                    with self.cond:
                        self.events.append(msg)
                        self.cond.notify_all()
                else:
                    self.replies.put(msg)
        except OSError:
            pass                    # the daemon quit: closed below
        self.replies.put({'error': {'desc': 'QMP connection closed'}})
        with self.cond:
            self.events.append(None)
            self.cond.notify_all()

    def call(self, command, **arguments):
        with self.lock:
            msg = {'execute': command}
            if arguments:
                msg['arguments'] = arguments
            self.file.write(json.dumps(msg).encode() + b'\n')
            self.file.flush()
            reply = self.replies.get(timeout=120)
        if 'error' in reply:
            raise QMPError('%s: %s' % (command, reply['error']['desc']))
        return reply['return']

    def wait_event(self, match, timeout=300):
        """The first event ``match(event)`` accepts (kept for others)."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for e in self.events:
                    if e is None:
                        raise QMPError('QMP connection closed')
                    if match(e):
                        return e
                left = deadline - time.monotonic()
                if left <= 0:
                    raise QMPError('no such event in %.0f s' % timeout)
                self.cond.wait(left)

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


class Daemon(object):
    """A qemu-storage-daemon with ``blockdevs``, the node ``export``
    exported through FUSE at ``mountpoint``, and a QMP monitor. Without
    ``export``, a daemon with its monitor only, which :meth:`add` later
    gives a chain and its export (a restart's, on a daemon that was
    running already).
    """

    def __init__(self, workdir, blockdevs=(), export=None, writable=False):
        self.workdir = workdir
        self.mountpoint = os.path.join(workdir, 'export')
        self.qmp_path = os.path.join(workdir, 'qmp.sock')
        open(self.mountpoint, 'a').close()
        args = [QSD]
        for b in blockdevs:
            args += ['--blockdev', json.dumps(b)]
        if export is not None:
            args += ['--export', json.dumps(self._export(export, writable))]
        args += ['--chardev', 'socket,id=qmp,path=%s,server=on,wait=off'
                 % self.qmp_path, '--monitor', 'chardev=qmp']
        self.log = open(os.path.join(workdir, 'qsd.log'), 'ab')
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL,
                                     stdout=self.log, stderr=self.log)
        self.qmp = None
        if export is not None:
            self._wait_mount()
        self.qmp = QMP(self.qmp_path)

    def _export(self, node, writable):
        return {'type': 'fuse', 'id': 'export', 'node-name': node,
                'mountpoint': self.mountpoint, 'writable': writable}

    def _wait_mount(self):
        deadline = time.monotonic() + 30
        while not os.path.ismount(self.mountpoint):
            if self.proc.poll() is not None:
                raise RuntimeError('qemu-storage-daemon exited: %s'
                                   % self._log_tail())
            if time.monotonic() > deadline:
                raise RuntimeError('qemu-storage-daemon export did not '
                                   'appear: %s' % self._log_tail())
            time.sleep(0.01)

    def add(self, blockdev, writable=False):
        """Open ``blockdev`` and export it (the daemon had none)."""
        self.qmp.call('blockdev-add', **blockdev)
        self.qmp.call('block-export-add',
                      **self._export(blockdev['node-name'], writable))
        self._wait_mount()

    def _log_tail(self):
        self.log.flush()
        with open(self.log.name, 'rb') as f:
            return f.read()[-2000:].decode(errors='replace')

    def stop(self):
        if self.qmp is not None:
            try:
                self.qmp.call('quit')
            except Exception:
                pass
            self.qmp.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        subprocess.run(['fusermount3', '-u', '-z', self.mountpoint],
                       capture_output=True, check=False)
        self.log.close()


def qcow2_node(name, path, backing=None, read_only=False):
    node = {'driver': 'qcow2', 'node-name': name, 'read-only': read_only,
            'file': {'driver': 'file', 'filename': path}}
    if backing is not False:
        node['backing'] = backing
    return node


def create_qcow2(path, size, cluster, backing=None):
    """A qcow2 file; ``backing`` is a file name relative to ``path``'s
    directory, so that copies of a chain stay a chain.
    """
    args = [QEMU_IMG, 'create', '-q', '-f', 'qcow2', '-o',
            'cluster_size=%d' % cluster]
    if backing:
        # -u: the size is given, so the backing file need not be opened
        # (it may still be written by a backup job).
        args += ['-u', '-b', backing, '-F', 'qcow2']
    subprocess.run(args + [path, str(size)], check=True, capture_output=True)


def fsync_path(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def allocated(path):
    return os.stat(path).st_blocks * 512


def refusal():
    """Why the QEMU peers cannot run here, or None."""
    for tool in (QSD, QEMU_IMG, 'fusermount3'):
        if shutil.which(tool) is None:
            return '%s is not installed' % tool
    if not os.path.exists('/dev/fuse'):
        return '/dev/fuse is missing (FUSE exports need it)'
    return None


class _ChainRestart(object):
    """A checkpoint's chain opened read-only in a daemon that runs
    already (started before the restart is timed, as BlobCR's mirror
    is).
    """

    def __init__(self, daemon, top):
        self.daemon = daemon
        t0 = time.perf_counter()
        daemon.add(qcow2_node('restart', top, backing=False,
                              read_only=True))
        self.fd = os.open(self.daemon.mountpoint, os.O_RDONLY)
        self.open_ms = (time.perf_counter() - t0) * 1000

    def read(self, offset, length):
        return os.pread(self.fd, length, offset)

    def close(self):
        """Stop the daemon; the restart's trace: the chain's opening."""
        os.close(self.fd)
        self.daemon.stop()
        return {'attach_ms': round(self.open_ms, 1)}


class _QemuPeer(peers_common.Peer):
    """What both QEMU peers share: the daemon, the FUSE file, a copy-out
    worker and the restart through a second daemon.
    """

    def __init__(self, args):
        super().__init__(args)
        self.cluster = args.granularity

    def _begin(self, workdir, size):
        self.workdir = workdir
        self.size = size
        self.index = 0

    def _add_image(self, node, path, backing=None):
        """A new qcow2 file (over ``backing``, named relative to it)
        opened in the daemon as ``node``, ahead of its checkpoint.
        """
        create_qcow2(path, self.size, self.cluster,
                     os.path.basename(backing) if backing else None)
        self.daemon.qmp.call('blockdev-add', **qcow2_node(node, path))

    def _start(self, workdir, blockdevs, export):
        self.daemon = Daemon(workdir, blockdevs, export, writable=True)
        self.fd = os.open(self.daemon.mountpoint, os.O_RDWR)
        self.worker = peers_common.CopyOutWorker(self.name)

    def write(self, offset, data):
        os.pwrite(self.fd, data, offset)

    def describe(self):
        version = subprocess.run([QSD, '--version'], capture_output=True,
                                 text=True).stdout.splitlines()
        return {'qemu': version[0] if version else None,
                'cluster_size': self.cluster, 'export': 'fuse'}

    def restart_prepare(self, cp):
        workdir = os.path.join(self.workdir, 'restart-%d' % cp['index'])
        os.makedirs(workdir, exist_ok=True)
        self.restart_daemon = Daemon(workdir)

    def restart_open(self, cp):
        daemon, self.restart_daemon = self.restart_daemon, None
        return _ChainRestart(daemon, cp['top'])

    def close(self):
        if getattr(self, 'restart_daemon', None) is not None:
            self.restart_daemon.stop()
            self.restart_daemon = None
        if getattr(self, 'worker', None) is not None:
            self.worker.stop()
        if getattr(self, 'fd', None) is not None:
            os.close(self.fd)
            self.fd = None
        if getattr(self, 'daemon', None) is not None:
            self.daemon.stop()
            self.daemon = None


class QemuBackupPeer(_QemuPeer):
    """Incremental backup with a persistent dirty bitmap."""

    name = 'qemu-backup'
    durable_at = 'backup target closed and fsync\'ed'
    BITMAP = 'peers'

    def open(self, workdir, size):
        self._begin(workdir, size)
        self.completed = {}
        disk = os.path.join(workdir, 'disk.qcow2')
        create_qcow2(disk, size, self.cluster)
        self.targets = os.path.join(workdir, 'backup')
        os.makedirs(self.targets)
        self._start(workdir, [qcow2_node('disk', disk)], 'disk')
        self._prepare(0)

    def _target(self, index):
        return os.path.join(self.targets, 'target-%d.qcow2' % index)

    def _prepare(self, index):
        self._add_image('target-%d' % index, self._target(index),
                        self._target(index - 1) if index else None)

    def checkpoint(self):
        t0 = time.perf_counter()
        # The bitmap is busy until the previous job completed (QEMU
        # refuses a second incremental job on it meanwhile, as libvirt
        # refuses a second backup job); closing and syncing its target
        # come after, behind the application.
        if self.index:
            while not self.completed[self.index - 1].wait(0.1):
                if self.worker.error is not None:
                    raise self.worker.error
        index = self.index
        backup = {'type': 'blockdev-backup', 'data': {
            'job-id': 'backup-%d' % index, 'device': 'disk',
            'target': 'target-%d' % index, 'auto-finalize': True,
            'auto-dismiss': True}}
        if index == 0:
            actions = [{'type': 'block-dirty-bitmap-add', 'data': {
                'node': 'disk', 'name': self.BITMAP, 'persistent': True,
                'granularity': self.cluster}}, backup]
            backup['data']['sync'] = 'full'
        else:
            actions = [backup]
            backup['data'].update(sync='incremental', bitmap=self.BITMAP)
        self.daemon.qmp.call('transaction', actions=actions)
        cp = self.acked(t0, index=index, top=self._target(index))
        self.index += 1
        self.completed[index] = threading.Event()
        self.worker.put(lambda: self._finish(cp))
        # The next job's target, after the ack (its backing file is
        # named, not opened: this one is still being written).
        self._prepare(index + 1)
        return cp

    def _finish(self, cp):
        job = 'backup-%d' % cp['index']
        try:
            event = self.daemon.qmp.wait_event(
                lambda e: e['event'] in ('BLOCK_JOB_COMPLETED',
                                         'BLOCK_JOB_CANCELLED') and
                e['data'].get('device') == job)
        finally:
            self.completed[cp['index']].set()
        if event['event'] != 'BLOCK_JOB_COMPLETED' or \
                event['data'].get('error'):
            raise RuntimeError('%s: %s' % (job, event))
        self.daemon.qmp.call('blockdev-del', **{
            'node-name': 'target-%d' % cp['index']})
        fsync_path(cp['top'])
        fsync_path(self.targets)
        self.durable(cp, copied=event['data']['offset'],
                     stored=allocated(cp['top']))


class Qcow2LayersPeer(_QemuPeer):
    """External snapshots, each closed layer copied out."""

    name = 'qcow2-layers'
    durable_at = 'copy of the closed layer fsync\'ed'

    def open(self, workdir, size):
        self._begin(workdir, size)
        self.layers = os.path.join(workdir, 'layers')
        self.copies = os.path.join(workdir, 'backup')
        os.makedirs(self.layers)
        os.makedirs(self.copies)
        create_qcow2(self._layer(0), size, self.cluster)
        self._start(workdir, [qcow2_node('layer-0', self._layer(0))],
                    'layer-0')
        self._prepare(1)

    def _layer(self, index):
        return os.path.join(self.layers, 'layer-%d.qcow2' % index)

    def _prepare(self, index):
        self._add_image('layer-%d' % index, self._layer(index),
                        self._layer(index - 1))

    def checkpoint(self):
        t0 = time.perf_counter()
        closed = self.index
        self.daemon.qmp.call('blockdev-snapshot', node='layer-%d' % closed,
                             overlay='layer-%d' % (closed + 1))
        cp = self.acked(t0, index=closed, top=os.path.join(
            self.copies, os.path.basename(self._layer(closed))))
        self.index += 1
        self.worker.put(lambda: self._finish(cp))
        self._prepare(closed + 2)       # the next overlay, after the ack
        return cp

    def _finish(self, cp):
        # The closed layer is read-only now: copy it out, then open the
        # overlay of the next checkpoint ahead.
        shutil.copyfile(self._layer(cp['index']), cp['top'])
        fsync_path(cp['top'])
        fsync_path(self.copies)
        size = os.path.getsize(cp['top'])
        self.durable(cp, copied=size, stored=allocated(cp['top']))
