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

"""Loop devices over mirror files: what stock Nova and os-brick open for
a ``local`` connection (issue 33).

Nova's LibvirtVolumeDriver gives the guest ``<disk type='block'>`` on
``connection_info['data']['device_path']`` and os-brick's LocalConnector
returns that path: with a loop device over the mirror file (direct I/O,
so the page cache holds no second copy and a flush reaches the mirror),
no file of Nova or os-brick is patched, and libvirt treats the disk as a
block device opened with ``cache=none`` (safe to live-migrate).

The agent owns their whole life: set up at attach, released at detach,
recorded in ``loop-devices.json`` under its state path. A connection
names a device by a link of the agent's, ``<state_path>/devices/<image>``,
never by its number: loop numbers are reused, and a number recorded by
Nova (its connection_info) could one day name another volume's device.

After an agent restart or a SIGKILL whose FUSE connection a service
manager kept (mirror/connection.py), the devices serve on: the next
agent keeps them. Without it, the connection died with the agent
before it, so its devices serve nothing: the next agent releases
them (one that a guest still holds open is freed by the kernel when the
guest closes it, and is never handed out before) and removes their
links; once the mirror re-attached those images it sets up new devices
behind the same links. A guest that opens its disk again (Nova's hard
reboot) reads its volume; one that kept the old device open gets I/O
errors until then, as a file disk on the dead mount would. A recorded
device that now backs another file belongs to someone else: a clear
error, never released or reused.
"""

import ctypes
import errno
import json
import logging
import os
import subprocess
import threading

from blobcr_agent import jsonfile
from blobcr_agent.privileged import loop as privileged_loop
from blobcr_common import exception

LOG = logging.getLogger(__name__)

# linux/prctl.h.
PR_SET_IO_FLUSHER = 57
PR_GET_IO_FLUSHER = 58
# What reading a loop device's status gives when its backing file is on
# a FUSE mount whose daemon died.
DEAD_MOUNT_ERRORS = (errno.ENOTCONN, errno.ECONNABORTED, errno.EIO)


class LoopDevices(object):
    """The loop devices of this agent's attached images."""

    def __init__(self, state_path, images_dir):
        self.path = os.path.join(state_path, 'loop-devices.json')
        self.links_dir = os.path.join(state_path, 'devices')
        self.images_dir = os.path.abspath(images_dir)
        self._lock = threading.Lock()
        self.devices = self._load()         # {image: {device, file, ...}}
        self.released_at_start = 0
        self.restored_at_start = 0
        self.closed = False

    # -- records -------------------------------------------------------

    def _load(self):
        return jsonfile.load(self.path, 'loop devices')

    def _save(self):
        jsonfile.save(self.path, self.devices)

    # -- the devices ---------------------------------------------------

    def link_of(self, image):
        """The stable name of ``image``'s device (what connections give)."""
        return os.path.join(self.links_dir, image)

    def setup(self, image, path):
        """The link to the loop device over ``path`` (image ``image``'s
        mirror file), set up if it has none yet.
        """
        with self._lock:
            known = self.devices.get(image)
            if known and backing_file(known['device']) == path and \
                    privileged_loop.identity(known['device']) == \
                    known.get('backing'):
                return self._link(image, known['device'])
            if known:
                self._release(image, known)
            if self.closed:
                raise exception.BackendUnavailable(
                    'the agent is stopping: no loop device for image %s'
                    % image)
            device = privileged_loop.attach(path)
            self.devices[image] = {'device': device, 'file': path,
                                   'backing': privileged_loop.identity(device)}
            self._save()
            LOG.info('image %s: loop device %s over %s', image, device, path)
            return self._link(image, device)

    def _link(self, image, device):
        # Replaced in one rename: an open of the link finds the old
        # device or the new one, never none. The directory is 0711:
        # QEMU's user opens a link by its path, nobody else lists them.
        os.makedirs(self.links_dir, mode=0o711, exist_ok=True)
        link = self.link_of(image)
        if os.path.islink(link) and os.readlink(link) == device:
            return link
        staged = '%s.%d.new' % (link, os.getpid())
        if os.path.lexists(staged):
            os.unlink(staged)
        os.symlink(device, staged)
        os.rename(staged, link)
        return link

    def _unlink(self, image):
        try:
            os.unlink(self.link_of(image))
        except FileNotFoundError:
            pass

    def device_of(self, image):
        known = self.devices.get(image)
        return known['device'] if known else None

    def release(self, image):
        """Detach the loop device of ``image`` (nothing if it has none).
        Raises InvalidInput if that device now backs another file.
        """
        with self._lock:
            known = self.devices.get(image)
            if known:
                self._release(image, known)

    def _release(self, image, known):
        # Judged by the backing file's device and inode, which the kernel
        # keeps from the set-up: its path no longer resolves once the
        # mount it was on died with an agent.
        device, path = known['device'], known['file']
        try:
            found = privileged_loop.identity(device)
        except OSError as e:
            if e.errno not in DEAD_MOUNT_ERRORS or not _names_file_of(
                    device, path):
                raise
            # The kernel asks the backing file's attributes, which a dead
            # FUSE mount cannot give: still ours (the same file name, on
            # a mount that died).
            found = known.get('backing')
        if found is not None and found != known.get('backing'):
            raise exception.InvalidInput(
                'loop device %s of image %s now backs %s, not %s: another '
                'process took it; it is left alone (release it with '
                '"losetup -d %s" if it is stale)'
                % (device, image, backing_file(device), path, device))
        self._unlink(image)
        if found is not None:
            privileged_loop.detach(device)
            LOG.info('image %s: loop device %s released', image, device)
        del self.devices[image]
        self._save()

    def release_all(self):
        """At a stop: the guests' disks end with the mount anyway (a busy
        device is detached once its last user closes it). No device is
        set up after it (a late attach, the restore after a restart).
        """
        with self._lock:
            self.closed = True
            for image, known in sorted(self.devices.items()):
                try:
                    self._release(image, known)
                except (exception.BlobCRError, OSError) as e:
                    LOG.error('image %s: loop device %s: %s', image,
                              known['device'], e)

    def recover(self, keep=False):
        """At start, before the mirror re-attaches anything: release the
        devices an earlier agent left over its dead mount (recorded, or
        set up and killed before the record) and remove their links.
        Returns the images that had one (restore() gives them new ones).
        With ``keep`` (the mount's connection was taken over, so they
        still serve), the recorded devices that still back their mirror
        file stay as they are.
        """
        had = set()
        seen = set()
        released = 0
        with self._lock:
            if keep:
                self._keep_live()
                self.released_at_start = 0
                return had
            for image, known in sorted(self.devices.items()):
                had.add(image)
                seen.add(known['device'])
                try:
                    self._release(image, known)
                    released += 1
                except (exception.BlobCRError, OSError) as e:
                    # Another process's now, or not to be read: never
                    # released blindly, and the agent comes up anyway.
                    LOG.error('image %s: loop device %s left alone: %s',
                              image, known['device'], e)
                    self._unlink(image)
                    del self.devices[image]
                    self._save()
            for device, path in _all_loops():
                # A device held open outlives its release (the kernel
                # detaches it at the last close): not counted twice.
                if device not in seen and \
                        path.startswith(self.images_dir + os.sep):
                    privileged_loop.detach(device)
                    LOG.warning('loop device %s over %s was left by an '
                                'earlier agent: released', device, path)
                    released += 1
            # Links with no record (killed between the two).
            if os.path.isdir(self.links_dir):
                for name in os.listdir(self.links_dir):
                    if name not in self.devices:
                        os.unlink(os.path.join(self.links_dir, name))
        self.released_at_start = released
        return had

    def _keep_live(self):
        backing = dict(_all_loops())
        for image, known in sorted(self.devices.items()):
            if backing.get(known['device']) != os.path.join(
                    self.images_dir, image):
                LOG.error('image %s: loop device %s no longer backs its '
                          'mirror file: forgotten', image, known['device'])
                self._unlink(image)
                del self.devices[image]
                self._save()
        for device, path in backing.items():
            if path.startswith(self.images_dir + os.sep) and \
                    device not in {k['device'] for k in
                                   self.devices.values()}:
                # Set up by an agent killed before it recorded it: left
                # alone (releasing it could wait on the mount, which has
                # no server yet); the next start without a kept mount
                # releases it.
                LOG.warning('loop device %s over %s is not recorded: left '
                            'alone', device, path)

    def restore(self, images, path_of):
        """After the mirror re-attached: a new device behind the same
        link for each of ``images`` that is mirrored again (``path_of``
        gives its file, None when it is not).
        """
        for image in sorted(images):
            path = path_of(image)
            if path is None:
                continue
            try:
                self.setup(image, path)
                self.restored_at_start += 1
            except exception.BlobCRError as e:
                LOG.error('image %s: no loop device after the restart: %s',
                          image, e)

    def status(self):
        return {'devices': {image: dict(known, link=self.link_of(image))
                            for image, known in self.devices.items()},
                'released_at_start': self.released_at_start,
                'restored_at_start': self.restored_at_start,
                'io_flusher': is_io_flusher()}


def become_io_flusher():
    """Mark this process (and the threads it starts afterwards) as one
    that serves writeback: the kernel then never makes it wait on, or
    reclaim memory through, the I/O it serves. Without it, under memory
    pressure the page cache writeback of a loop device over the mirror
    can wait for the mirror, which waits for memory: a deadlock (the
    loop driver and FUSE daemons such as NFS-Ganesha's set the same).
    Needs CAP_SYS_RESOURCE; False if refused or unknown.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_IO_FLUSHER, 1, 0, 0, 0) != 0:
        LOG.warning('not marked as an I/O flusher (prctl: %s): under '
                    'memory pressure, writes through loop devices can '
                    'stall', os.strerror(ctypes.get_errno()))
        return False
    return True


def is_io_flusher():
    return ctypes.CDLL(None).prctl(PR_GET_IO_FLUSHER, 0, 0, 0, 0) == 1


def _names_file_of(device, path):
    """Whether ``device``'s backing file is ``path``, or a file of that
    name on a mount detached since (the kernel then names it from the
    mount's root).
    """
    backing = backing_file(device) or ''
    return backing == path or backing == os.sep + os.path.basename(path)


def backing_file(device):
    """The file ``device`` loops over, or None if it is free."""
    for found, path in _all_loops():
        if found == device:
            return path
    return None


def _all_loops():
    out = _losetup('--list', '--json', '--output', 'NAME,BACK-FILE')
    if not out.strip():
        return []
    return [(d['name'], (d.get('back-file') or '').strip())
            for d in json.loads(out).get('loopdevices', [])]


def _losetup(*args):
    try:
        done = subprocess.run(['losetup'] + list(args), capture_output=True,
                              text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise exception.BackendUnavailable('losetup %s: %s'
                                           % (' '.join(args), e))
    if done.returncode != 0:
        raise exception.BackendUnavailable(
            'losetup %s failed: %s' % (' '.join(args),
                                       done.stderr.strip() or done.returncode))
    return done.stdout
