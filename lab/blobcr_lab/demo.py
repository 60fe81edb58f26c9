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

"""blobcr-demo: the main job end to end, as an operator runs it.

A real ``blobcr-agent`` is started on its own configuration file and
driven only by ``blobcr-manage`` commands, each one a process of its own
(``import``, ``attach``, ``checkpoint``, ``export``, ``clone``,
``verify``, ``status``, ``tree``, ``detach``); then it is stopped with
SIGTERM and must exit 0.

The disk is a real 64 MiB ext4 image built with ``mkfs.ext4 -d`` (no
loop device): a job directory and ``/data/live.bin``, a 16 MiB file
whose blocks are allocated and written at mkfs time. The live workload
is a separate process that writes the attached raw file the way a
database in a guest updates its preallocated file in place: 4 KiB
O_DIRECT writes at random blocks of that file's extent. It never
touches the file system's metadata (not even the file's mtime: there is
no guest kernel here to journal it), so every version, taken while it
writes, must be a clean file system (``e2fsck -fn``) whose ``live.bin``
changed.

How a checkpoint is verified, and how the check can fail: write number
``seq`` goes to a block chosen by a seeded random sequence and holds a
header (magic, seq, block) and bytes derived from ``seq``, so the whole
disk after writes 1..S is known for any S ("replay(S)"). The writer is
never paused (quiesce ``none``: no VM here), so what a checkpoint must
hold is a cut of the write stream: exactly writes 1..S, with S at least
the writes completed before ``blobcr-manage checkpoint`` was started and
at most one past those completed when it returned. S is the highest seq
found in the version; the version must then equal replay(S) byte for
byte. A lost write, a write leaking in from after the cut, a torn block
or a stale chunk all fail it.

Then: every checkpoint is exported and checked (replay, ``e2fsck -fn``,
``live.bin`` read back with debugfs); the middle one is restored with
``clone`` + ``attach`` and read through the mirror (lazy fetch); the job
restarts on the restored disk, continues the same write sequence, is
checkpointed with ``--wait-stable``, and must equal an uninterrupted run
(replay(S + n)); ``verify`` re-reads every chunk of every version.

Exits 1 with the reason on the first failed check (the work directory
is then kept for a look at ``agent.log``). On success, unless
``--keep``, the images are deleted and garbage-collected and the work
directory (default ``/var/tmp/blobcr-demo``) is removed.
"""

import argparse
import hashlib
import json
import mmap
import multiprocessing
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import time
import uuid

from blobcr_lab import agents

DISK = 64 << 20
BLOCK = 4096
LIVE_FILE = 'data/live.bin'
LIVE_SIZE = 16 << 20
SEED = 20110901
MAGIC = b'BLOBCR-DEMO-W\0\0\0'
HEADER = struct.Struct('<16sQQ')
# Fixed so that two runs build the same disk (UUID and directory hash
# seed are otherwise random).
FS_UUID = 'b10bc0de-0000-4000-8000-000000000001'
HASH_SEED = 'b10bc0de-0000-4000-8000-000000000002'
MARKER = '.blobcr-demo'
CHECKPOINTS = 3
RESTART_WRITES = 2000


class DemoFailed(Exception):
    pass


def say(text):
    print('==> %s' % text, flush=True)


def detail(text):
    print('    %s' % text, flush=True)


def human(n):
    for unit in ('B', 'KiB', 'MiB', 'GiB'):
        if abs(n) < 1024 or unit == 'GiB':
            return ('%d %s' if unit == 'B' else '%.1f %s') % (n, unit)
        n /= 1024.0


def _tool(name, module):
    """The installed console script next to this Python, else -m."""
    path = os.path.join(os.path.dirname(sys.executable), name)
    if os.access(path, os.X_OK):
        return [path]
    return [sys.executable, '-m', module]


# -- the workload --------------------------------------------------------

def block_data(seq, index):
    head = HEADER.pack(MAGIC, seq, index)
    return head + hashlib.shake_256(head).digest(BLOCK - len(head))


def schedule(nblocks):
    """(seq, block of live.bin) of every write, seq from 1."""
    rng = random.Random(SEED)
    seq = 0
    while True:
        seq += 1
        yield seq, rng.randrange(nblocks)


def replay(base, offsets, upto):
    """The disk after writes 1..``upto`` of the workload."""
    last = {}
    for seq, index in schedule(len(offsets)):
        if seq > upto:
            break
        last[index] = seq
    image = bytearray(base)
    for index, seq in last.items():
        image[offsets[index]:offsets[index] + BLOCK] = block_data(seq, index)
    return image


def cut_of(image, offsets):
    """The newest write a disk holds (0: none)."""
    newest = 0
    for index, offset in enumerate(offsets):
        magic, seq, where = HEADER.unpack_from(image, offset)
        if magic == MAGIC:
            if where != index:
                raise DemoFailed('block %d holds the write meant for block '
                                 '%d' % (index, where))
            newest = max(newest, seq)
    return newest


def writer(path, offsets, start, stop_after, done, longest, stop):
    """The live workload (a process of its own): writes start+1, ...

    ``done`` is the last write completed, ``longest`` the longest write
    (seconds) since the demo last reset it: the stall the workload sees.
    O_DIRECT (qemu cache=none) so that a completed write is in the
    mirror, not in a page cache.
    """
    fd = os.open(path, os.O_RDWR | os.O_DIRECT)
    buf = mmap.mmap(-1, BLOCK)      # page-aligned, as O_DIRECT needs
    try:
        for seq, index in schedule(len(offsets)):
            if seq <= start:
                continue
            if stop.is_set() or (stop_after and seq > start + stop_after):
                break
            buf[:] = block_data(seq, index)
            t0 = time.perf_counter()
            if os.pwritev(fd, [buf], offsets[index]) != BLOCK:
                raise OSError('short write at seq %d' % seq)
            took = time.perf_counter() - t0
            done.value = seq
            if took > longest.value:
                longest.value = took
    finally:
        buf.close()
        os.close(fd)


class Workload(object):
    def __init__(self, path, offsets, start=0, stop_after=0):
        ctx = multiprocessing.get_context('fork')
        self.done = ctx.RawValue('Q', start)
        self.longest = ctx.RawValue('d', 0.0)
        self.stop_event = ctx.Event()
        self.start_seq = start
        self.proc = ctx.Process(
            target=writer, name='blobcr-demo-writer',
            args=(path, offsets, start, stop_after, self.done,
                  self.longest, self.stop_event))

    def start(self):
        self.t0 = time.monotonic()
        self.proc.start()
        return self

    def stop(self):
        self.stop_event.set()
        self.proc.join(60)
        if self.proc.is_alive():
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.join()
            raise DemoFailed('the writer did not stop (stuck in a write?)')
        self.elapsed = time.monotonic() - self.t0
        if self.proc.exitcode != 0:
            raise DemoFailed('the writer failed (exit %s)'
                             % self.proc.exitcode)
        return self.done.value

    def wait(self, timeout=120):
        self.proc.join(timeout)
        if self.proc.is_alive():
            raise DemoFailed('the writer did not finish in %d s' % timeout)
        if self.proc.exitcode != 0:
            raise DemoFailed('the writer failed (exit %s)'
                             % self.proc.exitcode)
        return self.done.value


# -- the disk --------------------------------------------------------------

def build_disk(path, workdir):
    """mkfs.ext4 -d: an ext4 image holding the job's files; returns its
    bytes and the byte offset of every block of live.bin in it.
    """
    tree_dir = os.path.join(workdir, 'fs-tree')
    files = {
        'job/README': b'a job whose state lives in /data/live.bin\n',
        'job/input.dat': hashlib.shake_256(b'input').digest(2 << 20),
        LIVE_FILE: hashlib.shake_256(b'live.bin at start').digest(LIVE_SIZE),
    }
    for name, data in files.items():
        full = os.path.join(tree_dir, name)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, 'wb') as f:
            f.write(data)
        os.utime(full, (1700000000, 1700000000))
    with open(path, 'wb') as f:
        f.truncate(DISK)
    _run(['mkfs.ext4', '-q', '-F', '-b', str(BLOCK), '-U', FS_UUID,
          '-E', 'hash_seed=%s,root_owner=0:0,lazy_itable_init=0' % HASH_SEED,
          '-d', tree_dir, path],
         env=dict(os.environ, E2FSPROGS_FAKE_TIME='1700000000'))
    shutil.rmtree(tree_dir)
    out = _run(['debugfs', '-R', 'blocks /' + LIVE_FILE, path])
    offsets = [int(b) * BLOCK for b in out.split()]
    if len(offsets) != LIVE_SIZE // BLOCK:
        raise DemoFailed('debugfs lists %d blocks for %s, expected %d'
                         % (len(offsets), LIVE_FILE, LIVE_SIZE // BLOCK))
    with open(path, 'rb') as f:
        base = f.read()
    if b''.join(base[o:o + BLOCK] for o in offsets) != files[LIVE_FILE]:
        raise DemoFailed('the blocks debugfs lists do not hold ' + LIVE_FILE)
    return base, offsets


def _run(argv, env=None):
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise DemoFailed('%s exited %d: %s' % (' '.join(argv),
                                               done.returncode,
                                               done.stderr.strip()))
    return done.stdout


def check_fs(path, live_expected, workdir):
    """e2fsck -fn, and live.bin read back through the file system."""
    done = subprocess.run(['e2fsck', '-fn', path], capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise DemoFailed('e2fsck -fn %s: exit %d\n%s'
                         % (path, done.returncode, done.stdout))
    out = os.path.join(workdir, 'live.bin.dump')
    _run(['debugfs', '-R', 'dump /%s %s' % (LIVE_FILE, out), path])
    with open(out, 'rb') as f:
        data = f.read()
    os.unlink(out)
    if data != live_expected:
        raise DemoFailed('%s read through ext4 differs from the workload\'s '
                         'writes' % LIVE_FILE)


def first_difference(a, b):
    for offset in range(0, min(len(a), len(b)), BLOCK):
        if a[offset:offset + BLOCK] != b[offset:offset + BLOCK]:
            return offset
    return min(len(a), len(b))


# -- the agent and blobcr-manage -------------------------------------------

class Agent(object):
    """blobcr-agent on the demo's configuration, stopped by its PID."""

    def __init__(self, workdir, conffile, socket_path, mountpoint):
        self.conffile = conffile
        self.socket = socket_path
        self.mountpoint = mountpoint
        self.logfile = os.path.join(workdir, 'agent.log')
        self.proc = None

    def start(self, timeout=60):
        log = open(self.logfile, 'ab')
        self.proc = subprocess.Popen(
            _tool('blobcr-agent', 'blobcr_agent.cmd.agent')
            + ['--config-file', self.conffile], stdout=log, stderr=log)
        log.close()
        images = os.path.join(self.mountpoint, 'images')
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise DemoFailed('blobcr-agent exited %d at start:\n%s'
                                 % (self.proc.returncode, self.log_tail()))
            if os.path.exists(self.socket) and os.path.ismount(images):
                return
            time.sleep(0.05)
        raise DemoFailed('blobcr-agent did not come up in %d s:\n%s'
                         % (timeout, self.log_tail()))

    def log_tail(self, lines=15):
        try:
            with open(self.logfile, errors='replace') as f:
                return ''.join(f.readlines()[-lines:])
        except OSError:
            return ''

    def stop(self, timeout=120):
        """SIGTERM; its exit status (None if it had to be killed)."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            # A killed agent leaves its mounts behind: clear them.
            for sub in ('images', 'versions'):
                subprocess.run(['fusermount3', '-u', '-z',
                                os.path.join(self.mountpoint, sub)],
                               capture_output=True)
            return None


class Manage(object):
    """blobcr-manage commands, one process each, as an operator types them.
    """

    def __init__(self, conffile):
        self.argv = _tool('blobcr-manage', 'blobcr_agent.cmd.manage') + [
            '--config-file', conffile]

    def __call__(self, *args, as_json=False, quiet=False):
        if not quiet:
            print('    $ blobcr-manage %s' % ' '.join(args), flush=True)
        t0 = time.monotonic()
        done = subprocess.run(
            self.argv + list(args) + (['--json'] if as_json else []),
            capture_output=True, text=True, timeout=600)
        self.elapsed = time.monotonic() - t0
        if done.returncode != 0:
            raise DemoFailed('blobcr-manage %s exited %d: %s'
                             % (' '.join(args), done.returncode,
                                done.stderr.strip()))
        if as_json:
            return json.loads(done.stdout)
        return done.stdout


def write_config(workdir, backend, ceph_conf):
    paths = {'conf': os.path.join(workdir, 'blobcr.conf'),
             'socket': os.path.join(workdir, 'agent.sock'),
             'mount': os.path.join(workdir, 'mnt'),
             'store': os.path.join(workdir, 'store')}
    sections = {
        # oslo.log writes to stdout by default: keep blobcr-manage's
        # stdout (--json) for its answer.
        'DEFAULT': {'use_stderr': 'true'},
        'agent': {'state_path': os.path.join(workdir, 'state'),
                  'mountpoint': paths['mount'],
                  'admin_socket': paths['socket'],
                  # One host, no broker; no VM to freeze or suspend.
                  'rpc_enabled': 'false', 'quiesce': 'none',
                  'shutdown_timeout': '60'},
        'proxy': {'enabled': 'false'},
        'repository': {'backend': backend}}
    if backend == 'local':
        sections['local_store'] = {'path': paths['store']}
        paths['where'] = paths['store']
    else:
        # A namespace of its own: the demo shares the pools with nothing.
        namespace = 'demo-%s' % uuid.uuid4().hex[:12]
        sections['rados'] = {'conffile': ceph_conf, 'namespace': namespace}
        paths['where'] = '%s, namespace %s' % (ceph_conf, namespace)
    agents.write_conf(paths['conf'], sections)
    return paths


def prepare_workdir(path):
    """A fresh work directory: a leftover of an earlier demo is wiped,
    anything else is refused.
    """
    if os.path.isdir(path) and os.listdir(path):
        if not os.path.exists(os.path.join(path, MARKER)):
            raise DemoFailed('%s is not empty and not a demo work directory'
                             % path)
        for sub in ('images', 'versions'):
            if os.path.ismount(os.path.join(path, 'mnt', sub)):
                raise DemoFailed('an agent still serves %s/mnt: stop it '
                                 'first (its pid is in %s/state/agent.lock)'
                                 % (path, path))
        shutil.rmtree(path)
    os.makedirs(path, exist_ok=True)
    open(os.path.join(path, MARKER), 'w').close()


# -- the job ---------------------------------------------------------------

class Demo(object):
    def __init__(self, workdir, backend, ceph_conf):
        self.workdir = workdir
        self.backend = backend
        self.paths = write_config(workdir, backend, ceph_conf)
        self.manage = Manage(self.paths['conf'])
        self.agent = Agent(workdir, self.paths['conf'], self.paths['socket'],
                           self.paths['mount'])
        self.workload = None
        self.timings = {}
        self.checked = []           # (ref, how)

    def verify_cut(self, label, data, lo, hi):
        """``data`` must be exactly writes 1..S with lo <= S <= hi."""
        if len(data) != DISK:
            raise DemoFailed('%s: %d bytes, expected %d'
                             % (label, len(data), DISK))
        cut = cut_of(data, self.offsets)
        if not lo <= cut <= hi:
            raise DemoFailed(
                '%s holds writes up to #%d, but the checkpoint ran while '
                'writes #%d..#%d completed' % (label, cut, lo, hi))
        expected = replay(self.base, self.offsets, cut)
        if data != expected:
            offset = first_difference(data, expected)
            raise DemoFailed(
                '%s is not the disk after writes 1..%d: first difference '
                'at byte %d (block %d)' % (label, cut, offset,
                                           offset // BLOCK))
        live = b''.join(expected[o:o + BLOCK] for o in self.offsets)
        return cut, live

    def run(self):
        t_start = time.monotonic()
        say('starting blobcr-agent (backend %s: %s; RPC off, quiesce none)'
            % (self.backend, self.paths['where']))
        t0 = time.monotonic()
        self.agent.start()
        self.timings['agent start'] = time.monotonic() - t0
        detail('pid %d, admin socket %s, mount %s'
               % (self.agent.proc.pid, self.paths['socket'],
                  self.paths['mount']))
        detail(self.manage('status').strip().replace('\n', '\n    '))

        say('building a 64 MiB ext4 disk with mkfs.ext4 -d (the job and its '
            '16 MiB /%s)' % LIVE_FILE)
        disk = os.path.join(self.workdir, 'disk.raw')
        self.base, self.offsets = build_disk(disk, self.workdir)
        t0 = time.monotonic()
        imported = self.manage('import', disk, 'disk', as_json=True)
        self.timings['import'] = time.monotonic() - t0
        self.image = imported['image']
        detail('image %s version %d: %d chunks, %s stored'
               % (self.image, imported['version'], imported['chunks_stored'],
                  human(imported['bytes_stored'])))

        say('attaching it through the agent')
        path = self.manage('attach', 'disk').strip()
        detail(path)

        say('live workload: 4 KiB O_DIRECT writes at random blocks of '
            '/%s, never paused' % LIVE_FILE)
        self.workload = Workload(path, self.offsets).start()
        checkpoints = []
        for _ in range(CHECKPOINTS):
            time.sleep(1.0)
            self.workload.longest.value = 0.0
            lo = self.workload.done.value
            result = self.manage('checkpoint', 'disk', as_json=True)
            hi = self.workload.done.value + 1
            stall = self.workload.longest.value * 1000
            checkpoints.append(dict(result, lo=lo, hi=hi, stall=stall,
                                    wall=self.manage.elapsed))
            detail('version %d: downtime %.1f ms (held %.1f ms), %d '
                   'chunks; the writer was at write #%d when the command '
                   'started, #%d when it returned; its longest write '
                   'meanwhile took %.1f ms'
                   % (result['version'], result['downtime_ms'],
                      result['held_ms'], result['chunks'], lo, hi - 1,
                      stall))
        time.sleep(0.5)
        total = self.workload.stop()
        self.workload_stats = (total, self.workload.elapsed)
        self.workload = None
        say('workload stopped after %d writes (%s) in %.1f s'
            % (total, human(total * BLOCK), self.workload_stats[1]))

        say('exporting every version (export waits until it is persisted) '
            'and checking it')
        t0 = time.monotonic()
        for number, lo, hi in [(imported['version'], 0, 0)] + [
                (c['version'], c['lo'], c['hi']) for c in checkpoints]:
            ref = 'disk@%d' % number
            out = os.path.join(self.workdir, 'export-v%d.raw' % number)
            self.manage('export', ref, out)
            with open(out, 'rb') as f:
                data = f.read()
            if lo == hi == 0 and data != self.base:
                raise DemoFailed('%s differs from the imported file' % ref)
            cut, live = self.verify_cut(ref, data, lo, hi)
            check_fs(out, live, self.workdir)
            os.unlink(out)
            for c in checkpoints:
                if c['version'] == number:
                    c['cut'] = cut
            self.checked.append((ref, 'export'))
            detail('%s = %s, byte for byte; e2fsck clean; /%s as written'
                   % (ref, 'the disk after writes 1..%d' % cut if cut
                      else 'disk.raw as imported', LIVE_FILE))
        self.timings['export and check 4 versions'] = time.monotonic() - t0

        middle = checkpoints[len(checkpoints) // 2]
        say('restoring version %d: clone, attach, read through the mirror'
            % middle['version'])
        detail('image %s' % self.manage(
            'clone', 'disk@%d' % middle['version'], 'restored').strip())
        t0 = time.monotonic()
        rpath = self.manage('attach', 'restored').strip()
        with open(rpath, 'rb') as f:
            data = f.read()
        self.timings['restore (attach + read 64 MiB)'] = (
            time.monotonic() - t0)
        cut, live = self.verify_cut('restored@1', data, middle['cut'],
                                    middle['cut'])
        check_fs(rpath, live, self.workdir)
        self.checked.append(('restored@1', 'attach'))
        detail('%s = disk@%d = the disk after writes 1..%d; e2fsck clean'
               % (rpath, middle['version'], cut))

        say('restarting the job on the restored disk: %d more writes, then '
            'checkpoint --wait-stable' % RESTART_WRITES)
        self.workload = Workload(rpath, self.offsets, start=cut,
                                 stop_after=RESTART_WRITES).start()
        last = self.workload.wait()
        self.workload = None
        if last != cut + RESTART_WRITES:
            raise DemoFailed('the restarted writer stopped at #%d' % last)
        result = self.manage('checkpoint', 'restored', '--wait-stable',
                             as_json=True)
        detail('version %d %s: downtime %.1f ms, %d chunks'
               % (result['version'], result['state'], result['downtime_ms'],
                  result['chunks']))
        ref = 'restored@%d' % result['version']
        out = os.path.join(self.workdir, 'export-restored.raw')
        self.manage('export', ref, out)
        with open(out, 'rb') as f:
            data = f.read()
        cut2, live = self.verify_cut(ref, data, last, last)
        check_fs(out, live, self.workdir)
        os.unlink(out)
        self.checked.append((ref, 'export'))
        self.restart = (result, cut, cut2)
        detail('%s = the disk of an uninterrupted run after writes 1..%d'
               % (ref, cut2))

        say('verify: re-read and check every chunk of every version')
        refs = ['disk@%d' % n for n in
                [imported['version']] + [c['version'] for c in checkpoints]]
        refs += ['restored@1', ref]
        t0 = time.monotonic()
        for r in refs:
            detail(self.manage('verify', r).strip())
        self.timings['verify 6 versions'] = time.monotonic() - t0

        say('what the agent serves, and the version tree')
        detail(self.manage('status').strip().replace('\n', '\n    '))
        tree = self.manage('tree')
        print(tree, end='', flush=True)
        self.versions = self.manage('tree', as_json=True, quiet=True)

        say('detaching (the writes made after the last checkpoint are '
            'dropped), stopping the agent with SIGTERM')
        detail(self.manage('detach', 'restored').strip())
        detail(self.manage('detach', 'disk', '--discard').strip())
        t0 = time.monotonic()
        status = self.agent.stop()
        self.timings['agent stop'] = time.monotonic() - t0
        if status != 0:
            raise DemoFailed('blobcr-agent exited %s on SIGTERM:\n%s'
                             % (status, self.agent.log_tail()))
        if os.path.ismount(os.path.join(self.paths['mount'], 'images')):
            raise DemoFailed('blobcr-agent exited but left its mount')
        detail('blobcr-agent (pid %d) exited 0, mount gone'
               % self.agent.proc.pid)
        self.timings['total'] = time.monotonic() - t_start
        self.summary(imported, checkpoints)

    def summary(self, imported, checkpoints):
        stored = {}
        for h in self.versions:
            for v in h['versions']:
                stored[(h['name'], v['number'])] = v
        total, elapsed = self.workload_stats
        print()
        say('summary')
        print('  backend         %s (%s)' % (self.backend,
                                             self.paths['where']))
        print('  disk            ext4, %s, image %s; v%d imported: %d '
              'chunks, %s stored' % (human(DISK), self.image,
                                     imported['version'],
                                     imported['chunks_stored'],
                                     human(imported['bytes_stored'])))
        print('  live workload   %d writes of 4 KiB (%s) in %.1f s, '
              'never paused' % (total, human(total * BLOCK), elapsed))
        # The longest write of the workload while the command ran: what
        # the checkpoint cost it (plus any other hiccup of the host).
        print('  %-8s %8s %10s %10s %11s %7s %10s %9s  %s'
              % ('version', 'command', 'downtime', 'held', 'max write',
                 'chunks', 'stored', 'persist',
                 'holds writes (allowed cut)'))
        for c in checkpoints:
            v = stored[('disk', c['version'])]
            print('  disk@%-3d %6.2f s %7.1f ms %7.1f ms %8.1f ms %7d %10s '
                  '%7.2f s  1..%d (#%d..#%d)'
                  % (c['version'], c['wall'], c['downtime_ms'],
                     c['held_ms'], c['stall'], c['chunks'],
                     human(v['stored_bytes']),
                     v['stable_at'] - v['created'], c['cut'], c['lo'],
                     c['hi']))
        result, cut, cut2 = self.restart
        print('  restart         restored@1 (= disk@%d, writes 1..%d) + %d '
              'writes -> restored@%d, downtime %.1f ms'
              % (checkpoints[len(checkpoints) // 2]['version'], cut,
                 cut2 - cut, result['version'], result['downtime_ms']))
        print('  timings         %s' % ', '.join(
            '%s %.2f s' % kv for kv in self.timings.items()))
        print('  verified        %d versions byte for byte (%s); e2fsck '
              'clean; every chunk re-read by verify'
              % (len(self.checked), ', '.join(r for r, _ in self.checked)))

    def abort(self):
        """On failure: stop what this demo started, by PID."""
        if self.workload is not None and self.workload.proc.is_alive():
            os.kill(self.workload.proc.pid, signal.SIGKILL)
            self.workload.proc.join()
        self.agent.stop()


def cleanup_store(manage):
    """Give the space back: delete both images, GC everything."""
    manage('delete', 'restored', quiet=True)
    manage('delete', 'disk', quiet=True)
    return manage('gc', '--grace', '0', quiet=True).strip()


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog='blobcr-demo', description=__doc__.split('\n')[0])
    parser.add_argument('--backend', choices=['local', 'rados'],
                        default='local')
    parser.add_argument('--ceph-conf', default='/etc/ceph/ceph.conf')
    parser.add_argument('--workdir', default='/var/tmp/blobcr-demo',
                        help='work directory (default %(default)s)')
    parser.add_argument('--keep', action='store_true',
                        help='keep the work directory (and the images)')
    args = parser.parse_args(argv)
    workdir = os.path.abspath(args.workdir)
    demo = None
    try:
        prepare_workdir(workdir)
        demo = Demo(workdir, args.backend, args.ceph_conf)
        demo.run()
    except (DemoFailed, KeyboardInterrupt) as e:
        if demo is not None:
            demo.abort()
        print('blobcr-demo: FAILED: %s' % (e or 'interrupted'),
              file=sys.stderr)
        print('blobcr-demo: work directory kept: %s' % workdir,
              file=sys.stderr)
        return 1
    except BaseException:
        if demo is not None:
            demo.abort()
        raise
    if args.keep:
        say('work directory kept: %s (config %s)'
            % (workdir, demo.paths['conf']))
    else:
        say('removing the demo\'s images (delete, gc) and %s' % workdir)
        detail(cleanup_store(demo.manage))
        shutil.rmtree(workdir)
    say('demo passed: every check held')
    return 0


if __name__ == '__main__':
    sys.exit(main())
