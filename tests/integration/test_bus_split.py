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
RabbitMQ broker of the session and two real agents: each on a vhost of
its own with a broker user of its own, meeting on a peer vhost.
"""

import uuid

import kombu
import pytest

from blobcr_common import exception
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


def test_a_compute_hosts_credentials_reach_no_other_agents_control_side(
        split_bus, local_store, agent_factory, rabbitmq_broker):
    hosts, settings = [], {}
    for label in ('bus-a', 'bus-b'):
        host = agent_rpc.host_name(label)
        hosts.append(host)
        settings[host] = split_bus.add_host(host)
        conf = agent_rpc.rpc_settings(None, host)
        for section, values in settings[host].items():
            conf.setdefault(section, {}).update(values)
        agent_factory(local_store.backend, conf)
    a, b = hosts
    control = split_bus.caller(split_bus.control_url)
    b_peer = settings[b]['blobcr_bus']['peer_transport_url']
    as_b = split_bus.caller(settings[b]['DEFAULT']['transport_url'],
                            b_peer, timeout=10)
    try:
        for host in hosts:
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
        assert queues and all(q.startswith(('blobcr-agent-peer', 'reply_'))
                              for q in queues), queues
        with kombu.Connection(b_peer.replace('rabbit://', 'amqp://', 1)) \
                as connection:
            connection.Producer().publish(
                {'method': 'delete_image'}, exchange='',
                routing_key='blobcr-agent.%s' % a)
        # b's own vhost holds no queue of a either.
        own = rabbitmq_broker.ctl('list_queues', '-p',
                                  split_bus.host_vhost(b), 'name', '-q',
                                  '--no-table-headers').split()
        assert not [q for q in own if a in q], own
        # The peer side answers b: a's agent looked the image up.
        with pytest.raises(exception.ImageNotFound):
            as_b.handoff(a, 'no-such-image', b, rpc_timeout=20)
        # The control side still serves the control user, and the image
        # is intact.
        images = [i['id'] for i in control.list_images(a)]
        assert image in images
        control.delete_image(a, image)
        assert image not in [i['id'] for i in control.list_images(a)]
    finally:
        control.cleanup()
        as_b.cleanup()
