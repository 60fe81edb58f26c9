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

"""Whether an agent restart is a pause for the guests or fails their
disks, as the agent logs it once images/ is mounted and ``blobcr-manage
status`` shows it.

Only the kernel knows, and it says it once per mount, in FUSE_INIT
(connection.kernel_resends: FUSE_HAS_RESEND, protocol 7.40, Linux 6.9):
not from the kernel's release, which distributions backport into. The
connection must also be kept by a service manager (systemd's
``FileDescriptorStoreMax=``). Anything less, and a restart, an upgrade
or a crash of the agent fails every guest disk on the host.
"""

import logging
import platform
import struct

from blobcr_agent.mirror import connection

LOG = logging.getLogger(__name__)


def fuse_protocol(init):
    """The FUSE protocol version ('7.40') FUSE_INIT ``init`` offers."""
    if not init or len(init) < connection.FUSE_IN_HEADER + 8:
        return None
    return '%d.%d' % struct.unpack_from('<2I', init, connection.FUSE_IN_HEADER)


def verdict(init, stored, native=True, release=None):
    """What an agent restart does to the guests' disks, from the
    FUSE_INIT of images/'s mount (``init``; None: not mounted yet) and
    whether a service manager keeps its connection (``stored``).
    ``restart_keeps_disks`` is None while it is not known.
    """
    resends = connection.kernel_resends(init) if init else None
    found = {'kernel': release or platform.release(),
             'fuse_protocol': fuse_protocol(init),
             'kernel_resends': resends, 'descriptor_store': bool(stored)}
    if not native:
        keeps, why = False, ('io_loop = pyfuse3 keeps no connection: a '
                             'restart fails every guest disk on this host')
    elif init is None:
        keeps, why = None, 'not known until images/ is mounted'
    elif not resends:
        keeps, why = False, (
            'the kernel does not resend FUSE requests (FUSE_HAS_RESEND: '
            'protocol 7.40, Linux 6.9): a restart, an upgrade or a crash '
            'of the agent fails every guest disk on this host')
    elif not stored:
        keeps, why = False, (
            'no file descriptor store keeps the connection (systemd, '
            'FileDescriptorStoreMax=): a restart fails every guest disk '
            'on this host')
    else:
        keeps, why = True, ('the kernel resends FUSE requests and the '
                            'service manager keeps the connection: a '
                            'restart is a pause for the guests (an '
                            'upgrade too, unless it changes the libfuse '
                            'version or the kept session\'s format)')
    return dict(found, restart_keeps_disks=keeps, why=why)


def log(found):
    """Say it once: INFO if a restart keeps the disks, else WARNING."""
    say = LOG.info if found['restart_keeps_disks'] else LOG.warning
    say('agent restart keeps the guests\' disks: %s (kernel %s, FUSE '
        'protocol %s): %s', 'yes' if found['restart_keeps_disks'] else 'no',
        found['kernel'], found['fuse_protocol'] or '-', found['why'])
