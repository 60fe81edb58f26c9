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
own default paths. The images are built and run by
tests/integration/test_containers.py (tools/build-images.sh, podman).
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


def _stages(image='blobcr-agent'):
    """The Dockerfile's stages: [(FROM line, [its instructions])]."""
    with open(os.path.join(RECIPE, image, 'Dockerfile')) as f:
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
    # The agent's own configuration is required and private: root's,
    # read by the agent's user too (an agent run as it), by no one else.
    assert conf_file in dests and not dests[conf_file].get('optional')
    private = ('root:blobcr', '0640')
    assert (dests[conf_file]['owner'], dests[conf_file]['perm']) == private
    assert any(d.endswith('.keyring') and (e['owner'], e['perm']) == private
               for d, e in dests.items())


def _pip_installs(instructions):
    return [part for line in instructions for part in line.split('&&')
            if 'bin/pip install ' in part]


# What setup.py builds with: the host that makes the wheels
# (tools/build-images.sh, after install-deps.sh) has it, the image not.
BUILD_ONLY = {'build-essential', 'pkg-config', 'python3-dev', 'libfuse3-dev',
              'libvirt-dev', 'librados-dev'}


def test_the_image_installs_the_wheels_and_runs_kolla_start():
    (build_from, build), (run_from, run) = _stages()
    assert build_from == 'FROM ${BASE} AS build'
    assert run_from == 'FROM ${BASE}'
    build_packages, run_packages = _apt_packages(build), _apt_packages(run)
    # The venv from the wheels alone: no compiler, no index.
    assert build_packages == {'python3-venv'}
    installs = _pip_installs(build)
    assert installs and all('--no-index' in i for i in installs)
    assert not (BUILD_ONLY & (build_packages | run_packages))
    # What the agent needs at run time.
    assert {'fuse3', 'python3-rados', 'ceph-common'} <= run_packages
    # Less the rbd peer (benchmarks) and patch (devstack's optional
    # connection patches).
    assert (build_packages | run_packages) >= (
        _bindep() - BUILD_ONLY - {'python3-rbd', 'patch'})
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
    # The wheels are pinned as the tests' venv is.
    with open(os.path.join(TOP, 'tools', 'build-images.sh')) as f:
        assert '-c "$top/upper-constraints.txt"' in f.read()


def test_the_cinder_volume_image_runs_cinder_volume_as_kolla_does():
    with open(os.path.join(RECIPE, 'cinder-volume', 'config.json')) as f:
        config = json.load(f)
    command = shlex.split(config['command'])
    assert command[0] == 'cinder-volume'
    conf_file = command[command.index('--config-file') + 1]
    dest = {e['dest']: e for e in config['config_files']}[conf_file]
    assert dest['source'].startswith(KOLLA) and dest['owner'] == 'cinder'
    (build_from, build), (run_from, run) = _stages('cinder-volume')
    assert (build_from, run_from) == ('FROM ${BASE} AS build', 'FROM ${BASE}')
    installs = _pip_installs(build)
    assert installs and all('--no-index' in i for i in installs)
    assert any('/var/lib/kolla/venv ' in line for line in build)
    # kolla's cinder user (uid 42407), in the kolla group.
    assert any('--uid 42407' in line and '-G kolla' in line for line in run)
    assert run[-2:] == ['USER cinder', 'CMD ["kolla_start"]']


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
