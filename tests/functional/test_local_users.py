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

"""Local users of a host who are neither root nor the agent's user
(issue 54, finding 5): the agent's state directory and its mount's
directories list nothing to them (neither the image ids of the host's
tenants, nor, through versions/, every image of the store), while the
paths QEMU opens still resolve.

systemd's ``StateDirectory=blobcr`` makes the state directory mode 0755:
the agent closes it at its start (0711, its files 0600) and says so.
Who must still get through: root (the privileged daemon, libvirt), QEMU
running as root without capabilities (libvirt's
``clear_emulator_capabilities``) for a file disk, and QEMU's own user
for a 'local' connection's link ``<state_path>/devices/<image>``
(0711: it resolves, it does not list).

Real agents, as root and as their own user; the probes run as
``nobody`` and as a root without capabilities (``setpriv``).
"""

import json
import os
import shutil
import stat
import subprocess
import tempfile
import time

import pytest

from blobcr_agent.repository.backends import local
from blobcr_lab import agents

SIZE = 1 << 20
NOBODY = ['setpriv', '--reuid', 'nobody', '--regid', 'nogroup',
          '--clear-groups', '--']
# QEMU as root under libvirt, which clears its capabilities.
CAPLESS_ROOT = ['setpriv', '--inh-caps=-all', '--bounding-set=-all', '--']
PROBE = r'''
import errno, json, os, sys
with open('/proc/self/status') as f:
    caps = [line.split()[1] for line in f if line.startswith('CapEff')][0]
out = {'uid': os.getuid(), 'caps': int(caps, 16), 'got': []}
for op, path in json.loads(sys.argv[1]):
    try:
        if op == 'list':
            os.listdir(path)
        elif op == 'stat':
            os.stat(path)
        else:
            with open(path, 'rb') as f:
                f.read(512)
        out['got'].append(0)
    except OSError as e:
        out['got'].append(errno.errorcode[e.errno])
print(json.dumps(out))
'''


def _probe(who, ops):
    """``{(op, path): 0 or errno name}`` for ``ops`` (list, stat, read)
    done by ``who`` (a command that changes who runs the rest).
    """
    done = subprocess.run(who + ['/usr/bin/python3', '-c', PROBE,
                                 json.dumps(ops)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    if who is CAPLESS_ROOT:
        assert (out['uid'], out['caps']) == (0, 0)
    elif who is NOBODY:
        assert out['uid'] != 0 and out['caps'] == 0
    return dict(zip(map(tuple, ops), out['got']))


def _walkable_dir():
    # pytest's directories are root's, mode 0700: nobody could walk
    # them whatever the agent did.
    path = tempfile.mkdtemp(prefix='blobcr-local-users-')
    os.chmod(path, 0o755)
    return path


@pytest.fixture(params=['root', 'unprivileged'])
def agent(request, agent_factory):
    """A real agent, as root or as its own user, whose state directory
    was made as systemd makes it (0755) and holds an instance table as an
    older agent left it (0644).
    """
    if request.param == 'unprivileged':
        space = request.getfixturevalue('user_space')
        path, own = space.path, space.own
        kwargs = space.kwargs
    else:
        path, own = _walkable_dir(), (lambda top: None)
        kwargs = {'under': path}
    backend = local.LocalBackend(os.path.join(path, 'store'))
    own(backend.root)
    state = os.path.join(path, 'state')
    os.mkdir(state)
    os.chmod(state, 0o755)
    with open(os.path.join(state, 'instances.json'), 'w') as f:
        f.write('{}')
    os.chmod(os.path.join(state, 'instances.json'), 0o644)
    own(state)
    a = agent_factory(backend, {'agent': {'quiesce': 'none',
                                          'state_path': state}}, **kwargs)
    a.state_path = state            # where the harness looks for loops
    a.user = kwargs.get('user')
    yield a
    a.stop()
    if request.param == 'root':
        shutil.rmtree(path, ignore_errors=True)


def test_other_users_list_nothing_and_qemu_still_opens(agent):
    state = agent.state_path
    table = os.path.join(state, 'instances.json')
    image = agent.client.call('create_image', name='v', size=SIZE)['id']
    block = os.path.exists('/dev/loop-control')
    attached = agent.client.call('attach', image=image, instance='vm-1',
                                 block_device=block)
    images = os.path.join(agent.mount, 'images')
    versions = os.path.join(agent.mount, 'versions')
    disk = os.path.join(images, image)
    version = os.path.join(versions, image, '1')
    devices = os.path.join(state, 'devices')
    closed = [('list', state), ('read', table), ('list', images),
              ('list', versions), ('stat', os.path.join(versions, image)),
              ('list', os.path.join(versions, image)), ('read', version),
              ('read', disk)]
    if block:
        closed.append(('list', devices))
    walked = [('stat', disk)]           # a lookup: 0711
    if block:
        # A 'local' connection's link, which QEMU's user opens.
        assert attached['device'] == os.path.join(devices, image)
        walked.append(('stat', attached['device']))
    got = _probe(NOBODY, closed + walked)
    assert {op: got[op] for op in closed} == \
        {op: 'EACCES' for op in closed}, got
    assert {op: got[op] for op in walked} == {op: 0 for op in walked}, got
    # Closed at the start, and said so; written since, the table is the
    # agent's alone.
    assert stat.S_IMODE(os.stat(state).st_mode) == 0o711
    assert stat.S_IMODE(os.stat(table).st_mode) == 0o600
    with open(table) as f:
        assert image in f.read()
    with open(agent.log.name) as f:
        log = f.read()
    assert 'closed to other users' in log and state in log, log[-2000:]

    # QEMU as root without capabilities opens the disk (and root the
    # versions) by their paths.
    opened = [('read', disk), ('read', version), ('list', images)]
    got = _probe(CAPLESS_ROOT, opened)
    assert got == {op: 0 for op in opened}, got
    if agent.user:
        # The agent's user keeps its own directory.
        own = [('list', state), ('read', table)]
        got = _probe(['setpriv', '--reuid', agent.user, '--regid',
                      agent.user, '--init-groups', '--'], own)
        assert got == {op: 0 for op in own}, got
    agent.client.call('detach', image=image)


def test_the_pyfuse3_mount_lists_nothing_to_others(agent_factory):
    """blobcr-mirror's pyfuse3 loop serves images/ and versions/ from one
    mount: its root and both directories are closed the same way.
    """
    path = _walkable_dir()
    try:
        backend = local.LocalBackend(os.path.join(path, 'store'))
        workdir = os.path.join(path, 'mirror')
        os.mkdir(workdir)
        mirror = agents.MirrorProcess(workdir, agents.store_args(backend),
                                      ['--io-loop', 'pyfuse3']).start()
        try:
            mount = mirror.mount
            deadline = time.monotonic() + 10
            while not os.path.isdir(os.path.join(mount, 'images')):
                assert time.monotonic() < deadline
                time.sleep(0.05)
            closed = [('list', mount), ('list', os.path.join(mount, 'images')),
                      ('list', os.path.join(mount, 'versions'))]
            walked = [('stat', os.path.join(mount, 'images'))]
            got = _probe(NOBODY, closed + walked)
            assert got == dict([(op, 'EACCES') for op in closed] +
                               [(op, 0) for op in walked]), got
            got = _probe(CAPLESS_ROOT, closed)
            assert got == {op: 0 for op in closed}, got
        finally:
            mirror.stop()
    finally:
        shutil.rmtree(path, ignore_errors=True)
