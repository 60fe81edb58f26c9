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

"""``[upgrade_levels] blobcr_agent = auto`` (rpc/auto.py): each call
capped at the version of the agent it goes to, asked of that agent.
Agents here are oslo.messaging RPC servers on its in-process fake
transport, each with the target version of an older release.
"""

from oslo_config import cfg
import oslo_messaging
import pytest

from blobcr_common import rpc
from blobcr_common.rpc import api as rpc_api
from blobcr_common.rpc import auto


def test_the_highest_version_an_agent_speaks_is_found():
    major, newest = auto.parse(rpc.VERSION)
    for minor in range(newest + 1):
        asked = []

        def speaks(version):
            asked.append(version)
            return auto.parse(version) <= (major, minor)
        assert auto.highest(speaks) == '%d.%d' % (major, minor)
        # As new as the caller: one question; older: a binary search.
        assert len(asked) == 1 if minor == newest else len(asked) <= 6


def test_versions_are_kept_per_host_for_the_ttl():
    now = [0.0]
    asked = []

    def ask(host, version):
        asked.append(host)
        return auto.parse(version) <= ((1, 11) if host == 'old' else (1, 99))
    versions = auto.AgentVersions(ask, ttl=10, clock=lambda: now[0])
    assert versions.lowest_known() is None
    assert versions.of('new') == rpc.VERSION
    assert versions.of('old') == '1.11'
    before = len(asked)
    assert versions.of('old') == '1.11' and len(asked) == before
    assert versions.lowest_known() == '1.11'
    now[0] = 11.0                       # expired: asked again
    assert versions.lowest_known() is None
    assert versions.of('old') == '1.11' and len(asked) > before


class OldAgent(object):
    """An agent of the release that spoke ``version``."""

    def __init__(self, version):
        self.target = oslo_messaging.Target(version=version)
        self.calls = []

    def status(self, ctxt):
        self.calls.append('status')
        return {'host': 'old'}

    def admit_group(self, ctxt, group, members, project=None):
        self.calls.append('admit_group')
        return {'admitted': members}


def _conf(cap):
    conf = cfg.ConfigOpts()
    conf([], project='blobcr-test', default_config_files=[])
    # What this oslo.messaging's client reads and registers on cfg.CONF
    # only (a real service's configuration).
    for module, name in (('oslo_messaging._metrics.client',
                          'oslo_messaging_metrics'),
                         ('oslo_messaging._tracing.client',
                          'oslo_messaging_tracing')):
        try:
            opts = getattr(__import__(module, fromlist=[name]), name)
        except ImportError:
            continue
        conf.register_opts(opts, group=name)
    conf.register_opts(rpc_api.upgrade_opts, group=rpc_api.UPGRADE_GROUP)
    conf.set_override('blobcr_agent', cap, group=rpc_api.UPGRADE_GROUP)
    return conf


@pytest.fixture
def agents():
    api = rpc_api.AgentAPI(_conf('auto'), transport_url='fake:/', timeout=5)
    servers, endpoints = [], {}
    for host, version in (('old', '1.11'), ('new', rpc.VERSION)):
        endpoints[host] = OldAgent(version)
        server = oslo_messaging.get_rpc_server(
            api.transport, oslo_messaging.Target(
                exchange=rpc.EXCHANGE, topic=rpc.TOPIC, server=host),
            [endpoints[host]])
        server.start()
        servers.append(server)
    yield api, endpoints
    for server in servers:
        server.stop()
        server.wait()
    api.cleanup()


def test_auto_caps_each_host_at_its_agents_version(agents):
    api, endpoints = agents
    assert api.status('old') == {'host': 'old'}
    assert api._cap_for('old') == '1.11'
    assert api._cap_for('new') == rpc.VERSION
    # 1.11 goes to the 1.11 agent; 1.14 is refused before it is sent.
    assert api.admit_group('old', 'g', 2) == {'admitted': 2}
    with pytest.raises(oslo_messaging.RPCVersionCapError):
        api.hold_members('old', [{'image': 'i', 'quiesce': 'none'}])
    assert endpoints['old'].calls == ['status', 'admit_group']
    # The peer topic (1.12) for the new agent only.
    assert api._peer_client('new') is api.peer_client
    assert api._peer_client('old') is not api.peer_client
    # Decisions for every agent: the lowest of those asked.
    assert not api.can_batch_members()
    assert not api.hints_to_listeners()


def test_auto_is_a_valid_setting_and_a_typo_is_not():
    assert rpc_api.configured_version_cap(_conf('auto')) == auto.AUTO
    with pytest.raises(Exception, match='or auto'):
        rpc_api.configured_version_cap(_conf('automatic'))
