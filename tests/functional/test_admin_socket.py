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

"""Who may use a control socket: root, and ``[agent] admin_group``.

The clients are real processes running as other users (setpriv to uid
65534, nobody, with or without the group), on a real agent's admin
socket and on a bare control socket. File modes keep others out first;
the tests then open the modes up, as a wrong umask or a careless chmod
would, to show that the peer-credential check refuses them anyway.
"""

import grp
import json
import logging
import os
import pwd
import shutil
import stat
import subprocess
import tempfile

import pytest

from blobcr_agent import control
from blobcr_agent.repository import repository
from blobcr_lab import agents

NOBODY = 65534
GROUP = 'users'
TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
SERVICE_USERS = os.path.join(TOP, 'tools', 'service-users.sh')
AGENT = 'blobcr-agent'

# A stdlib-only client (run by /usr/bin/python3 -I as another user).
CLIENT = '''
import json, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(30)
try:
    s.connect(sys.argv[1])
except OSError as e:
    print(json.dumps({"errno": e.errno}))
    sys.exit()
s.sendall(sys.argv[2].encode() + b"\\n")
print(s.makefile("rb").readline().decode().strip() or "{}")
'''

pytestmark = pytest.mark.skipif(not shutil.which('setpriv'),
                                reason='setpriv (util-linux) absent')


def _as(creds, sock, op, **args):
    """Call ``op`` on the socket at ``sock`` from a process with the
    setpriv credentials ``creds``; the reply, or {"errno": n}.
    """
    done = subprocess.run(
        ['setpriv'] + creds + ['/usr/bin/python3', '-I', '-c', CLIENT,
                               sock, json.dumps(dict(args, op=op))],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _nobody(*groups):
    creds = ['--reuid', str(NOBODY), '--regid', str(NOBODY)]
    if groups:
        return creds + ['--groups', ','.join(str(g) for g in groups)]
    return creds + ['--clear-groups']


@pytest.fixture
def public_dir():
    """A directory others may search (tmp_path's parents are 0700)."""
    path = tempfile.mkdtemp(prefix='blobcr-admin-', dir='/tmp')
    os.chmod(path, 0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _open_up(path):
    """What a wrong umask or chmod would leave: anyone may connect."""
    os.chmod(os.path.dirname(path), 0o711)
    os.chmod(path, 0o666)


class Target(object):
    def ping(self):
        return 'pong'


def test_a_root_only_socket_refuses_everyone_else(public_dir, caplog):
    path = os.path.join(public_dir, 'run', 'control.sock')
    server = control.serve(path, control.Dispatcher(Target(), ['ping']))
    try:
        assert os.stat(path).st_mode & 0o077 == 0
        assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
        with control.Client(path) as client:
            assert client.call('ping') == 'pong'        # root
        assert _as(_nobody(), path, 'ping') == {'errno': 13}
        _open_up(path)
        with caplog.at_level(logging.WARNING, logger=control.__name__):
            reply = _as(_nobody(), path, 'ping')
        assert reply['ok'] is False
        assert reply['error'].startswith(
            'permission denied: uid 65534 (nobody, pid ')
        assert 'only root may use this socket' in reply['error']
        assert 'refused a connection' in caplog.text
        assert 'uid 65534' in caplog.text
        # A member of some group gets no more: no group is configured.
        reply = _as(_nobody(grp.getgrnam(GROUP).gr_gid), path, 'ping')
        assert reply['ok'] is False
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def repo(tmp_path):
    from blobcr_agent.repository.backends import local
    repo = repository.Repository(local.LocalBackend(str(tmp_path / 'store')),
                                 chunk_size=4096)
    header = repo.create_image('disk', 16 * 4096)
    repo.commit(header.id, {0: b'x' * 4096})
    yield repo
    repo.close()


def test_admin_group_members_may_use_the_agent(repo, public_dir, tmp_path):
    gid = grp.getgrnam(GROUP).gr_gid
    path = os.path.join(public_dir, 'run', 'agent.sock')
    exports = tmp_path / 'exports'
    workdir = tmp_path / 'agent'
    workdir.mkdir()
    agent = agents.AgentProcess(str(workdir), repo.backend, {'agent': {
        'admin_socket': path, 'admin_group': GROUP,
        'export_dir': str(exports)}})
    agent.control = path
    try:
        agent.start()
        st = os.stat(path)
        assert (stat.S_IMODE(st.st_mode), st.st_gid) == (0o660, gid)
        st = os.stat(os.path.dirname(path))
        assert (stat.S_IMODE(st.st_mode), st.st_gid) == (0o710, gid)
        # Members: by a supplementary group, by the primary one.
        reply = _as(_nobody(gid), path, 'status')
        assert reply['ok'] is True, reply
        reply = _as(['--reuid', str(NOBODY), '--regid', str(gid),
                     '--clear-groups'], path, 'list_versions', image='disk')
        assert reply['ok'] is True
        assert reply['result']['versions'][0]['version'] == 1
        # A member's export goes under export_dir only (written as root).
        outside = os.path.join(public_dir, 'owned-by-root')
        reply = _as(_nobody(gid), path, 'export', image='disk', version=1,
                    path=outside)
        assert reply == {'ok': False, 'error': (
            'exports by admin_group members go under %s ([agent] '
            'export_dir): %s is not there' % (exports, outside))}
        assert not os.path.exists(outside)
        inside = str(exports / 'disk.raw')
        assert _as(_nobody(gid), path, 'export', image='disk', version=1,
                   path=inside)['ok'] is True
        # Root is not held there.
        assert agent.client.call('export', image='disk', version=1,
                                 path=outside)['path'] == outside
        # Others: the modes keep them out; opened up, the check does.
        assert _as(_nobody(), path, 'status') == {'errno': 13}
        _open_up(path)
        reply = _as(_nobody(), path, 'status')
        assert reply['ok'] is False
        assert 'is neither root nor a member of group users' in \
            reply['error']
        with open(agent.log.name, errors='replace') as f:
            assert 'refused a connection: permission denied: uid 65534' in \
                f.read()
    finally:
        agent.stop()


def test_an_unknown_admin_group_stops_the_start(repo, tmp_path):
    agent = agents.AgentProcess(str(tmp_path), repo.backend, {'agent': {
        'admin_group': 'no-such-group-here'}})
    with pytest.raises(RuntimeError):
        agent.start(timeout=30)
    with open(agent.log.name, errors='replace') as f:
        assert "no group 'no-such-group-here' on this host" in f.read()


# Issue 54, finding 2: the four services ran as one user, so the
# listener, the sync and vendordata passed the agent's check (root or
# the agent's own uid) and got root's dispatch, and each read the
# others' credentials.

def _service_users(conf_dir=None):
    """{service: (user, group)}, the users made as the tools make them
    (tools/service-users.sh, from etc/systemd's units).
    """
    argv = ['bash', SERVICE_USERS]
    if conf_dir:
        argv += ['--conf-dir', conf_dir]
    done = subprocess.run(argv, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return {service: (user, group) for service, user, group in
            (line.split() for line in done.stdout.splitlines())}


def _user(user, group):
    return ['--reuid', user, '--regid', group, '--init-groups']


def test_other_services_users_are_refused_the_agents_socket(user_space,
                                                            agent_factory):
    users = _service_users()
    assert users[AGENT][0] == user_space.user
    others = {s: u for s, u in users.items() if s != AGENT}
    assert len(others) == 3
    agent = user_space.local_agent(agent_factory,
                                   {'agent': {'quiesce': 'none'}})
    path = agent.control
    # The agent's own user is admitted (the check admits its uid).
    assert _as(_user(*users[AGENT]), path, 'status')['ok'] is True
    # The others: the modes keep them out; opened up, the check does,
    # before any dispatch (delete_image would be root's).
    for service, who in others.items():
        assert _as(_user(*who), path, 'status') == {'errno': 13}, service
    _open_up(path)
    for service, who in others.items():
        for op, args in (('status', {}), ('delete_image', {'image': 'x'})):
            reply = _as(_user(*who), path, op, **args)
            assert reply['ok'] is False, (service, op, reply)
            assert 'permission denied: uid %d (%s, pid ' % (
                pwd.getpwnam(who[0]).pw_uid, who[0]) in reply['error']
            assert 'only root may use this socket' in reply['error']
    with open(agent.log.name, errors='replace') as f:
        log = f.read()
    for user, _ in others.values():
        assert '(%s, pid ' % user in log


READ = '''
import json, sys
got = {}
for path in sys.argv[1:]:
    try:
        open(path).read()
        got[path] = "read"
    except OSError as e:
        got[path] = e.errno
print(json.dumps(got))
'''


def test_each_service_reads_its_own_configuration_only(public_dir):
    """The sync's Keystone credentials (admin on every project) and the
    listener's blobcr-control password, on the storage host beside the
    agent: only their own service's user reads them.
    """
    conf_dir = os.path.join(public_dir, 'etc-blobcr')
    os.mkdir(conf_dir, 0o755)
    files = {AGENT: 'blobcr.conf',
             'blobcr-cinder-sync': 'blobcr-cinder-sync.conf',
             'blobcr-nova-listener': 'nova-listener.conf',
             'blobcr-vendordata': 'nova-vendordata.conf'}
    paths = {s: os.path.join(conf_dir, name) for s, name in files.items()}
    for path in paths.values():
        with open(path, 'w') as f:
            f.write('[DEFAULT]\npassword = secret\n')
        os.chmod(path, 0o644)       # as a careless copy leaves it
    users = _service_users(conf_dir)
    assert set(users) == set(files)
    for service, path in paths.items():
        st = os.stat(path)
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (
            0, grp.getgrnam(users[service][1]).gr_gid, 0o640), service
    for service, who in users.items():
        done = subprocess.run(
            ['setpriv'] + _user(*who) + ['/usr/bin/python3', '-I', '-c',
                                         READ] + list(paths.values()),
            capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        got = json.loads(done.stdout)
        assert got == {p: 'read' if s == service else 13
                       for s, p in paths.items()}, service
