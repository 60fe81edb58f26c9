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

"""A service manager's file descriptor store, as systemd keeps one
(sd_notify(3) FDSTORE=1, sd_listen_fds(3)), for services the lab runs.

The store listens on a datagram socket (the service's $NOTIFY_SOCKET),
keeps the descriptors a service sends with ``FDSTORE=1`` under their
``FDNAME``, drops them on ``FDSTOREREMOVE=1``, and passes them to the
service's next run as systemd does: from descriptor 3 on, with
LISTEN_FDS, LISTEN_FDNAMES and LISTEN_PID. ``python -m
blobcr_lab.fdstore FD[,FD...] NAME[:NAME...] -- COMMAND...`` is the
small exec step that puts them there (LISTEN_PID must be the service's
own PID, known only after the fork).
"""

import fcntl
import os
import socket
import sys
import tempfile
import threading


class FdStore(object):

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix='blobcr-fdstore-')
        self.path = os.path.join(self.dir, 'notify')
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM |
                                  socket.SOCK_CLOEXEC)
        self.sock.bind(self.path)
        self.fds = {}               # name -> descriptor
        self.messages = []          # every assignment received, in order
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._closed = False
        threading.Thread(target=self._receive, daemon=True,
                         name='fdstore').start()

    def _receive(self):
        while True:
            try:
                data, fds, _flags, _addr = socket.recv_fds(
                    self.sock, 4096, 16)
            except OSError:
                return              # closed
            fields = dict(line.split('=', 1) for line in
                          data.decode().splitlines() if '=' in line)
            with self._changed:
                self.messages.append(fields)
                name = fields.get('FDNAME', 'stored')
                if fields.get('FDSTORE') == '1':
                    for fd in fds:
                        os.set_inheritable(fd, False)
                        old = self.fds.pop(name, None)
                        if old is not None:
                            os.close(old)
                        self.fds[name] = fd
                    fds = []
                elif fields.get('FDSTOREREMOVE') == '1':
                    old = self.fds.pop(name, None)
                    if old is not None:
                        os.close(old)
                for fd in fds:
                    os.close(fd)
                self._changed.notify_all()

    def wait_for(self, name, timeout=30):
        """Wait until a descriptor named ``name`` is stored."""
        with self._changed:
            if not self._changed.wait_for(lambda: name in self.fds,
                                          timeout):
                raise RuntimeError('no descriptor %r was stored' % name)

    def wrap(self, args):
        """``args`` run with the stored descriptors (and the environment
        that names the store); pass_fds for Popen.
        """
        with self._lock:
            names, fds = list(self.fds), list(self.fds.values())
        if not fds:
            return list(args), ()
        return ([sys.executable, '-m', 'blobcr_lab.fdstore',
                 ','.join(map(str, fds)), ':'.join(names), '--'] +
                list(args), tuple(fds))

    def allow(self, uid):
        """Let user ``uid`` notify the store (its service runs as it), as
        systemd's notify socket lets a unit's User=.
        """
        os.chown(self.dir, uid, -1)
        os.chown(self.path, uid, -1)

    def env(self):
        env = dict(os.environ)
        # As systemd 254 sets them for FileDescriptorStoreMax=4.
        env.update(NOTIFY_SOCKET=self.path, FDSTORE='4')
        return env

    def close(self):
        """The manager forgets the service: its descriptors close."""
        with self._lock:
            fds, self.fds = list(self.fds.values()), {}
        for fd in fds:
            os.close(fd)
        self.sock.close()
        try:
            os.unlink(self.path)
            os.rmdir(self.dir)
        except OSError:
            pass


def main(argv):
    """Move descriptors FD,... to 3, 4, ... and exec COMMAND with
    sd_listen_fds(3)'s variables naming them.
    """
    fds = [int(fd) for fd in argv[0].split(',')]
    names = argv[1]
    command = argv[argv.index('--') + 1:]
    targets = range(3, 3 + len(fds))
    # Above the targets first: a source may be one of them.
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3 + len(fds))
            for fd in fds]
    for fd in fds:
        if fd not in targets:
            os.close(fd)
    for target, fd in zip(targets, high):
        os.dup2(fd, target, inheritable=True)
        os.close(fd)
    os.environ.update(LISTEN_FDS=str(len(fds)), LISTEN_FDNAMES=names,
                      LISTEN_PID=str(os.getpid()))
    os.execvp(command[0], command)


if __name__ == '__main__':
    main(sys.argv[1:])
