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

"""``blobcr-bench hosts``: what a caller (cinder-volume, the Nova
listener) holds with ``[blobcr_bus] host_vhosts`` and many compute
hosts (issue 56 item 6), with and without a bound on its transports.

A private RabbitMQ (tools/rabbitmq.sh) holds ``--hosts`` vhosts, each
served by the agent's control endpoint over a status-only manager
(blobcr_lab/many_hosts.py), in ``--server-procs`` processes. For each
variant a caller process calls every host in turn, each twice in a row,
``--rounds`` times, pausing every ``--pause-every`` hosts and at each
round's end while the broker is asked for the caller's connections
(``rabbitmqctl list_connections``) and its own RSS is read; then it
stays idle ``--idle-wait`` seconds and is sampled again.

* ``unbounded``: ``max_host_transports`` at least the hosts, no idle
  close: the old behaviour of cinder-volume;
* ``bounded``: ``--bound`` transports, closed after ``--idle`` s unused.

Latencies (ms, p50/p99) are split by whether the call opened its
host's transport (a connection, a reply queue) or found it open.
``extrapolation`` fits connections and RSS against the hosts called
(round 1 of ``unbounded``, linear least squares) and reads the fit at
1,000 hosts; with the bound, neither grows past ``--bound`` hosts.
"""

import os

from blobcr_bench import common
from blobcr_lab import many_hosts
from blobcr_lab import rabbitmq

AT = 1000


def add_arguments(p):
    p.add_argument('--hosts', type=int, default=200)
    p.add_argument('--rounds', type=int, default=3)
    p.add_argument('--bound', type=int, default=64,
                   help='max_host_transports of the bounded variant')
    p.add_argument('--idle', type=int, default=15,
                   help='host_transport_idle_timeout of the bounded '
                        'variant (s)')
    p.add_argument('--idle-wait', type=float, default=None,
                   help='seconds without calls after the rounds '
                        '(default: --idle + 10)')
    p.add_argument('--pause-every', type=int, default=50,
                   help='hosts between two samples of the broker')
    p.add_argument('--server-procs', type=int, default=4)
    p.add_argument('--variants', nargs='+',
                   default=['unbounded', 'bounded'],
                   choices=['unbounded', 'bounded'])


def _broker_rss_kib(broker):
    try:
        with open('/proc/%d/status' % broker.pid) as f:
            for line in f:
                if line.startswith('VmRSS:'):
                    return int(line.split()[1])
    except (OSError, TypeError):
        return None


def _fit(points):
    """Slope and intercept of the least-squares line through
    ``points`` ((x, y) pairs).
    """
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx
    return slope, my - slope * mx


def _variant(name, args, vhosts, broker, log):
    bounded = name == 'bounded'
    settings = dict(
        url=vhosts.caller_url, vhost_format=vhosts.vhost_format,
        hosts=vhosts.hosts, rounds=args.rounds,
        pause_every=args.pause_every,
        max_hosts=args.bound if bounded else len(vhosts.hosts),
        idle_timeout=args.idle if bounded else 0,
        idle_wait=args.idle_wait)
    caller = many_hosts.Caller(**settings)
    samples, latencies, errors = [], {'opened': [], 'cached': []}, []
    try:
        for event in caller.events():
            held = many_hosts.caller_connections(broker, vhosts.caller_user)
            sample = {k: event.get(k) for k in (
                'phase', 'round', 'called', 'rss_kib', 'threads', 'kept',
                'closing')}
            sample.update(connections=len(held), vhosts=len(set(held)),
                          broker_rss_kib=_broker_rss_kib(broker),
                          broker_queues=many_hosts.queue_count(broker))
            samples.append(sample)
            for kind in latencies:
                latencies[kind] += event.get(kind, [])
            errors += event.get('errors', [])
            log.event('sample', variant=name, **sample)
            caller.resume()
    finally:
        caller.stop()
    calls = [s for s in samples if s['phase'] == 'calls']
    idle = [s for s in samples if s['phase'] == 'idle']
    return {
        'max_host_transports': settings['max_hosts'],
        'idle_timeout': settings['idle_timeout'],
        'calls': sum(len(v) for v in latencies.values()),
        'errors': len(errors), 'first_errors': errors[:5],
        'latency_ms': {k: common.summary(v) for k, v in latencies.items()},
        'max_connections': max(s['connections'] for s in calls),
        'connections_after_idle': idle[-1]['connections'] if idle else None,
        'rss_kib': {'start': samples[0]['rss_kib'],
                    'max': max(s['rss_kib'] for s in calls),
                    'after_idle': idle[-1]['rss_kib'] if idle else None},
        'threads_max': max(s['threads'] for s in calls),
        'samples': samples}


def _extrapolation(unbounded, bounded):
    first = [s for s in unbounded['samples']
             if s['phase'] == 'calls' and s['round'] == 1]
    start = unbounded['samples'][0]
    out = {'hosts': AT, 'method': (
        'least squares over the samples of round 1 of unbounded (hosts '
        'called so far, with the start as 0 hosts), read at %d hosts; '
        'bounded: the bound does not depend on the hosts' % AT)}
    for key in ('connections', 'rss_kib', 'threads', 'broker_rss_kib'):
        points = [(n, s[key]) for n, s in
                  [(0, start)] + [(s['called'], s) for s in first]
                  if s.get(key) is not None]
        if len(points) < 2:
            continue
        slope, intercept = _fit(points)
        out[key] = {'per_host': round(slope, 2),
                    'unbounded_at': round(intercept + slope * AT)}
        if bounded is not None and key in ('connections', 'rss_kib',
                                           'threads'):
            top = {'connections': bounded['max_connections'],
                   'rss_kib': bounded['rss_kib']['max'],
                   'threads': bounded['threads_max']}[key]
            out[key]['bounded_at'] = top
    return out


def run(args, log):
    if args.idle_wait is None:
        args.idle_wait = args.idle + 10
    broker = rabbitmq.private_broker(args.workdir, log)
    servers = []
    result = {'hosts': args.hosts, 'rounds': args.rounds,
              'server': 'blobcr_agent.rpc.server.ControlEndpoint over a '
                        'status-only manager, one oslo.messaging RPC '
                        'server per host',
              'cpus': os.cpu_count()}
    try:
        log('making %d vhosts' % args.hosts)
        vhosts = many_hosts.HostVhosts(broker, 'mh', args.hosts)
        urls = sorted(vhosts.server_urls().items())
        for n in range(args.server_procs):
            part = dict(urls[n::args.server_procs])
            if part:
                servers.append(many_hosts.Servers(part))
        log('%d RPC servers up in %d processes' % (len(urls), len(servers)))
        for name in args.variants:
            result[name] = _variant(name, args, vhosts, broker, log)
    finally:
        for s in servers:
            s.stop()
        broker.stop()
    if 'unbounded' in result:
        result['extrapolation'] = _extrapolation(result['unbounded'],
                                                 result.get('bounded'))
    checks = common.Checks()
    for name in args.variants:
        v = result[name]
        checks.require('%s calls' % name, v['calls'],
                       'the caller called the hosts')
        checks.require_true('%s errors' % name, v['errors'] == 0,
                            'every call answered by its host', v['errors'])
    if 'bounded' in result:
        v = result['bounded']
        over = [s for s in v['samples'] if s['phase'] == 'calls' and
                s['connections'] > 2 * (args.bound + s['closing'])]
        checks.require_true(
            'bounded samples over the bound', not over,
            'at most two connections per kept or closing transport',
            len(over))
        checks.require_true(
            'bounded connections_after_idle',
            v['connections_after_idle'] == 0,
            'idle transports closed', v['connections_after_idle'])
    result['checks'] = checks.as_list()
    return result
