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

"""``[upgrade_levels] blobcr_agent``: during a rolling upgrade, the
callers of the agents' RPC API send no newer version than the oldest
agent understands. oslo.messaging's in-process fake transport stands in
for RabbitMQ here (the cap is checked before anything is sent; a capped
client against real agents: tests/integration/test_agent_rpc.py).
"""

from unittest import mock

from oslo_config import cfg
import oslo_messaging
import pytest

from blobcr_agent.mirror import flushlog
from blobcr_common import exception
from blobcr_common import rpc
from blobcr_common.rpc import api as rpc_api
from blobcr_common.rpc import bus


def _conf(cap=None):
    conf = cfg.ConfigOpts()
    conf([], project='blobcr-test', default_config_files=[])
    conf.register_opts(rpc_api.upgrade_opts, group=rpc_api.UPGRADE_GROUP)
    if cap is not None:
        conf.set_override('blobcr_agent', cap, group=rpc_api.UPGRADE_GROUP)
    return conf


def test_unset_sends_the_newest_version():
    api = rpc_api.AgentAPI(_conf(), transport_url='fake:/')
    assert api.client.can_send_version(rpc.VERSION)


def test_a_cap_refuses_newer_calls_before_sending():
    api = rpc_api.AgentAPI(_conf('1.2'), transport_url='fake:/')
    assert api.client.can_send_version('1.2')
    assert not api.client.can_send_version('1.3')
    # create_image is a 1.3 call: refused here, nothing sent.
    with pytest.raises(oslo_messaging.RPCVersionCapError):
        api.create_image('host-a', 'name', 1 << 20)


@pytest.mark.parametrize('bad', ['2.0', '1', 'one.two', '1.99', '1.2.3'])
def test_a_cap_this_release_cannot_mean_is_refused(bad):
    with pytest.raises(exception.InvalidInput, match='blobcr_agent'):
        rpc_api.AgentAPI(_conf(bad), transport_url='fake:/')


def test_peer_calls_take_the_peer_topic_once_every_agent_serves_it():
    new = rpc_api.AgentAPI(_conf(), transport_url='fake:/')
    old = rpc_api.AgentAPI(_conf('1.11'), transport_url='fake:/')
    for api, client, topic in ((new, new.peer_client, rpc.PEER_TOPIC),
                               (old, old.client, rpc.TOPIC)):
        assert api._peer_client('host-a') is client
        assert client.target.topic == topic
    assert new.client.target.topic == rpc.TOPIC


def test_host_vhosts_give_each_agent_a_url_of_its_own():
    conf = _conf()
    bus.register(conf)
    conf.set_override('host_vhosts', True, group=bus.GROUP)
    conf.set_override('peer_transport_url', 'fake://u:p@h:1/peers',
                      group=bus.GROUP)
    api = rpc_api.AgentAPI(conf, transport_url='fake://u:p@h:1/x')
    a, b = api.client_for('host-a'), api.client_for('host-b')
    assert a is api.client_for('host-a') and a is not b
    urls = sorted(api._hosts._vhosts)
    assert urls == ['fake://u:p@h:1/blobcr-host-a',
                    'fake://u:p@h:1/blobcr-host-b'], urls
    assert api.peer_transport is not api.transport
    api.cleanup()
    # Without it, every host shares the caller's own client.
    plain = rpc_api.AgentAPI(_conf(), transport_url='fake:/')
    assert plain.client_for('host-a') is plain.client


class Sent(object):
    """A client that records (method, version, arguments) of each call."""

    def __init__(self):
        self.sent = []

    def prepare(self, server=None, version=None, **kwargs):
        sent = self.sent

        class Context(object):
            def call(self, ctxt, method, **args):
                sent.append((method, version, args))
                return {}
        return Context()


def _sent_attach(**kwargs):
    api = rpc_api.AgentAPI(_conf(), transport_url='fake:/')
    api.client = Sent()
    api.attach('host-a', 'disk', instance='vm', project='p', **kwargs)
    [(method, version, args)] = api.client.sent
    assert method == 'attach'
    return version, args


def test_attach_sends_durability_as_1_15_only_when_given():
    assert _sent_attach() == ('1.2', {
        'image': 'disk', 'version': None, 'instance': 'vm', 'project': 'p'})
    assert _sent_attach(durability='host') == ('1.15', {
        'image': 'disk', 'version': None, 'instance': 'vm', 'project': 'p',
        'migrate_from': None, 'block_device': False, 'durability': 'host'})


@pytest.mark.parametrize('given,version', [
    ({'block_device': True}, '1.9'),
    ({'migrate_from': 'host-b'}, '1.6'),
    ({'block_device': True, 'migrate_from': 'host-b'}, '1.9')])
def test_attach_sends_durability_with_block_device_and_migrate_from(
        given, version):
    """Each argument reaches the agent whichever version the call is
    sent as: the newest among those given.
    """
    sent_version, args = _sent_attach(**given)
    assert sent_version == version
    assert 'durability' not in args
    sent_version, args = _sent_attach(durability='cluster', **given)
    assert sent_version == '1.15'
    assert args['durability'] == 'cluster'
    assert args['block_device'] is given.get('block_device', False)
    assert args['migrate_from'] == given.get('migrate_from')
    assert args['project'] == 'p'


def test_a_cap_below_1_15_refuses_durability_only():
    api = rpc_api.AgentAPI(transport_url='fake:/', version_cap='1.14')
    with pytest.raises(oslo_messaging.RPCVersionCapError):
        api.attach('host-a', 'disk', block_device=True, durability='host')
    # Without it, the cap lets the (1.9) call go.
    with mock.patch.object(api.transport, '_send',
                           return_value={'path': '/m/disk'}) as send:
        assert api.attach('host-a', 'disk', block_device=True) == {
            'path': '/m/disk'}
    assert send.call_args.args[2]['version'] == '1.9'


def test_the_agent_knows_the_durabilities_its_callers_send():
    assert tuple(flushlog.DURABILITIES) == rpc.DURABILITIES
