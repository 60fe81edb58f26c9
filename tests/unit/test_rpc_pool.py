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

"""The transports a caller keeps to agents' vhosts (rpc/pool.py): the
bound, idle close, and neither closing one under a call.
"""

import threading
import time

from oslo_config import cfg

from blobcr_common.rpc import api as rpc_api
from blobcr_common.rpc import bus
from blobcr_common.rpc import pool


class _Transport(object):
    def __init__(self, url, closed):
        self.url = url
        self._closed = closed

    def cleanup(self):
        self._closed.append(self.url)


def _pool(max_open=None, idle_timeout=None):
    closed = []
    made = []

    def open_vhost(url):
        made.append(url)
        return _Transport(url, closed), object()
    return pool.TransportPool(open_vhost, max_open, idle_timeout), made, closed


def _call(hosts, url):
    """A call to ``url``, and the closes it started done."""
    hosts.give_back(hosts.get(url))
    assert hosts.settle(5)


def _wait_for(predicate, timeout=5):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_least_recently_used_past_the_bound_is_closed():
    hosts, made, closed = _pool(max_open=2)
    for url in ('a', 'b', 'a', 'c'):
        _call(hosts, url)
    # b was the least recently used when c came.
    assert made == ['a', 'b', 'c'] and closed == ['b'] and len(hosts) == 2
    _call(hosts, 'b')
    assert closed == ['b', 'a'] and made[-1] == 'b'
    hosts.close()
    assert sorted(closed[2:]) == ['b', 'c']


def test_evicted_in_use_is_closed_when_given_back():
    hosts, _, closed = _pool(max_open=1)
    held = hosts.get('a')
    _call(hosts, 'b')
    assert closed == [] and len(hosts) == 2
    # A second call to a while it is evicted and held opens another.
    _call(hosts, 'a')
    assert closed == ['b']
    hosts.give_back(held)
    assert hosts.settle(5)
    assert closed == ['b', 'a'] and len(hosts) == 1
    # Given back twice, or a client it never gave: nothing.
    hosts.give_back(held)
    hosts.give_back(object())
    assert len(closed) == 2
    hosts.close()


def test_a_slow_close_does_not_hold_the_caller():
    """oslo.messaging's cleanup waits for its reply waiter's poll (up to
    5 s): the call that evicts a transport does not wait for it.
    """
    release = threading.Event()
    slow = _Transport('a', [])
    slow.cleanup = lambda: release.wait(10)
    transports = iter([(slow, object()), (_Transport('b', []), object())])
    hosts = pool.TransportPool(lambda url: next(transports), max_open=1)
    hosts.give_back(hosts.get('a'))
    start = time.monotonic()
    hosts.give_back(hosts.get('b'))
    assert time.monotonic() - start < 1
    assert hosts.closing == 1 and not hosts.settle(0.1)
    release.set()
    assert hosts.settle(5) and hosts.closing == 0
    hosts.close()


def test_no_bound_keeps_every_transport():
    hosts, _, closed = _pool()
    for n in range(100):
        _call(hosts, 'h%d' % n)
    assert len(hosts) == 100 and closed == []
    hosts.close()
    assert len(closed) == 100


def test_idle_transports_are_closed_and_opened_again():
    hosts, made, closed = _pool(max_open=10, idle_timeout=0.2)
    _call(hosts, 'a')
    _call(hosts, 'b')
    _wait_for(lambda: len(closed) == 2)
    assert sorted(closed) == ['a', 'b'] and len(hosts) == 0
    _call(hosts, 'a')
    assert made == ['a', 'b', 'a']
    _wait_for(lambda: len(closed) == 3)
    assert hosts._timer is None
    hosts.close()


def test_a_transport_in_use_is_not_closed_for_idleness():
    hosts, _, closed = _pool(idle_timeout=0.1)
    _call(hosts, 'a')
    held = hosts.get('a')
    time.sleep(0.3)
    # A timer fired while it was held (or none was armed): not closed.
    hosts._close_idle()
    assert hosts.settle(5)
    assert closed == [] and len(hosts) == 1
    hosts.give_back(held)
    _wait_for(lambda: closed == ['a'])
    hosts.close()


def test_a_call_just_made_is_not_closed_by_a_due_timer():
    """The timer due for a transport that a caller took again since:
    the caller's use (get, then give_back) moves its idle time on.
    """
    hosts, _, closed = _pool(idle_timeout=60)
    _call(hosts, 'a')
    vhost = hosts._vhosts['a']
    vhost.last_used -= 120
    client = hosts.get('a')
    hosts._close_idle()
    assert hosts.settle(5) and closed == []
    hosts.give_back(client)
    hosts._close_idle()
    assert hosts.settle(5) and closed == []
    vhost.last_used -= 120
    hosts._close_idle()
    assert hosts.settle(5) and closed == ['a']
    hosts.close()


def test_close_stops_the_timer():
    hosts, _, closed = _pool(idle_timeout=0.2)
    _call(hosts, 'a')
    timer = hosts._timer
    assert timer is not None
    hosts.close()
    assert closed == ['a'] and hosts._timer is None
    timer.join(1)
    _call(hosts, 'b')
    assert hosts._timer is None
    time.sleep(0.3)
    assert closed == ['a']


def _conf(**bus_options):
    conf = cfg.ConfigOpts()
    conf([], project='blobcr-test', default_config_files=[])
    bus.register(conf)
    conf.set_override('host_vhosts', True, group=bus.GROUP)
    for option, value in bus_options.items():
        conf.set_override(option, value, group=bus.GROUP)
    return conf


def test_agent_api_bounds_host_transports_by_default():
    api = rpc_api.AgentAPI(_conf(), transport_url='fake://u:p@h:1/x')
    assert api._hosts.max_open == 64
    assert api._hosts.idle_timeout == 300
    api.cleanup()
    api = rpc_api.AgentAPI(
        _conf(max_host_transports=3, host_transport_idle_timeout=0),
        transport_url='fake://u:p@h:1/x')
    assert api._hosts.max_open == 3 and api._hosts.idle_timeout is None
    api.cleanup()
    # The listener's own bound wins.
    api = rpc_api.AgentAPI(_conf(max_host_transports=3),
                           transport_url='fake://u:p@h:1/x', max_hosts=7)
    assert api._hosts.max_open == 7
    for n in range(10):
        api.give_back(api.client_for('h%d' % n))
    assert len(api._hosts) == 7
    api.cleanup()
    assert len(api._hosts) == 0
