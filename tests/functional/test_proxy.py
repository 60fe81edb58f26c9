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

"""The guest checkpoint endpoint of a real blobcr-agent process, over
HTTP on 127.0.0.1: authentication both ways (a token good for its
instance, on its host, until it expires, under the current or a
previous secret), refusals that commit nothing, limits, global (group)
checkpoints that show a guest only counts, and junk (bodies, framing
headers, random header bytes) that never gets a 5xx nor commits
anything.

The connection caps and timeouts are tested on a CheckpointProxy run in
this process with a stub agent (at the end): the handler threads they
bound can only be counted in-process.
"""

import configparser
import http.client
import json
import os
import random
import selectors
import socket
import subprocess
import sys
import threading
import time

import pytest

from blobcr_agent.proxy import server as proxy_server
from blobcr_agent.repository.backends import local
from blobcr_agent.repository import groups
from blobcr_agent.repository import repository
from blobcr_agent.repository import usage
from blobcr_common import auth
from blobcr_common import exception
from blobcr_lab.agent_rpc import committed

CHUNK = 64 * 1024
HOST = 'host-a'

SETTINGS = {'proxy': {'host_secret': 'host-secret',
                      'metadata_proxy_shared_secret': 'neutron-secret',
                      'rate': '0.5', 'burst': '3'},
            'agent': {'quiesce': 'none', 'host': HOST}}


def token(instance, host=HOST, secret='host-secret', lifetime=600):
    """What blobcr-vendordata hands out for ``instance`` running on
    ``host``, good for ``lifetime`` seconds from now.
    """
    return auth.make_token(secret, instance, host,
                           int(time.time()) + lifetime)


class Minted:
    """A token minted when the test runs, not when it is collected: a
    lane can reach a test long after the 600 s a token is good for.
    """

    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs

    def __str__(self):
        return token(*self.args, **self.kwargs)

    __repr__ = __str__


@pytest.fixture
def setup(backend_factory, agent_factory):
    repo = repository.Repository(backend_factory(), chunk_size=CHUNK)
    images = {}
    for instance in ('vm-a', 'vm-b'):
        header = repo.create_image(instance, 16 * CHUNK)
        repo.commit(header.id, {0: os.urandom(CHUNK)})
        images[instance] = header.id
    agent = agent_factory(repo.backend, SETTINGS)
    for instance, image in images.items():
        agent.client.call('attach', image=image, instance=instance)
    authenticator = auth.Authenticator('host-secret', 'neutron-secret',
                                       host=HOST)
    yield repo, images, authenticator, agent.proxy_port(), agent
    repo.close()


def request(port, method, path, headers=None, body=None):
    conn = http.client.HTTPConnection('127.0.0.1', port, timeout=30)
    conn.request(method, path, body=body, headers=headers or {})
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response.status, json.loads(data) if data else None


def versions(repo, image):
    # (The mirror's reservation of the next version, registered in the
    # background after the attach, is no commit.)
    return len(committed(repo.image(image).versions))


def test_token_and_metadata_signature(setup):
    repo, images, authenticator, port, _ = setup
    headers = {'X-Instance-ID': 'vm-a',
               'X-BlobCR-Token': authenticator.token_for('vm-a')}
    status, reply = request(port, 'POST', '/v1/checkpoint', headers)
    assert status == 200 and reply['version'] == 2
    deadline = time.monotonic() + 30
    while request(port, 'GET', '/v1/checkpoint/2', headers)[1]['state'] \
            != 'stable':
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert repo.image(images['vm-a']).version(2).state == 'stable'
    signed = {'X-Instance-ID': 'vm-b',
              'X-Instance-ID-Signature': auth.sign('neutron-secret', 'vm-b')}
    status, reply = request(port, 'POST', '/v1/checkpoint', signed)
    assert status == 200 and reply['version'] == 2


@pytest.mark.parametrize('headers,status', [
    ({}, 401),
    ({'X-Instance-ID': 'vm-a'}, 401),
    ({'X-Instance-ID': 'vm-a', 'X-BlobCR-Token': 'f' * 64}, 401),
    ({'X-Instance-ID': 'vm-a',          # vm-b's valid token
      'X-BlobCR-Token': Minted('vm-b')}, 401),
    ({'X-Instance-ID': 'vm-a',          # signed with the wrong secret
      'X-Instance-ID-Signature': auth.sign('host-secret', 'vm-a')}, 401),
    ({'X-Instance-ID': 'vm-a',          # signed with another secret
      'X-BlobCR-Token': Minted('vm-a', secret='guessed')}, 401),
    ({'X-Instance-ID': 'vm-a',          # the old form: HMAC(instance)
      'X-BlobCR-Token': auth.sign('host-secret', 'vm-a')}, 401),
    ({'X-Instance-ID': 'vm-a',          # expired
      'X-BlobCR-Token': Minted('vm-a', lifetime=-1)}, 401),
    ({'X-Instance-ID': 'vm-a',          # made for another host
      'X-BlobCR-Token': Minted('vm-a', host='host-b')}, 401),
    ({'X-Instance-ID': 'vm-elsewhere',  # valid, but not on this host
      'X-BlobCR-Token': Minted('vm-elsewhere')}, 403),
    # Not ASCII: hmac.compare_digest raised TypeError (a 500).
    ({'X-Instance-ID': 'vm-a', 'X-BlobCR-Token': '\xff\xfe'}, 401),
    ({'X-Instance-ID': 'vm-a', 'X-Instance-ID-Signature': 'sig\xe9'}, 401),
    ({'X-Instance-ID': 'vm-\xe9',
      'X-BlobCR-Token': Minted('vm-\xe9')}, 401),
    ({'X-Instance-ID': 'vm-a\x01',     # not printable
      'X-BlobCR-Token': Minted('vm-a\x01')}, 401),
])
def test_forged_or_foreign_requests_commit_nothing(setup, headers, status):
    repo, images, _, port, _ = setup
    headers = {name: str(value) for name, value in headers.items()}
    before = {i: versions(repo, i) for i in images.values()}
    got, reply = request(port, 'POST', '/v1/checkpoint', headers)
    assert got == status and reply['error']
    assert {i: versions(repo, i) for i in images.values()} == before


def _vm_a(repo, agent_factory, settings):
    """An agent with ``settings`` and vm-a (an image of its own)
    attached: (agent, image id).
    """
    header = repo.create_image('vm-a-%s' % settings['agent']['host'],
                               16 * CHUNK)
    repo.commit(header.id, {0: os.urandom(CHUNK)})
    agent = agent_factory(repo.backend, settings)
    agent.client.call('attach', image=header.id, instance='vm-a')
    return agent, header.id


def _with(settings, **sections):
    return {name: dict(settings.get(name, {}), **sections.get(name, {}))
            for name in set(settings) | set(sections)}


def test_a_token_made_for_one_host_is_refused_by_another(
        backend_factory, agent_factory):
    """Finding 6 of issue 54: a token was HMAC(instance id) under the one
    secret of every agent, so whoever held an instance's token could use
    it at any host. Two hosts with the same secret, each with an
    instance vm-a (as on both sides of a migration): the token made for
    vm-a on host-a passes at host-a only.
    """
    repo = repository.Repository(backend_factory(), chunk_size=CHUNK)
    a, image_a = _vm_a(repo, agent_factory, SETTINGS)
    b, image_b = _vm_a(repo, agent_factory,
                       _with(SETTINGS, agent={'host': 'host-b'}))
    for_a = {'X-Instance-ID': 'vm-a', 'X-BlobCR-Token': token('vm-a')}
    before = versions(repo, image_b)
    status, reply = request(b.proxy_port(), 'POST', '/v1/checkpoint', for_a)
    assert status == 401, reply
    assert request(b.proxy_port(), 'GET', '/v1/checkpoint/1',
                   for_a)[0] == 401
    assert versions(repo, image_b) == before
    # At its own host it passes, and host-b's own token at host-b.
    assert request(a.proxy_port(), 'POST', '/v1/checkpoint',
                   for_a)[0] == 200
    for_b = {'X-Instance-ID': 'vm-a',
             'X-BlobCR-Token': token('vm-a', host='host-b')}
    assert request(b.proxy_port(), 'POST', '/v1/checkpoint',
                   for_b)[0] == 200
    assert request(a.proxy_port(), 'POST', '/v1/checkpoint',
                   for_b)[0] == 401
    repo.close()


def test_an_expired_token_is_refused(setup):
    """Finding 6 of issue 54: tokens never expired."""
    repo, images, _, port, _ = setup
    before = versions(repo, images['vm-a'])
    for lifetime in (-1, -3600, -10 ** 6):
        expired = {'X-Instance-ID': 'vm-a',
                   'X-BlobCR-Token': token('vm-a', lifetime=lifetime)}
        status, reply = request(port, 'POST', '/v1/checkpoint', expired)
        assert status == 401, reply
        assert request(port, 'GET', '/v1/checkpoint/1', expired)[0] == 401
    assert versions(repo, images['vm-a']) == before
    # The same instance's token still good a little longer passes.
    assert request(port, 'POST', '/v1/checkpoint', {
        'X-Instance-ID': 'vm-a',
        'X-BlobCR-Token': token('vm-a', lifetime=5)})[0] == 200


def _reconfigure(agent, section, **values):
    """Restart ``agent`` with options of ``section`` set (None: unset),
    as an operator edits blobcr.conf and restarts the service.
    """
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(agent.conffile)
    for name, value in values.items():
        if value is None:
            parser.remove_option(section, name)
        else:
            parser.set(section, name, value)
    with open(agent.conffile, 'w') as f:
        parser.write(f)
    agent.stop()
    agent.start()


def test_secret_rotation_with_an_overlap(backend_factory, agent_factory):
    """A new secret at the agents first, the old one kept in
    ``[proxy] previous_host_secrets``: tokens blobcr-vendordata made
    with either pass while both are there (the overlap, as long as
    tokens live); once the old secret is removed, its tokens are refused.
    """
    repo = repository.Repository(backend_factory(), chunk_size=CHUNK)
    agent, image = _vm_a(repo, agent_factory, _with(SETTINGS, proxy={
        'host_secret': 'new-secret',
        'previous_host_secrets': 'older-secret,host-secret'}))
    old = {'X-Instance-ID': 'vm-a', 'X-BlobCR-Token': token('vm-a')}
    new = {'X-Instance-ID': 'vm-a',
           'X-BlobCR-Token': token('vm-a', secret='new-secret')}
    oldest = {'X-Instance-ID': 'vm-a',
              'X-BlobCR-Token': token('vm-a', secret='older-secret')}
    for headers in (old, new, oldest):
        status, reply = request(agent.proxy_port(), 'POST',
                                '/v1/checkpoint', headers)
        assert status == 200, reply
    # The overlap is over: the previous secrets are removed.
    _reconfigure(agent, 'proxy', previous_host_secrets=None)
    before = versions(repo, image)
    for headers in (old, oldest):
        status, reply = request(agent.proxy_port(), 'POST',
                                '/v1/checkpoint', headers)
        assert status == 401, reply
    assert versions(repo, image) == before
    assert request(agent.proxy_port(), 'POST', '/v1/checkpoint',
                   new)[0] == 200
    repo.close()


def test_bad_bodies_and_limits(setup):
    repo, images, authenticator, port, _ = setup
    headers = {'X-Instance-ID': 'vm-a',
               'X-BlobCR-Token': authenticator.token_for('vm-a')}
    before = versions(repo, images['vm-a'])
    for body, status in ((b'{nope', 400), (b'[1]', 400),
                         (b'{"group": "g"}', 400),
                         (b'{"group": "g", "members": "2"}', 400),
                         (b'{"evil": 1}', 400), (b'x' * 5000, 413)):
        got, reply = request(port, 'POST', '/v1/checkpoint', headers, body)
        assert got == status, (body[:20], reply)
    # Framing: a Content-Length of 1-6 digits and nothing else; chunked
    # bodies were ignored and the checkpoint taken with no options.
    for extra, body, status in (
            ({'Content-Length': '0_2'}, b'{}', 400),
            ({'Content-Length': '+2'}, b'{}', 400),
            ({'Content-Length': '2 '}, b'{}', 400),
            ({'Content-Length': '1234567'}, b'{}', 400),
            ({'Transfer-Encoding': 'chunked'}, b'2\r\n{}\r\n0\r\n\r\n',
             411)):
        conn = http.client.HTTPConnection('127.0.0.1', port, timeout=30)
        conn.putrequest('POST', '/v1/checkpoint', skip_accept_encoding=True)
        for name, value in list(headers.items()) + list(extra.items()):
            conn.putheader(name, value)
        conn.endheaders(body)
        response = conn.getresponse()
        reply = json.loads(response.read())
        conn.close()
        assert response.status == status and reply['error'], (extra, reply)
    assert request(port, 'GET', '/v1/checkpoint', headers)[0] == 405
    assert request(port, 'GET', '/v1/checkpoint/999', headers)[0] == 404
    assert request(port, 'GET', '/etc/passwd', headers)[0] == 404
    assert versions(repo, images['vm-a']) == before
    # burst of 3, then refused
    codes = [request(port, 'POST', '/v1/checkpoint', headers)[0]
             for _ in range(5)]
    assert codes[:3] == [200] * 3 and 429 in codes[3:]
    conn = http.client.HTTPConnection('127.0.0.1', port, timeout=30)
    conn.request('POST', '/v1/checkpoint', headers=headers)
    response = conn.getresponse()
    assert response.status == 429
    assert response.getheader('Retry-After') == '2'     # rate 0.5/s


def test_group_checkpoint_completes_when_all_members_are_stable(setup):
    repo, images, authenticator, port, _ = setup
    body = json.dumps({'group': 'job-7', 'members': 2})
    for vm in ('vm-a', 'vm-b'):
        headers = {'X-Instance-ID': vm,
                   'X-BlobCR-Token': authenticator.token_for(vm)}
        status, reply = request(port, 'POST', '/v1/checkpoint', headers,
                                body)
        assert status == 200 and reply['group'] == 'job-7'
        if vm == 'vm-a':
            status, group = request(port, 'GET', '/v1/group/job-7', headers)
            assert status == 200 and not group['complete']
            assert group['members'] == 2 and group['stable'] <= 1
    deadline = time.monotonic() + 30
    while True:
        status, group = request(port, 'GET', '/v1/group/job-7', headers)
        if group['complete']:
            break
        assert time.monotonic() < deadline, group
        time.sleep(0.05)
    # The guest sees counts, no other member's name or image id.
    assert group == {'group': 'job-7', 'members': 2, 'stable': 2,
                     'complete': True}
    # The record is in the repository, shared by every host of the job;
    # operators see every member, keyed by image id.
    assert {v.group['id'] for i in images.values()
            for v in repo.image(i).versions if v.group} == {'job-7'}
    found = groups.state(repo, 'job-7')
    assert found['complete'] and set(found['versions']) == \
        set(images.values())
    assert {v['name'] for v in found['versions'].values()} == \
        {'vm-a', 'vm-b'}


def test_a_guest_sees_only_its_own_groups(setup):
    repo, images, authenticator, port, _ = setup
    a = {'X-Instance-ID': 'vm-a',
         'X-BlobCR-Token': authenticator.token_for('vm-a')}
    b = {'X-Instance-ID': 'vm-b',
         'X-BlobCR-Token': authenticator.token_for('vm-b')}
    body = json.dumps({'group': 'only-a', 'members': 1})
    assert request(port, 'POST', '/v1/checkpoint', a, body)[0] == 200
    assert request(port, 'GET', '/v1/group/only-a', a)[0] == 200
    assert request(port, 'GET', '/v1/group/only-a', b)[0] == 404
    status, view = request(port, 'GET', '/v1/group/only-a', a)
    assert view == {'group': 'only-a', 'members': 1, 'stable': view['stable'],
                    'complete': view['complete']}
    assert images['vm-a'] not in json.dumps(view)
    # Not a member: the same answer as for a group that does not exist.
    assert request(port, 'GET', '/v1/group/only-a', b) == \
        (404, {'error': 'no group only-a with this instance in it'})
    # A member count that disagrees with the group's is refused, without
    # saying the group's count.
    for members in (2, 7):
        body = json.dumps({'group': 'only-a', 'members': members})
        before = versions(repo, images['vm-b'])
        status, reply = request(port, 'POST', '/v1/checkpoint', b, body)
        assert status == 400 and reply['error'] == (
            'members: %d does not match the member count of group only-a'
            % members)
        assert '1' not in reply['error']
        assert versions(repo, images['vm-b']) == before


def test_polls_have_their_own_budget(setup):
    repo, images, authenticator, port, _ = setup
    headers = {'X-Instance-ID': 'vm-a',
               'X-BlobCR-Token': authenticator.token_for('vm-a')}
    # The agent's defaults: 20 per second, 40 at once.
    for n in range(400):
        conn = http.client.HTTPConnection('127.0.0.1', port, timeout=30)
        conn.request('GET', '/v1/checkpoint/1', headers=headers)
        response = conn.getresponse()
        reply = json.loads(response.read())
        conn.close()
        if response.status == 429:
            break
        assert response.status == 200, reply
    assert response.status == 429 and n >= 40, n
    assert response.getheader('Retry-After') == '1'
    assert reply['retry_after'] == 1 and 'too many requests' in \
        reply['error']
    # Checkpoints are on their own budget, and so is every instance.
    assert request(port, 'POST', '/v1/checkpoint', headers)[0] == 200
    b = {'X-Instance-ID': 'vm-b',
         'X-BlobCR-Token': authenticator.token_for('vm-b')}
    assert request(port, 'GET', '/v1/checkpoint/1', b)[0] == 200


def raw_request(port, data):
    """Send bytes as they are; the status of the reply (None if none)."""
    with socket.create_connection(('127.0.0.1', port), timeout=30) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        reply = b''
        try:
            while True:
                more = s.recv(65536)
                if not more:
                    break
                reply += more
        except ConnectionResetError:
            pass
    if not reply.startswith(b'HTTP/1.'):
        return None, reply
    head, _, body = reply.partition(b'\r\n\r\n')
    return int(head.split(b' ', 2)[1]), body


def _junk_headers(rng, auth_lines):
    """A request to /v1/checkpoint, authenticated, that must not commit:
    its framing is wrong, or its body is not JSON.
    """
    kind = rng.choice(['length', 'length', 'encoding', 'bytes', 'bytes',
                       'duplicate', 'many', 'method'])
    method, lines, body = b'POST', list(auth_lines), b'{}'
    if kind == 'length':
        value = rng.choice([b'0_2', b'+2', b'2 ', b'-1', b'0x2', b'2.0',
                            b'1e2', b'', b'1234567', b'2, 2', b'\xb2',
                            b'\xef\xbc\x92', b'2\x00', b'9' * 40,
                            bytes(rng.randrange(33, 256)
                                  for _ in range(rng.randrange(1, 8)))])
        if value.isdigit() and len(value) <= 6:
            value += b'_'
        lines.append(b'Content-Length: ' + value)
    elif kind == 'encoding':
        lines.append(b'Transfer-Encoding: ' + rng.choice(
            [b'chunked', b'CHUNKED', b'gzip, chunked', b'identity', b'',
             b'chunked\x00', b'\xffchunked']))
        if rng.random() < 0.5:
            lines.append(b'Content-Length: 2')
        body = b'2\r\n{}\r\n0\r\n\r\n'
    elif kind == 'duplicate':
        lines += [b'Content-Length: 2', b'Content-Length: 2']
    elif kind == 'many':
        lines += [b'X-Junk-%d: x' % i for i in range(rng.choice([101, 300]))]
    elif kind == 'method':
        method = rng.choice([b'PATCH', b'HEAD', b'OPTIONS', b'FOO', b'TRACE',
                             b'CONNECT', b'post'])
        lines.append(b'Content-Length: 2')
    else:
        # Random bytes among the headers; the body is not JSON whatever
        # they do to the framing.
        rng.shuffle(lines)
        for _ in range(rng.randrange(1, 4)):
            junk = bytes(rng.randrange(256)
                         for _ in range(rng.randrange(1, 40)))
            lines.insert(rng.randrange(len(lines) + 1), junk)
        body = b'{nope'
        # First, so that it counts even if the junk ends the headers.
        lines.insert(0, b'Content-Length: %d' % len(body))
        return (method + b' /v1/checkpoint HTTP/1.1\r\n' +
                b'\r\n'.join(lines) + b'\r\n\r\n' + body)
    rng.shuffle(lines)
    return (method + b' /v1/checkpoint HTTP/1.1\r\nHost: x\r\n' +
            b'\r\n'.join(lines) + b'\r\n\r\n' + body)


def test_junk_never_gets_a_server_error(setup):
    repo, images, authenticator, port, _ = setup
    rng = random.Random(3)
    headers = {'X-Instance-ID': 'vm-a',
               'X-BlobCR-Token': authenticator.token_for('vm-a')}
    before = {i: versions(repo, i) for i in images.values()}
    for _ in range(200):
        path = '/' + ''.join(rng.choice('v1/checkpointgrou%.-0123')
                             for _ in range(rng.randrange(30)))
        body = bytes(rng.randrange(256) for _ in range(rng.randrange(64)))
        method = rng.choice(['GET', 'POST', 'PUT', 'DELETE'])
        status, reply = request(port, method, path, headers, body)
        assert 400 <= status < 500 or status == 200, (method, path, status)
    auth_lines = [b'X-Instance-ID: vm-a',
                  b'X-BlobCR-Token: ' + headers['X-BlobCR-Token'].encode()]
    for _ in range(300):
        data = _junk_headers(rng, auth_lines)
        status, reply = raw_request(port, data)
        assert status is not None and 400 <= status < 500, (data, reply)
        if not data.startswith(b'HEAD'):
            assert json.loads(reply)['error'], (data, reply)
    # Nothing was committed, and the endpoint still answers.
    assert {i: versions(repo, i) for i in images.values()} == before
    assert request(port, 'POST', '/v1/checkpoint', headers)[0] == 200


# -- before authentication: idle and slow clients (a real agent) ----------
# Guests behind one relay (Neutron's metadata proxy, a QEMU guestfwd)
# share its source address: what one of them holds before it has proved
# who it is must not deny the others.

HEADER_TIMEOUT = 2.0


@pytest.fixture
def guarded(agent_factory, tmp_path):
    """A real agent on a local store with ``[proxy] header_timeout`` 2 s,
    serving vm-a: ``(port, vm-a's headers)``.
    """
    backend = local.LocalBackend(str(tmp_path / 'store'))
    repo = repository.Repository(backend, chunk_size=CHUNK)
    header = repo.create_image('vm-a', 16 * CHUNK)
    repo.commit(header.id, {0: os.urandom(CHUNK)})
    settings = {'proxy': dict(SETTINGS['proxy'],
                              header_timeout=str(HEADER_TIMEOUT)),
                'agent': SETTINGS['agent']}
    agent = agent_factory(backend, settings)
    agent.client.call('attach', image=header.id, instance='vm-a')
    yield agent.proxy_port(), {
        'X-Instance-ID': 'vm-a',
        'X-BlobCR-Token': token('vm-a')}
    repo.close()


class _IdleFlood(object):
    """``count`` connections from 127.0.0.1 that send a request line and
    then nothing, each one the endpoint closes replaced at once (at most
    one every 5 ms): ``lives`` holds each one's [opened, closed].
    """

    def __init__(self, port, count):
        self.port, self.count = port, count
        self.lives = []
        self.open = {}                  # socket -> index in lives
        self.replacing = True
        self._stop = threading.Event()
        self._selector = selectors.DefaultSelector()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        for _ in range(self.count):
            self._open()
        self._thread.start()
        return self

    def _open(self):
        s = socket.create_connection(('127.0.0.1', self.port), timeout=5)
        s.sendall(b'POST /v1/checkpoint HTTP/1.1\r\n')
        s.setblocking(False)
        self.open[s] = len(self.lives)
        self.lives.append([time.monotonic(), None])
        self._selector.register(s, selectors.EVENT_READ)

    def _run(self):
        while not self._stop.is_set():
            for key, _ in self._selector.select(0.05):
                s = key.fileobj
                try:
                    if s.recv(65536):
                        continue        # a reply (408, 503): then EOF
                except BlockingIOError:
                    continue
                except OSError:
                    pass                # reset: closed as well
                self.lives[self.open.pop(s)][1] = time.monotonic()
                self._selector.unregister(s)
                s.close()
                if self.replacing:
                    time.sleep(0.005)
                    self._open()

    def drain(self, timeout):
        """Stop replacing; wait up to ``timeout`` s for the endpoint to
        close those left.
        """
        self.replacing = False
        deadline = time.monotonic() + timeout
        while self.open and time.monotonic() < deadline:
            time.sleep(0.05)

    def stop(self):
        self._stop.set()
        self._thread.join()
        for s in self.open:
            s.close()
        self._selector.close()


def _poll(port, headers):
    """One guest's GET of its version 1 from 127.0.0.1:
    ``(status, seconds)``.
    """
    start = time.monotonic()
    conn = http.client.HTTPConnection('127.0.0.1', port, timeout=30)
    try:
        conn.request('GET', '/v1/checkpoint/1', headers=headers)
        response = conn.getresponse()
        response.read()
        return response.status, time.monotonic() - start
    finally:
        conn.close()


def test_idle_connections_do_not_deny_the_guests_behind_their_source(
        guarded):
    """32 connections from the guests' source that send a request line
    and nothing more, replaced as soon as they are cut, for two header
    deadlines: every legitimate request from the same source meanwhile is
    served at once (no 503), and every idle connection is closed at the
    header deadline.
    """
    port, headers = guarded
    flood = _IdleFlood(port, 32).start()
    try:
        time.sleep(0.5)
        served = []
        end = time.monotonic() + 2 * HEADER_TIMEOUT + 1
        while time.monotonic() < end:
            served.append(_poll(port, headers))
            time.sleep(0.2)
        flood.drain(HEADER_TIMEOUT + 2)
    finally:
        flood.stop()
    assert [s for s, _ in served] == [200] * len(served), served
    assert max(t for _, t in served) < 1.0, served
    # The flood had connections cut and replaced, each at the deadline.
    assert len(flood.lives) > 32
    lives = [closed and closed - opened for opened, closed in flood.lives]
    assert all(life is not None and life < HEADER_TIMEOUT + 1.0
               for life in lives), sorted(lives, key=lambda x: x or 99)[-5:]


def _trickle(port, interval, source='127.0.0.1'):
    """A request line and a header sent a byte every ``interval`` s until
    the endpoint closes the connection: the seconds that took (None if
    it never did).
    """
    start = time.monotonic()
    s = _connect(port, source)
    with s:
        for byte in b'GET /v1/checkpoint/1 HTTP/1.0\r\nX-Pad: ' + b'a' * 50:
            try:
                s.sendall(bytes([byte]))
                s.settimeout(interval)
                while s.recv(65536):    # a 408 first, then the end
                    pass
                return time.monotonic() - start
            except socket.timeout:
                pass
            except OSError:             # a reset: closed as well
                return time.monotonic() - start
    return None


def test_a_header_trickled_a_byte_a_second_is_cut_at_the_header_deadline(
        guarded):
    port, _ = guarded
    elapsed = _trickle(port, 1.0)
    assert elapsed is not None, 'never cut'
    assert HEADER_TIMEOUT - 0.1 < elapsed < HEADER_TIMEOUT + 1.5, elapsed


# -- in-process: connection caps and timeouts ------------------------------
# Handler threads can only be counted in the process that runs them, so
# these tests run CheckpointProxy here, on a stub agent, rather than in a
# blobcr-agent process.


class StubAgent(object):
    def __init__(self):
        self.checkpoints = 0

    def resolve(self, instance):
        return 'image-of-' + instance

    def project_of(self, instance):
        return None

    def checkpoint(self, image, group=None, members=None, quiesce=None,
                   project=None, creator=None):
        self.checkpoints += 1
        return {'version': self.checkpoints + 1, 'downtime_ms': 0}

    def state(self, image, version):
        return 'stable'

    def group_state(self, group, project=None):
        return {'group': group, 'members': 0, 'versions': {},
                'complete': False}


AUTH = auth.Authenticator('host-secret', host=HOST)


def _recorded(repo, group, project, count, timeout=30):
    """The group's state once ``count`` members are in its index."""
    deadline = time.monotonic() + timeout
    while True:
        found = groups.state(repo, group, project=project)
        if len(found['versions']) >= count:
            return found
        assert time.monotonic() < deadline, found
        time.sleep(0.02)


def _headers(instance):
    return {'X-Instance-ID': instance,
            'X-BlobCR-Token': AUTH.token_for(instance)}


@pytest.fixture
def inproc():
    """``start(**proxy options) -> (proxy, port)``; stopped afterwards."""
    servers = []

    def start(**options):
        proxy = proxy_server.CheckpointProxy(AUTH, StubAgent(), **options)
        httpd = proxy.serve()
        servers.append(httpd)
        return proxy, httpd.server_port
    yield start
    for httpd in servers:
        httpd.shutdown()
        httpd.server_close()


def _connect(port, source='127.0.0.1'):
    s = socket.socket()
    s.settimeout(30)
    s.bind((source, 0))
    s.connect(('127.0.0.1', port))
    return s


def _slow(port, source='127.0.0.1', instance=None):
    """Headers (``instance``'s, or none) promising a body that never
    comes.
    """
    s = _connect(port, source)
    s.sendall(b'POST /v1/checkpoint HTTP/1.1\r\nHost: x\r\n' + b''.join(
        ('%s: %s\r\n' % kv).encode()
        for kv in (_headers(instance).items() if instance else ())) +
        b'Content-Length: 4000\r\n\r\n')
    return s


def _get(port, source, path='/v1/checkpoint/2', instance='vm-a'):
    """A legitimate request from ``source``: (status, reply, seconds)."""
    start = time.monotonic()
    s = _connect(port, source)
    with s:
        s.sendall(('GET %s HTTP/1.0\r\n' % path).encode() + b''.join(
            ('%s: %s\r\n' % kv).encode()
            for kv in _headers(instance).items()) + b'\r\n')
        reply = b''
        while True:
            more = s.recv(65536)
            if not more:
                break
            reply += more
    head, _, body = reply.partition(b'\r\n\r\n')
    return (int(head.split(b' ', 2)[1]), json.loads(body),
            time.monotonic() - start)


def _read_all(s):
    data = b''
    try:
        while True:
            more = s.recv(65536)
            if not more:
                return data
            data += more
    except ConnectionResetError:
        return data


def _handler_threads(baseline, expect, timeout=10):
    """Wait until the threads above ``baseline`` are ``expect`` or fewer;
    the count then.
    """
    deadline = time.monotonic() + timeout
    while threading.active_count() - baseline > expect and \
            time.monotonic() < deadline:
        time.sleep(0.05)
    return threading.active_count() - baseline


def test_defaults_bound_connections():
    proxy = proxy_server.CheckpointProxy(AUTH, StubAgent())
    assert (proxy.header_timeout, proxy.request_timeout,
            proxy.max_connections, proxy.max_per_source,
            proxy.max_per_instance, proxy.max_waiting) == (
                5.0, 10.0, 64, 16, 4, 256)
    assert (proxy.get_limiter.rate, proxy.get_limiter.burst) == (20.0, 40)


def _status_line(reply):
    return reply.split(b'\r\n')[0]


def test_unsigned_slow_bodies_hold_nothing(inproc):
    """200 connections from one address whose headers no instance signed
    and promise a body that never comes: each gets its 401 at once, its
    body unread; no thread is left, and the same address is served.
    """
    _, port = inproc(request_timeout=4.0)
    baseline = threading.active_count()
    start = time.monotonic()
    slow = [_slow(port) for _ in range(200)]
    try:
        replies = [_read_all(s) for s in slow]
    finally:
        for s in slow:
            s.close()
    assert all(b' 401 ' in _status_line(r) for r in replies), \
        set(_status_line(r) for r in replies)
    assert time.monotonic() - start < 3.0
    assert _handler_threads(baseline, 0) == 0
    assert _get(port, '127.0.0.1')[0] == 200


def test_slow_bodies_hold_at_most_their_instances_share(inproc):
    """20 connections of vm-a whose body never comes hold its 4 threads
    (max_per_instance), the others get 503 at once; vm-b, from the same
    address, is served meanwhile; the 4 get 408 at the request deadline,
    which spends vm-a's budget of mistakes.
    """
    proxy, port = inproc(request_timeout=2.0, max_per_instance=4,
                         get_rate=0.01, get_burst=10)
    baseline = threading.active_count()
    slow = [_slow(port, instance='vm-a') for _ in range(20)]
    try:
        time.sleep(0.3)
        assert _handler_threads(baseline, 4) == 4
        status, reply, seconds = _get(port, '127.0.0.1', instance='vm-b')
        assert status == 200 and reply['state'] == 'stable'
        assert seconds < 1.0
        replies = [_read_all(s) for s in slow]
        busy = [r for r in replies if b' 503 ' in _status_line(r)]
        timed_out = [r for r in replies if b' 408 ' in _status_line(r)]
        assert len(busy) == 16 and len(timed_out) == 4
        assert all(r.endswith(b'{"error": "busy"}') for r in busy)
        assert all(b'Retry-After: 1' in r for r in busy)
        assert _handler_threads(baseline, 0) == 0
    finally:
        for s in slow:
            s.close()
    # 4 of vm-a's 10 mistakes are spent; vm-b's budget is its own.
    assert proxy.get_limiter._buckets['vm-a'][0] < 7
    assert _get(port, '127.0.0.1')[0] == 200


def test_over_the_cap_no_thread_is_started(inproc):
    """All handler threads taken (slow bodies of 8 instances): a 9th
    request gets 503 at once from the head reader, no thread started, and
    a connection that sent nothing waits without one; once the slow ones
    time out, requests are served again.
    """
    proxy, port = inproc(request_timeout=1.0, max_connections=8,
                         max_per_source=0)
    baseline = threading.active_count()
    slow = [_slow(port, '127.0.0.%d' % (10 + i), 'vm-%d' % i)
            for i in range(8)]
    try:
        deadline = time.monotonic() + 10
        while threading.active_count() - baseline < 8:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        quiet = _connect(port, '127.0.0.98')
        started = time.monotonic()
        refused = _slow(port, '127.0.0.99', 'vm-9')
        with refused:
            reply = _read_all(refused)
        assert reply.startswith(b'HTTP/1.0 503 ')
        assert reply.endswith(b'{"error": "busy"}')
        assert time.monotonic() - started < 0.5
        assert threading.active_count() - baseline == 8
        quiet.close()
        # The slow ones time out; the slots are free again.
        assert _handler_threads(baseline, 0) == 0
        assert _get(port, '127.0.0.99')[0] == 200
    finally:
        for s in slow:
            s.close()


def test_connections_waiting_for_their_request_are_capped(inproc):
    """Idle connections have no thread; over max_waiting the oldest of
    the address with most waiting is cut (503), not another address's.
    """
    _, port = inproc(header_timeout=30.0, request_timeout=30.0,
                     max_waiting=8)
    baseline = threading.active_count()
    flood = [_connect(port, '127.0.0.1') for _ in range(8)]
    other = _connect(port, '127.0.0.2')
    try:
        assert _read_all(flood[0]).startswith(b'HTTP/1.0 503 ')
        for s in flood[1:] + [other]:
            s.settimeout(0.2)
            with pytest.raises(socket.timeout):
                s.recv(1)
        assert threading.active_count() == baseline
        # One more from the flood: its next oldest goes.
        flood.append(_connect(port, '127.0.0.1'))
        assert _read_all(flood[1]).startswith(b'HTTP/1.0 503 ')
        status, reply, _ = _get(port, '127.0.0.1')
        assert status == 200
        other.settimeout(30)
        other.sendall(b'GET /v1/checkpoint/2 HTTP/1.0\r\n' + b''.join(
            ('%s: %s\r\n' % kv).encode()
            for kv in _headers('vm-b').items()) + b'\r\n')
        assert b' 200 ' in _status_line(_read_all(other))
    finally:
        for s in flood + [other]:
            s.close()


def test_a_request_dribbled_in_is_cut_at_the_deadline(inproc):
    """One byte every 0.2 s: a timeout per read alone would never fire."""
    _, port = inproc(request_timeout=1.0)
    baseline = threading.active_count()
    elapsed = _trickle(port, 0.2)
    assert elapsed is not None and 0.9 < elapsed < 2.5, elapsed
    assert _handler_threads(baseline, 0) == 0


def test_poll_budget_per_instance(inproc):
    _, port = inproc(get_rate=1.0, get_burst=3, rate=1.0, burst=5)
    codes = [_get(port, '127.0.0.1')[:2] for _ in range(4)]
    assert [c for c, _ in codes] == [200, 200, 200, 429]
    assert codes[-1][1]['retry_after'] == 1
    # Group polls and mistakes spend the same budget...
    assert _get(port, '127.0.0.1', '/v1/group/job-1')[0] == 429
    assert _get(port, '127.0.0.1', '/nothing')[0] == 429
    # ...not checkpoints', nor another instance's.
    conn = http.client.HTTPConnection('127.0.0.1', port, timeout=30)
    conn.request('POST', '/v1/checkpoint', headers=_headers('vm-a'))
    assert conn.getresponse().status == 200
    conn.close()
    assert _get(port, '127.0.0.1', instance='vm-b')[0] == 200


def test_bad_bodies_spend_a_budget_and_a_nesting_bomb_is_a_400(
        inproc, caplog):
    """A guest's malformed bodies, a recursion bomb among them, get a 400
    and one log line at most, never a 500 and a traceback; and they
    spend the mistakes' budget, so a flood of them is refused (429)
    before it is parsed.
    """
    _, port = inproc(get_rate=0.01, get_burst=4, rate=1.0, burst=5)
    bomb = b'[' * 4000
    codes = []
    with caplog.at_level('DEBUG'):
        for body in (bomb, b'{nope', bomb, b'[1]', bomb, bomb):
            conn = http.client.HTTPConnection('127.0.0.1', port, timeout=30)
            conn.request('POST', '/v1/checkpoint', body=body,
                         headers=_headers('vm-a'))
            response = conn.getresponse()
            reply = json.loads(response.read())
            conn.close()
            codes.append(response.status)
            assert 'error' in reply
    assert codes == [400, 400, 400, 400, 429, 429], codes
    assert not [r for r in caplog.records if r.exc_info], \
        'a bad body logged a traceback'
    # The checkpoints' own budget is untouched, and another guest's too.
    conn = http.client.HTTPConnection('127.0.0.1', port, timeout=30)
    conn.request('POST', '/v1/checkpoint', headers=_headers('vm-a'))
    assert conn.getresponse().status == 200
    conn.close()


def test_authenticator_refuses_what_is_not_ascii():
    token = AUTH.token_for('vm-a')
    for headers in ({'X-Instance-ID': 'vm-a', 'X-BlobCR-Token': '\xff\xfe'},
                    {'X-Instance-ID': 'vm-a',
                     'X-BlobCR-Token': token[:-1] + '\xe9'},
                    {'X-Instance-ID': 'vm-\u0101',
                     'X-BlobCR-Token': auth.sign('host-secret', 'vm-\u0101')},
                    {'X-Instance-ID': 'vm-a\n', 'X-BlobCR-Token': token},
                    {'X-Instance-ID': 'x' * 65,
                     'X-BlobCR-Token': AUTH.token_for('x' * 65)}):
        assert AUTH.instance(headers) is None
    both = auth.Authenticator('host-secret', 'neutron-secret',
                              host=HOST)
    assert both.instance({'X-Instance-ID': 'vm-a',
                          'X-Instance-ID-Signature': '\xff'}) is None
    assert AUTH.instance({'X-Instance-ID': 'vm-a',
                          'X-BlobCR-Token': token}) == 'vm-a'


def test_groups_are_scoped_by_the_instances_project(
        backend_factory, agent_factory):
    # vm-a and vm-c of project p1, vm-b of p2 (Cinder and Nova bind
    # instances with their project); vm-d without one.
    repo = repository.Repository(backend_factory(), chunk_size=CHUNK)
    agent = agent_factory(repo.backend, SETTINGS)
    projects = {'vm-a': 'p1', 'vm-b': 'p2', 'vm-c': 'p1', 'vm-d': None}
    images, headers = _guests(repo, agent, projects)
    port = agent.proxy_port()
    job = json.dumps({'group': 'job', 'members': 2})
    assert request(port, 'POST', '/v1/checkpoint', headers['vm-a'],
                   job)[0] == 200
    # vm-b (p2) guessing p1's id and count makes a group of p2's own:
    # it neither joins nor completes p1's.
    assert request(port, 'POST', '/v1/checkpoint', headers['vm-b'],
                   job)[0] == 200
    # Nor does one with another count get refused by p1's count.
    assert request(port, 'POST', '/v1/checkpoint', headers['vm-d'],
                   json.dumps({'group': 'job', 'members': 5}))[0] == 200
    # Members are recorded after their ack (manager/tagger.py).
    p1 = _recorded(repo, 'job', 'p1', 1)
    _recorded(repo, 'job', 'p2', 1)
    assert set(p1['versions']) == {images['vm-a']}
    assert p1['creator'] == 'instance vm-a'
    assert set(groups.state(repo, 'job', project='p2')['versions']) == {
        images['vm-b']}
    # vm-b sees only its own group, never p1's members.
    status, view = request(port, 'GET', '/v1/group/job', headers['vm-b'])
    assert status == 200 and view['members'] == 2 and view['stable'] <= 1
    # vm-c (p1) completes p1's group.
    assert request(port, 'POST', '/v1/checkpoint', headers['vm-c'],
                   job)[0] == 200
    deadline = time.monotonic() + 30
    while not request(port, 'GET', '/v1/group/job',
                      headers['vm-c'])[1]['complete']:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert set(groups.state(repo, 'job', project='p1')['versions']) == {
        images['vm-a'], images['vm-c']}
    assert not groups.state(repo, 'job', project='p2')['complete']
    # A project needs an instance, and a valid id.
    for bad in ({'instance': None, 'project': 'p1'},
                {'instance': 'vm-e', 'project': 'a/b'}):
        with pytest.raises(exception.BlobCRError, match='project'):
            agent.client.call('attach', image=images['vm-a'], **bad)
    repo.close()


def test_an_unknown_project_is_refused_not_unscoped():
    # libvirt cannot say which project an unbound Nova guest belongs to:
    # its group request is refused (503), never put in the scope of
    # callers without a project; a plain checkpoint still goes through.
    class NoLibvirt(StubAgent):
        def project_of(self, instance):
            raise exception.BackendUnavailable('cannot reach libvirt')
    proxy = proxy_server.CheckpointProxy(AUTH, NoLibvirt())
    httpd = proxy.serve()
    try:
        port = httpd.server_port
        group = json.dumps({'group': 'job', 'members': 2})
        status, reply = request(port, 'POST', '/v1/checkpoint',
                                _headers('vm-x'), group)
        assert status == 503 and 'libvirt' in reply['error']
        assert request(port, 'GET', '/v1/group/job',
                       _headers('vm-x'))[0] == 503
        assert proxy.agent.checkpoints == 0
        assert request(port, 'POST', '/v1/checkpoint',
                       _headers('vm-x'))[0] == 200
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_guest_keeps_only_its_newest_checkpoints(backend_factory,
                                                   agent_factory):
    """Finding 3 of issue 54: guest checkpoints were never obsoleted, so
    a guest taking one a second filled the shared store. With
    ``[agent] guest_checkpoints_kept`` N, a guest taking N+5 (each
    waited for, as a polite guest does) leaves its newest N stable and
    the older ones obsolete, then freed by GC; a group checkpoint's
    member and the image's first content are never touched.
    """
    kept = 3
    repo = repository.Repository(backend_factory(), chunk_size=CHUNK)
    agent, image = _vm_a(repo, agent_factory, _with(SETTINGS, proxy={
        'rate': '100', 'burst': '100'}, agent={
        'guest_checkpoints_kept': str(kept)}))
    port = agent.proxy_port()
    headers = {'X-Instance-ID': 'vm-a', 'X-BlobCR-Token': token('vm-a')}
    member = _take(port, headers,
                   json.dumps({'group': 'job-1', 'members': 1}))
    _recorded(repo, 'job-1', None, 1)
    taken = [_take(port, headers) for _ in range(kept + 5)]
    # Off the guest's wait: by the agent's retention thread.
    deadline = time.monotonic() + 30
    while agent.client.call('status')['guest_checkpoints'][
            'obsoleted'] < 5:
        assert time.monotonic() < deadline, 'not obsoleted'
        time.sleep(0.1)
    state = {v.number: v.state for v in repo.image(image).versions}
    assert [state.get(n) for n in taken[-kept:]] == ['stable'] * kept
    assert all(state.get(n, 'obsolete') == 'obsolete'
               for n in taken[:-kept]), state
    assert state[1] == 'stable' and state[member] == 'stable'
    assert agent.client.call('status')['guest_checkpoints'][
        'obsoleted'] == 5
    # GC frees them: they leave the header.
    deadline = time.monotonic() + 30
    while set(taken[:-kept]) & {v.number
                                for v in repo.image(image).versions}:
        assert time.monotonic() < deadline, 'GC did not free them'
        time.sleep(0.2)
    repo.close()


def _take(port, headers, body=None, expect=200):
    """A guest checkpoint through the endpoint, waited for until stable
    (as a polite guest does); its number, or the refusal's reply.
    """
    status, reply = request(port, 'POST', '/v1/checkpoint', headers, body)
    assert status == expect, reply
    if status != 200:
        return reply
    number = reply['version']
    deadline = time.monotonic() + 30
    while request(port, 'GET', '/v1/checkpoint/%d' % number,
                  headers)[1]['state'] != 'stable':
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return number


def _guests(repo, agent, instances):
    """Images of ``instances`` ({instance: project}) attached on the
    agent for them: ({instance: image id}, {instance: headers}).
    """
    images, headers = {}, {}
    for instance, project in instances.items():
        header = repo.create_image(instance, 16 * CHUNK)
        repo.commit(header.id, {0: os.urandom(CHUNK)})
        images[instance] = header.id
        agent.client.call('attach', image=header.id, instance=instance,
                          project=project)
        headers[instance] = _headers(instance)
    return images, headers


def test_a_guest_past_its_budget_is_refused_and_nothing_is_taken(
        backend_factory, agent_factory):
    """Finding 3 of issue 54: a guest could checkpoint for ever, each
    checkpoint kept. Past its image's budget (checkpoints, or bytes they
    wrote), or its project's (over the project's images on this host),
    the endpoint answers 507 with the reason and the counts, and takes
    nothing; another project's guest goes on. ``blobcr-manage status``
    counts them.
    """
    repo = repository.Repository(backend_factory(), chunk_size=CHUNK)
    agent = agent_factory(repo.backend, _with(SETTINGS, proxy={
        'rate': '100', 'burst': '100'}, agent={
        # Retention off: every checkpoint stays, as Cinder snapshots of
        # them would.
        'guest_checkpoints_kept': '0',
        'guest_checkpoints_per_image': '3',
        'guest_checkpoints_per_project': '5',
        'guest_checkpoint_mib_per_image': '1'}))
    images, headers = _guests(repo, agent, {
        'vm-a': 'p1', 'vm-c': 'p1', 'vm-b': 'p2', 'vm-w': 'p3'})
    port = agent.proxy_port()
    for _ in range(3):
        _take(port, headers['vm-a'])
    before = versions(repo, images['vm-a'])
    reply = _take(port, headers['vm-a'], expect=507)
    assert 'budget of image %s' % images['vm-a'] in reply['error']
    assert reply['budget']['scope'] == 'image'
    assert reply['budget']['usage']['versions'] == 3
    assert versions(repo, images['vm-a']) == before
    # vm-c, of the same project: two more reach p1's 5.
    _take(port, headers['vm-c'])
    _take(port, headers['vm-c'])
    reply = _take(port, headers['vm-c'], expect=507)
    assert reply['budget']['scope'] == 'project' and \
        'project p1' in reply['error']
    # A group checkpoint spends it too, and is refused the same way.
    _take(port, headers['vm-c'], json.dumps({'group': 'g', 'members': 1}),
          expect=507)
    # Another project is not held back by p1's.
    _take(port, headers['vm-b'])
    # Bytes: vm-w rewrites its whole image (1 MiB) and checkpoints it;
    # its next checkpoint is past its 1 MiB.
    path = agent.client.call('status')['attached'][images['vm-w']]['path']
    with open(path, 'r+b') as f:
        f.write(os.urandom(16 * CHUNK))
        f.flush()
        os.fsync(f.fileno())
    _take(port, headers['vm-w'])
    reply = _take(port, headers['vm-w'], expect=507)
    assert 'bytes written' in reply['error'], reply
    guest = agent.client.call('status')['guest_checkpoints']
    assert guest['refused'] == {'image': 2, 'project': 2, 'groups': 0}
    assert guest['limits']['image'] == {'versions': 3, 'bytes': 1 << 20}
    assert guest['usage']['p1']['versions'] == 5
    repo.close()


def test_new_groups_past_the_projects_cap_are_refused(backend_factory,
                                                      agent_factory):
    """Finding 3 of issue 54: each new group id a guest named made an
    index record in the store, with no cap. Past ``[agent]
    guest_groups_per_project`` a new id is refused (507, nothing taken);
    an id the project has already still checkpoints, another project is
    not held back, and a group whose members' checkpoints are all gone
    is forgotten (its record deleted) to make room.
    """
    repo = repository.Repository(backend_factory(), chunk_size=CHUNK)
    agent = agent_factory(repo.backend, _with(SETTINGS, proxy={
        'rate': '100', 'burst': '100'}, agent={
        'guest_groups_per_project': '2', 'guest_checkpoints_kept': '0'}))
    images, headers = _guests(repo, agent, {'vm-a': 'p1', 'vm-b': 'p2'})
    port = agent.proxy_port()

    def group(name):
        return json.dumps({'group': name, 'members': 1})
    first = _take(port, headers['vm-a'], group('job-1'))
    _take(port, headers['vm-a'], group('job-2'))
    _recorded(repo, 'job-2', 'p1', 1)
    before = versions(repo, images['vm-a'])
    reply = _take(port, headers['vm-a'], group('job-3'), expect=507)
    assert 'project p1 has 2 groups, at most 2' in reply['error']
    assert reply['budget']['scope'] == 'groups'
    assert versions(repo, images['vm-a']) == before
    assert repo.backend.read_header(groups.record_name('job-3', 'p1')) \
        is None
    _take(port, headers['vm-a'], group('job-1'))       # known: goes on
    _take(port, headers['vm-b'], group('job-3'))       # p2's own
    assert groups.project_groups(repo, 'p1') == 2
    assert agent.client.call('status')['guest_checkpoints'][
        'refused']['groups'] == 1
    # job-2's only member version goes (obsoleted, as retention would):
    # once old enough, it is forgotten and its record deleted.
    job2 = groups.state(repo, 'job-2', 'p1')['versions'][images['vm-a']]
    agent.client.call('obsolete', image=images['vm-a'],
                      versions=[job2['version']])
    assert groups.reclaim(repo, 'p1') == 0              # too recent
    assert groups.reclaim(repo, 'p1', now=time.time() +
                          2 * groups.RECLAIM_AFTER) == 1
    assert repo.backend.read_header(groups.record_name('job-2', 'p1')) \
        is None
    assert first and groups.project_groups(repo, 'p1') == 1
    _take(port, headers['vm-a'], group('job-3'))
    repo.close()


def test_retention_spares_cinder_snapshots_and_keeps_newest_groups(
        backend_factory, agent_factory):
    """Finding 3 of issue 54: retention was off by default, as it would
    have obsoleted versions blobcr-cinder-sync registered as Cinder
    snapshots, and it kept every group's members for ever. The driver's
    manage now labels the version ``managed:<snapshot id>`` (done here
    as the driver's RPC does it): retention spares it, and the label is
    refused on a version retention obsoleted first, in one header swap
    either way. Members of groups older than the newest
    ``guest_groups_kept`` go like the rest.
    """
    repo = repository.Repository(backend_factory(), chunk_size=CHUNK)
    agent, image = _vm_a(repo, agent_factory, _with(SETTINGS, proxy={
        'rate': '100', 'burst': '100'}, agent={
        'guest_checkpoints_kept': '3', 'guest_groups_kept': '1'}))
    port = agent.proxy_port()
    headers = {'X-Instance-ID': 'vm-a', 'X-BlobCR-Token': token('vm-a')}
    old_group = _take(port, headers,
                      json.dumps({'group': 'job-1', 'members': 1}))
    _recorded(repo, 'job-1', None, 1)
    registered = _take(port, headers)
    repo.label(image, registered, 'managed:snapshot-1')
    _take(port, headers, json.dumps({'group': 'job-2', 'members': 1}))
    _recorded(repo, 'job-2', None, 1)
    new_group = groups.state(repo, 'job-2')['versions'][image]['version']
    taken = [_take(port, headers) for _ in range(6)]
    deadline = time.monotonic() + 30
    while True:
        state = {v.number: v.state for v in repo.image(image).versions}
        if state.get(old_group, 'obsolete') == 'obsolete' and all(
                state.get(n, 'obsolete') == 'obsolete'
                for n in taken[:-3]):
            break
        assert time.monotonic() < deadline, state
        time.sleep(0.1)
    assert state[registered] == 'stable'
    assert state[new_group] == 'stable'
    assert [state[n] for n in taken[-3:]] == ['stable'] * 3
    # The other order: retention first, then a manage of that version.
    with pytest.raises(exception.VersionNotStable):
        repo.label(image, taken[0], 'managed:snapshot-2')
    repo.close()


def test_an_obsolete_rechecks_on_the_header_it_swaps(backend_factory):
    """The retention's obsolete judged on a header read before a manage
    labelled a version: judged again on the header it swaps, the
    labelled version stays (a registered Cinder snapshot kept its data
    only by luck of timing before).
    """
    repo = repository.Repository(backend_factory(), chunk_size=CHUNK)
    header = repo.create_image('race', 4 * CHUNK)
    for _ in range(3):
        repo.commit(header.id, {0: os.urandom(CHUNK)})
    read = repo.image(header.id)
    picked = [v.number for v in read.versions
              if not v.made_by and v.parent is not None]
    assert picked == [2, 3]
    repo.label(header.id, 2, 'managed:snapshot-1')     # meanwhile

    def still(fresh):
        return [v.number for v in fresh.versions if not v.made_by]
    repo.obsolete(header.id, picked[:1], still=still)
    assert repo.image(header.id).version(2).state == 'stable'
    repo.close()


def test_checkpoints_retention_has_not_seen_do_not_lock_a_guest_out(
        backend_factory, agent_factory):
    """Unlabelled checkpoints an operator took (blobcr-manage, RPC) fill
    the image's budget without a guest checkpoint to run retention
    after: the guest's next one is not refused for them, retention runs
    first (and only what it keeps counts).
    """
    repo = repository.Repository(backend_factory(), chunk_size=CHUNK)
    agent, image = _vm_a(repo, agent_factory, _with(SETTINGS, proxy={
        'rate': '100', 'burst': '100'}, agent={
        'guest_checkpoints_kept': '2',
        'guest_checkpoints_per_image': '4'}))
    for _ in range(6):
        taken = agent.client.call('checkpoint', image=image)
        agent.client.call('wait_stable', image=image,
                          version=taken['version'])
    headers = {'X-Instance-ID': 'vm-a', 'X-BlobCR-Token': token('vm-a')}
    _take(agent.proxy_port(), headers)
    guest = agent.client.call('status')['guest_checkpoints']
    assert guest['refused']['image'] == 0 and guest['obsoleted'] >= 4
    repo.close()


def _others_seen(agent, project, versions, timeout=30):
    """Wait until ``agent`` counts ``versions`` checkpoints of
    ``project`` on other hosts (its status); False if it never does
    (then the refusals below tell what it let through).
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        usage = agent.client.call('status')['guest_checkpoints'][
            'usage'].get(project, {})
        if usage.get('other_hosts', {}).get('versions') == versions:
            return True
        time.sleep(0.2)
    return False


def test_a_projects_budget_counts_its_images_on_every_host(
        backend_factory, agent_factory):
    """Finding 3 of issue 54: a project's budget was counted by each
    agent over the project's images on its own host, so a project with
    images on N hosts had N times its budget. Two agents on one store,
    p1's images on both: once p1's 5 checkpoints are taken across them,
    the next guest checkpoint on either host is refused (507, scope
    project, nothing taken); p2 goes on, on both. When p1's last image
    on host-b is detached, host-b's count goes, and host-a's guest may
    checkpoint again.
    """
    repo = repository.Repository(backend_factory(), chunk_size=CHUNK)
    agents, images, headers = {}, {}, {}
    for host, guests in (('host-a', {'vm-a': 'p1', 'vm-x': 'p2'}),
                         ('host-b', {'vm-c': 'p1', 'vm-y': 'p2'})):
        agents[host] = agent_factory(repo.backend, _with(SETTINGS, proxy={
            'rate': '100', 'burst': '100'}, agent={
            'host': host, 'guest_checkpoints_kept': '0',
            'guest_checkpoints_per_project': '5'}))
        found, _ = _guests(repo, agents[host], guests)
        images.update(found)
        for instance in guests:
            headers[instance] = {'X-Instance-ID': instance,
                                 'X-BlobCR-Token': token(instance, host)}
    a, b = (agents[h].proxy_port() for h in ('host-a', 'host-b'))
    for _ in range(3):
        _take(a, headers['vm-a'])
    _others_seen(agents['host-b'], 'p1', 3)
    _take(b, headers['vm-c'])
    _take(b, headers['vm-c'])
    _others_seen(agents['host-a'], 'p1', 2)
    before = {i: versions(repo, i) for i in images.values()}
    for port, instance in ((a, 'vm-a'), (b, 'vm-c')):
        reply = _take(port, headers[instance], expect=507)
        assert reply['budget']['scope'] == 'project' and \
            'project p1' in reply['error'], reply
        assert reply['budget']['usage']['versions'] == 5
    assert {i: versions(repo, i) for i in images.values()} == before
    _take(a, headers['vm-x'])
    _take(b, headers['vm-y'])
    for host, here, there in (('host-a', 3, 2), ('host-b', 2, 3)):
        guest = agents[host].client.call('status')['guest_checkpoints']
        assert guest['refused']['project'] == 1
        assert guest['usage']['p1']['versions'] == here
        assert guest['usage']['p1']['other_hosts'] == {
            'versions': there, 'bytes': 0, 'hosts': 1}
    done = subprocess.run(
        [sys.executable, '-m', 'blobcr_agent.cmd.manage', '--config-file',
         agents['host-a'].conffile, 'status'], capture_output=True,
        text=True, timeout=120)
    assert 'project p1: 3 checkpoints, 0 MiB written, 1 images here; 2 ' \
        'checkpoints, 0 MiB on 1 other host(s)' in done.stdout, done
    # vm-c detached: host-b's entry of p1 goes, host-a counts its own.
    agents['host-b'].client.call('detach', image=images['vm-c'])
    assert _others_seen(agents['host-a'], 'p1', 0)
    _take(a, headers['vm-a'])
    repo.close()


def test_a_hosts_count_of_a_project_goes_stale(backend_factory):
    """The record of a project's counts: a host that stopped publishing
    (its agent gone) counts no more after usage.STALE seconds, and the
    next writer drops it; a host's drop of its own entry removes the
    record once it is the last.
    """
    repo = repository.Repository(backend_factory(), chunk_size=CHUNK)
    now = time.time()
    usage.publish(repo, 'p1', 'host-a', {'versions': 4, 'bytes': 10},
                  now=now - usage.STALE - 1)
    usage.publish(repo, 'p1', 'host-b', {'versions': 2, 'bytes': 5},
                  now=now)
    record = usage.read(repo, 'p1')
    assert set(record.hosts) == {'host-b'}       # host-a's dropped
    assert record.others('host-c') == {'versions': 2, 'bytes': 5,
                                       'hosts': 1}
    assert usage.read(repo, 'p2').others('host-c')['hosts'] == 0
    usage.publish(repo, 'p1', 'host-b', None)
    assert repo.backend.read_header(usage.record_name('p1')) is None
    repo.close()
