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

"""BlobCR's own connection type, 'blobcr', kept as an option: the
default ('local') edits no Nova or os-brick file, and nothing of the
project runs tools/apply-connection-patches.sh. So these tests edit no
installed file either: the patches are checked to still fit the venv's
stock Nova and os-brick (a dry run), tools/check_stock.py is shown to
catch an edited file (on a throwaway distribution of its own), and
os-brick's connector class is run directly. Nova's volume driver class
is run with Nova's own code in tests/integration/test_nova_volume_xml.py.
"""

import base64
import hashlib
import os
import subprocess
import sys

from os_brick import exception as brick_exception
import pytest

from blobcr_nova import brick_connector

TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
SCRIPT = os.path.join(TOP, 'tools', 'apply-connection-patches.sh')
CHECK_STOCK = os.path.join(TOP, 'tools', 'check_stock.py')


def check_stock(*names, **env):
    return subprocess.run(
        [sys.executable, CHECK_STOCK] + list(names), capture_output=True,
        text=True, timeout=120, env=dict(os.environ, **env))


def test_patches_fit_the_stock_nova_and_os_brick_and_edit_nothing():
    assert check_stock('nova', 'os-brick').returncode == 0
    done = subprocess.run(['bash', SCRIPT, '--check', sys.executable],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count(': fits ') == 2, done.stderr
    after = check_stock('nova', 'os-brick')
    assert after.returncode == 0, after.stderr


def test_check_stock_names_an_edited_file(tmp_path):
    # A distribution of its own, as pip installs one: its files and a
    # RECORD of their hashes.
    package = tmp_path / 'stockpkg'
    package.mkdir()
    (package / '__init__.py').write_text('VALUE = 1\n')
    info = tmp_path / 'stockpkg-1.0.dist-info'
    info.mkdir()
    (info / 'METADATA').write_text('Metadata-Version: 2.1\nName: stockpkg\n'
                                   'Version: 1.0\n')
    # sha256 of 'VALUE = 1\n', urlsafe base64 without padding.
    digest = base64.urlsafe_b64encode(hashlib.sha256(
        b'VALUE = 1\n').digest()).rstrip(b'=').decode()
    (info / 'RECORD').write_text(
        'stockpkg/__init__.py,sha256=%s,10\n'
        'stockpkg-1.0.dist-info/RECORD,,\n' % digest)
    assert check_stock('stockpkg', PYTHONPATH=str(tmp_path)).returncode == 0
    (package / '__init__.py').write_text('VALUE = 2\n')
    edited = check_stock('stockpkg', PYTHONPATH=str(tmp_path))
    assert edited.returncode == 1
    assert 'stockpkg/__init__.py differs' in edited.stderr
    assert check_stock('no-such-dist').returncode == 1


def test_a_python_without_blobcr_is_never_patched(tmp_path):
    # The system's Python (no blobcr_nova): the tables would name classes
    # it cannot import.
    done = subprocess.run(['bash', SCRIPT, '/usr/bin/python3'],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert 'cannot import blobcr_nova' in done.stderr


@pytest.fixture
def brick():
    return brick_connector.BlobCRConnector(None)


def test_connector_opens_the_mirror_file_as_it_is(brick, tmp_path):
    path = tmp_path / 'image'
    path.write_bytes(b'\0' * 8192)
    props = {'device_path': str(path)}
    assert brick.connect_volume(props) == {'type': 'file',
                                           'path': str(path)}
    assert brick.get_volume_paths(props) == [str(path)]
    assert brick.extend_volume(props) == 8192
    brick.disconnect_volume(props, None)
    assert path.exists()                # the agent's to detach, not ours


def test_connector_refuses_what_is_not_a_mirror_file(brick, tmp_path):
    with pytest.raises(brick_exception.VolumeDeviceNotFound):
        brick.connect_volume({'device_path': str(tmp_path / 'missing')})
    with pytest.raises(brick_exception.VolumeDeviceNotFound):
        brick.connect_volume({'device_path': str(tmp_path)})
    with pytest.raises(ValueError, match='no device_path'):
        brick.connect_volume({})
