"""The agent's RPC API end to end: AgentAPI in the test process, real
blobcr-agent processes, a real RabbitMQ (tests/rabbitmq.py) and the
repository on the local store and on the micro Ceph cluster.

Every agent gets a host name of its own, so that tests never reach each
other's agents on the shared broker.
"""

import os
import random
import socket
import time
import uuid

import oslo_messaging
import pytest

from blobcr_agent import exception
from blobcr_agent.repository.backends import local
from blobcr_agent.repository import repository
from blobcr_agent.rpc import api as rpc_api

CHUNK = 64 * 1024
NCHUNKS = 32
RPC_UP_TIMEOUT = 60


def host_name(label):
    return 'rpc-%s-%s' % (label, uuid.uuid4().hex[:10])


def make_image(repo, name):
    base = os.urandom(NCHUNKS * CHUNK)
    header = repo.create_image(name, len(base))
    repo.commit(header.id, {i: base[i * CHUNK:(i + 1) * CHUNK]
                            for i in range(NCHUNKS)})
    return header.id, base


def fill(path, rng, chunks):
    data = {}
    with open(path, 'r+b', buffering=0) as f:
        for index in chunks:
            data[index] = rng.randbytes(CHUNK)
            f.seek(index * CHUNK)
            f.write(data[index])
        os.fsync(f.fileno())
    return data


def expected(base, *writes):
    image = bytearray(base)
    for w in writes:
        for index, data in w.items():
            image[index * CHUNK:(index + 1) * CHUNK] = data
    return bytes(image)


def read(path):
    with open(path, 'rb') as f:
        return f.read()


def versions_of(repo, image_id):
    """(number, state, parent) of every version, as the store has them."""
    return [(v.number, v.state, v.parent)
            for v in repo.image(image_id).versions]


def rpc_settings(url, host):
    return {'DEFAULT': {'transport_url': url},
            'agent': {'host': host, 'rpc_enabled': 'true',
                      'quiesce': 'none'}}


def wait_rpc(api, host, timeout=RPC_UP_TIMEOUT):
    """Wait until ``host``'s agent answers RPC (it connects to the broker
    in the background after it mounted); returns its status.
    """
    cctxt = api.client.prepare(server=host, timeout=2)
    deadline = time.monotonic() + timeout
    while True:
        try:
            return cctxt.call({}, 'status')
        except oslo_messaging.MessagingTimeout:
            if time.monotonic() > deadline:
                raise


def agent_log(agent):
    with open(agent.log.name, errors='replace') as f:
        return f.read()


def closed_port():
    s = socket.socket()
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture
def api(rabbitmq_url):
    client = rpc_api.AgentAPI(transport_url=rabbitmq_url, timeout=60)
    yield client
    client.cleanup()


@pytest.fixture
def store(backend_factory):
    repo = repository.Repository(backend_factory(), chunk_size=CHUNK)
    yield repo
    repo.close()


@pytest.fixture
def local_store(tmp_path):
    repo = repository.Repository(
        local.LocalBackend(str(tmp_path / 'store')), chunk_size=CHUNK)
    yield repo
    repo.close()


@pytest.fixture
def rpc_agent(agent_factory, rabbitmq_url, api):
    """start(repo, label) -> (agent, host): an agent serving RPC."""
    def start(repo, label='a'):
        host = host_name(label)
        agent = agent_factory(repo.backend, rpc_settings(rabbitmq_url, host))
        assert wait_rpc(api, host)['host'] == host
        return agent, host
    return start


def test_life_cycle(store, rpc_agent, api, tmp_path):
    repo = store
    image_id, base = make_image(repo, 'disk')
    agent, host = rpc_agent(repo)
    rng = random.Random(7)

    # attach: the mirror file the hypervisor opens, from version 1.
    attached = api.attach(host, 'disk', instance='vm-1')
    path = attached['path']
    assert path == os.path.join(agent.mount, 'images', image_id)
    assert attached['image'] == image_id and attached['version'] == 1
    assert attached['size'] == len(base)
    assert read(path) == base

    # checkpoint, twice; each version turns stable.
    w2 = fill(path, rng, [0, 3, 5, 30])
    cp = api.checkpoint(host, image_id)
    assert cp['version'] == 2 and cp['image'] == image_id
    assert cp['quiesce'] == 'none' and cp['chunks'] == len(w2)
    assert cp['downtime_ms'] >= cp['held_ms'] > 0
    assert api.wait_stable(host, image_id, 2, timeout=60) == 'stable'
    assert api.state(host, image_id, 2) == 'stable'
    w3 = fill(path, rng, [1, 5])
    cp = api.checkpoint(host, 'disk')
    assert cp['version'] == 3 and cp['chunks'] == len(w3)
    assert api.wait_stable(host, image_id, 3, timeout=60) == 'stable'
    assert repo.read(image_id, 2, 0, len(base)) == expected(base, w2)
    assert repo.read(image_id, 3, 0, len(base)) == expected(base, w2, w3)

    listed = api.list_versions(host, image_id)
    assert listed['image'] == image_id and listed['name'] == 'disk'
    assert [(v['version'], v['state'], v['parent'])
            for v in listed['versions']] == \
        [(1, 'stable', None), (2, 'stable', 1), (3, 'stable', 2)] == \
        versions_of(repo, image_id)

    # clone version 2, attach the clone: exactly the data of version 2.
    clone = api.clone(host, image_id, version=2, name='disk-v2')
    assert clone['origin'] == {'image': image_id, 'version': 2}
    assert clone['name'] == 'disk-v2' and clone['newest_stable'] == 1
    assert repo.image(clone['id']).origin == clone['origin']
    assert [v['clones'] for v in api.list_versions(
        host, image_id)['versions']] == [[], [clone['id']], []]
    cpath = api.attach(host, 'disk-v2')['path']
    assert cpath == os.path.join(agent.mount, 'images', clone['id'])
    assert read(cpath) == expected(base, w2)

    # obsolete versions 1 and 2; GC frees what only version 1 used (the
    # clone keeps the root of version 2 alive).
    after = api.obsolete(host, image_id, [1, 2])
    assert [v['state'] for v in after['versions']] == \
        ['obsolete', 'obsolete', 'stable']
    assert [s for _, s, _ in versions_of(repo, image_id)] == \
        ['obsolete', 'obsolete', 'stable']
    report = api.gc(host, grace=0)
    assert report['chunks_deleted'] == len(w2), report
    assert report['bytes_freed'] > 0 and report['versions_failed'] == 0
    assert repo.read(image_id, 3, 0, len(base)) == expected(base, w2, w3)
    assert repo.read(clone['id'], 1, 0, len(base)) == expected(base, w2)
    with pytest.raises(exception.VersionNotStable):
        repo.read(image_id, 1, 0, CHUNK)
    assert read(path) == expected(base, w2, w3)
    assert read(cpath) == expected(base, w2)

    # export version 3 to a file of this host.
    target = str(tmp_path / 'disk-v3.raw')
    exported = api.export(host, image_id, 3, target, timeout=60)
    assert exported == {'image': image_id, 'version': 3, 'path': target,
                        'size': len(base)}
    assert read(target) == expected(base, w2, w3)

    status = api.status(host)
    assert status['host'] == host and status['mountpoint'] == agent.mount
    assert status['default_quiesce'] == 'none'
    assert sorted(status['attached']) == sorted([image_id, clone['id']])
    assert status['attached'][image_id]['path'] == path
    assert status['attached'][image_id]['instances'] == ['vm-1']
    assert status['attached'][clone['id']]['path'] == cpath
    assert status['attached'][clone['id']]['instances'] == []

    # A group checkpoint of both images: complete once both are stable.
    group = 'job-' + uuid.uuid4().hex[:8]
    w4 = fill(path, rng, [2])
    wc = fill(cpath, rng, [9, 10])
    first = api.checkpoint(host, image_id, group=group, members=2)
    assert first['group'] == group and first['version'] == 4
    partial = api.group_state(host, group)
    assert partial['members'] == 2 and not partial['complete']
    assert list(partial['versions']) == ['disk']
    second = api.checkpoint(host, clone['id'], group=group, members=2)
    assert second['group'] == group and second['version'] == 2
    for image, version in ((image_id, 4), (clone['id'], 2)):
        assert api.wait_stable(host, image, version, timeout=60) == 'stable'
        assert repo.image(image).version(version).group == \
            {'id': group, 'members': 2}
    done = api.group_state(host, group)
    assert done['complete'] and done['group'] == group
    assert {name: (v['image'], v['version'], v['state'])
            for name, v in done['versions'].items()} == {
        'disk': (image_id, 4, 'stable'),
        'disk-v2': (clone['id'], 2, 'stable')}
    assert repo.read(image_id, 4, 0, len(base)) == \
        expected(base, w2, w3, w4)
    assert repo.read(clone['id'], 2, 0, len(base)) == expected(base, w2, wc)

    # detach both: nothing discarded, nothing left attached.
    assert api.detach(host, clone['id']) == \
        {'image': clone['id'], 'discarded_chunks': 0}
    assert api.detach(host, 'disk') == \
        {'image': image_id, 'discarded_chunks': 0}
    assert api.status(host)['attached'] == {}
    assert agent.client.call('status')['attached'] == {}
    assert not os.path.exists(path)


def assert_agent_error(ei, cls, *words):
    """The caller got ``cls`` itself, with the agent's one-line message."""
    e = ei.value
    assert type(e) is cls, (type(e), str(e))
    message = str(e)
    assert '\n' not in message and 'Traceback' not in message, message
    for word in words:
        assert word in message, message
    return message


def test_errors_reach_the_caller_as_their_own_types(store, rpc_agent, api,
                                                    tmp_path):
    repo = store
    image_id, base = make_image(repo, 'disk')
    other_id, _ = make_image(repo, 'other')
    twin_a, _ = make_image(repo, 'twin')
    twin_b, _ = make_image(repo, 'twin')
    agent, host = rpc_agent(repo)
    path = api.attach(host, image_id)['path']
    fill(path, random.Random(1), [4])
    assert api.checkpoint(host, image_id)['version'] == 2
    assert api.wait_stable(host, image_id, 2, timeout=60) == 'stable'
    api.obsolete(host, image_id, [1])
    group = 'job-' + uuid.uuid4().hex[:8]
    assert api.checkpoint(host, image_id, group=group,
                          members=2)['version'] == 3
    assert api.wait_stable(host, image_id, 3, timeout=60) == 'stable'
    fill(path, random.Random(2), [6])          # dirty since version 3

    before = {h.id: [(v.number, v.state, v.group) for v in h.versions]
              for h in repo.images()}
    attached_before = sorted(api.status(host)['attached'])
    assert attached_before == [image_id]

    missing = 'nope-' + uuid.uuid4().hex[:6]
    refused = [
        (lambda: api.attach(host, missing), exception.ImageNotFound,
         [missing, 'does not exist']),
        (lambda: api.checkpoint(host, missing), exception.ImageNotFound,
         [missing]),
        (lambda: api.checkpoint(host, image_id, quiesce='bogus'),
         exception.InvalidInput, ['quiesce mode must be one of']),
        (lambda: api.checkpoint(host, image_id, group=group),
         exception.InvalidInput, ['group and members go together']),
        (lambda: api.checkpoint(host, image_id, group=group, members=3),
         exception.InvalidInput, [group, 'has 2 members, not 3']),
        (lambda: api.checkpoint(host, image_id, group='bad group',
                                members=1),
         exception.InvalidInput, ['group:']),
        (lambda: api.checkpoint(host, other_id), exception.InvalidInput,
         [other_id, 'not attached here']),
        (lambda: api.state(host, image_id, 9), exception.VersionNotFound,
         [image_id, 'no version 9']),
        (lambda: api.state(host, other_id, 9), exception.VersionNotFound,
         [other_id, 'no version 9']),
        (lambda: api.attach(host, other_id, version=9),
         exception.VersionNotFound, ['no version 9']),
        (lambda: api.obsolete(host, image_id, [3, 9]),
         exception.VersionNotFound, ['no version 9']),
        (lambda: api.clone(host, image_id, version=1),
         exception.VersionNotStable, ['version 1', 'is obsolete']),
        (lambda: api.export(host, image_id, 1, str(tmp_path / 'v1.raw'),
                            timeout=5),
         exception.VersionNotStable, ['is obsolete, not stable']),
        (lambda: api.export(host, image_id, 3, 'relative.raw'),
         exception.InvalidInput, ['absolute path']),
        (lambda: api.attach(host, 'twin'), exception.AmbiguousImage,
         ['ambiguous', twin_a, twin_b]),
        (lambda: api.detach(host, image_id), exception.InvalidInput,
         ['1 chunks written since its last checkpoint']),
    ]
    for call, cls, words in refused:
        with pytest.raises(exception.BlobCRError) as ei:
            call()
        assert_agent_error(ei, cls, *words)

    # Nothing committed, obsoleted, cloned, exported or (de)tached.
    assert {h.id: [(v.number, v.state, v.group) for v in h.versions]
            for h in repo.images()} == before
    assert sorted(api.status(host)['attached']) == attached_before
    assert not os.path.exists(str(tmp_path / 'v1.raw'))
    assert api.group_state(host, group)['members'] == 2
    # The dirty chunk is still there to checkpoint.
    assert api.checkpoint(host, image_id)['chunks'] == 1


def test_call_to_a_host_without_agent_times_out(rabbitmq_url):
    client = rpc_api.AgentAPI(transport_url=rabbitmq_url, timeout=2)
    try:
        for call in (client.status, lambda host: client.attach(host, 'd')):
            t0 = time.monotonic()
            with pytest.raises(oslo_messaging.MessagingTimeout):
                call(host_name('nowhere'))
            elapsed = time.monotonic() - t0
            assert 1.5 < elapsed < 8, elapsed
    finally:
        client.cleanup()


def test_calls_reach_the_named_host_only(store, rpc_agent, api):
    repo = store
    x_id, x_base = make_image(repo, 'x')
    y_id, y_base = make_image(repo, 'y')
    agent_a, host_a = rpc_agent(repo, 'a')
    agent_b, host_b = rpc_agent(repo, 'b')
    assert agent_a.state_path != agent_b.state_path

    path_x = api.attach(host_a, x_id)['path']
    assert path_x == os.path.join(agent_a.mount, 'images', x_id)
    status_a, status_b = api.status(host_a), api.status(host_b)
    assert status_a['host'] == host_a and status_b['host'] == host_b
    assert status_a['mountpoint'] == agent_a.mount
    assert status_b['mountpoint'] == agent_b.mount
    assert list(status_a['attached']) == [x_id]
    assert status_b['attached'] == {}
    # The admin sockets agree: the attach happened in A's process only.
    assert list(agent_a.client.call('status')['attached']) == [x_id]
    assert agent_b.client.call('status')['attached'] == {}

    path_y = api.attach(host_b, 'y')['path']
    assert path_y == os.path.join(agent_b.mount, 'images', y_id)
    assert list(api.status(host_a)['attached']) == [x_id]
    assert list(api.status(host_b)['attached']) == [y_id]
    assert read(path_x) == x_base and read(path_y) == y_base

    # B does not mirror x: its checkpoint of x is refused, nothing made.
    w = fill(path_x, random.Random(3), [7])
    with pytest.raises(exception.InvalidInput, match='not attached here'):
        api.checkpoint(host_b, x_id)
    assert versions_of(repo, x_id) == [(1, 'stable', None)]
    cp = api.checkpoint(host_a, x_id)
    assert cp['version'] == 2 and cp['chunks'] == 1
    assert api.wait_stable(host_a, x_id, 2, timeout=60) == 'stable'
    # Same store: B sees the version A made.
    assert [v['version'] for v in
            api.list_versions(host_b, x_id)['versions']] == [1, 2]
    assert repo.read(x_id, 2, 0, len(x_base)) == expected(x_base, w)

    api.detach(host_a, x_id)
    assert api.status(host_a)['attached'] == {}
    assert list(api.status(host_b)['attached']) == [y_id]


def test_versions(local_store, rpc_agent, rabbitmq_url, api):
    image_id, _ = make_image(local_store, 'disk')
    agent, host = rpc_agent(local_store)
    capped = rpc_api.AgentAPI(transport_url=rabbitmq_url, timeout=30,
                              version_cap='1.0')
    uncapped = rpc_api.AgentAPI(transport_url=rabbitmq_url, timeout=30,
                                version_cap=None)
    try:
        assert capped.status(host)['host'] == host
        assert capped.attach(host, image_id)['image'] == image_id
        assert uncapped.status(host)['attached'] == \
            capped.status(host)['attached']
        assert list(capped.status(host)['attached']) == [image_id]
        # A client capped at 1.0 refuses newer calls itself: nothing
        # reaches the agent.
        for version in ('1.1', '2.0'):
            assert not capped.client.can_send_version(version)
            with pytest.raises(oslo_messaging.RPCVersionCapError):
                capped.client.prepare(server=host, version=version).call(
                    {}, 'status')
        assert 'UnsupportedVersion' not in agent_log(agent)
        # Without a cap the agent's 1.0 dispatcher refuses them.
        # oslo.messaging answers UnsupportedVersion, which the caller
        # gets as a RemoteError naming it (oslo_messaging.rpc.dispatcher
        # is not an allowed remote exception module).
        for version in ('1.1', '2.0'):
            assert uncapped.client.can_send_version(version)
            with pytest.raises(oslo_messaging.RemoteError) as ei:
                uncapped.client.prepare(server=host, version=version).call(
                    {}, 'status')
            assert type(ei.value) is oslo_messaging.RemoteError
            assert ei.value.exc_type == 'UnsupportedVersion'
            assert ei.value.value == ('Endpoint does not support RPC version '
                                      '%s. Attempted method: status'
                                      % version)
        with pytest.raises(oslo_messaging.RemoteError) as ei:
            uncapped.client.prepare(server=host, version='1.0').call(
                {}, 'no_such_call')
        assert ei.value.exc_type == 'NoSuchMethod'
        # (The agent logs these refusals: so it did see those calls.)
        assert 'UnsupportedVersion: Endpoint does not support RPC ' \
            'version 2.0' in agent_log(agent)
        # 1.0 calls still work afterwards.
        cctxt = uncapped.client.prepare(server=host, version='1.0')
        assert list(cctxt.call({}, 'status')['attached']) == [image_id]
        assert cctxt.call({}, 'checkpoint', image=image_id)['version'] == 2
        assert [v.number for v in local_store.image(image_id).versions] == \
            [1, 2]
    finally:
        capped.cleanup()
        uncapped.cleanup()


def unreachable_broker_agent(agent_factory, repo):
    url = 'rabbit://blobcr:nothing@127.0.0.1:%d/' % closed_port()
    return agent_factory(repo.backend, rpc_settings(url, host_name('off')))


def test_serves_admin_socket_and_fuse_without_broker(local_store,
                                                     agent_factory):
    image_id, base = make_image(local_store, 'disk')
    agent = unreachable_broker_agent(agent_factory, local_store)
    try:
        status = agent.client.call('status')
        assert status['attached'] == {}
        path = agent.client.call('attach', image=image_id)['path']
        assert path == os.path.join(agent.mount, 'images', image_id)
        assert read(path) == base
        w = fill(path, random.Random(4), [0, 1])
        cp = agent.client.call('checkpoint', image=image_id)
        assert cp['version'] == 2 and cp['chunks'] == 2
        assert agent.client.call('wait_stable', image=image_id,
                                 version=2) == 'stable'
        assert local_store.read(image_id, 2, 0, len(base)) == \
            expected(base, w)
        assert list(agent.client.call('status')['attached']) == [image_id]
        # It was trying the broker all along, and is still running.
        deadline = time.monotonic() + 10
        while 'Connection refused' not in agent_log(agent):
            assert time.monotonic() < deadline, agent_log(agent)
            time.sleep(0.1)
        assert agent.proc.poll() is None
    finally:
        agent.stop()


def test_sigterm_without_broker(local_store, agent_factory):
    # The RPC server is still retrying the broker: the stop must not
    # wait for it.
    make_image(local_store, 'disk')
    agent = unreachable_broker_agent(agent_factory, local_store)
    assert agent.client.call('status')['attached'] == {}
    # Nothing attached: a stop takes well under a second otherwise.
    assert agent.stop(timeout=5) == 0
