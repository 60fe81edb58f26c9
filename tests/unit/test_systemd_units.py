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


# Issue 54, finding 2: a Unix user per service, so that none reads
# another's credentials (the sync's Keystone admin, the listener's
# blobcr-control password) nor passes the agent's admin socket check,
# which admits root and the agent's own uid.
INSTALL = os.path.join(TOP, 'doc', 'source', 'install.rst')
# The agent's user is the one tools/agent-user.sh makes and the tests'
# unprivileged agents run as (tests/conftest.py).
AGENT_USER = 'blobcr'


def _services():
    return {os.path.basename(u)[:-len('.service')]: _unit(u)['Service']
            for u in UNITS}


def _config_files(service):
    argv = service['ExecStart'].split()
    return [argv[i + 1] for i, arg in enumerate(argv)
            if arg == '--config-file']


def test_each_service_runs_as_a_user_of_its_own():
    services = _services()
    users = {name: s['User'] for name, s in services.items()}
    groups = {name: s['Group'] for name, s in services.items()}
    assert users['blobcr-agent'] == AGENT_USER
    assert len(set(users.values())) == len(users), users
    assert len(set(groups.values())) == len(groups), groups
    for name, service in services.items():
        # Its own group (useradd --user-group), and no other service's
        # user or group among its supplementary groups.
        assert groups[name] == users[name]
        others = {v for n in services if n != name
                  for v in (users[n], groups[n])}
        extra = set(service.get('SupplementaryGroups', '').split())
        assert not extra & others, (name, extra & others)
        assert 'DynamicUser' not in service


def _install_commands():
    """The shell commands of install.rst's literal blocks, continuation
    lines joined, each split into words.
    """
    with open(INSTALL) as f:
        text = f.read().replace('\\\n', ' ')
    return [line.split('#')[0].split() for line in text.splitlines()
            if line.startswith('    ') and line.split()]


def test_install_gives_each_configuration_file_to_its_service_only():
    """install.rst makes each unit's user (its own group) and gives each
    configuration file a unit names to root and that group, mode 0640:
    the service reads it, cannot change it, and no other service's user
    reads it.
    """
    commands = _install_commands()
    made = {words[-1] for words in commands
            if words[:1] == ['useradd'] and '--user-group' in words}
    owners = {}
    modes = {}
    for words in commands:
        if words[:1] == ['chown']:
            for path in words[2:]:
                owners.setdefault(path, set()).add(words[1])
        elif words[:1] == ['chmod']:
            for path in words[2:]:
                modes.setdefault(path, set()).add(words[1])
    for name, service in _services().items():
        assert service['User'] in made, (name, made)
        files = _config_files(service)
        assert files, name
        for path in files:
            assert owners.get(path) == {'root:%s' % service['Group']}, \
                (name, path, owners.get(path))
            assert modes.get(path) and modes[path] <= {'0640', '0600'}, \
                (name, path, modes.get(path))
