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

"""The blobcr-agent daemon for real: blobcr-manage over its admin socket,
SIGTERM and SIGKILL with persists in flight and the restart that picks
everything up, and quiescing through libvirt.

libvirt here is the test driver loaded from a file that describes a
domain whose disk is the agent's mirror file: a real libvirt connection
and API, with an in-memory hypervisor (the QEMU guest is in
tests/integration/test_guest_vm_checkpoint.py).
"""

import argparse
import http.client
import json
import os
import random
import select
import socket
import stat
import subprocess
import sys
import threading
import uuid

import pytest

from blobcr_agent.cmd import manage as manage_cmd
from blobcr_agent import control
from blobcr_agent.repository import repository
from blobcr_agent.repository import scrub
from blobcr_common import auth
from blobcr_common import exception
from blobcr_lab import agents

CHUNK = 64 * 1024
NCHUNKS = 128


def manage(agent, *args):
    """Run blobcr-manage against ``agent``; (exit status, stdout, stderr)."""
    done = subprocess.run(
        [sys.executable, '-m', 'blobcr_agent.cmd.manage', '--config-file',
         agent.conffile] + list(args), capture_output=True, text=True,
        timeout=300)
    return done.returncode, done.stdout, done.stderr


def fill(path, rng, chunks):
    data = {}
    with open(path, 'r+b', buffering=0) as f:
        for index in chunks:
            data[index] = rng.randbytes(CHUNK)
            f.seek(index * CHUNK)
            f.write(data[index])
        os.fsync(f.fileno())
    return data


def expected(base, writes):
    image = bytearray(base)
    for index, data in writes.items():
        image[index * CHUNK:(index + 1) * CHUNK] = data
    return bytes(image)


@pytest.fixture
def image(backend_factory):
    repo = repository.Repository(backend_factory(), chunk_size=CHUNK)
    base = os.urandom(NCHUNKS * CHUNK)
    header = repo.create_image('disk', len(base))
    repo.commit(header.id, {i: base[i * CHUNK:(i + 1) * CHUNK]
                            for i in range(NCHUNKS)})
    yield repo, header.id, base
    repo.close()


def test_manage_commands_drive_the_agent(image, agent_factory, tmp_path):
    repo, image_id, base = image
    agent = agent_factory(repo.backend, {'agent': {'quiesce': 'none'}})
    assert stat.S_IMODE(os.stat(agent.control).st_mode) & 0o077 == 0
    status, out, err = manage(agent, 'attach', 'disk')
    assert status == 0, err
    path = out.strip()
    assert path == os.path.join(agent.mount, 'images', image_id)
    with open(path, 'rb') as f:
        assert f.read() == base
    rng = random.Random(1)
    writes = fill(path, rng, range(0, NCHUNKS, 3))
    status, out, err = manage(agent, 'checkpoint', 'disk', '--wait-stable',
                              '--json')
    assert status == 0, err
    result = json.loads(out)
    assert result['version'] == 2 and result['state'] == 'stable'
    assert result['chunks'] == len(writes) and result['downtime_ms'] > 0
    exported = str(tmp_path / 'v2.raw')
    status, out, err = manage(agent, 'export', 'disk@2', exported)
    assert status == 0, err
    with open(exported, 'rb') as f:
        assert f.read() == expected(base, writes)
    assert scrub.verify(repo, image_id, 2).ok

    # Detach refuses to drop writes made since the checkpoint.
    fill(path, rng, [5])
    status, out, err = manage(agent, 'detach', 'disk')
    assert status == 1 and 'checkpoint it first' in err
    assert image_id in agent.client.call('status')['attached']
    status, out, err = manage(agent, 'detach', 'disk', '--discard')
    assert status == 0, err
    assert agent.client.call('status')['attached'] == {}
    # Clear one-line errors, exit 1.
    for args, message in ((['attach', 'nope'], 'does not exist'),
                          (['checkpoint', 'disk'], 'not attached'),
                          (['attach', 'disk@9'], 'no version 9')):
        status, out, err = manage(agent, *args)
        assert status == 1 and message in err, (args, err)
        assert err.startswith('blobcr-manage: error:')
    # (The mirror's reservation of a version 3 ended failed at the
    # detach: nothing is left pending.)
    assert [(v.number, v.state) for v in repo.image(image_id).versions
            if v.state != 'failed'] == [(1, 'stable'), (2, 'stable')]


def test_sigterm_drains_persists_and_restart_picks_up(image, agent_factory):
    repo, image_id, base = image
    settings = {'agent': {'quiesce': 'none', 'host': 'host-1'},
                'proxy': {'host_secret': 'hs'}}
    agent = agent_factory(repo.backend, settings)
    path = agent.client.call('attach', image=image_id,
                             instance='vm-1')['path']
    writes = fill(path, random.Random(2), range(NCHUNKS))
    version = agent.client.call('checkpoint', image=image_id)['version']
    # SIGTERM at once: the persist is under way and must finish first.
    assert agent.stop() == 0
    assert repo.image(image_id).version(version).state == 'stable'
    assert repo.read(image_id, version, 0, len(base)) == \
        expected(base, writes)
    assert not os.path.ismount(os.path.join(agent.mount, 'images'))

    agent.start()                       # same state directory
    attached = agent.client.call('status')['attached']
    assert list(attached) == [image_id]
    assert attached[image_id]['instances'] == ['vm-1']
    with open(path, 'rb') as f:
        assert f.read() == expected(base, writes)
    # The instance table survived: the guest endpoint still knows vm-1.
    port = agent.proxy_port()
    conn = http.client.HTTPConnection('127.0.0.1', port, timeout=30)
    conn.request('POST', '/v1/checkpoint', headers={
        'X-Instance-ID': 'vm-1',
        'X-BlobCR-Token': auth.Authenticator('hs', host='host-1').token_for(
            'vm-1')})
    reply = conn.getresponse()
    # The next version after the one persisted (the reservation made
    # before the stop ended failed: one number may be skipped).
    assert reply.status == 200
    answer = json.loads(reply.read())
    assert answer['version'] in (version + 1, version + 2)
    # The guest learns how long it was held, and how.
    assert answer['quiesce'] == 'none'
    assert 0 <= answer['held_ms'] <= answer['downtime_ms']


def test_sigkill_with_a_persist_in_flight(image, agent_factory):
    repo, image_id, base = image
    agent = agent_factory(repo.backend, {'agent': {'quiesce': 'none'}})
    path = agent.client.call('attach', image=image_id)['path']
    writes = fill(path, random.Random(3), range(NCHUNKS))
    version = agent.client.call('checkpoint', image=image_id)['version']
    agent.kill()
    agent.start()
    state = agent.client.call('wait_stable', image=image_id,
                              version=version)
    # Nothing was written after the COMMIT: the persist must resume.
    assert state == 'stable'
    assert repo.read(image_id, version, 0, len(base)) == \
        expected(base, writes)
    assert scrub.verify(repo, image_id, version).ok


def _libvirt_node(path, domain_uuid):
    # A libvirt test-driver node with one running domain using ``path``.
    return ('<node><domain type="test"><name>vm-libvirt</name>'
            '<uuid>%s</uuid><memory>65536</memory><os><type>hvm</type>'
            '</os><devices><disk type="file" device="disk">'
            '<source file="%s"/><target dev="vda"/></disk></devices>'
            '</domain></node>' % (domain_uuid, path))


def test_quiesce_and_instance_lookup_through_libvirt(image, tmp_path):
    pytest.importorskip('libvirt')
    repo, image_id, base = image
    workdir = tmp_path / 'agent'
    workdir.mkdir()
    instance = str(uuid.uuid4())
    node = tmp_path / 'libvirt-node.xml'
    node.write_text(_libvirt_node(
        os.path.join(str(workdir), 'mnt', 'images', image_id), instance))
    agent = agents.AgentProcess(str(workdir), repo.backend, {
        'agent': {'libvirt_uri': 'test://%s' % node, 'quiesce': 'suspend'},
        'proxy': {'metadata_proxy_shared_secret': 'ns'}})
    agent.start()
    try:
        # No instance given: the guest endpoint finds it by domain UUID.
        agent.client.call('attach', image=image_id)
        result = agent.client.call('checkpoint', image=image_id)
        assert result['quiesce'] == 'suspend'
        result = agent.client.call('checkpoint', image=image_id,
                                   quiesce='fsfreeze')
        assert result['quiesce'] == 'fsfreeze'
        conn = http.client.HTTPConnection('127.0.0.1', agent.proxy_port(),
                                          timeout=30)
        for who, status in ((instance, 200), (str(uuid.uuid4()), 403)):
            conn.request('POST', '/v1/checkpoint', body='{"quiesce": "none"}',
                         headers={'X-Instance-ID': who,
                                  'X-Instance-ID-Signature':
                                  auth.sign('ns', who)})
            reply = conn.getresponse()
            body = json.loads(reply.read())
            assert reply.status == status, body
        assert body['error'].endswith('is not hosted here')
        # Nothing committed for the refused instance: the base and the
        # three checkpoints, then at most the mirror's reservation of
        # the next version (pending, nothing written into it).
        agent.client.call('wait_stable', image=image_id, version=4)
        versions = repo.image(image_id).versions
        assert [(v.number, v.state) for v in versions[:4]] == \
            [(n, 'stable') for n in (1, 2, 3, 4)]
        assert [(v.state, v.chunks) for v in versions[4:]] in \
            ([], [('pending', 0)])

        # An image no domain uses: quiescing it when asked explicitly is
        # refused; the configured default falls back to none.
        spare = repo.create_image('spare', CHUNK * 4).id
        agent.client.call('attach', image=spare)
        for mode in ('suspend', 'fsfreeze'):
            status, out, err = manage(agent, 'checkpoint', spare,
                                      '--quiesce', mode)
            assert status == 1, err
            assert 'no running domain uses image %s: cannot %s' \
                % (spare, mode) in err
        # Refused: nothing committed (at most the reservation, unused).
        assert [(v.state, v.chunks) for v in repo.image(spare).versions
                if v.state != 'pending' or v.chunks] == []
        assert agent.client.call('checkpoint',
                                 image=spare)['quiesce'] == 'none'

        # Detach refuses while the domain runs on the image, unless forced.
        status, out, err = manage(agent, 'detach', image_id)
        assert status == 1
        assert 'domain vm-libvirt is running on image %s; stop it or ' \
            'detach with force' % image_id in err
        assert image_id in agent.client.call('status')['attached']
        status, out, err = manage(agent, 'detach', image_id, '--force')
        assert status == 0, err
        status, out, err = manage(agent, 'detach', spare)
        assert status == 0, err
        assert agent.client.call('status')['attached'] == {}
    finally:
        agent.stop()


# -- export --------------------------------------------------------------


def test_export_follows_no_planted_link_and_keeps_files(image, agent_factory,
                                                        tmp_path):
    repo, image_id, base = image
    agent = agent_factory(repo.backend, {'agent': {'quiesce': 'none'}})
    out_dir = tmp_path / 'out'
    out_dir.mkdir()
    victim = tmp_path / 'victim'
    victim.write_bytes(b'precious')
    target = out_dir / 'v1.raw'
    # Where the old export put its temporary file, a symlink someone
    # planted in a world-writable directory: never followed.
    planted = out_dir / ('v1.raw.part-%d' % agent.proc.pid)
    planted.symlink_to(victim)
    status, out, err = manage(agent, 'export', 'disk@1', str(target))
    assert status == 0, err
    assert victim.read_bytes() == b'precious'
    assert not target.is_symlink() and target.read_bytes() == base
    assert sorted(os.listdir(out_dir)) == sorted(['v1.raw', planted.name])

    # An existing file (or symlink) is kept unless --overwrite.
    target.write_bytes(b'old')
    link = out_dir / 'link.raw'
    link.symlink_to(victim)
    for path in (target, link):
        status, out, err = manage(agent, 'export', 'disk@1', str(path))
        assert status == 1
        assert err.startswith('blobcr-manage: error: %s exists' % path)
        assert 'Traceback' not in err
    assert target.read_bytes() == b'old'
    assert victim.read_bytes() == b'precious'
    for path in (target, link):
        status, out, err = manage(agent, 'export', 'disk@1', str(path),
                                  '--overwrite')
        assert status == 0, err
        assert not path.is_symlink() and path.read_bytes() == base
    assert victim.read_bytes() == b'precious'
    assert sorted(os.listdir(out_dir)) == sorted(['v1.raw', 'link.raw',
                                                  planted.name])
    # The same without an agent: the repository itself refuses.
    with pytest.raises(exception.InvalidInput, match='exists'):
        repo.export(image_id, 1, str(target))
    missing_dir = str(tmp_path / 'nowhere' / 'v1.raw')
    with pytest.raises(exception.InvalidInput, match='cannot write'):
        repo.export(image_id, 1, missing_dir)


# -- attach ----------------------------------------------------------------


def test_a_failed_attach_binds_no_instance(image, agent_factory):
    repo, image_id, base = image
    other = repo.create_image('other', CHUNK * 4).id
    agent = agent_factory(repo.backend, {'agent': {'quiesce': 'none'}})
    status, out, err = manage(agent, 'attach', 'disk@9', '--instance',
                              'vm-1')
    assert status == 1 and 'no version 9' in err
    assert agent.client.call('status')['attached'] == {}
    # vm-1 is free: nothing was bound by the failed attach.
    status, out, err = manage(agent, 'attach', 'other', '--instance', 'vm-1')
    assert status == 0, err
    attached = agent.client.call('status')['attached']
    assert list(attached) == [other]
    assert attached[other]['instances'] == ['vm-1']
    # A binding that cannot be made is refused before attaching.
    status, out, err = manage(agent, 'attach', 'disk', '--instance',
                              'x' * 65)
    assert status == 1 and 'an instance id is 1-64 characters' in err
    assert list(agent.client.call('status')['attached']) == [other]
    # A second volume of the same instance (a data volume beside its
    # boot volume): both bound, the guest endpoint takes the first.
    status, out, err = manage(agent, 'attach', 'disk', '--instance', 'vm-1')
    assert status == 0, err
    attached = agent.client.call('status')['attached']
    assert sorted(attached) == sorted([other, image_id])
    assert attached[image_id]['instances'] == ['vm-1']
    assert attached[other]['instances'] == ['vm-1']


# -- blobcr-manage and the admin socket ------------------------------------


def test_manage_waits_as_long_as_it_was_told(monkeypatch):
    made = []

    class Client(object):
        def __init__(self, path, timeout=None):
            made.append(timeout)

        def call(self, op, **args):
            if op == 'wait_stable':
                return 'stable'
            return {'version': 2, 'downtime_ms': 1.0, 'held_ms': 0.5,
                    'chunks': 1, 'quiesce': 'none'}

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

    monkeypatch.setattr(manage_cmd, 'AgentClient', Client)
    args = argparse.Namespace(
        admin_socket='/nonexistent.sock', image='disk', quiesce=None,
        group=None, members=None, project=None, wait_stable=True,
        timeout=900, json=True)
    assert not manage_cmd.do_checkpoint(args)
    assert made == [930]
    args.wait_stable = False
    assert not manage_cmd.do_checkpoint(args)
    assert made[1] == manage_cmd.AGENT_TIMEOUT


def _resetting_server(path):
    """A socket that takes a request and drops the connection unread."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(4)

    def run():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            select.select([conn], [], [], 30)
            conn.close()
    threading.Thread(target=run, daemon=True).start()
    return server


def test_manage_reports_a_lost_agent_in_one_line(tmp_path):
    path = str(tmp_path / 'agent.sock')
    server = _resetting_server(path)
    try:
        for args in (['status'],
                     ['checkpoint', 'disk', '--wait-stable', '--timeout',
                      '900']):
            done = subprocess.run(
                [sys.executable, '-m', 'blobcr_agent.cmd.manage'] + args +
                ['--admin-socket', path], capture_output=True, text=True,
                timeout=120)
            assert done.returncode == 1, done.stderr
            assert done.stderr.startswith('blobcr-manage: error: lost the '
                                          'blobcr-agent admin socket')
            assert 'Traceback' not in done.stderr
            assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    finally:
        server.close()


class Pinger(object):
    def ping(self):
        return 'pong'


def test_a_served_control_socket_is_not_taken_over(tmp_path):
    path = str(tmp_path / 'control.sock')
    dispatch = control.Dispatcher(Pinger(), ['ping'])
    first = control.serve(path, dispatch)
    try:
        with pytest.raises(exception.InvalidInput,
                           match='another process serves %s' % path):
            control.serve(path, dispatch)
        with control.Client(path) as client:
            assert client.call('ping') == 'pong'
    finally:
        first.shutdown()
        first.server_close()
    # Nobody serves it any more: the stale socket is replaced.
    assert stat.S_ISSOCK(os.lstat(path).st_mode)
    second = control.serve(path, dispatch)
    try:
        with control.Client(path) as client:
            assert client.call('ping') == 'pong'
    finally:
        second.shutdown()
        second.server_close()
    # Anything else is left alone.
    other = tmp_path / 'not-a-socket'
    other.write_text('keep me')
    with pytest.raises(exception.InvalidInput, match='not a socket'):
        control.serve(str(other), dispatch)
    assert other.read_text() == 'keep me'


def test_a_second_agent_does_not_take_over_the_admin_socket(
        image, agent_factory, tmp_path):
    repo, image_id, base = image
    first = agent_factory(repo.backend, {'agent': {'quiesce': 'none'}})
    first.client.call('attach', image=image_id)
    workdir = tmp_path / 'second'
    workdir.mkdir()
    second = agents.AgentProcess(str(workdir), repo.backend, {
        'agent': {'quiesce': 'none', 'admin_socket': first.control}})
    proc = subprocess.Popen(second.args, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        second.proc = proc
        second._unmount()
        pytest.fail('the second agent took the admin socket and ran')
    finally:
        second.log.close()
    assert proc.returncode == 1
    assert 'another process serves %s' % first.control in err
    # The first agent still answers on its socket, new connections too.
    assert list(first.client.call('status')['attached']) == [image_id]
    status, out, err = manage(first, 'status', '--json')
    assert status == 0, err
    assert list(json.loads(out)['attached']) == [image_id]


def test_the_agent_tells_systemd_when_it_serves(image, agent_factory,
                                                tmp_path, monkeypatch,
                                                backend_kind):
    """Type=notify (etc/systemd/blobcr-agent.service): READY=1 comes
    once the mirror's mount serves (an attached image reads there),
    after the restart of a killed agent too; STOPPING=1 at its stop.
    """
    if backend_kind != 'local':
        pytest.skip('the notification does not depend on the store')
    repo, image_id, base = image
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = str(tmp_path / 'notify.sock')
    listener.bind(path)
    listener.settimeout(60)
    monkeypatch.setenv('NOTIFY_SOCKET', path)

    def received():
        while True:
            # FDSTORE=1 (images/'s connection, mirror/connection.py):
            # this listener keeps nothing, as a unit without
            # FileDescriptorStoreMax=; the kernel closes what it sent.
            message = dict(line.split('=', 1) for line in
                           listener.recv(4096).decode().splitlines())
            if 'FDSTORE' not in message:
                return message

    agent = agent_factory(repo.backend, {'agent': {'quiesce': 'none'}})
    ready = received()
    assert ready['READY'] == '1', ready
    assert 'serving 0 image(s)' in ready['STATUS']
    assert os.path.ismount(os.path.join(agent.mount, 'images'))
    attached = agent.client.call('attach', image=image_id)['path']
    agent.kill()
    agent.start()
    ready = received()
    # Re-attached before it said so: the image reads at once.
    assert ready['READY'] == '1' and 'serving 1 image(s)' in ready['STATUS']
    with open(attached, 'rb') as f:
        assert f.read(CHUNK) == base[:CHUNK]
    agent.stop()
    assert received()['STOPPING'] == '1'
    listener.close()
