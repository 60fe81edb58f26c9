"""The guest checkpoint endpoint of a real blobcr-agent process, over
HTTP on 127.0.0.1: authentication both ways, refusals that commit
nothing, limits, global (group) checkpoints, and junk that never gets a
5xx.
"""

import http.client
import json
import os
import random
import time

import pytest

from blobcr_agent.proxy import auth
from blobcr_agent.repository import repository

CHUNK = 64 * 1024


SETTINGS = {'proxy': {'host_secret': 'host-secret',
                      'metadata_proxy_shared_secret': 'neutron-secret',
                      'rate': '0.5', 'burst': '3'},
            'agent': {'quiesce': 'none'}}


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
    authenticator = auth.Authenticator('host-secret', 'neutron-secret')
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
    return len(repo.image(image).versions)


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
      'X-BlobCR-Token': auth.sign('host-secret', 'vm-b')}, 401),
    ({'X-Instance-ID': 'vm-a',          # signed with the wrong secret
      'X-Instance-ID-Signature': auth.sign('host-secret', 'vm-a')}, 401),
    ({'X-Instance-ID': 'vm-elsewhere',  # valid, but not on this host
      'X-BlobCR-Token': auth.sign('host-secret', 'vm-elsewhere')}, 403),
])
def test_forged_or_foreign_requests_commit_nothing(setup, headers, status):
    repo, images, _, port, _ = setup
    before = {i: versions(repo, i) for i in images.values()}
    got, reply = request(port, 'POST', '/v1/checkpoint', headers)
    assert got == status and reply['error']
    assert {i: versions(repo, i) for i in images.values()} == before


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
    deadline = time.monotonic() + 30
    while True:
        status, group = request(port, 'GET', '/v1/group/job-7', headers)
        if group['complete']:
            break
        assert time.monotonic() < deadline, group
        time.sleep(0.05)
    assert set(group['versions']) == {'vm-a', 'vm-b'}
    # The record is in the repository, shared by every host of the job.
    assert {v.group['id'] for i in images.values()
            for v in repo.image(i).versions if v.group} == {'job-7'}


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
    # A member count that disagrees with the group's is refused.
    body = json.dumps({'group': 'only-a', 'members': 2})
    before = versions(repo, images['vm-b'])
    status, reply = request(port, 'POST', '/v1/checkpoint', b, body)
    assert status == 400 and 'members' in reply['error']
    assert versions(repo, images['vm-b']) == before


def test_junk_never_gets_a_server_error(setup):
    _, _, authenticator, port, _ = setup
    rng = random.Random(3)
    headers = {'X-Instance-ID': 'vm-a',
               'X-BlobCR-Token': authenticator.token_for('vm-a')}
    for _ in range(200):
        path = '/' + ''.join(rng.choice('v1/checkpointgrou%.-0123')
                             for _ in range(rng.randrange(30)))
        body = bytes(rng.randrange(256) for _ in range(rng.randrange(64)))
        method = rng.choice(['GET', 'POST', 'PUT', 'DELETE'])
        status, reply = request(port, method, path, headers, body)
        assert 400 <= status < 500 or status == 200, (method, path, status)
