"""Client of the mirror's control socket (JSON lines)."""

import json
import socket

from blobcr_agent import exception


class MirrorClient(object):

    def __init__(self, path, timeout=600):
        self.path = path
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(timeout)
        try:
            self._sock.connect(path)
        except OSError as e:
            raise exception.BackendUnavailable(
                'cannot reach the mirror at %s: %s' % (path, e))
        self._file = self._sock.makefile('rwb')

    def call(self, op, **args):
        """Run one operation; raise BlobCRError with the service's message
        if it failed.
        """
        self._file.write(json.dumps(dict(args, op=op)).encode() + b'\n')
        self._file.flush()
        line = self._file.readline()
        if not line:
            raise exception.BackendUnavailable('the mirror closed the '
                                               'connection')
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
