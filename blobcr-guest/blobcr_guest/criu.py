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

"""Process-level checkpointing with CRIU, as BLCR did in the paper (§3.3).

A process tree is dumped into a fresh ``dump-*`` directory under the
directory given; only when CRIU succeeded does the ``latest`` symlink
switch to it, so the disk snapshot taken next holds either the whole new
dump or the previous one, never half of one. The CRIU flags of a dump are
kept beside it (``blobcr.json``) because a restore must use the same.

``checkpoint`` makes the dump and the disk snapshot consistent: CRIU
leaves the tree stopped (``--leave-stopped``), the disk snapshot is
requested while it is, and only then is the tree continued (SIGCONT) or
killed. A tree left running by the dump would go on writing before the
snapshot, which would then hold files newer than the process images.
"""

import json
import os
import shutil
import signal
import subprocess
import time

from blobcr_guest import exception

LATEST = 'latest'
META = 'blobcr.json'
PREFIX = 'dump-'
# criu lives in sbin, which a non-login PATH often lacks.
_SEARCH = ('/usr/local/sbin', '/usr/sbin', '/sbin')
# File systems a disk snapshot does not hold.
VOLATILE = ('tmpfs', 'ramfs', 'proc', 'sysfs', 'devtmpfs', 'nfs', 'nfs4',
            'cifs', '9p', 'virtiofs')


def find_criu(binary=None):
    """The criu executable, or CriuError saying how to get one."""
    if binary:
        if os.path.isfile(binary) and os.access(binary, os.X_OK):
            return binary
        found = shutil.which(binary)
        if found:
            return found
        raise exception.CriuError('criu binary %s not found' % binary)
    found = shutil.which('criu') or shutil.which(
        'criu', path=os.pathsep.join(_SEARCH))
    if not found:
        raise exception.CriuError('criu is not installed (no criu in PATH '
                                  'or %s): install the "criu" package'
                                  % ', '.join(_SEARCH))
    return found


def flags(shell_job=True, tcp_established=False, file_locks=False,
          extra=()):
    args = []
    if shell_job:
        args.append('--shell-job')
    if tcp_established:
        args.append('--tcp-established')
    if file_locks:
        args.append('--file-locks')
    return args + list(extra)


def dump(pid, directory, leave_running=True, shell_job=True,
         tcp_established=False, file_locks=False, extra=(), binary=None,
         leave_stopped=False):
    """Dump the tree of ``pid`` under ``directory``; returns the dump dir.

    ``leave_stopped`` leaves the tree stopped (whatever
    ``leave_running`` says); otherwise it keeps running, or CRIU kills
    it when ``leave_running`` is false. For a dump that a disk snapshot
    must match, use ``checkpoint``.
    """
    criu = find_criu(binary)
    _check_root()
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        raise exception.CriuError('no process %d' % pid)
    except PermissionError:
        pass                    # criu will say more
    directory = os.path.abspath(directory)
    os.makedirs(directory, exist_ok=True)
    stamp = time.time()
    name = '%s%s.%06d-%d' % (PREFIX, time.strftime(
        '%Y%m%dT%H%M%S', time.gmtime(stamp)), int(stamp % 1 * 1e6), pid)
    images = os.path.join(directory, name)
    os.mkdir(images)
    options = flags(shell_job, tcp_established, file_locks, extra)
    args = [criu, 'dump', '--tree', str(pid), '--images-dir', images,
            '--log-file', os.path.join(images, 'dump.log'), '-v2']
    if leave_stopped:
        args.append('--leave-stopped')
    elif leave_running:
        args.append('--leave-running')
    _run(args + options, os.path.join(images, 'dump.log'), 'dump')
    with open(os.path.join(images, META), 'w') as f:
        json.dump({'pid': pid, 'time': stamp, 'leave_running': leave_running,
                   'leave_stopped': leave_stopped, 'shell_job': shell_job,
                   'tcp_established': tcp_established,
                   'file_locks': file_locks, 'extra': list(extra)}, f)
    # A symlink switched by rename: the latest complete dump, atomically.
    link = os.path.join(directory, LATEST)
    tmp = link + '.tmp'
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(name, tmp)
    os.replace(tmp, link)
    for entry in os.listdir(directory):
        path = os.path.join(directory, entry)
        if (entry.startswith(PREFIX) and entry != name and
                os.path.isdir(path) and not os.path.islink(path)):
            shutil.rmtree(path, ignore_errors=True)
    return images


def checkpoint(pid, directory, request, leave_running=True, **options):
    """Dump the tree of ``pid``, then call ``request()`` (sync the disks
    and ask for their snapshot) while the tree is still stopped as CRIU
    left it, so that the snapshot holds the files as the dump saw them.

    Returns ``(images, request())``. Afterwards, and in a ``finally``,
    the dumped tree is continued with SIGCONT; with ``leave_running``
    false it is killed instead, but only once ``request()`` returned: a
    tree whose snapshot was not taken is continued, not lost. Processes
    that were stopped before the dump are left stopped. ``options`` go
    to ``dump``.
    """
    stopped_before = set(p for p in tree(pid) if _state(p) == 'T')
    dumped = killed = False
    try:
        images = dump(pid, directory, leave_stopped=True,
                      leave_running=leave_running, **options)
        dumped = True
        result = request()
        if not leave_running:
            signal_tree(pid, signal.SIGKILL)
            killed = True
        return images, result
    finally:
        if not killed:
            # After a failed dump CRIU has put the tree back as it was;
            # only what is stopped now (CRIU killed in the middle) is
            # continued, so that no process gets a stray SIGCONT.
            signal_tree(pid, signal.SIGCONT, skip=stopped_before,
                        only_stopped=not dumped)


def tree(pid):
    """``pid`` and its descendants, parents first (from /proc)."""
    children = {}
    for entry in os.listdir('/proc'):
        if not entry.isdigit():
            continue
        stat = _stat(int(entry))
        if stat:
            children.setdefault(int(stat[1]), []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        current = todo.pop(0)
        if current in found:
            continue
        found.append(current)
        todo.extend(sorted(children.get(current, ())))
    return found


def signal_tree(pid, signum, skip=(), only_stopped=False):
    """Send ``signum`` to the tree of ``pid``; the pids it reached."""
    sent = []
    for target in tree(pid):
        if target in skip or (only_stopped and _state(target) != 'T'):
            continue
        try:
            os.kill(target, signum)
        except OSError:             # gone already
            continue
        sent.append(target)
    return sent


def _stat(pid):
    """The fields of /proc/PID/stat after the command name, or None."""
    try:
        with open('/proc/%d/stat' % pid) as f:
            text = f.read()
    except OSError:
        return None
    fields = text.rpartition(')')[2].split()
    return fields if len(fields) > 1 else None


def _state(pid):
    stat = _stat(pid)
    return stat[0] if stat else None


def images_of(directory):
    """The dump to restore: ``latest`` or a directory of CRIU images."""
    latest = os.path.join(directory, LATEST)
    if os.path.isdir(latest):
        return os.path.realpath(latest)
    if os.path.isfile(os.path.join(directory, 'pstree.img')):
        return os.path.abspath(directory)
    raise exception.CriuError('no CRIU dump in %s (neither %s/ nor '
                              'pstree.img)' % (directory, LATEST))


def restore(directory, shell_job=None, tcp_established=None,
            file_locks=None, extra=(), binary=None):
    """Restore the latest dump detached (``criu restore -d``); its pid.

    Flags left None are those the dump used.
    """
    criu = find_criu(binary)
    _check_root()
    images = images_of(directory)
    meta = {}
    try:
        with open(os.path.join(images, META)) as f:
            meta = json.load(f)
    except (OSError, ValueError):
        pass                    # images dumped by hand: plain defaults

    def pick(value, key, default):
        return meta.get(key, default) if value is None else value

    options = flags(pick(shell_job, 'shell_job', True),
                    pick(tcp_established, 'tcp_established', False),
                    pick(file_locks, 'file_locks', False),
                    list(meta.get('extra', [])) + list(extra))
    pidfile = os.path.join(images, 'restore.pid')
    if os.path.exists(pidfile):
        os.unlink(pidfile)
    log = os.path.join(images, 'restore.log')
    _run([criu, 'restore', '--restore-detached', '--images-dir', images,
          '--log-file', log, '--pidfile', pidfile, '-v2'] + options, log,
         'restore')
    try:
        with open(pidfile) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return meta.get('pid')


def filesystem_type(path):
    """The type of the file system ``path`` is on, from mountinfo."""
    path = os.path.realpath(path)
    best, kind = '', None
    try:
        with open('/proc/self/mountinfo') as f:
            for line in f:
                fields = line.split()
                sep = fields.index('-')
                mount = fields[4].replace('\\040', ' ')
                inside = path == mount or path.startswith(
                    mount.rstrip('/') + '/')
                if inside and len(mount) >= len(best):
                    best, kind = mount, fields[sep + 1]
    except (OSError, ValueError, IndexError):
        return None
    return kind


def _check_root():
    if os.geteuid() != 0:
        raise exception.CriuError('CRIU needs root')


def _run(args, log, what):
    try:
        result = subprocess.run(args, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, timeout=600)
    except subprocess.TimeoutExpired:
        raise exception.CriuError('criu %s took over 600s' % what)
    except OSError as e:
        raise exception.CriuError('cannot run %s: %s' % (args[0], e))
    if result.returncode != 0:
        raise exception.CriuError('criu %s failed (exit %d): %s [log: %s]'
                                  % (what, result.returncode,
                                     _errors(result, log), log))


def _errors(result, log):
    """The lines of CRIU's output that say why, most telling first."""
    lines = []
    try:
        with open(log, errors='replace') as f:
            lines = [line.strip() for line in f if 'Error' in line]
    except OSError:
        pass
    lines += [line.strip() for line in (result.stderr or b'').decode(
        errors='replace').splitlines() if line.strip()]
    # "exited, status=N" is a helper CRIU probes with (iptables when it
    # is absent): noise. Of the rest, the first error is the cause.
    telling = [line for line in lines if 'exited, status=' not in line]
    seen = []
    for line in telling or lines:
        if line not in seen:
            seen.append(line)
    return ' | '.join(seen[:4]) or 'no message'
