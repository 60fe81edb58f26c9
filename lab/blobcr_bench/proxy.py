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

"""``blobcr-bench proxy``: the CHECKPOINT round trip through the guest
endpoint and through RPC, for each quiesce mode, against the admin
socket measured in the same run; and how many forged requests per second
the endpoint refuses, with the legitimate round trip under that flood.

A real blobcr-agent serves an image of ``--size`` and a real RabbitMQ
carries the RPC (``--transport-url``, or a private broker: the lab's,
blobcr_lab.rabbitmq). The domain that quiesce acts on is
a libvirt test-driver domain whose disk is the mirror file, so fsfreeze
and suspend cost what libvirt's API path costs, not what a guest's
qemu-ga does (the QEMU end-to-end test measures that one). Between two
checkpoints ``--dirty`` chunks are rewritten and the previous version is
persisted, untimed, so each round trip holds a real COMMIT.
"""

import http.client
import json
import multiprocessing
import os
import statistics
import time
import uuid

from blobcr_bench import common
from blobcr_common import auth
from blobcr_lab import agents
from blobcr_lab import rabbitmq

CHUNK = 256 * 1024
MODES = ('none', 'fsfreeze', 'suspend')


def _percentile(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100.0 *
                                                   (len(ordered) - 1))))]


def _summary(samples):
    return {'median_ms': round(statistics.median(samples), 2),
            'p99_ms': round(_percentile(samples, 99), 2),
            'n': len(samples)}


class _Endpoint(object):
    """One keep-alive HTTP connection to the guest endpoint."""

    def __init__(self, port, headers):
        self.conn = http.client.HTTPConnection('127.0.0.1', port, timeout=60)
        self.headers = headers

    def post(self, body):
        self.conn.request('POST', '/v1/checkpoint', body=body,
                          headers=self.headers)
        reply = self.conn.getresponse()
        data = reply.read()
        return reply.status, data


def run(repo, backend_args, args, log):
    from blobcr_common.rpc import api as rpc_api
    nchunks = args.size // CHUNK
    header = repo.create_image('bench-proxy', nchunks * CHUNK,
                               chunk_size=CHUNK)
    repo.commit(header.id, {0: os.urandom(CHUNK)})
    workdir = os.path.join(args.workdir, 'agent')
    os.makedirs(workdir)
    instance = str(uuid.uuid4())
    node = os.path.join(args.workdir, 'libvirt-node.xml')
    with open(node, 'w') as f:
        f.write('<node><domain type="test"><name>bench</name><uuid>%s'
                '</uuid><memory>65536</memory><os><type>hvm</type></os>'
                '<devices><disk type="file" device="disk"><source file='
                '"%s"/><target dev="vda"/></disk></devices></domain></node>'
                % (instance, os.path.join(workdir, 'mnt', 'images',
                                          header.id)))
    broker = None if args.transport_url else \
        rabbitmq.private_broker(args.workdir, log)
    url = args.transport_url or broker.url
    host = 'bench-%d' % os.getpid()
    agent = agents.AgentProcess(workdir, repo.backend, {
        'DEFAULT': {'transport_url': url},
        'agent': {'host': host, 'rpc_enabled': 'true',
                  'libvirt_uri': 'test://' + node},
        'proxy': {'host_secret': 'bench', 'rate': '100000',
                  'burst': '100000'}})
    api = None
    try:
        agent.start()
        path = agent.client.call('attach', image=header.id)['path']
        api = rpc_api.AgentAPI(transport_url=url, timeout=60)
        api.status(host)                 # the RPC server is up
        token = {'X-Instance-ID': instance,
                 'X-BlobCR-Token': auth.Authenticator(
                     'bench', host=host).token_for(instance,
                                                   lifetime=86400)}
        endpoint = _Endpoint(agent.proxy_port(), token)
        fd = os.open(path, os.O_RDWR)
        counter = [0]

        def dirty():
            for _ in range(args.dirty):
                index = counter[0] % nchunks
                counter[0] += 1
                os.pwrite(fd, os.urandom(4096), index * CHUNK)

        def settle(version):
            agent.client.call('wait_stable', image=header.id,
                              version=version)

        def via_admin(mode):
            return agent.client.call('checkpoint', image=header.id,
                                     quiesce=mode)

        def via_http(mode):
            status, data = endpoint.post(json.dumps({'quiesce': mode}))
            if status != 200:
                raise RuntimeError('endpoint said %d: %s' % (status, data))
            return json.loads(data)

        def via_rpc(mode):
            return api.checkpoint(host, header.id, quiesce=mode)

        held = []

        def round_trips(call, mode, rounds):
            samples = []
            del held[:]
            for _ in range(rounds):
                dirty()
                t0 = time.perf_counter()
                reply = call(mode)
                samples.append((time.perf_counter() - t0) * 1000)
                if reply.get('held_ms') is not None:
                    held.append(reply['held_ms'])
                settle(reply['version'])
            return samples

        result = {'size': args.size, 'dirty_chunks': args.dirty,
                  'rounds': args.rounds}
        for mode in MODES:
            entry = {}
            for name, call in (('admin', via_admin), ('http', via_http),
                               ('rpc', via_rpc)):
                round_trips(call, mode, 2)             # warm-up
                entry[name] = _summary(round_trips(call, mode, args.rounds))
                # The guest held still (admin and RPC replies say; the
                # guest endpoint's reply does not carry it).
                entry[name]['held'] = _summary(held) if held else None
                log('%-8s %-5s median %.2f ms  p99 %.2f ms'
                    % (mode, name, entry[name]['median_ms'],
                       entry[name]['p99_ms']))
            for name in ('http', 'rpc'):
                entry['%s_over_admin' % name] = round(
                    entry[name]['median_ms'] / entry['admin']['median_ms'], 2)
            result[mode] = entry
        result['forged'] = _flood(agent.proxy_port(), instance, args,
                                  lambda: round_trips(via_http, 'none',
                                                      args.rounds), log)
        result['forged']['legit_under_flood_over_quiet'] = round(
            result['forged']['legit_under_flood']['median_ms'] /
            result['none']['http']['median_ms'], 2)
        os.close(fd)
        checks = common.Checks()
        checks.require('forged requests sent',
                       result['forged']['requests'],
                       'the flood must reach the endpoint')
        checks.require_true('forged requests all refused',
                            result['forged']['not_refused'] == 0,
                            'every forged request must get a 401',
                            value=result['forged']['not_refused'])
        checks.require('round trips per path and mode (min)', min(
            result[m][p]['n'] for m in MODES for p in ('admin', 'http',
                                                       'rpc')),
            'each path must take checkpoints')
        result['checks'] = checks.as_list()
        if args.plot:
            plot(result, args.plot)
        return result
    finally:
        if api is not None:
            api.cleanup()
        agent.stop()
        if broker is not None:
            broker.stop()


def _flooder(port, instance, seconds, results):
    # In its own process: the flood must not take the GIL from the
    # legitimate client whose round trips are measured.
    endpoint = _Endpoint(port, {'X-Instance-ID': instance,
                                'X-BlobCR-Token': 'f' * 64})
    n = bad = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        status, _ = endpoint.post(b'{}')
        n += 1
        bad += status != 401
    results.put((n, bad))


def _flood(port, instance, args, legit, log):
    """Forged requests from ``args.flooders`` processes for
    ``args.flood_seconds``; the legitimate round trip meanwhile.
    """
    results = multiprocessing.Queue()
    procs = [multiprocessing.Process(
        target=_flooder, args=(port, instance, args.flood_seconds, results))
        for _ in range(args.flooders)]
    t0 = time.perf_counter()
    for p in procs:
        p.start()
    legit_samples = legit()
    counts = [results.get() for _ in procs]
    for p in procs:
        p.join()
    elapsed = max(args.flood_seconds, time.perf_counter() - t0)
    total = sum(n for n, _ in counts)
    result = {'refused_per_s': round(total / args.flood_seconds, 1),
              'requests': total,
              'not_refused': sum(b for _, b in counts),
              'flooders': args.flooders,
              'legit_under_flood': _summary(legit_samples)}
    log('forged: %.0f refusals/s over %.1f s, legit median %.2f ms'
        % (result['refused_per_s'], elapsed,
           result['legit_under_flood']['median_ms']))
    return result


def plot(result, path):
    """Grouped bars: median round trip per quiesce mode and path, with
    the p99 as a whisker.
    """
    import matplotlib
    matplotlib.use('Agg')
    from matplotlib import pyplot

    paths = (('admin', 'admin socket', '#999999'),
             ('http', 'guest endpoint (HTTP)', '#2a7ab9'),
             ('rpc', 'RPC (RabbitMQ)', '#d9822b'))
    fig, ax = pyplot.subplots(figsize=(8, 4))
    width = 0.26
    for k, (key, label, color) in enumerate(paths):
        xs = [m + (k - 1) * width for m in range(len(MODES))]
        medians = [result[mode][key]['median_ms'] for mode in MODES]
        p99 = [result[mode][key]['p99_ms'] - med
               for mode, med in zip(MODES, medians)]
        ax.bar(xs, medians, width, label=label, color=color,
               yerr=[[0] * len(p99), p99], capsize=3)
        for x, value in zip(xs, medians):
            ax.annotate('%.1f' % value, (x, value / 2), ha='center',
                        va='center', fontsize=8, color='white')
    ax.set_xticks(range(len(MODES)))
    ax.set_xticklabels(['quiesce: %s' % m for m in MODES])
    ax.set_ylabel('CHECKPOINT round trip (ms), median, p99 whisker')
    ax.legend(fontsize=8)
    forged = result['forged']
    ax.set_title('blobcr-bench proxy: %d MiB image, %d dirty chunks; '
                 'forged refused %.0f/s' % (result['size'] >> 20,
                                            result['dirty_chunks'],
                                            forged['refused_per_s']),
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
