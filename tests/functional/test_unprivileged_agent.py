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

"""The agent as a user of its own (issue 35, item 3): no capability of
its own, its FUSE mounts made through fusermount3, and root's work
(loop devices, aborting a dead connection) done by its oslo.privsep
daemon, which refuses what is not this agent's.

The loop-device and restart tests (test_loop_devices.py,
test_agent_restart.py) run both as root and so (agent_place).
"""

import json
import os
import subprocess
import sys

import pytest


SIZE = 1 << 20
# linux/capability.h.
CAP_DAC_OVERRIDE = 1
CAP_SYS_ADMIN = 21
FORGER = os.path.join(os.path.dirname(__file__), 'privsep_forger.py')

pytestmark = pytest.mark.skipif(not os.path.exists('/dev/loop-control'),
                                reason='no loop devices here')


@pytest.fixture
def agent(user_space, agent_factory):
    a = user_space.local_agent(agent_factory, {'agent': {'quiesce': 'none'}})
    yield a
    a.stop()


def _status(pid):
    with open('/proc/%d/status' % pid) as f:
        fields = dict(line.split(':', 1) for line in f)
    return {'uid': int(fields['Uid'].split()[1]),
            'caps': int(fields['CapEff'].strip(), 16)}


def _daemons(conffile):
    """PIDs of the privileged daemons started with ``conffile``."""
    found = []
    for name in os.listdir('/proc'):
        if not name.isdigit():
            continue
        try:
            with open('/proc/%s/cmdline' % name, 'rb') as f:
                argv = f.read().split(b'\0')
        except OSError:
            continue
        if any(a.endswith(b'privsep-helper') for a in argv[:3]) and \
                conffile.encode() in argv and b'sudo' not in argv[0]:
            found.append(int(name))
    return found


def test_the_agent_holds_nothing_and_its_daemon_two_capabilities(agent,
                                                                 user_space):
    image = agent.client.call('create_image', name='v', size=SIZE)['id']
    attached = agent.client.call('attach', image=image, block_device=True)
    device = os.path.realpath(attached['device'])
    assert device.startswith('/dev/loop')
    uid = int(subprocess.run(['id', '-u', user_space.user], check=True,
                             capture_output=True, text=True).stdout)
    me = _status(agent.pid)
    assert me == {'uid': uid, 'caps': 0}
    daemons = _daemons(agent.conffile)
    assert len(daemons) == 1, daemons
    assert _status(daemons[0]) == {
        'uid': 0, 'caps': (1 << CAP_SYS_ADMIN) | (1 << CAP_DAC_OVERRIDE)}
    # The mount is the user's (fusermount3's), open to root (QEMU).
    with open('/proc/self/mountinfo') as f:
        mine = [line for line in f
                if ' %s ' % os.path.join(agent.mount, 'images') in line]
    assert mine and 'user_id=%d' % uid in mine[0], mine
    with open(device, 'rb') as f:
        assert f.read(4096) == bytes(4096)
    agent.client.call('detach', image=image)
    assert not os.path.exists('/sys/block/%s/loop'
                              % os.path.basename(device))


def test_forged_requests_to_the_daemon_are_refused(agent, user_space,
                                                   tmp_path):
    """What the agent's user could ask its daemon, were it compromised:
    every request outside this agent's images and devices is refused,
    and root's own loop device stays attached.
    """
    outside = os.path.join(agent.workdir, 'outside.raw')
    with open(outside, 'wb') as f:
        f.truncate(SIZE)
    backing = tmp_path / 'root.raw'
    backing.write_bytes(bytes(SIZE))
    device = subprocess.run(['losetup', '--find', '--show', str(backing)],
                            check=True, capture_output=True,
                            text=True).stdout.strip()
    try:
        done = subprocess.run(
            ['setpriv', '--reuid', user_space.user, '--regid',
             user_space.user, '--init-groups', '--', sys.executable,
             FORGER, agent.conffile, device, outside],
            capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        got = json.loads(done.stdout.splitlines()[-1])
        with open('/sys/block/%s/loop/backing_file'
                  % os.path.basename(device)) as f:
            assert f.read().strip() == str(backing)
    finally:
        subprocess.run(['losetup', '--detach', device], check=False)
    assert got.pop('uid') != 0
    assert got == {case: "InvalidInput" for case in got}, got
    assert len(got) == 10
