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

"""The bus split with least privilege (rpc/bus.py), through the real
RabbitMQ broker of the session: each agent on a vhost of its own with a
broker user of its own, meeting on a peer vhost where the broker
authenticates who calls (rpc/peer_bus.py).
"""

import os
import threading
import time
import uuid

import amqp.exceptions
import kombu
from oslo_config import cfg
import pytest

from blobcr_agent.rpc import peer_bus
from blobcr_agent.rpc import peer_wire
from blobcr_common import exception
from blobcr_common.rpc import bus
from blobcr_lab import agent_rpc
from blobcr_lab import bus_split

MiB = 1 << 20


@pytest.fixture
def split_bus(rabbitmq_broker):
    if rabbitmq_broker.external:
        pytest.skip('BLOBCR_RABBIT_URL: a broker we cannot administer')
    bus = bus_split.SplitBus(rabbitmq_broker,
                             'bt%s' % uuid.uuid4().hex[:6])
    yield bus
    bus.cleanup()


def _refused(call):
    with pytest.raises(Exception) as ei:
        call()
    assert 'refused' in str(ei.value) and 'vhost' in str(ei.value), \
        repr(ei.value)
    return str(ei.value)


def _amqp(url):
    return kombu.Connection(url.replace('rabbit://', 'amqp://', 1))


def _peer_url(settings):
    return settings[bus.GROUP]['peer_transport_url']


def _agents(split_bus, agent_factory, local_store, labels, **agent):
    hosts, settings = [], {}
    for label in labels:
        host = agent_rpc.host_name(label)
        hosts.append(host)
        settings[host] = split_bus.add_host(host)
        conf = agent_rpc.rpc_settings(None, host, **agent)
        for section, values in settings[host].items():
            conf.setdefault(section, {}).update(values)
        agent_factory(local_store.backend, conf)
    return hosts, settings


def test_a_compute_hosts_credentials_reach_no_other_agents_control_side(
        split_bus, local_store, agent_factory, rabbitmq_broker):
    (a, b), settings = _agents(split_bus, agent_factory, local_store,
                               ('bus-a', 'bus-b'))
    control = split_bus.caller(split_bus.control_url)
    as_b = split_bus.caller(settings[b]['DEFAULT']['transport_url'],
                            _peer_url(settings[b]), timeout=10)
    try:
        for host in (a, b):
            assert agent_rpc.wait_rpc(control, host)['host'] == host
        image = control.create_image(a, 'victim-%s' % uuid.uuid4().hex[:6],
                                     MiB)['id']
        # Host b's credentials: its client reaches a's vhost for these
        # control calls, and the broker refuses the connection itself.
        said = _refused(lambda: as_b.delete_image(a, image))
        _refused(lambda: as_b.take_over(a, image, why='forged'))
        print('refused: %s' % said)
        # Nor does any queue of a's control side exist on the vhost
        # that b may use besides its own: nothing to publish into by
        # name through the default exchange there.
        queues = rabbitmq_broker.ctl('list_queues', '-p',
                                     split_bus.peer_vhost, 'name', '-q',
                                     '--no-table-headers').split()
        assert sorted(queues) == sorted(
            q for h in (a, b) for q in (bus.peer_queue(h),
                                        bus.reply_queue(h))), queues
        # b's own vhost holds no queue of a either.
        own = rabbitmq_broker.ctl('list_queues', '-p',
                                  split_bus.host_vhost(b), 'name', '-q',
                                  '--no-table-headers').split()
        assert not [q for q in own if a in q], own
        # The control side still serves the control user, and the image
        # is intact.
        images = [i['id'] for i in control.list_images(a)]
        assert image in images
        control.delete_image(a, image)
        assert image not in [i['id'] for i in control.list_images(a)]
    finally:
        control.cleanup()
        as_b.cleanup()


def _peer_conf(settings):
    conf = cfg.ConfigOpts()
    conf([], project='blobcr-test')
    bus.register(conf)
    for option, value in settings[bus.GROUP].items():
        conf.set_override(option, value, group=bus.GROUP)
    return conf


class Recorder(object):
    """Stands in for a manager behind PeerRequests: what the peer bus
    delivered, and answers that take ``delay`` s.
    """

    def __init__(self, delay=0.0):
        self.delay = delay
        self.calls = []
        self.arrived = threading.Event()

    def handoff(self, image, dest, wait=0):
        time.sleep(self.delay)
        self.calls.append(('handoff', image, dest))
        self.arrived.set()
        if image == 'missing':
            raise exception.ImageNotFound(image)
        return {'image': image, 'version': 7}

    def prepare_handoff(self, image, dest):
        self.calls.append(('prepare_handoff', image, dest))
        self.arrived.set()

    def receive_hints(self, scope, source, chunks):
        self.calls.append(('hints', scope, source, chunks))
        self.arrived.set()


@pytest.fixture
def peer_buses(split_bus):
    """Three hosts on the peer vhost, each a PeerBus with its own broker
    user: x serves a Recorder (the peer bus under test, not a manager),
    y and z call it.
    """
    made = {}
    try:
        for label in ('x', 'y', 'z'):
            host = 'pb-%s-%s' % (label, uuid.uuid4().hex[:4])
            settings = split_bus.add_host(host, agent=False)
            recorder = Recorder(delay=1.0 if label == 'x' else 0)
            peers = peer_bus.PeerBus(_peer_conf(settings),
                                     peer_bus.PeerRequests(recorder),
                                     host=host)
            peers.start()
            made[label] = (peers, recorder, settings)
        for peers, _, _ in made.values():
            assert peers.ready.wait(30)
        yield made
    finally:
        for peers, _, _ in made.values():
            peers.stop()
        for peers, _, _ in made.values():
            peers.wait()


def test_the_peer_bus_serves_only_the_host_the_broker_authenticated(
        peer_buses):
    (x, served, _), (y, _, _), (z, _, z_settings) = \
        peer_buses['x'], peer_buses['y'], peer_buses['z']
    # y asks for its own handoff: served, with the answer x gave.
    assert y.handoff(x.host, 'img', y.host, rpc_timeout=20) == \
        {'image': 'img', 'version': 7}
    with pytest.raises(exception.ImageNotFound):
        y.handoff(x.host, 'missing', y.host, rpc_timeout=20)
    # z asks for y's: refused before the manager hears of it.
    before = list(served.calls)
    with pytest.raises(exception.NotAuthorized, match='but %s asked'
                       % z.host):
        z.handoff(x.host, 'img', y.host, rpc_timeout=20)
    # Casts the same way: z's preparation for y and hints in y's name
    # are dropped, y's own arrive.
    z.prepare_handoff(x.host, 'img', y.host)
    z.publish_hints('scope-1', y.host, [1, 2], hosts=[x.host])
    served.arrived.clear()
    y.publish_hints('scope-1', y.host, [3], hosts=[x.host])
    y.prepare_handoff(x.host, 'img', y.host)
    _wait_for(lambda: len(served.calls) >= len(before) + 2)
    assert sorted(served.calls[len(before):]) == sorted([
        ('hints', 'scope-1', y.host, [3]),
        ('prepare_handoff', 'img', y.host)]), served.calls

    # What the broker refuses z's user: a message in y's name, reading
    # or deleting x's queues.
    with _amqp(_peer_url(z_settings)) as conn:
        with pytest.raises(amqp.exceptions.PreconditionFailed,
                           match='user_id'):
            conn.Producer().publish(
                {'v': 1, 'method': 'handoff', 'args': {
                    'image': 'img', 'dest': y.host}},
                exchange='', routing_key=bus.peer_queue(x.host),
                user_id=y.user)
            conn.default_channel.basic_qos(0, 1, False)
    for forbidden in (lambda ch: ch.basic_get(bus.peer_queue(x.host)),
                      lambda ch: ch.basic_get(bus.reply_queue(y.host)),
                      lambda ch: ch.queue_delete(bus.peer_queue(x.host)),
                      lambda ch: ch.exchange_declare('blobcr-fan',
                                                     'fanout')):
        with _amqp(_peer_url(z_settings)) as conn:
            with pytest.raises(amqp.exceptions.AccessRefused):
                forbidden(conn.default_channel)
    # z's casts to x: one in order, and the same one without user_id
    # (what oslo.messaging would send), in pickle, compressed (kombu
    # would inflate it before any check), past its deadline, meant for
    # another host. Only the first is served.

    def cast(to=x.host, ttl=60, **extra):
        producer.publish(peer_wire.request(to, 'prepare_handoff', {
            'image': 'img', 'dest': z.host}, ttl), exchange='',
            routing_key=bus.peer_queue(x.host), **extra)
    dropped = x.dropped
    with _amqp(_peer_url(z_settings)) as conn:
        producer = conn.Producer()
        cast()
        cast(user_id=z.user)
        cast(serializer='pickle', user_id=z.user)
        cast(compression='zlib', user_id=z.user)
        cast(ttl=-3600, user_id=z.user)
        cast(to=y.host, user_id=z.user)
    _wait_for(lambda: x.dropped >= dropped + 5)
    assert x.dropped == dropped + 5
    assert [c for c in served.calls if z.host in c] == [
        ('prepare_handoff', 'img', z.host)], served.calls

    # An answer z forges into y's reply queue (as if it guessed the
    # call's id) is not taken: y waits for x's.
    result = {}
    asking = threading.Thread(target=lambda: result.update(
        y.handoff(x.host, 'img', y.host, rpc_timeout=20)))
    asking.start()
    deadline = time.monotonic() + 10
    while not y._pending and time.monotonic() < deadline:
        time.sleep(0.01)
    [correlation] = list(y._pending)
    with _amqp(_peer_url(z_settings)) as conn:
        conn.Producer().publish({'result': {'version': 666}}, exchange='',
                                routing_key=bus.reply_queue(y.host),
                                correlation_id=correlation, user_id=z.user)
    asking.join(30)
    assert result == {'image': 'img', 'version': 7}

    # z's own queue is z's to declare: it makes it dead-letter into x's,
    # and rejects a cast y really sent it. The message reaches x with
    # y's user_id, and x drops it (meant for z, and dead-lettered).
    z.stop()
    z.wait()
    dropped, before = x.dropped, len(served.calls)
    with _amqp(_peer_url(z_settings)) as conn:
        channel = conn.default_channel
        channel.queue_delete(bus.peer_queue(z.host))
        channel.queue_declare(bus.peer_queue(z.host), auto_delete=False,
                              arguments={
                                  'x-dead-letter-exchange': '',
                                  'x-dead-letter-routing-key':
                                      bus.peer_queue(x.host)})
        y.prepare_handoff(z.host, 'img', y.host)
        got = []
        _wait_for(lambda: got.append(channel.basic_get(
            bus.peer_queue(z.host))) or got[-1] is not None)
        assert got[-1].properties['user_id'] == y.user
        channel.basic_reject(got[-1].delivery_tag, requeue=False)
    _wait_for(lambda: x.dropped > dropped)
    assert x.dropped == dropped + 1 and len(served.calls) == before


def _wait_for(condition, timeout=20):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, 'timed out'
        time.sleep(0.05)
    time.sleep(0.5)           # and nothing more arrives meanwhile


def test_a_live_migration_handoff_over_the_authenticated_peer_bus(
        split_bus, local_store, agent_factory):
    """Two real agents (libvirt's test driver: no guest runs on the
    source) hand an image off through the peer bus; a third host's
    credentials cannot ask that handoff for the destination.
    """
    (a, b), _ = _agents(split_bus, agent_factory, local_store,
                        ('mig-a', 'mig-b'), libvirt_uri='test:///default',
                        handoff_timeout='30')
    c = 'pb-c-%s' % uuid.uuid4().hex[:4]
    c_peers = peer_bus.PeerBus(_peer_conf(split_bus.add_host(c, agent=False)),
                               peer_bus.PeerRequests(Recorder()), host=c)
    c_peers.start()
    control = split_bus.caller(split_bus.control_url, timeout=60)
    try:
        for host in (a, b):
            agent_rpc.wait_rpc(control, host)
        assert c_peers.ready.wait(30)
        image = control.create_image(a, 'mig-%s' % uuid.uuid4().hex[:6],
                                     8 * MiB)['id']
        path_a = control.attach(a, image, instance='vm-m')['path']
        data = os.urandom(2 * MiB)
        with open(path_a, 'r+b') as f:
            f.seek(MiB)
            f.write(data)
            os.fsync(f.fileno())
        path_b = control.attach(b, image, instance='vm-m',
                                migrate_from=a)['path']
        # c, authenticated as c, cannot ask a for b's handoff...
        with pytest.raises(exception.NotAuthorized):
            c_peers.handoff(a, image, b, rpc_timeout=20)
        assert image in control.status(a)['attached']
        # ...and asking for its own, it reaches a's manager.
        with pytest.raises(exception.ImageNotFound):
            c_peers.handoff(a, 'no-such-image', c, rpc_timeout=20)
        # b's first read waits for a's handoff, asked over the peer bus.
        with open(path_b, 'rb') as f:
            f.seek(MiB)
            assert f.read(len(data)) == data
        incoming = control.status(b)['attached'][image]['incoming']
        assert incoming['done'], incoming
        assert image not in control.status(a)['attached']
    finally:
        control.cleanup()
        c_peers.stop()
        c_peers.wait()
