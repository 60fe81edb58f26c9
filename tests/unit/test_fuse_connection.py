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

"""mirror/connection.py: what decides whether images/'s FUSE connection
is kept and taken over. The end-to-end restarts are in
tests/functional/test_agent_restart.py.
"""

import base64
import struct

from blobcr_agent.mirror import connection

# The FUSE_INIT request Linux 6.18 sent this machine's agent (protocol
# 7.45), as .fuse-session.json keeps it.
LINUX_6_18 = base64.b64decode(
    'aAAAABoAAAACAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAcAAAAtAAAAAAACAPv'
    '//3P9BQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=')


def _with(init, minor=None, flags=None, flags2=None):
    fields = list(struct.unpack_from('<5I', init, 40))
    for k, value in ((1, minor), (3, flags), (4, flags2)):
        if value is not None:
            fields[k] = value
    out = bytearray(init)
    struct.pack_into('<5I', out, 40, *fields)
    return bytes(out)


def test_a_kernel_that_resends_is_recognized():
    assert connection.kernel_resends(LINUX_6_18)


def test_without_resend_the_connection_is_not_kept():
    flags2 = struct.unpack_from('<I', LINUX_6_18, 56)[0]
    flags = struct.unpack_from('<I', LINUX_6_18, 52)[0]
    # FUSE_HAS_RESEND off; flags2 not valid; an older protocol; cut.
    assert not connection.kernel_resends(
        _with(LINUX_6_18, flags2=flags2 & ~connection.FUSE_HAS_RESEND_FLAGS2))
    assert not connection.kernel_resends(
        _with(LINUX_6_18, flags=flags & ~connection.FUSE_INIT_EXT))
    assert not connection.kernel_resends(_with(LINUX_6_18, minor=39))
    assert not connection.kernel_resends(LINUX_6_18[:56])


def test_the_connection_is_found_by_mountinfo(tmp_path, monkeypatch):
    # Two FUSE mounts stacked on one path and an ext4 one elsewhere: the
    # top one (the last listed) is the path's connection.
    info = tmp_path / 'mountinfo'
    info.write_text(
        '36 25 0:31 / /srv/mnt/images rw - fuse blobcr rw\n'
        '37 25 8:1 / /srv/other rw - ext4 /dev/sda1 rw\n'
        '38 36 0:44 / /srv/mnt/images rw - fuse blobcr rw\n')
    real_open = open

    def fake_open(path, *args, **kwargs):
        if path == '/proc/self/mountinfo':
            return real_open(str(info), *args, **kwargs)
        return real_open(path, *args, **kwargs)
    monkeypatch.setattr('builtins.open', fake_open)
    assert connection.connections(['/srv/mnt/images']) == [31, 44]
    assert connection.connections(['/srv/other']) == []
