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

"""The container recipe (etc/container/, install.rst "In containers")
against the tree: the programs it runs exist, the packages it installs
are Debian's and cover bindep's, and what it mounts covers the agent's
own default paths. No container engine runs on the test machines, so
the image itself is not built here.
"""

import configparser
import json
import os
import re
import shlex
import subprocess

import yaml

from blobcr_agent.conf import agent as agent_conf

TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
RECIPE = os.path.join(TOP, 'etc', 'container')
KOLLA = '/var/lib/kolla/config_files/'


def _console_scripts():
    setup = configparser.ConfigParser()
    setup.read(os.path.join(TOP, 'setup.cfg'))
    return {line.split('=')[0].strip() for line in
            setup.get('entry_points', 'console_scripts').splitlines()
            if line.strip()}


def _default(name):
    return {o.name: o.default for o in agent_conf.agent_opts}[name]


def _stages():
    """The Dockerfile's stages: [(FROM line, [its instructions])]."""
    with open(os.path.join(RECIPE, 'blobcr-agent', 'Dockerfile')) as f:
        text = re.sub(r'\\\n', ' ', f.read())
    stages = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith('#'):
            continue
        if line.startswith('FROM '):
            stages.append((line, []))
        elif stages:
            stages[-1][1].append(line)
    return stages


def _apt_packages(instructions):
    packages = set()
    for line in instructions:
        for part in line.split('&&'):
            words = shlex.split(part)
            if words[:3] == ['RUN', 'apt-get', 'install'] or \
                    words[:2] == ['apt-get', 'install']:
                packages |= {w for w in words if not w.startswith('-') and
                             w not in ('RUN', 'apt-get', 'install')}
    return packages


def _bindep(profile_test=False):
    """bindep.txt's dpkg packages (the test ones only if asked)."""
    names = set()
    with open(os.path.join(TOP, 'bindep.txt')) as f:
        for line in f:
            line = line.split('#')[0].strip()
            if line and (profile_test or ' test]' not in line):
                names.add(line.split()[0])
    return names


def test_the_kolla_config_runs_an_entry_point_with_its_files():
    with open(os.path.join(RECIPE, 'blobcr-agent', 'config.json')) as f:
        config = json.load(f)
    command = shlex.split(config['command'])
    assert command[0] in _console_scripts()
    conf_file = command[command.index('--config-file') + 1]
    dests = {}
    for entry in config['config_files']:
        assert entry['source'].startswith(KOLLA), entry
        assert os.path.isabs(entry['dest']), entry
        assert entry['owner'] and re.match(r'^0[0-7]{3}$', entry['perm'])
        dests[entry['dest']] = entry
    # The agent's own configuration is required and private.
    assert conf_file in dests and not dests[conf_file].get('optional')
    assert dests[conf_file]['perm'] == '0600'
    assert any(d.endswith('.keyring') and e['perm'] == '0600'
               for d, e in dests.items())


def test_the_image_builds_what_bindep_needs_and_runs_kolla_start():
    (build_from, build), (run_from, run) = _stages()
    assert build_from.endswith(' AS build')
    assert run_from == 'FROM ${BASE}'
    build_packages, run_packages = _apt_packages(build), _apt_packages(run)
    # What setup.py builds with, and what the agent needs at run time.
    assert {'build-essential', 'pkg-config', 'python3-dev', 'python3-venv',
            'libfuse3-dev', 'libvirt-dev'} <= build_packages
    assert {'fuse3', 'python3-rados', 'ceph-common'} <= run_packages
    # Less the rbd peer's and librados' headers (benchmarks) and patch
    # (devstack's optional connection patches).
    assert (build_packages | run_packages) >= (
        _bindep() - {'python3-rbd', 'librados-dev', 'patch'})
    # Every name a package Debian has.
    wanted = sorted(build_packages | run_packages)
    shown = subprocess.run(['apt-cache', 'show', '--no-all-versions'] +
                           wanted, capture_output=True, text=True)
    assert set(re.findall(r'^Package: (\S+)$', shown.stdout, re.M)) == \
        set(wanted)
    # The programs it links are the tree's, and it starts as kolla's do.
    links = [line for line in run if ' ln -s ' in line]
    linked = {os.path.basename(w) for line in links
              for w in shlex.split(line) if w.startswith('/opt/blobcr/bin/')}
    assert linked and linked <= _console_scripts()
    assert run[-1] == 'CMD ["kolla_start"]'
    assert any('-c /src/upper-constraints.txt' in line for line in build)


def test_the_run_recipe_grants_and_mounts_what_the_agent_uses():
    with open(os.path.join(RECIPE, 'compose.yaml')) as f:
        service = yaml.safe_load(f)['services']['blobcr_agent']
    assert service['network_mode'] == 'host'
    assert 'SYS_ADMIN' in service['cap_add']
    assert '/dev/fuse:/dev/fuse' in service['devices']
    assert any(r.startswith('b 7:') for r in service['device_cgroup_rules'])
    volumes = {}
    for volume in service['volumes']:
        host, inside, *mode = volume.split(':')
        volumes[inside.rstrip('/')] = mode[0].split(',') if mode else []
    assert volumes[KOLLA.rstrip('/')] == ['ro']
    # The agent's default paths are on the host; its mount reaches the
    # host (and nova_libvirt) only with shared propagation.
    for option in ('state_path', 'mountpoint', 'export_dir',
                   'admin_socket'):
        path = _default(option)
        holder = max((v for v in volumes if path == v or
                      path.startswith(v + '/')), key=len, default=None)
        assert holder is not None, (option, path)
    mount_holder = max((v for v in volumes
                        if _default('mountpoint').startswith(v + '/')),
                       key=len)
    assert 'rshared' in volumes[mount_holder]
    assert '/dev' in volumes
    # Long enough for SIGTERM's drain of the persists in flight.
    grace = int(service['stop_grace_period'].rstrip('s'))
    assert grace > _default('shutdown_timeout')


def test_install_guide_gives_nova_libvirt_the_mount_as_a_receiver():
    with open(os.path.join(TOP, 'doc', 'source', 'install.rst')) as f:
        guide = f.read()
    mount_root = os.path.dirname(_default('mountpoint'))
    assert '"%s:%s:rslave"' % (mount_root, mount_root) in guide
    assert 'nova_libvirt_extra_volumes' in guide
