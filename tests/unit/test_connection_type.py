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

"""BlobCR's own connection type, 'blobcr', where Nova and os-brick look
it up: tools/apply-connection-patches.sh (run by install-openstack.sh
and the devstack plugin) put BlobCR's classes in their fixed tables of
the test venv; the patches still describe those tables (a second run
finds them applied); os-brick's connector opens the mirror file as it
is. Nova's volume driver is run with Nova's own code in
tests/integration/test_nova_volume_xml.py.
"""

import os
import subprocess
import sys

from os_brick import exception as brick_exception
from os_brick.initiator import connector
import pytest

TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
SCRIPT = os.path.join(TOP, 'tools', 'apply-connection-patches.sh')


def test_nova_and_os_brick_tables_name_blobcr():
    # Nova's table is read in a child: importing Nova's libvirt driver
    # sets up Nova's global config.
    code = ('import nova.virt.libvirt.driver as d; '
            'print(d.VOLUME_DRIVERS["blobcr"])')
    done = subprocess.run([sys.executable, '-c', code], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == \
        'blobcr_nova.libvirt_volume.LibvirtBlobCRVolumeDriver'
    made = connector.InitiatorConnector.factory('blobcr', None)
    assert type(made).__name__ == 'BlobCRConnector'


def test_patches_are_applied_once():
    done = subprocess.run(['bash', SCRIPT, sys.executable],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count('already in') == 2, done.stderr


def test_a_python_without_blobcr_is_never_patched(tmp_path):
    # The system's Python (no blobcr_nova): the tables would name classes
    # it cannot import.
    done = subprocess.run(['bash', SCRIPT, '/usr/bin/python3'],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert 'cannot import blobcr_nova' in done.stderr


@pytest.fixture
def brick():
    return connector.InitiatorConnector.factory('BLOBCR', None)


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
