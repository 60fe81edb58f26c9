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

"""The systemd units of etc/systemd/, checked by ``systemd-analyze
verify`` (this machine's PID 1 is not systemd, so none is started here;
the agent's readiness notification is tested in
tests/functional/test_agent.py). Each unit's ExecStart names a console
script of the agent's, the Cinder side's or the Nova side's setup.cfg,
which verify finds in this venv's bin.
"""

import configparser
import glob
import os
import shutil
import subprocess
import sys

import pytest

TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
UNITS = sorted(glob.glob(os.path.join(TOP, 'etc', 'systemd', '*.service')))
# Any of these gives the service a mount namespace of its own, whose
# mounts QEMU would not see.
NAMESPACING = ('PrivateTmp', 'PrivateDevices', 'PrivateMounts',
               'ProtectSystem', 'ProtectHome', 'ProtectKernelModules',
               'ProtectKernelTunables', 'ProtectControlGroups',
               'ReadOnlyPaths', 'ReadWritePaths', 'InaccessiblePaths',
               'TemporaryFileSystem', 'BindPaths', 'RootDirectory',
               'DynamicUser', 'MountFlags')


def _unit(path):
    parser = configparser.ConfigParser(strict=False,
                                       interpolation=None)
    parser.optionxform = str
    parser.read(path)
    return parser


def _console_scripts():
    """Every console script of the tree's product distributions."""
    found = set()
    for distribution in ('.', 'blobcr-cinder', 'blobcr-nova'):
        setup = configparser.ConfigParser()
        setup.read(os.path.join(TOP, distribution, 'setup.cfg'))
        found |= {line.split('=')[0].strip() for line in
                  setup['entry_points']['console_scripts'].splitlines()
                  if line}
    return found


def test_every_service_has_a_unit():
    names = {os.path.basename(u)[:-len('.service')] for u in UNITS}
    assert names == {'blobcr-agent', 'blobcr-vendordata',
                     'blobcr-nova-listener', 'blobcr-cinder-sync'}
    assert names <= _console_scripts()


@pytest.mark.skipif(not shutil.which('systemd-analyze'),
                    reason='no systemd-analyze: install-deps.sh installs '
                           'systemd')
def test_units_verify(tmp_path):
    bindir = os.path.dirname(sys.executable)
    copies = []
    for unit in UNITS:
        copy = tmp_path / os.path.basename(unit)
        copy.write_text(open(unit).read().replace('/usr/bin/', bindir + '/'))
        copies.append(str(copy))
    done = subprocess.run(['systemd-analyze', 'verify'] + copies,
                          capture_output=True, text=True, timeout=120)
    # verify exits 0 on what it ignores with a warning: none is allowed.
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr


def test_the_agent_notifies_and_keeps_the_hosts_mounts():
    service = _unit(os.path.join(TOP, 'etc', 'systemd',
                                 'blobcr-agent.service'))['Service']
    assert service['Type'] == 'notify'
    assert service['Restart'] == 'on-failure'
    # systemd keeps images/'s FUSE connection for the next agent
    # (mirror/connection.py stores one descriptor).
    assert int(service['FileDescriptorStoreMax']) >= 1
    # Its stop drains persists for [agent] shutdown_timeout first.
    assert int(service['TimeoutStopSec']) > 300
    assert not set(NAMESPACING) & set(service)
