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

"""mirror/restarts.py: whether an agent restart keeps the guests' disks,
derived from the kernel's FUSE_INIT, as the agent logs it and
``blobcr-manage status`` shows it.
"""

import argparse
import base64
import contextlib
import logging
import struct
import types

from blobcr_agent.cmd import manage
from blobcr_agent.mirror import connection
from blobcr_agent.mirror import restarts
from blobcr_agent.mirror import service
from tests.unit.test_fuse_connection import _with
from tests.unit.test_fuse_connection import LINUX_6_18

# What Debian 12's 6.1 sends: protocol 7.38, flags2 valid, with only the
# flags it knows (FUSE_SECURITY_CTX, FUSE_HAS_INODE_DAX,
# FUSE_CREATE_SUPP_GROUP).
LINUX_6_1 = _with(LINUX_6_18, minor=38, flags2=0x7)


def test_the_kernel_that_resends_keeps_the_disks():
    found = restarts.verdict(LINUX_6_18, stored=True, release='6.18.44')
    assert found['restart_keeps_disks'] is True
    assert found['kernel_resends'] is True
    assert found['fuse_protocol'] == '7.45'
    assert found['kernel'] == '6.18.44'
    assert 'pause' in found['why']


def test_debian_12s_kernel_fails_the_disks():
    assert struct.unpack_from('<I', LINUX_6_1, 44)[0] == 38
    found = restarts.verdict(LINUX_6_1, stored=True, release='6.1.0-37')
    assert found['restart_keeps_disks'] is False
    assert found['kernel_resends'] is False
    assert found['fuse_protocol'] == '7.38'
    assert 'fails every guest disk' in found['why']
    # The same release with the resend backported: the kernel's answer
    # decides, not its version.
    backported = _with(LINUX_6_1, flags2=0x7 |
                       connection.FUSE_HAS_RESEND_FLAGS2, minor=40)
    assert restarts.verdict(backported, True,
                            release='6.1.0-37')['restart_keeps_disks']


def test_without_a_store_or_a_mount_or_the_native_loop():
    assert restarts.verdict(LINUX_6_18, stored=False)[
        'restart_keeps_disks'] is False
    unknown = restarts.verdict(None, stored=False)
    assert unknown['restart_keeps_disks'] is None
    assert unknown['fuse_protocol'] is None
    assert restarts.verdict(LINUX_6_18, True, native=False)[
        'restart_keeps_disks'] is False


def _mirror(tmp_path, init, stored):
    kept = connection.KeptConnection(str(tmp_path / 'mnt' / 'images'),
                                     str(tmp_path))
    kept._state['init'] = base64.b64encode(init).decode()
    kept._stored = stored
    return types.SimpleNamespace(kept=kept, native_loop=object(),
                                 io_loop='native')


def test_the_mirror_reports_what_its_mount_was_told(tmp_path, caplog):
    for init, keeps, level in ((LINUX_6_18, True, logging.INFO),
                               (LINUX_6_1, False, logging.WARNING)):
        mirror = _mirror(tmp_path, init, stored=True)
        found = service.MirrorService.restart_verdict(mirror)
        assert found['restart_keeps_disks'] is keeps
        caplog.clear()
        with caplog.at_level(logging.INFO, logger=restarts.__name__):
            restarts.log(found)
        assert [r.levelno for r in caplog.records] == [level]
        assert ('keeps the guests\' disks: %s' % ('yes' if keeps else 'no')
                in caplog.text)
    # Before the mount: not known, whatever a taken-over session holds.
    mirror.native_loop = None
    assert service.MirrorService.restart_verdict(mirror)[
        'restart_keeps_disks'] is None


def test_blobcr_manage_status_shows_it(tmp_path, monkeypatch, capsys):
    for init, shown in ((LINUX_6_18, 'restart_keeps_disks: true'),
                        (LINUX_6_1, 'restart_keeps_disks: false')):
        found = service.MirrorService.restart_verdict(
            _mirror(tmp_path, init, stored=True))
        result = {'host': 'h', 'mountpoint': '/m', 'proxy': None,
                  'attached': {}, 'restart': found}
        agent = types.SimpleNamespace(call=lambda op: result)
        monkeypatch.setattr(manage, '_agent',
                            lambda args: contextlib.nullcontext(agent))
        manage.do_status(argparse.Namespace(json=False))
        out = capsys.readouterr().out
        assert shown in out
        assert 'kernel %s' % found['kernel'] in out
