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

"""A control socket: JSON lines over a UNIX stream socket.

Used by the mirror (``blobcr-mirror --control``) and by the agent's admin
socket (``[agent] admin_socket``). Each request is one JSON object with
an ``op`` and its arguments; each reply is one line,
``{"ok": true, "result": ...}`` or ``{"ok": false, "error": "message"}``.

Who may call: root (and the server's own user), plus the members of one
group if one is given (``[agent] admin_group``). The socket's mode says
so (0600, or 0660 owned by that group), and every connection's peer
credentials (SO_PEERCRED, SO_PEERGROUPS) are checked as well, so that a
socket or a directory left too open does not let anyone else in.
"""

import array
import errno
import grp
import json
import logging
import os
import pwd
import socket
import socketserver
import stat
import struct
import threading

from blobcr_common import exception

LOG = logging.getLogger(__name__)


class Dispatcher(object):
    """Route requests to the methods ``operations`` of ``target``."""

    def __init__(self, target, operations):
        self.target = target
        self.operations = frozenset(operations)

    def __call__(self, request):
        """One request (a decoded JSON value) -> one reply (a dict)."""
        try:
            if not isinstance(request, dict):
                raise exception.InvalidInput('a request is a JSON object')
            op = request.get('op')
            if op not in self.operations:
                raise exception.InvalidInput('unknown operation %r' % (op,))
            args = {k: v for k, v in request.items() if k != 'op'}
            return {'ok': True, 'result': getattr(self.target, op)(**args)}
        except TypeError as e:
            return {'ok': False, 'error': 'bad arguments: %s' % e}
        except exception.BlobCRError as e:
            return {'ok': False, 'error': str(e)}
        except Exception as e:
            LOG.exception('control request %r failed', request)
            return {'ok': False, 'error': 'internal error: %s' % e}


def _claim(path):
    """Clear ``path`` for a new socket: remove a stale socket left by a
    process that died; refuse a socket some process still serves (say
    another agent, with another state_path) and anything not a socket.
    """
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise exception.InvalidInput('%s exists and is not a socket: not '
                                     'replacing it' % path)
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(5)
    try:
        probe.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):
        LOG.info('removing the stale socket %s', path)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        return
    except OSError as e:
        # Say a full backlog (timeout): someone is there.
        raise exception.InvalidInput('another process may serve %s: %s'
                                     % (path, e))
    finally:
        probe.close()
    raise exception.InvalidInput('another process serves %s' % path)


# Linux's SO_PEERGROUPS (4.13+), which Python does not name.
SO_PEERGROUPS = getattr(socket, 'SO_PEERGROUPS', 59)
# Seconds a refused client has to send its request, and its longest line:
# it is read only so that the refusal reaches the client.
REFUSED_TIMEOUT = 5
REFUSED_LINE = 65536


def group_id(group):
    """The gid of a group name (or number); InvalidInput if unknown."""
    try:
        if isinstance(group, int) or group.isdigit():
            return grp.getgrgid(int(group)).gr_gid
        return grp.getgrnam(group).gr_gid
    except KeyError:
        raise exception.InvalidInput('no group %r on this host' % (group,))


def peer_credentials(sock):
    """``(pid, uid, gid, groups)`` of the process at the other end of a
    UNIX socket, as the kernel saw them when it connected.
    """
    pid, uid, gid = struct.unpack(
        '3i', sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                              struct.calcsize('3i')))
    groups = array.array('I')
    for size in (4 * 256, 4 * 65536):
        try:
            groups.frombytes(sock.getsockopt(socket.SOL_SOCKET,
                                             SO_PEERGROUPS, size))
            break
        except OSError as e:
            if e.errno == errno.ERANGE:
                continue
            if e.errno != errno.ENOPROTOOPT:
                raise
            # An old kernel: the group database instead.
            groups.extend(_database_groups(uid))
            break
    return pid, uid, gid, set(groups)


def _database_groups(uid):
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        return []
    return [g.gr_gid for g in grp.getgrall() if user in g.gr_mem]


def _user_name(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return '?'


class PeerCheck(object):
    """Who may call: uid 0, the server's own uid, and members (primary
    or supplementary) of ``group`` if given.
    """

    def __init__(self, group=None):
        self.group = group
        self.gid = None if group is None else group_id(group)

    def admit(self, sock):
        """True for root (or the server's user), False for a member of
        the group; PermissionError, saying why, for anyone else.
        """
        pid, uid, gid, groups = peer_credentials(sock)
        if uid in (0, os.geteuid()):
            return True
        if self.gid is not None and (gid == self.gid or self.gid in groups):
            return False
        who = 'uid %d (%s, pid %d)' % (uid, _user_name(uid), pid)
        if self.gid is None:
            raise PermissionError(
                'permission denied: %s is not root; only root may use this '
                'socket (or set [agent] admin_group)' % who)
        raise PermissionError(
            'permission denied: %s is neither root nor a member of group %s '
            '([agent] admin_group)' % (who, self.group))


def _make_parent(path, gid):
    """Make the socket's directory: mode 0700, or 0710 with group ``gid``
    (its members must reach the socket). A directory that exists is left
    as it is, with a warning if those members cannot search it.
    """
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        os.makedirs(parent, mode=0o700, exist_ok=True)
        if gid is not None:
            os.chown(parent, -1, gid)
            os.chmod(parent, 0o710)
        return
    if gid is None:
        return
    st = os.stat(parent)
    if not (st.st_mode & stat.S_IXOTH or
            (st.st_mode & stat.S_IXGRP and st.st_gid == gid)):
        LOG.warning('members of group %d cannot reach %s: its directory %s '
                    'is not searchable by them', gid, path, parent)


def serve(path, dispatch, name='blobcr-control', group=None,
          group_dispatch=None):
    """Serve ``dispatch`` on a socket at ``path`` from a thread, for root
    and the members of ``group`` (a name or gid; None: root only), whose
    requests go to ``group_dispatch`` if given; returns the server
    (``shutdown()`` stops it). Refuses (InvalidInput) a path where
    another process serves already, or an unknown group.
    """
    check = PeerCheck(group)

    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            try:
                root = check.admit(self.request)
            except PermissionError as e:
                self._refuse(str(e))
                return
            serving = dispatch if root else group_dispatch or dispatch
            for line in self.rfile:
                try:
                    request = json.loads(line)
                except ValueError:
                    reply = {'ok': False, 'error': 'not JSON'}
                else:
                    reply = serving(request)
                self.wfile.write(json.dumps(reply).encode() + b'\n')
                self.wfile.flush()

        def _refuse(self, why):
            LOG.warning('%s: refused a connection: %s', path, why)
            # Its request first (bounded), so that the client, which
            # writes before it reads, gets the answer and not EPIPE.
            self.request.settimeout(REFUSED_TIMEOUT)
            try:
                self.rfile.readline(REFUSED_LINE)
                self.wfile.write(json.dumps(
                    {'ok': False, 'error': why}).encode() + b'\n')
                self.wfile.flush()
            except OSError:
                pass

    class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
        daemon_threads = True

    _make_parent(path, check.gid)
    _claim(path)
    old = os.umask(0o077)       # 0600 from the start
    try:
        server = Server(path, Handler)
    finally:
        os.umask(old)
    try:
        if check.gid is not None:
            os.chown(path, -1, check.gid)
        os.chmod(path, 0o600 if check.gid is None else 0o660)
    except OSError:
        server.server_close()
        os.unlink(path)
        raise
    threading.Thread(target=server.serve_forever, daemon=True,
                     name=name).start()
    return server


class Client(object):
    """Client of a control socket."""

    what = 'the control socket'

    def __init__(self, path, timeout=600):
        self.path = path
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(timeout)
        try:
            self._sock.connect(path)
        except OSError as e:
            self._sock.close()
            raise exception.BackendUnavailable(
                'cannot reach %s at %s: %s' % (self.what, path, e))
        self._file = self._sock.makefile('rwb')

    def call(self, op, **args):
        """Run one operation; raise BlobCRError with the service's message
        if it failed.
        """
        self._file.write(json.dumps(dict(args, op=op)).encode() + b'\n')
        self._file.flush()
        line = self._file.readline()
        if not line:
            raise exception.BackendUnavailable('%s closed the connection'
                                               % self.what)
        reply = json.loads(line)
        if not reply.get('ok'):
            raise exception.BlobCRError(reply.get('error', 'failed'))
        return reply['result']

    def close(self):
        self._file.close()
        self._sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
