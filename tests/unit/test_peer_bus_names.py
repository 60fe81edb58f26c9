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

"""The names of the authenticated peer side (rpc/bus.py): broker users
to hosts and back, and the permission patterns that confine a host's
user to its own queues. (The broker's refusals themselves are
tests/integration/test_bus_split.py.)
"""

import json
import re

import hypothesis
from hypothesis import strategies as st
from oslo_config import cfg
import pytest

from blobcr_agent.rpc import peer_bus
from blobcr_agent.rpc import peer_wire
from blobcr_common import exception
from blobcr_common.rpc import bus

HOSTS = st.from_regex(bus.HOST_NAME, fullmatch=True)
FORMATS = st.sampled_from(['blobcr-%(host)s', '%(host)s', 'u.%(host)s.x',
                           'p(%(host)s)'])


@hypothesis.given(FORMATS, HOSTS, HOSTS)
def test_a_user_names_its_host_and_no_other(user_format, host, other):
    user = bus.peer_user(user_format, host)
    assert bus.peer_host(user_format, user) == host
    if other != host:
        assert bus.peer_host(user_format, bus.peer_user(
            user_format, other)) != host


@pytest.mark.parametrize('user', [None, '', 'blobcr-', 'guest', 42])
def test_a_user_the_format_does_not_name_is_no_host(user):
    assert bus.peer_host('blobcr-%(host)s', user) is None


@hypothesis.given(HOSTS, HOSTS)
def test_the_permissions_match_the_hosts_own_queues_only(host, other):
    configure, write, read = bus.peer_permissions(host)
    assert configure == read
    own = re.compile(configure)
    assert own.search(bus.peer_queue(host))
    assert own.search(bus.reply_queue(host))
    if other != host:
        assert not own.search(bus.peer_queue(other))
        assert not own.search(bus.reply_queue(other))
    assert not own.search(bus.peer_queue(host) + '.x')
    assert re.search(write, 'amq.default')
    assert not re.search(write, 'amq.direct')
    assert not re.search(write, bus.peer_queue(host))


def _conf(url):
    conf = cfg.ConfigOpts()
    conf([], project='blobcr-test')
    bus.register(conf)
    conf.set_override('peer_transport_url', url, group=bus.GROUP)
    conf.set_override('host_vhosts', True, group=bus.GROUP)
    return conf


@pytest.mark.parametrize('host', ['', '.a', 'a b', 'a\n', 'a/b', '-a', 'a*',
                                  'h\u00e9'])
def test_a_host_name_the_patterns_cannot_confine_is_refused(host):
    with pytest.raises(ValueError):
        bus.peer_permissions(host)
    assert bus.peer_host('blobcr-%(host)s', 'blobcr-' + host) is None


def test_no_host_name_makes_a_reply_queue_a_request_queue():
    assert bus.reply_queue('a') != bus.peer_queue('a.reply')
    own = re.compile(bus.peer_permissions('a')[0])
    assert not own.search(bus.peer_queue('a.reply'))
    assert not own.search(bus.reply_queue('a.reply'))


def test_the_broker_urls_keep_every_host_and_quote_credentials():
    urls, user = peer_wire.kombu_urls(
        _conf(None), 'rabbit://blobcr-h:p%40ss@b1:5673,'
        'blobcr-h:p%40ss@[::1]/blobcr-peer')
    assert user == 'blobcr-h'
    assert urls == ('amqp://blobcr-h:p%40ss@b1:5673/blobcr-peer;'
                    'amqp://blobcr-h:p%40ss@[::1]:5672/blobcr-peer')


@pytest.mark.parametrize('url', [
    'rabbit://blobcr-h:p@b1,blobcr-g:p@b2/blobcr-peer',   # two users
    'rabbit://blobcr-h:p@b1/blobcr-peer?ssl=1',           # TLS
    'rabbit://b1/blobcr-peer'])                           # no user
def test_a_broker_url_the_peer_bus_cannot_keep_is_refused(url):
    with pytest.raises(exception.InvalidInput):
        peer_wire.kombu_urls(_conf(None), url)


def test_an_agent_whose_user_names_another_host_does_not_start():
    conf = _conf('rabbit://blobcr-other:p@127.0.0.1:5672/blobcr-peer')
    with pytest.raises(exception.InvalidInput, match='blobcr-h'):
        peer_bus.PeerBus(conf, None, host='h')
    conf.set_override('host_vhosts', False, group=bus.GROUP)
    with pytest.raises(exception.InvalidInput, match='host_vhosts'):
        peer_bus.PeerBus(conf, None, host='h')
    assert peer_bus.PeerBus(_conf(
        'rabbit://blobcr-h:p@127.0.0.1:5672/blobcr-peer'), None,
        host='h').user == 'blobcr-h'


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.text(max_size=8), inner, max_size=3), max_leaves=8)
REQUESTS = st.fixed_dictionaries({}, optional={
    'v': st.sampled_from([1, 2, '1', None]),
    'to': st.sampled_from(['x', 'y', None, 7]),
    'deadline': st.sampled_from([None, 'soon', -1e9, 1e12]),
    'method': st.sampled_from(list(peer_wire.METHODS) + ['gc', None, 3,
                                                         ['hints']]),
    'args': JSON})


class _Message(object):
    def __init__(self, body, **properties):
        self.body = body
        self.properties = properties


@hypothesis.given(
    st.one_of(REQUESTS, JSON),
    st.sampled_from([None, 'blobcr-y', 'guest', 'blobcr-', 'blobcr-a b']),
    st.sampled_from(['application/json', 'application/x-python-serialize',
                     None]),
    st.sampled_from([{}, {'compression': 'application/x-gzip'},
                     {'x-death': []}, {'x-first-death-queue': 'q'}]))
def test_a_message_is_a_request_exactly_when_every_check_holds(
        body, user, content_type, headers):
    """Whatever arrives, the checks end in a request or Dropped, never in
    another error (which would reach the consumer loop), and accept
    exactly what the model below accepts.
    """
    properties = {'user_id': user, 'content_type': content_type,
                  'application_headers': headers}
    message = _Message(json.dumps(body).encode(), **properties)
    try:
        caller, got = peer_wire.decoded(message, 'blobcr-%(host)s')
        method, args = peer_wire.checked_request(got, 'x')
        accepted = True
    except peer_wire.Dropped:
        accepted = False
    expected = (user == 'blobcr-y' and content_type == 'application/json'
                and not headers and isinstance(body, dict) and
                body.get('v') == 1 and body.get('to') == 'x' and
                body.get('deadline') == 1e12 and
                isinstance(body.get('method'), str) and
                body.get('method') in peer_wire.METHODS and
                isinstance(body.get('args'), dict))
    assert accepted == expected
    if accepted:
        assert (caller, method, args) == ('y', body['method'], body['args'])


@hypothesis.given(st.one_of(JSON, st.fixed_dictionaries({'error': JSON})))
def test_any_answer_gives_a_result_or_a_blobcr_error(body):
    if not isinstance(body, dict):
        return                  # decoded() drops those before this
    try:
        result = peer_wire.answered(body)
    except exception.BlobCRError:
        assert body.get('error') is not None
    else:
        assert body.get('error') is None and result == body.get('result')
