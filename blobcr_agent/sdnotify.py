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

"""systemd's service notification (sd_notify(3)) for ``Type=notify``
units (etc/systemd/blobcr-agent.service): one datagram to the socket
$NOTIFY_SOCKET names, with file descriptors for the manager's store.
Without that variable (not under systemd) it does nothing.
"""

import logging
import os
import socket

LOG = logging.getLogger(__name__)


def notify(*assignments):
    """Send ``assignments`` (``'READY=1'``, ``'STATUS=...'``); True if
    a service manager listens.
    """
    return notify_fds([], *assignments)


def notify_fds(fds, *assignments):
    """Send ``assignments`` with the file descriptors ``fds`` (for
    ``FDSTORE=1``: the manager keeps duplicates and passes them to the
    service's next run, see listen_fds()); True if a manager listens.
    """
    path = os.environ.get('NOTIFY_SOCKET')
    if not path:
        return False
    if path.startswith('@'):            # an abstract socket
        path = '\0' + path[1:]
    try:
        with socket.socket(socket.AF_UNIX,
                           socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
            s.connect(path)
            if fds:
                socket.send_fds(s, ['\n'.join(assignments).encode()], fds)
            else:
                s.sendall('\n'.join(assignments).encode())
    except OSError as e:
        # The service runs on; only its manager's view of it is late.
        LOG.warning('cannot notify the service manager at %s: %s',
                    os.environ.get('NOTIFY_SOCKET'), e)
        return False
    return True


LISTEN_FDS_START = 3


def listen_fds():
    """The descriptors the service manager passed to this process
    (sd_listen_fds(3)): {name: [fd, ...]}, close-on-exec; the variables
    that name them are removed, so that no child takes them for its own.
    """
    env = os.environ
    try:
        mine = int(env.get('LISTEN_PID', '')) == os.getpid()
        count = int(env.get('LISTEN_FDS', '0'))
    except ValueError:
        mine, count = False, 0
    names = env.get('LISTEN_FDNAMES', '').split(':')
    for var in ('LISTEN_PID', 'LISTEN_FDS', 'LISTEN_FDNAMES'):
        env.pop(var, None)
    found = {}
    if not mine:
        return found
    for k in range(count):
        fd = LISTEN_FDS_START + k
        os.set_inheritable(fd, False)
        name = names[k] if k < len(names) else 'unknown'
        found.setdefault(name, []).append(fd)
    return found
