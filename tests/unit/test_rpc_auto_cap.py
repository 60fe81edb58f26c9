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

import threading
import time

from oslo_config import cfg
import oslo_messaging
import pytest

from blobcr_common import rpc
from blobcr_common.rpc import api as rpc_api
from blobcr_common.rpc import auto
from blobcr_common.rpc import bus


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

    def ask(host, version, timeout):
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
    assert api._versions.lowest_known() is None     # 1.0: not probed
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
    assert not api.hints_to_listeners()


def test_auto_is_a_valid_setting_and_a_typo_is_not():
    assert rpc_api.configured_version_cap(_conf('auto')) == auto.AUTO
    with pytest.raises(Exception, match='or auto'):
        rpc_api.configured_version_cap(_conf('automatic'))


# -- the review of 8e256df ----------------------------------------------------

def _probes(versions):
    """The hosts ``versions`` (an AgentVersions) probes, as it does."""
    asked = []
    ask = versions._ask

    def counted(host, *args):
        asked.append(host)
        return ask(host, *args)
    versions._ask = counted
    return asked


def _takes(call, *args, **kwargs):
    """Seconds ``call`` took, and what it raised (None if it returned)."""
    start = time.monotonic()
    try:
        call(*args, **kwargs)
        error = None
    except Exception as e:
        error = e
    return time.monotonic() - start, error


def test_a_1_0_call_sends_no_probe_and_takes_its_own_timeout(agents):
    """status(timeout=...) is how Cinder's driver asks whether a host is
    alive: under auto, a dead host's answer took the client's timeout
    (5 s here, 60 s by default) for the probe first.
    """
    api, _ = agents
    asked = _probes(api._versions)
    took, error = _takes(api.status, 'ghost', timeout=1)
    assert isinstance(error, oslo_messaging.MessagingTimeout)
    assert took < 1.5 and asked == []
    assert api.status('old') == {'host': 'old'} and asked == []


def test_a_probe_is_bounded_by_the_calls_timeout_and_its_failure_kept(agents):
    api, _ = agents
    asked = _probes(api._versions)
    # import_file is a 1.3 call: probed, within its own 1 s.
    took, error = _takes(api.import_file, 'ghost', 'img', '/p', timeout=1)
    assert isinstance(error, oslo_messaging.MessagingTimeout)
    assert took < 1.5 and asked == ['ghost']
    # Not probed again for FAILED_TTL: the call goes out as it would
    # without auto, and fails as it would.
    took, error = _takes(api.import_file, 'ghost', 'img', '/p', timeout=1)
    assert isinstance(error, oslo_messaging.MessagingTimeout)
    assert took < 1.5 and asked == ['ghost']


def test_a_failed_probe_leaves_the_call_as_without_auto(agents):
    api, endpoints = agents

    def unreachable(host, version, timeout=None):
        raise oslo_messaging.MessageDeliveryFailure('no route to ' + host)
    api._versions._ask = unreachable
    # Capped at this caller's newest: the call goes out and succeeds.
    assert api.admit_group('new', 'g', 2) == {'admitted': 2}
    assert endpoints['new'].calls == ['admit_group']
    assert api._versions.lowest_known() is None


def test_concurrent_first_calls_to_a_host_probe_once():
    asked = []

    def ask(host, version, *timeout):
        asked.append(version)
        time.sleep(0.3)
        return True
    versions = auto.AgentVersions(ask)
    answers = []
    threads = [threading.Thread(target=lambda: answers.append(
        versions.of('h'))) for _ in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers == [rpc.VERSION] * 5 and asked == [rpc.VERSION]


def test_a_waiter_gives_up_at_its_own_timeout():
    release = threading.Event()

    def ask(host, version, *timeout):
        release.wait(5)
        return True
    versions = auto.AgentVersions(ask)
    first = threading.Thread(target=versions.of, args=('h',))
    first.start()
    time.sleep(0.1)
    took, error = _takes(versions.of, 'h', 0.3)
    release.set()
    first.join()
    assert error is None and took < 1.0


def test_the_ttl_runs_from_the_answer():
    now = [0.0]

    def ask(host, version, *timeout):
        now[0] += 50                    # a slow answer
        return True
    versions = auto.AgentVersions(ask, ttl=100, clock=lambda: now[0])
    versions.of('h')
    now[0] = 120.0                      # 70 s after the answer
    assert versions.lowest_known() == rpc.VERSION


class PeerAgent(object):
    """An agent's peer side (PeerEndpoint's calls)."""

    target = oslo_messaging.Target(version=rpc.VERSION)

    def __init__(self):
        self.calls = []

    def handoff(self, ctxt, image, dest, wait=0):
        self.calls.append('handoff')
        return {'version': 3}

    def prepare_handoff(self, ctxt, image, dest):
        self.calls.append('prepare_handoff')


def test_peer_calls_under_auto_probe_on_the_peer_side_with_host_vhosts():
    """An agent's own AgentAPI (server.peers_of) has no permission on
    another host's control vhost: its probes go where its peer calls
    go.
    """
    conf = _conf('auto')
    bus.register(conf)
    conf.set_override('host_vhosts', True, group=bus.GROUP)
    api = rpc_api.AgentAPI(conf, transport_url='fake:/', timeout=5)
    peer = PeerAgent()
    server = oslo_messaging.get_rpc_server(
        api.peer_transport, oslo_messaging.Target(
            exchange=rpc.EXCHANGE, topic=rpc.PEER_TOPIC, server='src'),
        [peer])
    server.start()
    controls = []

    def no_control(host):
        controls.append(host)
        raise oslo_messaging.MessagingTimeout('no permission on ' + host)
    api.client_for = no_control
    asked = _probes(getattr(api, '_peer_versions', api._versions))
    try:
        assert api.handoff('src', 'img', 'dst') == {'version': 3}
        assert api.prepare_handoff('src', 'img', 'dst') is True
        for _ in range(50):
            if len(peer.calls) == 2:
                break
            time.sleep(0.02)
    finally:
        server.stop()
        server.wait()
        api.cleanup()
    assert peer.calls == ['handoff', 'prepare_handoff']
    assert controls == [] and asked == ['src']


def test_batching_is_decided_by_the_groups_own_hosts(agents):
    api, _ = agents
    assert api.admit_group('old', 'g', 2) == {'admitted': 2}
    assert api._versions.lowest_known() == '1.11'
    # One old agent elsewhere does not turn batching off for a group
    # whose hosts are all new.
    assert api.can_batch_members(['new'])
    assert not api.can_batch_members(['new', 'old'])


# -- the review of 584fe62 ----------------------------------------------------

def test_a_failed_re_probe_keeps_what_the_agent_said_before():
    """A re-probe that times out (a loaded agent, a short caller
    budget) does not make an old agent one of this caller's version.
    """
    now = [0.0]
    answering = [True]

    def ask(host, version, timeout):
        if not answering[0]:
            raise oslo_messaging.MessagingTimeout('slow')
        return auto.parse(version) <= (1, 11)
    versions = auto.AgentVersions(ask, ttl=10, failed_ttl=5,
                                  clock=lambda: now[0])
    assert versions.of('old') == '1.11'
    now[0], answering[0] = 11.0, False   # expired, and the probe fails
    assert versions.of('old') == '1.11'
    assert versions.lowest_known() == '1.11'
    # Never known: nothing to keep.
    assert versions.of('other') is None


def _serve(api, host, endpoint):
    server = oslo_messaging.get_rpc_server(
        api.transport, oslo_messaging.Target(
            exchange=rpc.EXCHANGE, topic=rpc.TOPIC, server=host), [endpoint])
    server.start()
    return server


def _stop(server):
    server.stop()
    server.wait()


class NewAgent(OldAgent):
    """An agent of this release: it batches group members (1.14)."""

    def __init__(self):
        super().__init__(rpc.VERSION)

    def hold_members(self, ctxt, members, timeout=60):
        self.calls.append('hold_members')
        return {'held': len(members)}


def test_an_agent_upgraded_since_its_probe_is_asked_again():
    api = rpc_api.AgentAPI(_conf('auto'), transport_url='fake:/', timeout=5)
    server = _serve(api, 'h', OldAgent('1.11'))
    try:
        assert api._cap_for('h') == '1.11'
        _stop(server)
        upgraded = NewAgent()
        server = _serve(api, 'h', upgraded)
        # The cached 1.11 refuses the 1.14 call here: the agent is asked
        # again, and the call goes.
        assert api.hold_members('h', [{'image': 'i', 'quiesce': 'none'}]) \
            == {'held': 1}
        assert upgraded.calls == ['hold_members']
        assert api._cap_for('h') == rpc.VERSION
    finally:
        _stop(server)
        api.cleanup()


def test_an_agent_rolled_back_since_its_probe_is_asked_again():
    api = rpc_api.AgentAPI(_conf('auto'), transport_url='fake:/', timeout=5)
    server = _serve(api, 'h', NewAgent())
    try:
        assert api._cap_for('h') == rpc.VERSION
        _stop(server)
        old = OldAgent('1.11')
        server = _serve(api, 'h', old)
        # The agent refuses 1.14: asked again, the call is refused here,
        # clearly, and the next ones are capped at 1.11.
        with pytest.raises(oslo_messaging.RPCVersionCapError):
            api.hold_members('h', [{'image': 'i', 'quiesce': 'none'}])
        assert api._cap_for('h') == '1.11'
        assert api.admit_group('h', 'g', 2) == {'admitted': 2}
    finally:
        _stop(server)
        api.cleanup()
