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

"""The agent's state directory, closed to other local users.

What it holds names the host's instances and images (``instances.json``,
``loop-devices.json``, the links ``devices/<image>``, the caches). Other
users may walk through it, not list it nor read its files: QEMU's user
opens a 'local' connection's link ``devices/<image>``, and with the
default ``[agent] mountpoint`` the mirror's mount is under it. So the
directory is mode 0711, the directories in it lose read and write for
group and others (search stays), and its files everything for them.

systemd's ``StateDirectory=`` makes it 0755 (``StateDirectoryMode=``
is not applied to one that exists), and an older agent left its files
0644: the agent closes them at its start and logs what it changed.
"""

import logging
import os
import stat

LOG = logging.getLogger(__name__)

MODE = 0o711
_DIRECTORY_MASK = 0o066             # group and others: search only
_FILE_MASK = 0o077


def prepare(path):
    """Make ``path`` (mode 0711) or close the one there; returns what
    changed, ``[(path, old mode, new mode)]``.
    """
    os.makedirs(path, mode=MODE, exist_ok=True)
    changed, refused = [], []
    _close(path, _DIRECTORY_MASK, changed, refused)
    for entry in os.scandir(path):
        try:
            if entry.is_symlink():
                continue
            if entry.is_dir(follow_symlinks=False):
                if not os.path.ismount(entry.path):
                    _close(entry.path, _DIRECTORY_MASK, changed, refused)
            elif entry.is_file(follow_symlinks=False):
                _close(entry.path, _FILE_MASK, changed, refused)
        except OSError as e:
            refused.append('%s (%s)' % (entry.path, e))
    if changed:
        LOG.warning('state directory %s was open to other users: closed '
                    'to other users (%s)', path,
                    ', '.join('%s %04o -> %04o' % c for c in changed))
    if refused:
        LOG.warning('state directory %s: cannot close %s to other users; '
                    'chmod go-rw them', path, ', '.join(refused))
    return changed


def _close(path, mask, changed, refused):
    st = os.lstat(path)
    mode = stat.S_IMODE(st.st_mode)
    if not mode & mask:
        return
    try:
        os.chmod(path, mode & ~mask)
    except PermissionError as e:      # someone else's
        refused.append('%s (%s)' % (path, e.strerror))
        return
    changed.append((path, mode, mode & ~mask))
