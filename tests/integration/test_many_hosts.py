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

"""A caller and many compute hosts with ``[blobcr_bus] host_vhosts``
(issue 56 item 6), on the session's RabbitMQ: 20 hosts, a vhost each,
served by the agent's control endpoint (blobcr_lab/many_hosts.py); a
caller bounded to 4 transports. What it holds is what the broker lists
(``rabbitmqctl list_connections``), not what the caller counts.

And the small version of ``blobcr-bench hosts`` (a private broker).
"""

import json
import os
import time
import uuid

import pytest

from blobcr_bench import cli as bench
from blobcr_lab import many_hosts

HOSTS = 20
BOUND = 4
IDLE = 3
# An oslo.messaging transport, once called, holds two connections: the
# one it sends on and the one its reply queue is consumed on.
PER_TRANSPORT = 2


@pytest.fixture
def vhosts(rabbitmq_broker):
    if rabbitmq_broker.external:
        pytest.skip('BLOBCR_RABBIT_URL: a broker we cannot administer')
    made = many_hosts.HostVhosts(rabbitmq_broker,
                                 'mh%s' % uuid.uuid4().hex[:6], HOSTS)
    servers = many_hosts.Servers(made.server_urls())
    yield made
    servers.stop()
    made.cleanup()


def test_a_caller_holds_at_most_its_bound_and_closes_idle_ones(
        vhosts, rabbitmq_broker):
    api = many_hosts.make_caller(vhosts.caller_url, vhosts.vhost_format,
                                 BOUND, IDLE)
    try:
        held_most, calls, errors = [], 0, []
        for part in many_hosts.call_hosts(api, vhosts.hosts, rounds=2,
                                          pause_every=BOUND):
            calls += len(part['opened']) + len(part['cached'])
            errors += part['errors']
            # Evicted transports close off the caller's path, each in up
            # to 5 s: while paused, those still closing only end.
            closing = api._hosts.closing
            held = many_hosts.caller_connections(rabbitmq_broker,
                                                 vhosts.caller_user)
            assert len(held) <= PER_TRANSPORT * (BOUND + closing), \
                (held, closing)
            assert api._hosts.settle(30)
            held = many_hosts.caller_connections(rabbitmq_broker,
                                                 vhosts.caller_user)
            held_most.append(len(held))
            # Only host vhosts: the caller's own transport (on /) never
            # connected.
            assert set(held) <= {vhosts.vhost(h) for h in vhosts.hosts}
            assert len(set(held)) <= BOUND, held
            assert len(held) <= PER_TRANSPORT * BOUND, held
        assert calls == 2 * 2 * HOSTS and not errors, errors
        # The bound was reached (the figures above are no idle lull).
        assert max(held_most) == PER_TRANSPORT * BOUND, held_most
        # No call for IDLE s: every transport closed, as the broker
        # sees it.
        deadline = time.monotonic() + IDLE + 20
        while True:
            held = many_hosts.caller_connections(rabbitmq_broker,
                                                 vhosts.caller_user)
            if not held or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert held == [] and len(api._hosts) == 0
        # And a host called again is reached again.
        assert api.status(vhosts.hosts[0])['host'] == vhosts.hosts[0]
    finally:
        api.cleanup()


def test_hosts_bench_small(capsys, tmp_path):
    # CI: 12 hosts, 2 rounds, a bound of 4, 2 s idle;
    # BLOBCR_BENCH_DEFAULTS=1: the defaults (3 rounds, a bound of 64,
    # 15 s idle), scaled in size: 80 hosts.
    defaults = os.environ.get('BLOBCR_BENCH_DEFAULTS') == '1'
    rc = bench.main(['hosts', '--workdir', str(tmp_path), '--json'] + (
        ['--hosts', '80'] if defaults else
        ['--hosts', '12', '--rounds', '2', '--bound', '4', '--idle', '2',
         '--idle-wait', '6', '--pause-every', '6', '--server-procs', '1']))
    out, err = capsys.readouterr()
    result = json.loads(out)
    failed = [c for c in result['checks'] if not c['ok']]
    assert rc == 0 and not failed, (failed, err[-3000:])
    hosts = result['hosts']
    unbounded, bounded = result['unbounded'], result['bounded']
    # Without the bound: every host's transport stays, idle or not.
    assert unbounded['max_connections'] == PER_TRANSPORT * hosts
    assert unbounded['connections_after_idle'] == PER_TRANSPORT * hosts
    # With it (the benchmark's checks: never more than two per kept or
    # closing transport), and none once idle.
    assert 0 < bounded['max_connections'] < unbounded['max_connections']
    assert bounded['connections_after_idle'] == 0
    for variant in (unbounded, bounded):
        assert variant['latency_ms']['opened']['n'] > 0
        assert variant['latency_ms']['cached']['n'] > 0
    assert result['extrapolation']['connections']['unbounded_at'] == \
        PER_TRANSPORT * 1000
