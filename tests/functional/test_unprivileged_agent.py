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

from blobcr_agent.mirror import connection
from blobcr_lab import agents


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


def _as_user(user_space, argv, **kwargs):
    return subprocess.run(
        ['setpriv', '--reuid', user_space.user, '--regid', user_space.user,
         '--init-groups', '--'] + argv, capture_output=True, text=True,
        timeout=120, **kwargs)


def _forge(user_space, conffile, cases):
    """What the daemon of ``conffile`` answered each of ``cases``
    (privsep_forger.py), asked as the agent's user.
    """
    done = _as_user(user_space, [sys.executable, FORGER, conffile,
                                 json.dumps(cases)])
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.splitlines()[-1])
    assert got.pop('uid') != 0
    return got


def _loop_over(path):
    return subprocess.run(['losetup', '--find', '--show', str(path)],
                          check=True, capture_output=True,
                          text=True).stdout.strip()


def _backing(device):
    with open('/sys/block/%s/loop/backing_file'
              % os.path.basename(device)) as f:
        return f.read().strip()


def test_forged_requests_to_the_daemon_are_refused(agent, user_space,
                                                   agent_factory, tmp_path):
    """What the agent's user could ask its daemon, were it compromised:
    every request outside this agent's images and devices is refused;
    root's loop devices and another BlobCR mount are left as they were.
    """
    images = os.path.join(agent.mount, 'images')
    outside = os.path.join(agent.workdir, 'outside.raw')
    with open(outside, 'wb') as f:
        f.truncate(SIZE)
    # Root's loop devices: over a file of a disk's file system, and over
    # a file of a tmpfs detached since (named "/x", major 0, like a dead
    # agent's FUSE file).
    backing = tmp_path / 'root.raw'
    backing.write_bytes(bytes(SIZE))
    shm = tmp_path / 'shm'
    shm.mkdir()
    subprocess.run(['mount', '-t', 'tmpfs', 'none', str(shm)], check=True)
    (shm / 'x').write_bytes(bytes(SIZE))
    devices = [_loop_over(backing), _loop_over(shm / 'x')]
    subprocess.run(['umount', '-l', str(shm)], check=True)
    # Another BlobCR mount, root's agent's: its connection.
    other = agent_factory(agent.backend, {'agent': {'quiesce': 'none'}})
    image = other.client.call('create_image', name='o', size=SIZE)['id']
    other_file = other.client.call('attach', image=image)['path']
    other_conn, = connection.connections([os.path.dirname(other_file)])
    # The agent's user points a directory it owns at /etc, as it could
    # with its own mnt/images once unmounted; a configuration of root's
    # names it.
    fake = os.path.join(user_space.path, 'fake')
    os.makedirs(fake)
    os.symlink('/etc', os.path.join(fake, 'images'))
    user_space.own(fake)
    fake_conf = os.path.join(agents.LAB_CONFIG_DIR, 'fake-%d.conf'
                             % os.getpid())
    with open(agent.conffile) as f:
        text = f.read().replace(agent.mount, fake)
    with open(fake_conf, 'w') as f:
        f.write(text)
    try:
        got = _forge(user_space, agent.conffile, [
            ['attach a system file', 'attach', '/etc/shadow'],
            ['attach a file beside images/', 'attach', outside],
            ['attach through ..', 'attach', os.path.join(
                images, '..', '..', os.path.basename(outside))],
            ['attach images/ itself', 'attach', images],
            ['attach with a list', 'attach', [images, 'x']],
            ['attach a file of another mount', 'attach', other_file],
            ['detach a device of root', 'detach', devices[0]],
            ['detach root\'s on a detached tmpfs', 'detach', devices[1]],
            ['detach a disk', 'detach', '/dev/vda'],
            ['detach a forged name', 'detach', '/dev/loop0 /dev/vda'],
            ['read a disk', 'identity', '/dev/vda'],
            ['abort another BlobCR mount', 'abort', other_conn],
            ['abort a connection of nobody', 'abort', 999999],
            ['abort with a string', 'abort', str(other_conn)],
        ])
        got.update(_forge(user_space, fake_conf, [
            ['attach through a linked images/', 'attach',
             os.path.join(fake, 'images', 'shadow')]]))
        assert [_backing(d) for d in devices] == [str(backing), '/x']
        with open(other_file, 'rb') as f:
            assert f.read(4096) == bytes(4096)      # still served
    finally:
        os.unlink(fake_conf)
        for device in devices:
            subprocess.run(['losetup', '--detach', device], check=False)
    assert got == {case: 'InvalidInput' for case in got}, got
    assert len(got) == 15


def test_the_helper_takes_no_argument_of_the_users_choosing(agent,
                                                            user_space):
    """sudo lets the agent's user run blobcr-privsep-helper with any
    arguments: the helper itself refuses all but its own, and any
    configuration file but root's own under /etc/blobcr.
    """
    helper = os.path.join(os.path.dirname(sys.executable),
                          'blobcr-privsep-helper')
    planted = os.path.join(user_space.path, 'planted')
    own_conf = os.path.join(agent.workdir, 'mine.conf')
    with open(agent.conffile) as f, open(own_conf, 'w') as g:
        g.write(f.read())
    user_space.own(own_conf)
    sock = ['--privsep_context', 'blobcr_agent.privileged.default',
            '--privsep_sock_path', os.path.join(agent.workdir,
                                                'privsep.sock')]
    for args in (['--config-file', agent.conffile, '--log-file', planted]
                 + sock,
                 ['--config-file', agent.conffile, '--config-file',
                  own_conf] + sock,
                 ['--config-file', own_conf] + sock,
                 # Root's files whose contents a user can choose (a
                 # process's command line), or outside /etc/blobcr.
                 ['--config-file', '/proc/%d/cmdline' % os.getpid()] + sock,
                 ['--config-file', '/etc/hostname'] + sock,
                 ['--config-file', '/' + agent.conffile] + sock,
                 ['--config-file=' + agent.conffile] + sock,
                 ['--config-file', agent.conffile, '--privsep_context',
                  'os_brick.privileged.default', '--privsep_sock_path',
                  '/tmp/x/privsep.sock']):
        done = _as_user(user_space, ['sudo', '-n', helper] + args)
        assert done.returncode == 2 and 'refused' in done.stderr, \
            (args, done.returncode, done.stderr[-2000:])
    assert not os.path.exists(planted)
