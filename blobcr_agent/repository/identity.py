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

"""Who wrote a record, and where: process identities, boot ids, pin
records.

A process identity (``host:pid:start-time:boot:pid-namespace``) names
a writer (a pending version's owner) so that another process can tell
it is gone, and judges only what it can see: a process of the same
host, in the same boot and the same PID namespace (a PID means another
process in another namespace: OpenStack services in containers share
the host's name). Same host, another boot: the writer's kernel is gone,
whatever its PID now names (host names are unique per machine in a
cloud: Nova and Cinder key their services by them). Identities of the
older form (``host:pid:start-time``) say no namespace: never judged.

A pin record names a reader (a mirror's cache directory) on one host,
in one boot, in one view of the file system, so that only a process that
sees the same files judges whether its holder is gone.
"""

import os
import socket
import time

from blobcr_common import exception


def process_identity(pid=None):
    """``host:pid:start-time:boot:pid-namespace``: unique even when PIDs
    are reused, across reboots and PID namespaces.
    """
    pid = pid or os.getpid()
    return '%s:%d:%s:%s:%s' % (socket.gethostname(), pid, _start_time(pid),
                               boot_id() or '?', pid_namespace() or '?')


def pid_namespace():
    """The inode of this process's PID namespace, or None if unknown."""
    try:
        link = os.readlink('/proc/self/ns/pid')     # pid:[4026531836]
    except OSError:
        return None
    return link.partition('[')[2].rstrip(']') or None


def _start_time(pid):
    try:
        with open('/proc/%d/stat' % pid) as f:
            # Field 22, counted after the parenthesised command name.
            return f.read().rsplit(')', 1)[1].split()[19]
    except (OSError, IndexError):
        return '?'


def boot_id():
    """The kernel's id of the current boot, or None if unknown."""
    try:
        with open('/proc/sys/kernel/random/boot_id') as f:
            return f.read().strip() or None
    except OSError:
        return None


def fs_view():
    """Which file system tree this process sees (its mount namespace and
    root), so that a path recorded by one process is only checked by
    another that sees the same files; None if unknown.
    """
    try:
        ns = os.stat('/proc/self/ns/mnt')
        root = os.stat('/')
    except OSError:
        return None
    return '%d:%d/%d:%d' % (ns.st_dev, ns.st_ino, root.st_dev, root.st_ino)


def pin_record(holder):
    """A pin held by ``holder`` (a path, e.g. a mirror's cache directory)
    on this host, in this boot.
    """
    if not isinstance(holder, str) or not holder:
        raise exception.InvalidInput('a pin needs a holder')
    return {'host': socket.gethostname(), 'holder': holder,
            'boot': boot_id(), 'fs': fs_view(), 'at': time.time()}


def same_pin(pin, host, holder):
    return pin.get('host') == host and pin.get('holder') == holder


def owner_is_gone(owner):
    """True only if ``owner`` is surely a process that no longer runs:
    one of this host in an earlier boot, or one of this boot and PID
    namespace whose PID no longer names it. Anything this process
    cannot see (another host, another PID namespace, an unknown boot or
    namespace, the older form) is not judged: False.
    """
    fields = owner.split(':')
    if len(fields) != 5:
        return False
    host, pid, started, boot, ns = fields
    if host != socket.gethostname() or not pid.isdigit():
        return False
    here = boot_id()
    if '?' in (boot, here or '?'):
        return False
    if boot != here:
        return True
    if ns == '?' or ns != pid_namespace():
        return False
    return _start_time(int(pid)) != started
