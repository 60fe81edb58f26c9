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
    if privileged.as_root():
        return _status(device)
    return _loop_identity(device)


# -- the entry points: what an unprivileged agent may ask ---------------

@privileged.default.entrypoint
def _attach_image_file(path):
    return _losetup_attach(_image_file(path))


@privileged.default.entrypoint
def _detach_image_device(device):
    _check_device(device)
    backing = _backing_file(device)
    if backing is None:
        return None
    if os.path.dirname(backing) != privileged.images_dir() and not \
            _on_detached_mount(device, backing):
        raise exception.InvalidInput(
            'loop device %s loops over %s, not over a file of %s: not '
            'detached' % (device, backing, privileged.images_dir()))
    return _clear(device)


@privileged.default.entrypoint
def _loop_identity(device):
    _check_device(device)
    return _status(device)


# -- checks -------------------------------------------------------------

def _image_file(path):
    """``path`` if it is a regular file right in the images directory."""
    name = os.path.basename(path)
    parent = os.path.realpath(os.path.dirname(os.path.abspath(path)))
    if parent != privileged.images_dir() or name in ('', '.', '..'):
        raise exception.InvalidInput(
            '%s is not a file of %s: no loop device over it'
            % (path, privileged.images_dir()))
    full = os.path.join(parent, name)
    try:
        st = os.lstat(full)
    except OSError as e:
        raise exception.InvalidInput('%s: %s' % (full, e.strerror))
    if not (st.st_mode & 0o170000) == 0o100000:
        raise exception.InvalidInput('%s is not a regular file' % full)
    return full


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


def _on_detached_mount(device, backing):
    """Whether ``backing`` is how the kernel names a file of a FUSE
    mount detached since (from that mount's root: "/<image>"), on a
    connection no longer mounted anywhere: what an agent that died
    leaves. A file of a block device's filesystem never qualifies.
    """
    if backing.count('/') != 1:
        return False
    found = _status(device)
    if found is None:
        return False
    major, minor = os.major(found[0]), os.minor(found[0])
    if major != 0:
        return False
    return minor not in {conn for conn, _path in fuse.mounts()}


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
