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
$NOTIFY_SOCKET names. Without that variable (not under systemd) it does
nothing.
"""

import logging
import os
import socket

LOG = logging.getLogger(__name__)


def notify(*assignments):
    """Send ``assignments`` (``'READY=1'``, ``'STATUS=...'``); True if
    a service manager listens.
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
            s.sendall('\n'.join(assignments).encode())
    except OSError as e:
        # The service runs on; only its manager's view of it is late.
        LOG.warning('cannot notify the service manager at %s: %s',
                    os.environ.get('NOTIFY_SOCKET'), e)
        return False
    return True
