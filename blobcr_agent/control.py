"""A root-only control socket: JSON lines over a UNIX stream socket.

Used by the mirror (``blobcr-mirror --control``) and by the agent's admin
socket (``[agent] admin_socket``). Each request is one JSON object with
an ``op`` and its arguments; each reply is one line,
``{"ok": true, "result": ...}`` or ``{"ok": false, "error": "message"}``.
"""

import json
import logging
import os
import socket
import socketserver
import stat
import threading

from blobcr_agent import exception

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


def serve(path, dispatch, name='blobcr-control'):
    """Serve ``dispatch`` on a root-only socket at ``path`` from a thread;
    returns the server (``shutdown()`` stops it). Refuses (InvalidInput)
    a path where another process serves already.
    """

    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            for line in self.rfile:
                try:
                    request = json.loads(line)
                except ValueError:
                    reply = {'ok': False, 'error': 'not JSON'}
                else:
                    reply = dispatch(request)
                self.wfile.write(json.dumps(reply).encode() + b'\n')
                self.wfile.flush()

    class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
        daemon_threads = True

    os.makedirs(os.path.dirname(os.path.abspath(path)), mode=0o700,
                exist_ok=True)
    _claim(path)
    old = os.umask(0o077)       # root-only socket
    try:
        server = Server(path, Handler)
    finally:
        os.umask(old)
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
