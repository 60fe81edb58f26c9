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
recorded in ``loop-devices.json`` under its state path so that the next
agent, after a restart or a SIGKILL, releases those it finds still
pointing into its mount (their FUSE connection died with the agent
before it: they can serve nothing). A recorded device that now backs
another file belongs to someone else: a clear error, never released or
reused.
"""

import ctypes
import errno
import fcntl
import json
import logging
import os
import struct
import subprocess
import threading

from blobcr_agent import exception
from blobcr_agent import jsonfile

LOG = logging.getLogger(__name__)

# linux/prctl.h.
PR_SET_IO_FLUSHER = 57
PR_GET_IO_FLUSHER = 58
# linux/loop.h: struct loop_info64 and the ioctl that reads it.
LOOP_GET_STATUS64 = 0x4C05
LOOP_INFO64 = struct.Struct('=QQQQQIIII64s64s32s2Q')


class LoopDevices(object):
    """The loop devices of this agent's attached images."""

    def __init__(self, state_path, images_dir):
        self.path = os.path.join(state_path, 'loop-devices.json')
        self.images_dir = os.path.abspath(images_dir)
        self._lock = threading.Lock()
        self.devices = self._load()         # {image: {device, file}}
        self.released_at_start = 0

    # -- records -------------------------------------------------------

    def _load(self):
        return jsonfile.load(self.path, 'loop devices')

    def _save(self):
        jsonfile.save(self.path, self.devices)

    # -- the devices ---------------------------------------------------

    def setup(self, image, path):
        """The loop device over ``path`` (image ``image``'s mirror file),
        set up if it has none yet.
        """
        with self._lock:
            known = self.devices.get(image)
            if known and backing_file(known['device']) == path and \
                    identity(known['device']) == known.get('backing'):
                return known['device']
            if known:
                self._release(image, known)
            device = _losetup('--find', '--show', '--direct-io=on',
                              path).strip()
            self.devices[image] = {'device': device, 'file': path,
                                   'backing': identity(device)}
            self._save()
            LOG.info('image %s: loop device %s over %s', image, device, path)
            return device

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
        found = identity(device)
        if found is not None and found != known.get('backing'):
            raise exception.InvalidInput(
                'loop device %s of image %s now backs %s, not %s: another '
                'process took it; it is left alone (release it with '
                '"losetup -d %s" if it is stale)'
                % (device, image, backing_file(device), path, device))
        if found is not None:
            _losetup('--detach', device)
            LOG.info('image %s: loop device %s released', image, device)
        del self.devices[image]
        self._save()

    def release_all(self):
        """At a stop: the guests' disks end with the mount anyway (a busy
        device is detached once its last user closes it).
        """
        with self._lock:
            for image, known in sorted(self.devices.items()):
                try:
                    self._release(image, known)
                except exception.BlobCRError as e:
                    LOG.error('%s', e)

    def recover(self):
        """At start: release the devices an earlier agent left over its
        mount (recorded, or set up and killed before the record).
        Returns how many.
        """
        released = 0
        with self._lock:
            for image, known in sorted(self.devices.items()):
                try:
                    self._release(image, known)
                    released += 1
                except exception.InvalidInput as e:
                    LOG.error('%s', e)
                    del self.devices[image]
                    self._save()
            for device, path in _all_loops():
                if path.startswith(self.images_dir + os.sep):
                    _losetup('--detach', device)
                    LOG.warning('loop device %s over %s was left by an '
                                'earlier agent: released', device, path)
                    released += 1
        self.released_at_start = released
        return released

    def status(self):
        return {'devices': dict(self.devices),
                'released_at_start': self.released_at_start,
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


def identity(device):
    """(device, inode) of the file ``device`` loops over, as the kernel
    recorded them when it was set up (LOOP_GET_STATUS64); None if the
    device is free.
    """
    try:
        fd = os.open(device, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        info = fcntl.ioctl(fd, LOOP_GET_STATUS64, bytes(LOOP_INFO64.size))
    except OSError as e:
        if e.errno == errno.ENXIO:
            return None
        raise
    finally:
        os.close(fd)
    lo_device, lo_inode = LOOP_INFO64.unpack(info)[:2]
    return [lo_device, lo_inode]


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
