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

"""The process that runs the model walks of tests/cinder_model.py: real
blobcr-agents (a storage agent and two compute agents on one store,
RPC on the given RabbitMQ) and the Cinder driver in this process.

    python -m tests.cinder_model_run --transport-url URL --workdir DIR
        [--seed S] [--seeds N] [--steps N] [--hours H]
        [--ceph-conf FILE]      # the micro Ceph cluster, else local
        [--pid-namespaces ROLES] [--protect-interval S]
        [--scenario NAME]       # a directed one (cinder_model_overlap)

Prints a line per walk (its seed and the command that replays it), then
``model walks: ...`` and ``MODEL-SUMMARY {json}``; exits 1 at the first
walk that finds a difference from the model.
"""

import argparse
import json
import os
import random
import signal
import socket
import sys
import threading
import time
import traceback
import uuid

from blobcr_agent.repository.backends import local
from blobcr_agent.repository import repository
from blobcr_common.rpc import api as rpc_api
from blobcr_lab import agent_rpc
from blobcr_lab import agents
from tests import cinder_model
from tests import cinder_model_overlap

COMPUTE = ('compute-a', 'compute-b')


def _backend(args):
    if not args.ceph_conf:
        return local.LocalBackend(os.path.join(args.workdir, 'store'))
    from blobcr_agent.repository.backends import rados
    return rados.RadosBackend(args.ceph_conf, 'blobcr-data', 'blobcr-meta',
                              namespace='model-' + uuid.uuid4().hex,
                              connect_timeout=10, op_timeout=60)


def _driver(group, storage, url):
    from cinder import objects
    from cinder.volume import configuration
    from oslo_config import cfg

    from blobcr_cinder import driver as driver_mod
    from blobcr_cinder import options
    objects.register_all()
    conf = configuration.Configuration(options.blobcr_opts,
                                       config_group=group)
    cfg.CONF.set_override('blobcr_agent_host', storage, group=group)
    cfg.CONF.set_override('blobcr_rpc_timeout', 60, group=group)
    cfg.CONF.set_override('blobcr_snapshot_timeout', 300, group=group)
    # Probes shorter than the defaults (10 s, then 25 s): the walk
    # pauses agents for longer than both, many times.
    cfg.CONF.set_override('blobcr_alive_probe_timeout', 1, group=group)
    cfg.CONF.set_override('blobcr_retry_probe_timeout', 2, group=group)
    driver = driver_mod.BlobCRDriver(configuration=conf,
                                     host='model@%s' % group)
    driver.api = rpc_api.AgentAPI(transport_url=url, timeout=60)
    return driver


class World(object):
    """The agents, the driver and a repository to read versions back."""

    def __init__(self, args):
        self.url = args.transport_url
        self.workdir = args.workdir
        self.backend = _backend(args)
        self.api = rpc_api.AgentAPI(transport_url=self.url, timeout=60)
        self.agents = {}
        self.names = {}
        # In PID namespaces of their own (as in containers), where asked:
        # their GC and take-overs judge writers they cannot see.
        self.namespaced = set(args.pid_namespaces.split(',')) - {''}
        self.protect_interval = args.protect_interval
        # The hosts whose compute service Nova reports down (the walk's
        # answer to os-services: no Nova runs here).
        self.nova_down = set()
        # {host: [[stopped at, resumed at or None, Event]]}
        self.paused = {}
        self.killed_holders = set()
        self.storage = self._start('storage')
        self.compute = {self._start(role): None for role in COMPUTE}
        self.repo = repository.Repository(self.backend,
                                          chunk_size=cinder_model.CHUNK)
        self.driver = _driver('blobcr-model-%s' % self.storage[-6:],
                              self.storage, self.url)

    def _start(self, role):
        host = self.names.setdefault(role, agent_rpc.host_name(role))
        workdir = os.path.join(self.workdir, role)
        os.makedirs(workdir, exist_ok=True)
        # libvirt's test driver: no domain uses a mirror file, so no
        # guest is running during a handoff (a live migration's switch).
        settings = agent_rpc.rpc_settings(
            self.url, host, libvirt_uri='test:///default',
            handoff_timeout='60')
        settings['repository'] = {'chunk_size': str(cinder_model.CHUNK)}
        settings['agent']['protect_interval'] = str(self.protect_interval)
        self.agents[host] = agents.AgentProcess(
            workdir, self.backend, settings,
            pid_namespace=role in self.namespaced).start()
        agent_rpc.wait_rpc(self.api, host)
        return host

    def restart(self, host):
        """SIGKILL an agent and start it again."""
        agent = self.agents[host]
        # As the store's GC lease names it (gc.lease_holder_name): a
        # collection it was running keeps the lease until it expires.
        self.killed_holders.add('%s:%d' % (
            socket.gethostname(), 1 if agent.pid_namespace else agent.pid))
        agent.kill()
        self._start(next(r for r, h in self.names.items() if h == host))

    def path(self, host, path):
        """A file of ``host``'s mirror as the walk opens it."""
        return self.agents[host].path(path)

    def send(self, host, signum):
        self.agents[host].send_signal(signum)
        if signum == signal.SIGCONT:
            self._resumed(host)

    def pause(self, host, seconds):
        """SIGSTOP ``host``'s agent, and SIGCONT after ``seconds`` (None:
        left to the caller); an Event set once it runs again.

        Never while it holds a header lock of the local store: that
        store serialises compare-and-sets with flocks, and a stopped
        holder would stop every agent (the local store is one host's;
        a hung holder is a hung host. RADOS has no such lock).
        """
        resumed = threading.Event()
        for _ in range(1000):
            self.agents[host].send_signal(signal.SIGSTOP)
            if not self._holds_header_lock(self.agents[host].pid):
                break
            self.agents[host].send_signal(signal.SIGCONT)
            time.sleep(0.002)
        else:
            raise RuntimeError('%s always holds a header lock' % host)
        self.paused.setdefault(host, []).append(
            [time.monotonic(), None, resumed])
        if seconds is not None:
            threading.Timer(seconds, self.send,
                            (host, signal.SIGCONT)).start()
        return resumed

    def _resumed(self, host):
        for window in self.paused.get(host, []):
            if window[1] is None:
                window[1] = time.monotonic()
                window[2].set()

    def paused_during(self, host, start, end):
        """Whether ``host``'s agent was stopped at some time between
        ``start`` and ``end`` (monotonic); waits until it runs again.
        """
        hit = False
        for since, until, resumed in list(self.paused.get(host, [])):
            if since < end and (until is None or until > start):
                resumed.wait()
                hit = True
        return hit

    def _holds_header_lock(self, pid):
        if self.backend.name != 'local' or pid is None:
            return False
        locks = os.path.join(self.backend.root, 'lock')
        headers = {os.stat(os.path.join(locks, name)).st_ino
                   for name in os.listdir(locks)
                   if not name.startswith('lease.')}
        with open('/proc/locks') as f:
            for line in f:
                fields = line.split()
                if fields[1] == 'FLOCK' and fields[4] == str(pid) and \
                        int(fields[5].rsplit(':', 1)[1]) in headers:
                    return True
        return False

    def close(self):
        self.driver.api.cleanup()
        self.api.cleanup()
        agents.stop_all(list(self.agents.values()))
        self.repo.close()
        self.backend.close()


def clean_up(walk):
    """Detach and delete what the walk made, then GC: the store keeps
    nothing the walk made, and GC runs through.
    """
    for volume in walk.volumes:
        if volume.host:
            walk.terminate(volume, {'host': volume.host})
            volume.detach_record()
    walk.verify_all()
    for snapshot in list(walk.snapshots):
        walk.driver.delete_snapshot(snapshot)
        walk.snapshots.remove(snapshot)
    for volume in list(walk.volumes):
        walk.driver.delete_volume(volume)
        walk.volumes.remove(volume)
    walk.collect()


def run(args, world):
    current = {}
    cinder_model.answer_records(lambda: current['walk'])
    from blobcr_cinder import compute_hosts
    compute_hosts.nova_says_down = lambda host: (
        'the walk reports %s down' % host if host in world.nova_down
        else None)
    deadline = time.monotonic() + args.hours * 3600
    counts, steps, seed = {}, 0, args.seed
    walks = histories = overlapped = 0
    if args.scenario:
        walk = current['walk'] = cinder_model.Walk(seed, world)
        cinder_model_overlap.SCENARIOS[args.scenario](walk)
        clean_up(walk)
        print('MODEL-SUMMARY %s' % json.dumps(
            {'scenario': args.scenario, 'counts': walk.counts}), flush=True)
        return
    while walks < args.seeds or time.monotonic() < deadline:
        print('model walk: seed %d, %d steps (replay: BLOBCR_MODEL_SEED=%d '
              'BLOBCR_MODEL_SEEDS=1 BLOBCR_MODEL_STEPS=%d)'
              % (seed, args.steps, seed, args.steps), flush=True)
        walk = current['walk'] = cinder_model.Walk(seed, world)
        walk.run(args.steps)
        try:
            clean_up(walk)
        except Exception as e:
            raise cinder_model.ModelError(
                'seed %d, clean-up after the walk: %s: %s\nlast steps: %s'
                % (seed, type(e).__name__, e,
                   ' '.join(walk.history[-25:]))) from e
        for name, n in walk.counts.items():
            counts[name] = counts.get(name, 0) + n
        steps += walk.steps
        histories += len(walk.overlaps)
        overlapped += sum(log.overlapping() for log in walk.overlaps)
        walks += 1
        seed += 1
    print('model walks: %d seeds from %d, %d steps, %d histories checked '
          '(%d pairs of requests in flight together): %s'
          % (walks, args.seed, steps, histories, overlapped,
             ', '.join('%s %d' % kv for kv in sorted(counts.items()))))
    print('MODEL-SUMMARY %s' % json.dumps(
        {'seeds': walks, 'first': args.seed, 'steps': steps,
         'histories': histories, 'overlapped': overlapped,
         'counts': counts}), flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--transport-url', required=True)
    parser.add_argument('--workdir', required=True)
    parser.add_argument('--seed', type=int,
                        default=random.SystemRandom().randrange(1 << 31))
    parser.add_argument('--seeds', type=int, default=4)
    parser.add_argument('--steps', type=int, default=120)
    parser.add_argument('--hours', type=float, default=0)
    parser.add_argument('--ceph-conf')
    parser.add_argument('--pid-namespaces', default='storage,compute-b',
                        help='agents (by role) in PID namespaces of their '
                             'own; empty: none')
    parser.add_argument('--scenario',
                        choices=sorted(cinder_model_overlap.SCENARIOS),
                        help='one directed scenario instead of walks')
    parser.add_argument('--protect-interval', type=int, default=3,
                        help='[agent] protect_interval of the agents (s)')
    args = parser.parse_args(argv)
    world = World(args)
    try:
        run(args, world)
    except cinder_model.ModelError as e:
        print('MODEL-FAILED %s' % e, flush=True)
        traceback.print_exc(file=sys.stdout)
        return 1
    finally:
        world.close()
    return 0


if __name__ == '__main__':
    sys.exit(main())
