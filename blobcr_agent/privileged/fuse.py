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

"""FUSE connections: which are mounted where, and aborting one.

Aborting a connection whose server died (so that its mount can be
cleared without hanging) writes to fusectl, which only root may mount.
"""

import logging
import os
import subprocess

from blobcr_agent import privileged
from blobcr_common import exception

LOG = logging.getLogger(__name__)

FUSECTL = '/sys/fs/fuse/connections'
# The mirror's mounts' fsname (mirror/service.py, native/fuseloop.c).
SOURCE = 'blobcr'


def mounts():
    """(connection id, mount point, source) of every FUSE mount this
    process sees, from /proc/self/mountinfo (never stat: a mount whose
    server is gone but whose connection is kept would not answer). Its
    paths are the kernel's: no symbolic link in them.
    """
    found = []
    with open('/proc/self/mountinfo') as f:
        for line in f:
            fields = line.split()
            dash = fields.index('-')
            if fields[dash + 1].startswith('fuse'):
                found.append((int(fields[2].split(':')[1]),
                              fields[4].encode().decode('unicode_escape'),
                              fields[dash + 2]))
    return found


def images_path():
    """The configured ``<mountpoint>/images``, normalized, not resolved."""
    return os.path.normpath(os.path.join(privileged.CONF.agent.mountpoint,
                                         'images'))


def images_mount():
    """(path, st_dev) of this agent's images mount: a FUSE mount named
    ``blobcr`` right at the configured ``<mountpoint>/images``. Matched
    on mountinfo's path, never by resolving a link: the agent's user
    owns the directories on the way, and could point them elsewhere.
    """
    path = images_path()
    found = [conn for conn, where, source in mounts()
             if where == path and source == SOURCE]
    if not found:
        raise exception.InvalidInput(
            'no BlobCR FUSE mount at %s ([agent] mountpoint must name it '
            'without symbolic links)' % path)
    return path, os.makedev(0, found[-1])


def live_connection(conn):
    """Whether FUSE connection ``conn`` exists (mounted or not)."""
    return os.path.isdir(os.path.join(FUSECTL, str(conn)))


def abort(conn):
    """Abort FUSE connection ``conn``: its requests fail from now on."""
    if privileged.as_root():
        return _abort(conn)
    return _abort_own_connection(conn)


@privileged.default.entrypoint
def _abort_own_connection(conn):
    top = os.path.normpath(privileged.CONF.agent.mountpoint)
    if type(conn) is not int or not any(
            found == conn and source == SOURCE and
            (path == top or path.startswith(top + os.sep))
            for found, path, source in mounts()):
        raise exception.InvalidInput(
            'FUSE connection %r is not a BlobCR mount under %s: not '
            'aborted' % (conn, top))
    return _abort(conn)


def _abort(conn):
    try:
        mounted = bool(os.listdir(FUSECTL))
    except OSError:
        mounted = False
    if not mounted:
        subprocess.run(['mount', '-t', 'fusectl', 'none', FUSECTL],
                       check=False, capture_output=True)
    try:
        with open(os.path.join(FUSECTL, str(conn), 'abort'), 'w') as f:
            f.write('1')
    except OSError as e:
        LOG.error('cannot abort FUSE connection %d: %s', conn, e)
