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

"""The real ``openstack`` CLI, imported once: a fork per call.

Starting the CLI costs about two seconds of imports on this machine,
and the tests run it hundreds of times. This server imports
openstackclient once; for each request (a JSON ``{"argv", "env"}`` on a
Unix socket) it forks, and the child runs the CLI's own ``main`` with
that environment and argv, its stdin on /dev/null and its stdout and
stderr in files, then answers ``{"rc", "stdout", "stderr"}``. The
commands, their parsing, authentication and output are the CLI's; only
the imports are shared. OpenStackStack.openstack uses it when the stack
started one (not with BLOBCR_OSC_FORK=0).

Usage: python -m blobcr_lab.osc_server SOCKET
"""

import io
import json
import os
import signal
import socket
import sys
import tempfile


def request(path, argv, env, timeout):
    """Run the CLI through the server at ``path``: (rc, stdout, stderr).
    Raises OSError when the server cannot be reached.
    """
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout)
        conn.connect(path)
        conn.sendall(json.dumps({'argv': argv, 'env': env}).encode())
        conn.shutdown(socket.SHUT_WR)
        answer = _read_all(conn)
    if not answer:
        raise OSError('the openstack CLI server at %s answered nothing'
                      % path)
    done = json.loads(answer)
    return done['rc'], done['stdout'], done['stderr']


def _read_all(conn):
    chunks = []
    while True:
        chunk = conn.recv(1 << 16)
        if not chunk:
            return b''.join(chunks)
        chunks.append(chunk)


def _run(conn, main):
    """In the forked child: one CLI call, answered on ``conn``."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    asked = json.loads(_read_all(conn))
    os.environ.clear()
    os.environ.update(asked['env'])
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    os.dup2(out.fileno(), 1)
    os.dup2(err.fileno(), 2)
    sys.stdin = io.TextIOWrapper(io.FileIO(0, 'r', closefd=False))
    sys.stdout = io.TextIOWrapper(io.FileIO(1, 'w', closefd=False))
    sys.stderr = io.TextIOWrapper(io.FileIO(2, 'w', closefd=False))
    sys.argv = ['openstack'] + asked['argv']
    try:
        rc = main(asked['argv'])
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 1
    except BaseException:
        import traceback
        traceback.print_exc()
        rc = 1
    sys.stdout.flush()
    sys.stderr.flush()
    texts = []
    for f in (out, err):
        f.seek(0)
        texts.append(f.read().decode(errors='replace'))
    conn.sendall(json.dumps({'rc': rc or 0, 'stdout': texts[0],
                             'stderr': texts[1]}).encode())


def serve(path):
    sys.argv[0] = 'openstack'       # the program name cliff shows
    # The shell, and the command modules the tests use most, imported
    # before any fork.
    import openstackclient.identity.v3.token  # noqa: F401
    from openstackclient import shell
    import openstackclient.volume.v3.volume  # noqa: F401
    import openstackclient.volume.v3.volume_snapshot  # noqa: F401
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)     # children reaped
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    print('ready', flush=True)
    while True:
        conn, _ = listener.accept()
        if os.fork() == 0:
            listener.close()
            try:
                _run(conn, shell.main)
            finally:
                os._exit(0)
        conn.close()


if __name__ == '__main__':
    serve(sys.argv[1])
