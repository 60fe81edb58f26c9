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

"""The FUSE connection of ``images/``, kept across agent restarts.

Guests' disks are files on ``images/``. The kernel's FUSE connection of
that mount lives as long as some process holds its /dev/fuse descriptor,
so the agent hands a duplicate of it to its service manager's file
descriptor store (sd_notify's FDSTORE=1; systemd with
``FileDescriptorStoreMax=``). The next agent, after a SIGTERM or a
SIGKILL alike, gets it back (LISTEN_FDS) and serves the same connection:
guests see a pause, not an error. It also needs what the kernel said
when the mount was made (FUSE_INIT, see native/fuseloop.c) and the inode
number each image's file had, which the kernel goes on using: both are
kept in ``.fuse-session.json`` in the mirror's cache directory.

Without a store (no $NOTIFY_SOCKET, or a manager that keeps nothing) a
dead agent's mount is dead: the next agent aborts it, and clears it.
"""

import base64
import logging
import os
import select
import struct
import subprocess
import threading

from blobcr_agent import _native
from blobcr_agent import jsonfile
from blobcr_agent.privileged import fuse
from blobcr_agent import sdnotify
from blobcr_common import exception

LOG = logging.getLogger(__name__)

FDNAME = 'blobcr-images'
SESSION = '.fuse-session.json'
# What a taken-over loop must share with the one that made the mount,
# beside libfuse: native/fuseloop.c's operations. Bumped when they change.
FORMAT = 1
# linux/fuse.h: FUSE_INIT's flags say that flags2 is set; flags2's bit 7
# is FUSE_HAS_RESEND (1 << 39), protocol 7.40, Linux 6.9.
FUSE_INIT_EXT = 1 << 30
FUSE_HAS_RESEND_FLAGS2 = 1 << 7
FUSE_IN_HEADER = 40


def kernel_resends(init):
    """Whether the kernel that sent FUSE_INIT ``init`` sends again, on
    request, what a dead server had read and not answered. Without it a
    connection taken over would keep those requests waiting forever:
    it is not kept at all.
    """
    if len(init) < FUSE_IN_HEADER + 20:
        return False
    major, minor, _readahead, flags, flags2 = struct.unpack_from(
        '<5I', init, FUSE_IN_HEADER)
    return major == 7 and minor >= 40 and bool(flags & FUSE_INIT_EXT) and \
        bool(flags2 & FUSE_HAS_RESEND_FLAGS2)


def connections(paths):
    """The FUSE connection ids (device minors) of the mounts at ``paths``."""
    wanted = {os.path.normpath(p) for p in paths}
    return [conn for conn, path, _source in fuse.mounts() if path in wanted]


class KeptConnection(object):
    """The connection of the mount at ``path`` and what taking it over
    needs, saved in ``cache_dir``.
    """

    def __init__(self, path, cache_dir):
        # As /proc/self/mountinfo names it: symbolic links resolved (not
        # the mount itself, whose server may be gone).
        self.path = os.path.join(
            os.path.realpath(os.path.dirname(os.path.abspath(path))),
            os.path.basename(path))
        self.state_path = os.path.join(cache_dir, SESSION)
        self._state = {'inodes': {}, 'next': 2}
        self._fd = None
        self._stored = False
        self._lock = threading.Lock()
        # open_loop() serves the kept connection (not a new mount).
        self.adopted = False

    @property
    def taken_over(self):
        return self._fd is not None

    @property
    def init(self):
        """The FUSE_INIT the kernel sent for this connection's mount, or
        None before there is one.
        """
        init = self._state.get('init')
        return base64.b64decode(init) if init else None

    @property
    def stored(self):
        """Whether a service manager keeps the connection."""
        return self._stored

    def claim(self, stored):
        """At start, before anything touches the mount: take the stored
        descriptor (``stored``, sdnotify.listen_fds()) if it is the
        connection still mounted at ``path``. True if this agent takes
        it over. Otherwise the store lets go of what it kept (which ends
        that connection once nothing else holds it) and a connection
        left at ``path`` is aborted, so that it can be cleared without
        hanging.
        """
        kept = stored.pop(FDNAME, [])
        fds = [fd for fd in kept if _alive(fd)]
        try:
            state = jsonfile.load(self.state_path, 'FUSE session')
        except exception.CorruptObject as e:
            LOG.error('%s', e)
            state = {}
        mounted = connections([self.path])
        # The same connection, the same libfuse and the same loop: the
        # replayed FUSE_INIT must negotiate what the first one did.
        if len(fds) == 1 and mounted and \
                state.get('conn') == mounted[-1] and state.get('init') and \
                state.get('libfuse') == _native.LIBFUSE_VERSION and \
                state.get('format') == FORMAT:
            self._fd = fds.pop()
            self._state = state
            self._state.setdefault('inodes', {})
            self._state['next'] = max(
                [state.get('next', 2)] +
                [n + 1 for n in self._state['inodes'].values()])
            LOG.info('taking over FUSE connection %d of %s (%d image '
                     'file(s))', mounted[-1], self.path,
                     len(self._state['inodes']))
        for fd in fds:
            os.close(fd)
        if self._fd is None:
            if kept:
                sdnotify.notify('FDSTOREREMOVE=1', 'FDNAME=' + FDNAME)
            for conn in mounted:
                LOG.warning('FUSE connection %d at %s cannot be taken over '
                            '(no stored descriptor, another connection or '
                            'another libfuse): aborting it', conn, self.path)
                fuse.abort(conn)
        return self.taken_over

    def open_loop(self):
        """The native loop of ``path``: on the kept connection, or on a
        new mount. Not serving yet (add the images, then start()).
        """
        if self._fd is not None:
            try:
                loop = _native.FuseLoop(
                    self.path, fd=self._fd,
                    init=base64.b64decode(self._state['init']))
                self._stored = self.adopted = True
                return loop
            except (OSError, ValueError) as e:
                # Guests would wait for an agent that cannot serve them:
                # they get errors instead, and a new mount serves.
                LOG.error('cannot take over FUSE connection %s of %s (%s): '
                          'aborting it and mounting afresh',
                          self._state.get('conn'), self.path, e)
                sdnotify.notify('FDSTOREREMOVE=1', 'FDNAME=' + FDNAME)
                for conn in connections([self.path]):
                    fuse.abort(conn)
                subprocess.run(['fusermount3', '-u', '-z', self.path],
                               check=False, capture_output=True)
                os.makedirs(self.path, exist_ok=True)
            finally:
                os.close(self._fd)
                self._fd = None
        return self._mount()

    def _mount(self):
        loop = _native.FuseLoop(self.path)
        fd, init = loop.device()
        mounted = connections([self.path])
        with self._lock:
            self._state = {'inodes': {}, 'next': 2, 'format': FORMAT,
                           'init': base64.b64encode(init).decode(),
                           'conn': mounted[-1] if mounted else None,
                           'libfuse': _native.LIBFUSE_VERSION}
            jsonfile.save(self.state_path, self._state)
        # Only where a manager keeps descriptors (systemd 254 says how
        # many in $FDSTORE; the unit sets it for older ones), and after
        # the session file: a stored descriptor always has its FUSE_INIT
        # on disk. Whether it was kept is logged by the mirror
        # (restarts.py).
        if kernel_resends(init) and _store_size() > 0 and mounted:
            # At most one, the current one, under the name.
            sdnotify.notify('FDSTOREREMOVE=1', 'FDNAME=' + FDNAME)
            self._stored = sdnotify.notify_fds(
                [fd], 'FDSTORE=1', 'FDNAME=' + FDNAME)
        return loop

    def inode(self, image_id):
        """The inode number of ``image_id``'s file: the one the kernel
        knows it by if it had one, else one never given on this
        connection (the kernel may still hold a detached image's), saved
        before the kernel can learn it.
        """
        with self._lock:
            inodes = self._state['inodes']
            if image_id not in inodes:
                inodes[image_id] = self._state['next']
                self._state['next'] += 1
                jsonfile.save(self.state_path, self._state)
            return inodes[image_id]

    def forget(self, image_id):
        with self._lock:
            if self._state['inodes'].pop(image_id, None) is not None:
                jsonfile.save(self.state_path, self._state)

    def release(self):
        """A real stop: the store lets the descriptor go."""
        if self._stored:
            sdnotify.notify('FDSTOREREMOVE=1', 'FDNAME=' + FDNAME)
            self._stored = False


def _alive(fd):
    """Whether descriptor ``fd``'s FUSE connection was not aborted (a
    dead one polls POLLERR); a dead one is closed.
    """
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    if any(events & (select.POLLERR | select.POLLHUP | select.POLLNVAL)
           for _fd, events in poller.poll(0)):
        os.close(fd)
        return False
    return True


def _store_size():
    try:
        return int(os.environ.get('FDSTORE', '0'))
    except ValueError:
        return 0
