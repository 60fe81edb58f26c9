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

"""The agent's RPC API end to end: AgentAPI in the test process, real
blobcr-agent processes, a real RabbitMQ (blobcr_lab/rabbitmq.py) and the
repository on the local store and on the micro Ceph cluster.
"""

import hashlib
import os
import random
import socket
import sys
import time
import uuid

import oslo_messaging
from oslo_messaging._drivers import common as rpc_common
import pytest

from blobcr_agent.repository.backends import base as backends_base
from blobcr_agent.rpc import server as rpc_server
from blobcr_common import exception
from blobcr_common import rpc
from blobcr_common.rpc import api as rpc_api
from blobcr_lab.agent_rpc import agent_log
from blobcr_lab.agent_rpc import committed
from blobcr_lab.agent_rpc import host_name
from blobcr_lab.agent_rpc import rpc_settings
from tests.functional.test_agent import fill  # same CHUNK
from tests.integration.conftest import CHUNK

NCHUNKS = 32


def make_image(repo, name):
    base = os.urandom(NCHUNKS * CHUNK)
    header = repo.create_image(name, len(base))
    repo.commit(header.id, {i: base[i * CHUNK:(i + 1) * CHUNK]
                            for i in range(NCHUNKS)})
    return header.id, base


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
    """(number, state, parent) of every version, as the store has them
    (the mirror's reservation of the next one left out).
    """
    return [(v.number, v.state, v.parent)
            for v in committed(repo.image(image_id).versions)]


def closed_port():
    s = socket.socket()
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_life_cycle(store, rpc_agent, api, export_dir):
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
    assert cp['served_ms'] >= cp['downtime_ms']     # the COMMIT is inside
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
            for v in committed(listed['versions'])] == \
        [(1, 'stable', None), (2, 'stable', 1), (3, 'stable', 2)] == \
        versions_of(repo, image_id)

    # clone version 2, attach the clone: exactly the data of version 2.
    clone = api.clone(host, image_id, version=2, name='disk-v2')
    assert clone['origin'] == {'image': image_id, 'version': 2}
    assert clone['name'] == 'disk-v2' and clone['newest_stable'] == 1
    assert repo.image(clone['id']).origin == clone['origin']
    assert [v['clones'] for v in committed(api.list_versions(
        host, image_id)['versions'])] == [[], [clone['id']], []]
    cpath = api.attach(host, 'disk-v2')['path']
    assert cpath == os.path.join(agent.mount, 'images', clone['id'])
    assert read(cpath) == expected(base, w2)

    # obsolete versions 1 and 2: obsolete at once, but version 1 is
    # pinned by the mirror attached from it (untouched chunks are still
    # fetched from it), so GC keeps its chunks until the detach.
    after = api.obsolete(host, image_id, [1, 2])
    assert [v['state'] for v in committed(after['versions'])] == \
        ['obsolete', 'obsolete', 'stable']
    assert [s for _, s, _ in versions_of(repo, image_id)] == \
        ['obsolete', 'obsolete', 'stable']
    report = api.gc(host, grace=0)
    assert report['chunks_deleted'] == 0, report
    assert report['versions_failed'] == 0
    assert repo.read(image_id, 3, 0, len(base)) == expected(base, w2, w3)
    assert repo.read(clone['id'], 1, 0, len(base)) == expected(base, w2)
    with pytest.raises(exception.VersionNotStable):
        repo.read(image_id, 1, 0, CHUNK)
    assert read(path) == expected(base, w2, w3)
    assert read(cpath) == expected(base, w2)

    # export version 3 to a file of this host, under its export_dir;
    # an existing file is replaced with overwrite (API 1.1).
    target = str(export_dir / 'disk-v3.raw')
    exported = api.export(host, image_id, 3, target, timeout=60)
    assert exported == {'image': image_id, 'version': 3, 'path': target,
                        'size': len(base)}
    assert read(target) == expected(base, w2, w3)
    with open(target, 'wb') as f:
        f.write(b'stale')
    assert api.export(host, image_id, 3, target, timeout=60,
                      overwrite=True) == exported
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
    assert list(partial['versions']) == [image_id]
    second = api.checkpoint(host, clone['id'], group=group, members=2)
    assert second['group'] == group and second['version'] == 2
    for image, version in ((image_id, 4), (clone['id'], 2)):
        assert api.wait_stable(host, image, version, timeout=60) == 'stable'
        assert repo.image(image).version(version).group == \
            {'id': group, 'members': 2, 'project': None}
    done = api.group_state(host, group)
    assert done['complete'] and done['group'] == group
    assert {key: (v['name'], v['version'], v['state'])
            for key, v in done['versions'].items()} == {
        image_id: ('disk', 4, 'stable'),
        clone['id']: ('disk-v2', 2, 'stable')}
    assert repo.read(image_id, 4, 0, len(base)) == \
        expected(base, w2, w3, w4)
    assert repo.read(clone['id'], 2, 0, len(base)) == expected(base, w2, wc)

    # detach both (one forced, API 1.1: no domain uses it anyway):
    # nothing discarded, nothing left attached.
    assert api.detach(host, clone['id'], force=True) == \
        {'image': clone['id'], 'discarded_chunks': 0}
    assert api.detach(host, 'disk') == \
        {'image': image_id, 'discarded_chunks': 0}
    assert api.status(host)['attached'] == {}
    assert agent.client.call('status')['attached'] == {}
    assert not os.path.exists(path)
    # Unpinned: GC frees what only version 1 used (the clone keeps the
    # root of version 2 alive): the chunks w2 replaced, and version 1's
    # restart profile (saved at the detach), unless it is the clone's
    # (the same first-read order: one object) or too recent (rados
    # mtimes are whole seconds, rounded up). Both images were read whole,
    # but concurrent FUSE reads may record another order: see
    # tests/functional/test_gc_profiles.py.
    only_v1 = {hashlib.sha256(base[i * CHUNK:(i + 1) * CHUNK]).hexdigest()
               for i in w2}
    profile = repo.image(image_id).version(1).profile
    shared = profile == repo.image(clone['id']).version(1).profile
    before = set(repo.backend.list(backends_base.CHUNK))
    report = api.gc(host, grace=0)
    freed = before - set(repo.backend.list(backends_base.CHUNK))
    assert freed - {profile} == only_v1, report
    if shared:
        assert profile not in freed, report
    else:
        assert profile in freed or report['kept_recent'], report
    assert report['chunks_deleted'] == len(freed), report
    assert report['bytes_freed'] > 0
    assert repo.read(clone['id'], 2, 0, len(base)) == expected(base, w2, wc)


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
                                                    tmp_path, export_dir):
    repo = store
    image_id, base = make_image(repo, 'disk')
    other_id, _ = make_image(repo, 'other')
    twin_a, _ = make_image(repo, 'twin')
    twin_b, _ = make_image(repo, 'twin')
    # No libvirt here: quiescing fails as the agent's own failure.
    agent, host = rpc_agent(
        repo, libvirt_uri='qemu+unix:///system?socket=/nonexistent')
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

    # Without the mirror's reservation of the next version: it is
    # registered in the background after the checkpoint's ack, maybe
    # only after this snapshot of the chains (mirror/reserve.py).
    def chains():
        return {h.id: [(v.number, v.state, v.group)
                       for v in committed(h.versions)]
                for h in repo.images()}
    before = chains()
    attached_before = sorted(api.status(host)['attached'])
    assert attached_before == [image_id]

    missing = 'nope-' + uuid.uuid4().hex[:6]
    export_dir.mkdir()
    existing = export_dir / 'existing.raw'
    existing.write_bytes(b'keep')
    outside = tmp_path / 'outside.raw'
    (export_dir / 'escape').symlink_to(tmp_path)
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
         exception.InvalidInput,
         ['members: 3 does not match the member count of group', group]),
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
        (lambda: api.export(host, image_id, 1, str(export_dir / 'v1.raw'),
                            timeout=5),
         exception.VersionNotStable, ['is obsolete, not stable']),
        (lambda: api.export(host, image_id, 3, 'relative.raw'),
         exception.InvalidInput, ['absolute path']),
        (lambda: api.export(host, image_id, 3, str(outside)),
         exception.InvalidInput, ['export_dir', str(outside)]),
        (lambda: api.export(host, image_id, 3, '/etc/blobcr-rpc.raw'),
         exception.InvalidInput, ['export_dir']),
        (lambda: api.export(host, image_id, 3,
                            str(export_dir / '..' / 'outside.raw')),
         exception.InvalidInput, ['export_dir']),
        (lambda: api.export(host, image_id, 3,
                            str(export_dir / 'escape' / 'outside.raw')),
         exception.InvalidInput, ['export_dir']),
        (lambda: api.export(host, image_id, 3, str(existing)),
         exception.InvalidInput, [str(existing), 'exists', 'overwrite']),
        (lambda: api.attach(host, 'twin'), exception.AmbiguousImage,
         ['ambiguous', twin_a, twin_b]),
        (lambda: api.detach(host, image_id), exception.InvalidInput,
         ['1 chunks written since its last checkpoint']),
    ]
    for call, cls, words in refused:
        with pytest.raises(exception.BlobCRError) as ei:
            call()
        assert_agent_error(ei, cls, *words)
    # The caller's mistakes are answered, not logged as failures.
    assert 'Exception during message handling' not in agent_log(agent)

    # Nothing committed, obsoleted, cloned, exported or (de)tached.
    assert chains() == before
    assert sorted(api.status(host)['attached']) == attached_before
    assert not os.path.exists(str(export_dir / 'v1.raw'))
    assert not os.path.exists(str(outside))
    assert existing.read_bytes() == b'keep'
    assert sorted(os.listdir(export_dir)) == ['escape', 'existing.raw']

    # A failure of the agent reaches the caller as its own type too, and
    # is in the agent's log with its traceback.
    with pytest.raises(exception.BlobCRError) as ei:
        api.checkpoint(host, image_id, quiesce='suspend')
    assert_agent_error(ei, exception.BackendUnavailable, 'libvirt')
    log = agent_log(agent)
    assert 'Exception during message handling' in log
    assert 'BackendUnavailable: cannot reach libvirt' in log
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
            committed(api.list_versions(host_b, x_id)['versions'])] == [1, 2]
    assert repo.read(x_id, 2, 0, len(x_base)) == expected(x_base, w)

    api.detach(host_a, x_id)
    assert api.status(host_a)['attached'] == {}
    assert list(api.status(host_b)['attached']) == [y_id]


def test_versions(local_store, rpc_agent, rabbitmq_url, api):
    image_id, _ = make_image(local_store, 'disk')
    agent, host = rpc_agent(local_store)
    capped = rpc_api.AgentAPI(transport_url=rabbitmq_url, timeout=30,
                              version_cap='1.0')
    uncapped = rpc_api.AgentAPI(transport_url=rabbitmq_url, timeout=30)
    # No cap at all (not even this release's newest, the default): what
    # the agent's own dispatcher answers to newer versions.
    uncapped.client = uncapped.client.prepare(version_cap=None)
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
        # The 1.1 arguments are 1.1 calls, the 1.2 ones (project,
        # creator) 1.2 calls.
        with pytest.raises(oslo_messaging.RPCVersionCapError):
            capped.detach(host, image_id, force=True)
        with pytest.raises(oslo_messaging.RPCVersionCapError):
            capped.export(host, image_id, 1, '/nowhere.raw', overwrite=True)
        for call in (lambda: capped.attach(host, image_id, instance='vm',
                                           project='p1'),
                     lambda: capped.checkpoint(host, image_id, group='g',
                                               members=1, project='p1'),
                     lambda: capped.group_state(host, 'g', project='p1')):
            with pytest.raises(oslo_messaging.RPCVersionCapError):
                call()
        assert list(capped.status(host)['attached']) == [image_id]
        assert 'UnsupportedVersion' not in agent_log(agent)
        # Without a cap, 1.1 to 1.15 are served; the agent's dispatcher
        # refuses newer versions.
        for version in ('1.1', '1.2', '1.3', '1.4', '1.5', '1.6', '1.7',
                        '1.8', '1.9', '1.10', '1.11', '1.12', '1.13',
                        '1.14', '1.15'):
            assert uncapped.client.prepare(server=host, version=version).call(
                {}, 'status')['host'] == host
        assert uncapped.group_state(host, 'g', project='p1')['project'] == \
            'p1'
        # 1.15: a durability reaches the agent, which checks it against
        # its store (the local one keeps no write log).
        assert uncapped.attach(host, image_id, durability='host')[
            'image'] == image_id
        with pytest.raises(exception.InvalidInput, match='local to it'):
            uncapped.attach(host, image_id, durability='cluster')
        # oslo.messaging answers UnsupportedVersion, which the caller
        # gets as a RemoteError naming it (oslo_messaging.rpc.dispatcher
        # is not an allowed remote exception module).
        for version in ('1.16', '2.0'):
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
        assert cctxt.call({}, 'wait_stable', image=image_id, version=2,
                          timeout=60) == 'stable'
        assert [v.number for v in committed(
            local_store.image(image_id).versions)] == [1, 2]
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


# -- the RPC layer without a broker ------------------------------------------


class StubManager(object):
    """Raises ``error`` from every call; records the calls."""

    def __init__(self, error=None):
        self.error = error
        self.calls = []

    def __getattr__(self, name):
        def call(*args, **kwargs):
            self.calls.append((name, args, kwargs))
            if self.error is not None:
                raise self.error
            return {'called': name}
        return call


CALLER_ERRORS = [exception.InvalidInput('bad'), exception.ImageNotFound('x'),
                 exception.AmbiguousImage('x', ['a', 'b']),
                 exception.VersionNotFound('x', 9),
                 exception.VersionNotStable('x', 1, 'pending'),
                 exception.Busy('persist under way')]
AGENT_FAILURES = [exception.BackendUnavailable('down'),
                  exception.CorruptObject('chunk', 'c', 'bad crc'),
                  exception.Conflict('lost a race'),
                  exception.CommitAborted('aborted'),
                  exception.QuiesceFailed('cannot suspend'),
                  exception.ObjectNotFound('chunk', 'c'),
                  exception.BackendFull('full')]


@pytest.mark.parametrize('error', CALLER_ERRORS + AGENT_FAILURES,
                         ids=lambda e: type(e).__name__)
def test_only_caller_errors_are_expected(error):
    # oslo.messaging logs an unexpected error with its traceback, and
    # answers an expected one (ExpectedException) with a debug line.
    endpoint = rpc_server.AgentEndpoint(StubManager(error))
    with pytest.raises(Exception) as ei:
        endpoint.checkpoint({}, 'disk')
    if any(error is e for e in CALLER_ERRORS):
        assert type(ei.value) is oslo_messaging.ExpectedException
        assert ei.value.exc_info[1] is error
    else:
        assert ei.value is error


@pytest.mark.parametrize('error', [exception.QuiesceFailed('cannot suspend '
                                                           'domain vm-1'),
                                   exception.Busy('persist under way')],
                         ids=lambda e: type(e).__name__)
def test_quiesce_failed_and_busy_arrive_as_their_own_types(error):
    try:
        raise error
    except exception.BlobCRError:
        wire = rpc_common.serialize_remote_exception(sys.exc_info())
    got = rpc_common.deserialize_remote_exception(wire,
                                                  rpc_api.REMOTE_EXMODS)
    assert isinstance(got, type(error))
    clean = rpc_api._without_remote_traceback(got)
    assert type(clean) is type(error) and str(clean) == str(error)


def test_rpc_exports_stay_under_export_dir(tmp_path):
    root = tmp_path / 'exports'
    manager = StubManager()
    rpc_endpoint = rpc_server.AgentEndpoint(manager, export_dir=str(root))

    class endpoint(object):
        # The caller's errors come wrapped (ExpectedException): unwrap.
        @staticmethod
        def export(*args, **kwargs):
            try:
                return rpc_endpoint.export(*args, **kwargs)
            except oslo_messaging.ExpectedException as e:
                raise e.exc_info[1]
    inside = root / 'v1.raw'
    assert endpoint.export({}, 'disk', 1, str(inside)) == \
        {'called': 'export'}
    assert root.is_dir() and (root.stat().st_mode & 0o777) == 0o700
    (root / 'sub').mkdir()
    (root / 'escape').symlink_to(tmp_path)
    (root / 'out.raw').symlink_to(tmp_path / 'victim.raw')
    endpoint.export({}, 'disk', 1, str(root / 'sub' / 'v.raw'),
                    overwrite=True)
    assert [(c[1][2], c[2]) for c in manager.calls] == [
        (str(inside), {'timeout': 600, 'overwrite': False}),
        (str(root / 'sub' / 'v.raw'), {'timeout': 600, 'overwrite': True})]
    for path in ('/etc/passwd', str(tmp_path / 'v.raw'), str(root),
                 str(root / '..' / 'v.raw'), str(root / 'escape' / 'v.raw'),
                 str(root / 'out.raw'), str(root) + '-other/v.raw'):
        with pytest.raises(exception.InvalidInput, match='export_dir'):
            endpoint.export({}, 'disk', 1, path, overwrite=True)
    with pytest.raises(exception.InvalidInput, match='absolute path'):
        endpoint.export({}, 'disk', 1, 'v.raw')
    assert len(manager.calls) == 2


class RecordingClient(object):
    """Stands in for the RPC client: records what each call prepares."""

    def __init__(self):
        self.prepared = []

    def prepare(self, **kwargs):
        client = self

        class Context(object):
            def call(self, ctxt, method, **args):
                client.prepared.append((method, kwargs, args))
                return {}
            cast = call
        return Context()

    def can_send_version(self, version):
        return True


def test_calls_prepare_their_versions_and_timeouts():
    api = rpc_api.AgentAPI(transport_url='fake:///', timeout=60)
    try:
        api.client = RecordingClient()
        api.peer_client = RecordingClient()
        api.checkpoint('h', 'disk')
        api.checkpoint('h', 'disk', rpc_timeout=900)
        api.checkpoint('h', 'disk', rpc_timeout=None)
        api.detach('h', 'disk')
        api.detach('h', 'disk', force=True)
        api.export('h', 'disk', 1, '/x.raw')
        api.export('h', 'disk', 1, '/x.raw', timeout=10, overwrite=True)
        api.checkpoint('h', 'disk', group='g', members=2, project='p',
                       creator='cinder')
        api.attach('h', 'disk', instance='vm')
        api.attach('h', 'disk', instance='vm', project='p')
        api.group_state('h', 'g')
        api.group_state('h', 'g', project='p')
        api.snapshot('h', 'disk')
        api.import_file('h', 'disk', '/x.raw')
        api.list_images('h')
        api.checkpoint('h', 'disk', project='p', label='cinder')
        api.hold('h', 'disk', quiesce='suspend', timeout=30)
        api.release('h', 'disk')
        api.attach('h', 'disk', instance='vm', migrate_from='a')
        api.handoff('h', 'disk', 'b', wait=2, rpc_timeout=32)
        api.detach('h', 'disk', background=True)
        api.take_over('h', 'disk', why='lost')
        api.publish_hints('scope', 'h', [3, 4])
        api.publish_hints('scope', 'h', [5], hosts=['b', 'c'])
        api.attach('h', 'disk', instance='vm', block_device=True)
        api.prepare_handoff('h', 'disk', 'b')
        api.admit_group('h', 'g', 4, project='p')
        api.hold_members('h', [{'image': 'disk'}], timeout=30)
        api.checkpoint_members('h', [{'image': 'disk'}], 'g', 4,
                               label='cinder')
        api.attach('h', 'disk', instance='vm', durability='host')
        api.attach('h', 'disk', instance='vm', block_device=True,
                   durability='cluster')
        got = [(m, kw, sorted(a)) for m, kw, a in api.client.prepared]
        peer = [(m, kw, sorted(a)) for m, kw, a in api.peer_client.prepared]
    finally:
        api.cleanup()
    assert rpc.VERSION == '1.15'
    checkpoint = ['group', 'image', 'members', 'quiesce']
    assert got == [
        # A checkpoint outlasts the agent's bounded wait (then Busy).
        ('checkpoint', {'server': 'h', 'version': '1.0', 'timeout':
                        rpc_api.CHECKPOINT_TIMEOUT}, checkpoint),
        ('checkpoint', {'server': 'h', 'version': '1.0', 'timeout': 900},
         checkpoint),
        ('checkpoint', {'server': 'h', 'version': '1.0'}, checkpoint),
        ('detach', {'server': 'h', 'version': '1.0'}, ['discard', 'image']),
        ('detach', {'server': 'h', 'version': '1.1'},
         ['discard', 'force', 'image']),
        ('export', {'server': 'h', 'version': '1.0', 'timeout': 630},
         ['image', 'path', 'timeout', 'version']),
        ('export', {'server': 'h', 'version': '1.1', 'timeout': 40},
         ['image', 'overwrite', 'path', 'timeout', 'version']),
        ('checkpoint', {'server': 'h', 'version': '1.2', 'timeout':
                        rpc_api.CHECKPOINT_TIMEOUT},
         ['creator', 'group', 'image', 'members', 'project', 'quiesce']),
        ('attach', {'server': 'h', 'version': '1.0'},
         ['image', 'instance', 'version']),
        ('attach', {'server': 'h', 'version': '1.2'},
         ['image', 'instance', 'project', 'version']),
        ('group_state', {'server': 'h', 'version': '1.0'}, ['group']),
        ('group_state', {'server': 'h', 'version': '1.2'},
         ['group', 'project']),
        # The volume calls are 1.3 calls; an import may take long.
        ('snapshot', {'server': 'h', 'version': '1.3'}, ['image']),
        ('import_file', {'server': 'h', 'version': '1.3', 'timeout': 3600},
         ['image', 'path']),
        ('list_images', {'server': 'h', 'version': '1.4'}, []),
        ('checkpoint', {'server': 'h', 'version': '1.4', 'timeout':
                        rpc_api.CHECKPOINT_TIMEOUT},
         ['group', 'image', 'label', 'members', 'project', 'quiesce']),
        ('hold', {'server': 'h', 'version': '1.5'},
         ['image', 'quiesce', 'timeout']),
        ('release', {'server': 'h', 'version': '1.5'}, ['image']),
        ('attach', {'server': 'h', 'version': '1.6'},
         ['image', 'instance', 'migrate_from', 'project', 'version']),
        # 1.7: a detach that returns before its persist, a take-over.
        ('detach', {'server': 'h', 'version': '1.7'},
         ['background', 'discard', 'force', 'image']),
        ('take_over', {'server': 'h', 'version': '1.7'}, ['image', 'why']),
        # 1.9: a loop device over the mirror file.
        ('attach', {'server': 'h', 'version': '1.9'},
         ['block_device', 'image', 'instance', 'migrate_from', 'project',
          'version']),
        # 1.11: a group's member count, checked once per host.
        ('admit_group', {'server': 'h', 'version': '1.11'},
         ['group', 'members', 'project']),
        # 1.14: a host's members of a group, a call per phase.
        ('hold_members', {'server': 'h', 'version': '1.14'},
         ['members', 'timeout']),
        ('checkpoint_members', {'server': 'h', 'version': '1.14', 'timeout':
                                rpc_api.CHECKPOINT_TIMEOUT},
         ['count', 'group', 'label', 'members']),
        # 1.15: a volume's durability, with the arguments before it.
        ('attach', {'server': 'h', 'version': '1.15'},
         ['block_device', 'durability', 'image', 'instance', 'migrate_from',
          'project', 'version']),
        ('attach', {'server': 'h', 'version': '1.15'},
         ['block_device', 'durability', 'image', 'instance', 'migrate_from',
          'project', 'version'])]
    # The peer side (1.12): what agents ask each other, on its own topic.
    assert peer == [
        ('handoff', {'server': 'h', 'version': '1.6', 'timeout': 32},
         ['dest', 'image', 'wait']),
        # 1.8: restart hints, a cast to every agent.
        ('hints', {'fanout': True, 'version': '1.8'},
         ['chunks', 'scope', 'source']),
        # 1.13: to the hosts listening to the scope, a cast to each.
        ('hints', {'server': 'b', 'version': '1.8'},
         ['chunks', 'scope', 'source']),
        ('hints', {'server': 'c', 'version': '1.8'},
         ['chunks', 'scope', 'source']),
        # 1.10: a migration began (a cast, no answer).
        ('prepare_handoff', {'server': 'h', 'version': '1.10'},
         ['dest', 'image'])]
    assert rpc_api.CHECKPOINT_TIMEOUT >= 300


def test_the_callers_request_id_is_in_the_agents_log(store, rpc_agent, api):
    """A call made inside a request (Cinder's, Nova's) carries its
    request id: the lines the agent logs while serving it name it, and
    a call made outside any request gets an id of its own.
    """
    from oslo_context import context as oslo_context
    agent, host = rpc_agent(store, 'ctx')
    request_id = 'req-%s' % uuid.uuid4()
    oslo_context.RequestContext(request_id=request_id, overwrite=True)
    try:
        inside = api.create_image(host, 'ctx-in-%s' % uuid.uuid4().hex[:6],
                                  1 << 20)
    finally:
        del oslo_context._request_store.context     # no API clears it
    outside = api.create_image(host, 'ctx-out-%s' % uuid.uuid4().hex[:6],
                               1 << 20)
    log = agent_log(agent).splitlines()
    line_in = [line for line in log if inside['id'] in line]
    line_out = [line for line in log if outside['id'] in line]
    assert any(request_id in line for line in line_in), line_in
    assert line_out and not any(request_id in line for line in line_out)
    assert all('req-' in line for line in line_out), line_out


def _settled_writes(api, host):
    """The agent's (header writes, key writes) once they stop changing
    (the release of the previous version's pin follows the stable
    update).
    """
    last = None
    while True:
        status = api.status(host)
        now = (status['header_cas']['writes'], status['key_writes'])
        if now == last:
            return now
        last = now
        time.sleep(0.5)


def _checkpoint_writes(api, host, image_id, **kw):
    """A checkpoint waited stable: its version and the (header, key)
    writes the agent made for it.
    """
    before = _settled_writes(api, host)
    taken = api.checkpoint(host, image_id, **kw)
    assert api.wait_stable(host, image_id, taken['version'],
                           timeout=60) == 'stable'
    after = _settled_writes(api, host)
    return taken['version'], (after[0] - before[0], after[1] - before[1])


@pytest.mark.parametrize('reserve', ['1', '0'])
def test_a_cinder_group_member_call_writes_no_label_or_tag_of_its_own(
        local_store, rpc_agent, api, monkeypatch, reserve):
    """Cinder's member call (a labelled group checkpoint over RPC): the
    label and the group tag go into the header write that registers the
    version, or, for a version registered ahead (reserve.py, on by
    default), into the one that makes it stable; never into a
    compare-and-set of their own. The stable version has both, and the
    group is complete. Without reservations (nothing registered in the
    background), the writes are counted: the first member call makes
    the group's index record (one header write more than a plain
    checkpoint's), and each lists its image with one key write; a later
    one writes no header more than a plain checkpoint (it was three
    more, then one). The local store only: what is counted does not
    depend on the store.
    """
    monkeypatch.setenv('BLOBCR_RESERVE_AHEAD', reserve)
    image_id, _ = make_image(local_store, 'member')
    agent, host = rpc_agent(local_store)
    api.attach(host, image_id)
    group = 'cinder-' + uuid.uuid4().hex[:8]
    # The first stable version releases no earlier one's pin; the
    # others do (a write each): a first checkpoint sets them all equal.
    _checkpoint_writes(api, host, image_id)
    seen = []
    for _ in range(2):
        _, plain = _checkpoint_writes(api, host, image_id)
        number, member = _checkpoint_writes(
            api, host, image_id, group=group, members=1, project='p1',
            label='cinder')
        stable = local_store.image(image_id).version(number)
        assert (stable.made_by, stable.group) == (
            'cinder', {'id': group, 'members': 1, 'project': 'p1'})
        assert api.group_state(host, group, project='p1')['complete']
        if reserve == '0':
            seen.append((member[0] - plain[0], member[1], plain[1]))
    assert seen == ([(1, 1, 0), (0, 1, 0)] if reserve == '0' else []), seen
