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

"""Guest-visible checkpoint latency through the metadata path, against the
same request sent to the agent's endpoint directly (issue 10).

Run with the lab installed (it boots the lab's TCG guest,
blobcr_lab.guest_vm)::

    .venv/bin/python -m blobcr_bench.metadata --runs 3 --requests 20

What runs, all real and on loopback:

* a blobcr-agent (local store) with an ext4 image attached for an
  instance, its libvirt URI a session libvirtd of our own;
* the relay (a separate process): MetadataFront of
  blobcr_lab.metadata_front in its signing mode, i.e.
  vendor_data2.json from blobcr-vendordata's application and ``/v1/``
  relayed to the agent with ``X-Instance-ID`` and
  ``X-Instance-ID-Signature`` as Neutron's metadata proxy adds them;
* per run, a fresh TCG guest booted on the agent's mirror file. QEMU's
  slirp forwards 169.254.169.254:80 to the relay and
  169.254.169.254:8775 to the agent's endpoint (both through busybox nc,
  one per connection, so both routes pay the same forwarding).

In the guest, a loop takes turns between the routes: (a) ``metadata``,
no credentials, http://169.254.169.254/; (b) ``direct``, the instance id
and token the guest read from vendordata, http://169.254.169.254:8775/.
Before each request it writes 64 KiB to the mounted disk and syncs
(untimed); the request is ``POST /v1/checkpoint`` (blobcr_guest's
client, no retries, no sync), timed with the guest's monotonic clock
from the request to the ack. The agent's figure per request is the
``downtime_ms`` of its reply (its own request-to-ack time), and
``held_ms`` (how long the guest was kept still). The agent's per-instance
limit
(1 checkpoint/s, burst 5) is raised for the benchmark: the guest asks
back to back.

Prints one JSON object: per route the median and p99 of the guest's
request-to-ack time, of the agent's downtime_ms and of held_ms over all
requests,
per-run medians, the ratio metadata/direct of the medians (pooled and per
run), and the checkpoint counts. Exits 3 with ``"valid": false`` if a
route made zero checkpoints, a request failed, or a version the guest was
given is not committed (stable in the agent's list_versions).
"""

import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

from blobcr_agent.repository.backends import local
from blobcr_agent.repository import repository
import blobcr_guest
from blobcr_lab.agent_rpc import committed
from blobcr_lab import agents
from blobcr_lab import guest_vm
from blobcr_lab.metadata_front import vendordata_answer

DIRECT_PORT = 8775
SECRET, META = 'bench-host-secret', 'bench-metadata-secret'
HOST = 'bench-host'                 # the agent's [agent] host

# The relay, a process of its own: prints its port, serves until stdin
# closes.
RELAY = r'''
import json, sys
from blobcr_lab.metadata_front import MetadataFront
spec = json.loads(sys.argv[1])
front = MetadataFront(spec['document'], spec['agent_port'],
                      sign=(spec['secret'], spec['instance']))
print(front.port, flush=True)
sys.stdin.read()
print(json.dumps({'relayed': front.relayed}), flush=True)
front.close()
'''

GUEST_LOOP = r'''
import json, os, sys, time
from blobcr_guest import client, config
n, quiesce = int(sys.argv[1]), sys.argv[2] or None
found = config.vendordata()
routes = {
    'metadata': client.CheckpointClient('http://169.254.169.254',
                                        retries=0),
    'direct': client.CheckpointClient(
        'http://169.254.169.254:%d' % DIRECT_PORT,
        instance_id=found['instance_id'], token=found['token'],
        retries=0),
}
fd = os.open('/mnt/bench.dat', os.O_WRONLY | os.O_CREAT, 0o644)
block = os.urandom(65536)
k = 0
for i in range(n):
    order = ('metadata', 'direct') if i % 2 == 0 else ('direct', 'metadata')
    for route in order:
        os.pwrite(fd, block, (k % 64) * 65536)
        os.fsync(fd)
        k += 1
        t0 = time.monotonic()
        try:
            taken = routes[route].checkpoint(quiesce=quiesce, sync=False)
        except Exception as e:
            print('LAT ' + json.dumps({'route': route, 'error': str(e)}),
                  flush=True)
            continue
        ms = (time.monotonic() - t0) * 1000.0
        print('LAT ' + json.dumps({'route': route, 'ms': round(ms, 3),
                                   'downtime_ms': taken.downtime_ms,
                                   'held_ms': getattr(taken, 'held_ms', None),
                                   'version': taken.version}), flush=True)
os.close(fd)
'''.replace('DIRECT_PORT', str(DIRECT_PORT))

SCENARIO = r'''set -e
mount -t ext4 /dev/vda /mnt
python3 /bench_loop.py %d %s
umount /mnt
'''


class BenchVM(guest_vm.GuestVM):
    """The test guest with a second forward: METADATA_IP:8775 to the
    agent's endpoint (the direct route).
    """

    def __init__(self, *args, direct_port, **kwargs):
        super().__init__(*args, **kwargs)
        self.direct_port = direct_port

    def _netdev(self):
        return super()._netdev() + (
            ',guestfwd=tcp:%s:%d-cmd:%s 127.0.0.1 %d'
            % (guest_vm.METADATA_IP, DIRECT_PORT, guest_vm.NC,
               self.direct_port))


def say(text):
    print('bench-metadata: %s' % text, file=sys.stderr, flush=True)


def percentile(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1,
                       int(round(p / 100.0 * (len(ordered) - 1))))]


def stats(values):
    if not values:
        return None
    return {'median_ms': round(statistics.median(values), 2),
            'p99_ms': round(percentile(values, 99), 2), 'n': len(values)}


def ratio(a, b):
    return round(a / b, 3) if a and b else None


def summarize(runs, committed_versions):
    """runs: [[sample dicts of one guest]] -> the result object."""
    routes = ('metadata', 'direct')
    out = {'bench': 'metadata', 'runs': len(runs), 'routes': {}}
    errors = [s for run in runs for s in run if 'error' in s]
    for route in routes:
        samples = [s for run in runs for s in run
                   if s['route'] == route and 'error' not in s]
        versions = [s['version'] for s in samples]
        out['routes'][route] = {
            'request_to_ack_ms': stats([s['ms'] for s in samples]),
            'agent_downtime_ms': stats([s['downtime_ms'] for s in samples
                                        if s['downtime_ms'] is not None]),
            'held_ms': stats([s['held_ms'] for s in samples
                              if s.get('held_ms') is not None]),
            'per_run_median_ms': [
                round(statistics.median(v), 2) if v else None
                for v in ([s['ms'] for s in run if s['route'] == route and
                           'error' not in s] for run in runs)],
            'checkpoints': len(samples),
            'committed': len(set(versions) & committed_versions),
        }
    m, d = (out['routes'][r] for r in routes)
    out['ratio_metadata_direct'] = ratio(
        (m['request_to_ack_ms'] or {}).get('median_ms'),
        (d['request_to_ack_ms'] or {}).get('median_ms'))
    out['ratio_per_run'] = [ratio(a, b) for a, b in zip(
        m['per_run_median_ms'], d['per_run_median_ms'])]
    out['errors'] = [e['route'] + ': ' + e['error'] for e in errors][:10]
    out['valid'] = bool(
        not errors and all(out['routes'][r]['checkpoints'] and
                           out['routes'][r]['committed'] ==
                           out['routes'][r]['checkpoints']
                           for r in routes))
    return out


def wait_stable(agent, image, versions, timeout=300):
    deadline = time.monotonic() + timeout
    while True:
        listed = committed(agent.client.call('list_versions',
                                             image=image)['versions'])
        states = {v['version']: v['state'] for v in listed}
        if all(states.get(v) in ('stable', 'failed') for v in versions) or \
                time.monotonic() > deadline:
            return {v for v, s in states.items() if s == 'stable'}
        time.sleep(0.5)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--runs', type=int, default=3,
                        help='guest boots (default 3)')
    parser.add_argument('--requests', type=int, default=20,
                        help='checkpoints per route per run (default 20)')
    parser.add_argument('--quiesce', default='fsfreeze',
                        choices=['none', 'fsfreeze', 'suspend', 'default'],
                        help="quiesce asked by the guest (default fsfreeze, "
                             "through the guest's qemu-ga; 'default': the "
                             "agent's)")
    parser.add_argument('--guest-image', default=guest_vm.DEFAULT_BASE_DIR)
    parser.add_argument('--workdir', default=None)
    parser.add_argument('--json', action='store_true')
    args = parser.parse_args(argv)

    guest_vm.build_image(args.guest_image)
    scratch = tempfile.mkdtemp(prefix='bm-', dir=args.workdir or '/var/tmp')
    lv = agent = relay = repo = None
    runs = []
    try:
        # Its own short temp dir: unix socket paths are short.
        lv = guest_vm.SessionLibvirt().start()
        repo = repository.Repository(
            local.LocalBackend(os.path.join(scratch, 'store')))
        raw = os.path.join(scratch, 'data.raw')
        with open(raw, 'wb') as f:
            f.truncate(64 << 20)
        subprocess.run(['mkfs.ext4', '-q', '-F', raw], check=True,
                       timeout=60)
        header, _ = repo.import_file(raw, 'data')
        os.unlink(raw)
        os.makedirs(os.path.join(scratch, 'agent'))
        agent = agents.AgentProcess(os.path.join(scratch, 'agent'),
                                    repo.backend, {
            'agent': {'libvirt_uri': lv.uri, 'quiesce': 'none',
                      'host': HOST},
            # The per-instance limit (1 checkpoint/s, burst 5) off: the
            # guest asks back to back.
            'proxy': {'host_secret': SECRET,
                      'metadata_proxy_shared_secret': META,
                      'rate': '1000', 'burst': '1000'}})
        agent.start()
        instance, project = str(uuid.uuid4()), uuid.uuid4().hex
        path = agent.client.call('attach', image='data', instance=instance,
                                 project=project)['path']
        document = {'blobcr': vendordata_answer(instance, project, SECRET,
                                                HOST)}
        relay = subprocess.Popen(
            [sys.executable, '-c', RELAY, json.dumps({
                'document': document, 'agent_port': agent.proxy_port(),
                'secret': META, 'instance': instance})],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        relay_port = int(relay.stdout.readline())
        quiesce = '' if args.quiesce == 'default' else args.quiesce
        for run in range(args.runs):
            say('run %d/%d: booting the guest' % (run + 1, args.runs))
            vmdir = os.path.join(scratch, 'vm%d' % run)
            os.makedirs(vmdir)
            vm = BenchVM(
                'bm-%d' % run, path, lv.uri, base_dir=args.guest_image,
                files={'/scenario.sh': SCENARIO % (args.requests, quiesce),
                       '/bench_loop.py': GUEST_LOOP,
                       '/usr/lib/python3/dist-packages/blobcr_guest':
                       pathlib.Path(blobcr_guest.__file__).parent},
                metadata_port=relay_port, workdir=vmdir,
                direct_port=agent.proxy_port())
            with vm:
                status = vm.wait_exit(timeout=300 + 20 * args.requests)
                console = vm.console()
            samples = [json.loads(line[4:]) for line in console.splitlines()
                       if line.startswith('LAT ')]
            if status != 0:
                say('guest exit %d; console tail:\n%s'
                    % (status, console[-3000:]))
                samples.append({'route': 'metadata',
                                'error': 'guest exit %d' % status})
            runs.append(samples)
        versions = [s['version'] for run in runs for s in run
                    if 'version' in s]
        stable = wait_stable(agent, 'data', versions)
        result = summarize(runs, stable)
        result.update(requests_per_route_per_run=args.requests,
                      quiesce=args.quiesce)
        relay.stdin.close()
        result['relayed'] = json.loads(relay.stdout.readline())['relayed']
    finally:
        if relay is not None and relay.poll() is None:
            relay.terminate()
            relay.wait(10)
        if agent is not None:
            agent.stop()
        if repo is not None:
            repo.close()
        if lv is not None:
            lv.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    print(json.dumps(result, indent=None if args.json else 2))
    return 0 if result['valid'] else 3


if __name__ == '__main__':
    sys.exit(main())
