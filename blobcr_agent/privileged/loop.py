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

"""Loop devices over the mirror's files: set up, detached, read.

``attach``, ``detach`` and ``identity`` are what manager/loopdevs.py
calls: in this process for a root agent, else through the privileged
daemon, whose entry points first check that the file is one of this
agent's images and the device a loop device over one.
"""

import errno
import fcntl
import os
import re
import stat
import struct
import subprocess

from blobcr_agent import privileged
from blobcr_agent.privileged import fuse
from blobcr_common import exception

# linux/loop.h: struct loop_info64 and the ioctl that reads it; the one
# that detaches a device ("losetup -d").
LOOP_GET_STATUS64 = 0x4C05
LOOP_CLR_FD = 0x4C01
LOOP_INFO64 = struct.Struct('=QQQQQIIII64s64s32s2Q')
# struct loop_config: fd, block_size, loop_info64, 8 reserved u64; the
# ioctl that sets a device up from it in one step, the control device's
# that finds a free one, and the flag of direct I/O.
LOOP_CONFIG_HEAD = struct.Struct('=II')
LOOP_CONFIG_TAIL = 64
LOOP_CONFIGURE = 0x4C0A
LOOP_CTL_GET_FREE = 0x4C82
LO_FLAGS_DIRECT_IO = 16
# What reading a loop device's status gives when its backing file is on
# a FUSE connection that died.
DEAD_FUSE = (errno.ENOTCONN, errno.ECONNABORTED)
LOOP_DEVICE = re.compile(r'/dev/loop[0-9]+\Z')


def attach(path):
    """A new loop device (direct I/O) over image file ``path``."""
    if privileged.as_root():
        return _losetup_attach(path)
    return _attach_image_file(path)


def detach(device):
    """What ``losetup -d`` does, without a process: a detach sits on a
    live migration's handoff (manager/handoff.py), where starting
    losetup cost tens of milliseconds. A device still open (the paused
    guest's) is detached by the kernel at its last close.
    """
    if privileged.as_root():
        return _clear(device)
    return _detach_image_device(device)


def identity(device):
    """(device, inode) of the file ``device`` loops over, as the kernel
    recorded them when it was set up (LOOP_GET_STATUS64); None if the
    device is free or absent.
    """
    found = _status(device) if privileged.as_root() else \
        _loop_identity(device)
    # A list, as loop-devices.json keeps it: the privileged daemon's
    # answer comes back a tuple, and [dev, ino] != (dev, ino).
    return None if found is None else list(found)


# -- the entry points: what an unprivileged agent may ask ---------------
# Each works on descriptors it opened and checked itself, never on a path
# or device name twice: the agent's user owns the directories on the way
# and serves the mount's files.

@privileged.default.entrypoint
def _attach_image_file(path):
    images, dev = fuse.images_mount()
    name = os.path.basename(path) if isinstance(path, str) else ''
    if not isinstance(path, str) or name in ('', '.', '..') or \
            os.path.normpath(os.path.dirname(path)) != images:
        raise exception.InvalidInput(
            '%r is not a file of %s: no loop device over it'
            % (path, images))
    top = os.open(images, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW |
                  os.O_CLOEXEC)
    try:
        if os.fstat(top).st_dev != dev:
            raise exception.InvalidInput(
                '%s is not the BlobCR mount any more' % images)
        fd = os.open(name, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC,
                     dir_fd=top)
    finally:
        os.close(top)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_dev != dev:
            raise exception.InvalidInput(
                '%s is not a regular file of the BlobCR mount' % path)
        return _configure(fd, path)
    finally:
        os.close(fd)


@privileged.default.entrypoint
def _detach_image_device(device):
    _check_device(device)
    try:
        fd = os.open(device, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        try:
            found = _read_status(fd)
        except OSError as e:
            # Its backing file's attributes cannot be read: a file of a
            # FUSE connection that died, named as it was (the mount is
            # still there) or from the root of a mount detached since
            # ("/<image>"). It serves nothing any more.
            if e.errno not in DEAD_FUSE or not _dead_image_name(
                    _backing_file(device) or ''):
                raise
        else:
            if found is None:
                return None
            if not _ours(found[0]):
                raise exception.InvalidInput(
                    'loop device %s does not loop over a file of this '
                    'agent\'s mount: not detached' % device)
        fcntl.ioctl(fd, LOOP_CLR_FD, 0)
    except OSError as e:
        raise exception.BackendUnavailable('cannot detach loop device %s: '
                                           '%s' % (device, e))
    finally:
        os.close(fd)


@privileged.default.entrypoint
def _loop_identity(device):
    _check_device(device)
    return _status(device)


# -- checks -------------------------------------------------------------

def _check_device(device):
    if not isinstance(device, str) or not LOOP_DEVICE.match(device):
        raise exception.InvalidInput('%r is not a loop device' % (device,))


def _backing_file(device):
    """What sysfs says ``device`` loops over; None if it is free."""
    name = os.path.basename(device)
    try:
        with open('/sys/block/%s/loop/backing_file' % name) as f:
            return f.read().rstrip('\n')
    except FileNotFoundError:
        return None


def _dead_image_name(backing):
    return backing.count('/') == 1 or \
        os.path.dirname(backing) == fuse.images_path()


def _ours(backing_dev):
    """Whether a file on device ``backing_dev`` is this agent's: on its
    images mount, or on a FUSE connection that is mounted nowhere any
    more (what an agent that died leaves behind it).
    """
    try:
        if backing_dev == fuse.images_mount()[1]:
            return True
    except exception.InvalidInput:
        pass                        # not mounted now: a restart
    conn = os.minor(backing_dev)
    return os.major(backing_dev) == 0 and fuse.live_connection(conn) and \
        conn not in {found for found, _path, _source in fuse.mounts()}


# -- the operations -----------------------------------------------------

def _losetup_attach(path):
    try:
        done = subprocess.run(
            ['losetup', '--find', '--show', '--direct-io=on', path],
            capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise exception.BackendUnavailable('losetup %s: %s' % (path, e))
    if done.returncode != 0:
        raise exception.BackendUnavailable(
            'losetup over %s failed: %s'
            % (path, done.stderr.strip() or done.returncode))
    return done.stdout.strip()


def _clear(device):
    try:
        fd = os.open(device, os.O_RDONLY)
        try:
            fcntl.ioctl(fd, LOOP_CLR_FD, 0)
        finally:
            os.close(fd)
    except OSError as e:
        raise exception.BackendUnavailable('cannot detach loop device %s: '
                                           '%s' % (device, e))


def _status(device):
    try:
        fd = os.open(device, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        return _read_status(fd)
    finally:
        os.close(fd)


def _read_status(fd):
    """[device, inode] of the backing file of the loop device open as
    ``fd``; None if it is free.
    """
    try:
        info = fcntl.ioctl(fd, LOOP_GET_STATUS64, bytes(LOOP_INFO64.size))
    except OSError as e:
        if e.errno == errno.ENXIO:
            return None
        raise
    lo_device, lo_inode = LOOP_INFO64.unpack(info)[:2]
    return [lo_device, lo_inode]


def _configure(fd, path):
    """A free loop device over the open file ``fd`` (direct I/O), as
    ``losetup --find --direct-io=on`` sets it up, without a path to
    resolve again; its name.
    """
    info = LOOP_INFO64.pack(0, 0, 0, 0, 0, 0, 0, 0, LO_FLAGS_DIRECT_IO,
                            os.fsencode(path)[:63], b'', b'', 0, 0)
    config = LOOP_CONFIG_HEAD.pack(fd, 0) + info + bytes(LOOP_CONFIG_TAIL)
    control = os.open('/dev/loop-control', os.O_RDWR | os.O_CLOEXEC)
    try:
        # Another process may take the free device first: ask again.
        for _attempt in range(32):
            number = fcntl.ioctl(control, LOOP_CTL_GET_FREE)
            device = '/dev/loop%d' % number
            loop = os.open(device, os.O_RDWR | os.O_CLOEXEC)
            try:
                fcntl.ioctl(loop, LOOP_CONFIGURE, config)
                return device
            except OSError as e:
                if e.errno != errno.EBUSY:
                    raise exception.BackendUnavailable(
                        'cannot set up %s over %s: %s' % (device, path, e))
            finally:
                os.close(loop)
    finally:
        os.close(control)
    raise exception.BackendUnavailable('no free loop device for %s' % path)
