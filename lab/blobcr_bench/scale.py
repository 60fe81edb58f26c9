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

"""``blobcr-bench scale``: M VMs on H hosts take global checkpoints, then
all restart on other hosts: lazily, lazily with shared live prefetch
hints, and after a pre-copy (the BlobCR paper's Figures 6 and 7).

Hosts are network namespaces on one bridge (blobcr_lab.hosts), each with
its own blobcr-agent (RPC server named after it, FUSE mount, state, guest
endpoint on its own address). They share one RabbitMQ and the store (the
micro Ceph cluster, forwarded onto each host's loopback).

For each M of ``--vms`` and each of ``--runs``:

1. M volumes are cloned from one base image (its first quarter: the
   system) and attached, VM j on host j mod H.
2. Each VM (scale_vm.py, a process in its host's namespace, on its
   volume's raw file) runs ``--iterations`` of CM1-like work: compute,
   rewrite its checkpoint file (1/50 of the disk) and small summaries.
   Once without checkpoints (the baseline), then with a global
   checkpoint per iteration through its host's guest endpoint (group id,
   M members). Per VM: ack time (its downtime: the rank waits for it),
   the agent's held time, slowdown against the baseline; per group: time
   from the first request until every member is stable.
3. The volumes are detached and each VM's last group version restarts
   on host j+1 mod H (never the host it ran on), ranks starting
   ``--stagger`` s apart, each reading what CM1 reads at restart (system
   runs, its checkpoint file, its summaries), in three modes:

   - ``lazy``: agents with ``[agent] restart_hints = false``;
   - ``hints``: agents with hints on: each restarting image publishes
     its first reads, the others prefetch them (mirror/hints.py);
   - ``precopy``: the new host's agent exports the whole version to a
     local file, then the VM reads that.

   Per VM: bytes its reads waited for (``fetched_by['read']``), bytes
   moved (OSD counters on Ceph: bytes the OSDs sent), restart time; the
   Ceph load (client ops/s, MiB/s) over the mode.

The run fails (exit 3) if a path did not run: no chunk prefetched by
hint, no hint crossed hosts (with H > 1), a lazy restart prefetched by
hint, a VM restarted on the host it ran on, a pre-copy moved nothing,
modes read different data, a group never completed.
"""

import argparse
import concurrent.futures
import json
import os
import random
import statistics
import subprocess
import time

from blobcr_bench import common
from blobcr_bench import scale_cinder
from blobcr_bench import scale_model
from blobcr_bench import scale_vm
from blobcr_common import auth
from blobcr_common.rpc import api as rpc_api
from blobcr_lab import agent_rpc
from blobcr_lab import agents
from blobcr_lab import ceph
from blobcr_lab import hosts as hosts_mod
from blobcr_lab import rabbitmq

SECRET = 'blobcr-scale-bench'       # every host's [proxy] host_secret
PROXY_PORT = 8789
PROJECT = 'scale-bench'
MODES = ('lazy', 'hints', 'precopy')
MIB = 1 << 20


def add_arguments(p, size):
    p.add_argument('--hosts', type=int, default=4,
                   help='hosts (network namespaces, default 4)')
    p.add_argument('--vms', default='1,2,4,8,16',
                   help='comma-separated VM counts (default 1,2,4,8,16)')
    p.add_argument('--runs', type=int, default=3)
    p.add_argument('--disk-size', type=size, default=256 << 20,
                   help='each VM\'s disk (default 256M)')
    p.add_argument('--iterations', type=int, default=3,
                   help='work iterations, a global checkpoint after each')
    p.add_argument('--compute', type=float, default=1.0,
                   help='seconds of work per iteration (default 1)')
    p.add_argument('--system-read', type=float, default=0.1,
                   help='fraction of the system quarter read at restart')
    p.add_argument('--think-ms', type=float, default=2.0,
                   help='work between two 256 KiB restart reads')
    p.add_argument('--stagger', type=float, default=0.2,
                   help='seconds between two ranks\' restarts')
    p.add_argument('--modes', nargs='+', choices=MODES, default=MODES)
    p.add_argument('--transport-url',
                   help='RabbitMQ to use (default: start a private one)')
    p.add_argument('--seed', type=int, default=42)
    p.add_argument('--cinder', action='store_true',
                   help='also the operator\'s global checkpoint: a Cinder '
                        'group snapshot of M attached volumes (starts a '
                        'Keystone and Cinder of its own)')
    p.add_argument('--capacity-seconds', type=int, default=5,
                   help='RADOS: seconds of rados bench on the data pool '
                        '(written, then read back) for the model\'s OSD '
                        'capacity (0: assume it)')
    p.add_argument('--plot', help='write a PNG of the curves here')
    p.add_argument('--from-json', metavar='FILE',
                   help='run nothing: derive the summary, goals, model '
                        'and picture again from a saved result')


class Cluster(object):
    """H hosts with their agents; the RPC client that drives them."""

    def __init__(self, args, backend, url, workdir, log):
        self.args = args
        self.backend = backend
        self.url = url
        self.log = log
        ports = hosts_mod.service_ports(
            args.ceph_conf if args.backend == 'rados' else None, url)
        self.network = hosts_mod.HostNetwork(
            args.hosts, os.path.join(workdir, 'hosts'), ports)
        self.agents = {}
        self.hints = None
        self.cinder = None          # scale_cinder.CinderPath (--cinder)
        self.api = rpc_api.AgentAPI(transport_url=url, timeout=120)

    @property
    def hosts(self):
        return self.network.hosts

    def name(self, host):
        """The host's RPC server name (unique on a shared broker)."""
        return '%s-%s' % (self.network.prefix, host.name)

    def start(self):
        self.network.start()
        self.set_hints(True)
        return self

    def set_hints(self, enabled):
        """(Re)start every agent with ``[agent] restart_hints``."""
        if self.hints == enabled:
            return
        for agent in self.agents.values():
            agent.stop()
        for host in self.hosts:
            settings = agent_rpc.rpc_settings(
                self.url, self.name(host),
                export_dir=os.path.join(host.workdir, 'exports'),
                restart_hints=str(enabled).lower())
            settings['proxy'] = {'listen': host.address,
                                 'port': str(PROXY_PORT),
                                 'host_secret': SECRET}
            # --in-flight: the store writes each agent keeps in flight.
            settings['repository'] = {
                'max_in_flight': str(self.args.in_flight)}
            agent = agents.AgentProcess(host.workdir, self.backend, settings)
            agent.args = host.command(agent.args)
            self.agents[host.name] = agent      # stopped even if not up
            agent.start()
        for host in self.hosts:
            agent_rpc.wait_rpc(self.api, self.name(host))
        self.hints = enabled

    def status(self, host):
        return self.api.status(self.name(host))

    def endpoint(self, host):
        return 'http://%s:%d' % (host.address, PROXY_PORT)

    def stop(self):
        if self.cinder is not None:
            self.cinder.stop()
        for agent in self.agents.values():
            agent.stop()
        self.api.cleanup()
        self.network.stop()


class VM(object):

    def __init__(self, index, run_host, restart_host, seed):
        self.index = index
        self.run_host = run_host
        self.restart_host = restart_host
        self.seed = seed
        self.image = None
        self.path = None
        self.instance = None
        self.version = None


def _vm_process(host, argv, token=None):
    """A rank on ``host``; ``token``: its instance's, for the host's
    guest endpoint (as blobcr-vendordata would hand it out).
    """
    env = dict(os.environ)
    if token:
        env['BLOBCR_TOKEN'] = token
    return subprocess.Popen(host.python('blobcr_bench.scale_vm', *argv),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env)


def _results(procs, timeout=900):
    out = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError('a VM process failed (%s): %s' % (
                proc.returncode, stderr.decode(errors='replace')[-2000:]))
        out.append(json.loads(stdout))
    return out


def _cinder_members(runs, key):
    """Every member's ``key`` of the runs' Cinder group snapshots."""
    return [a for r in runs if 'cinder' in r
            for a in r['cinder'].get(key, [])]


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _tail(per_run):
    """A group waits for its slowest member: the maximum over members of
    each run (``per_run``: one list of members' values per run), their
    median over runs and their maximum. None where no run has a value.
    """
    maxima = [max(v for v in values if v is not None) for values in per_run
              if any(v is not None for v in values)]
    if not maxima:
        return {'max_per_run': [], 'median_of_max': None, 'max': None}
    return {'max_per_run': maxima,
            'median_of_max': statistics.median(maxima), 'max': max(maxima)}


def make_base(repo, size, system_fraction, seed, workdir):
    """The base image (random system quarter) and the restart trace of
    system runs: disjoint runs of 1-8 chunks, in a random order.
    """
    rng = random.Random(seed)
    header = repo.create_image('scale-base', size)
    chunk = header.chunk_size
    system = header.size // 4 // chunk
    content = {i: rng.randbytes(chunk) for i in range(system)}
    version = repo.commit(header.id, content)
    runs, used = [], set()
    want = int(system * system_fraction)
    while len(used) < want:
        start = rng.randrange(system)
        run = [c for c in range(start, min(system, start +
                                           rng.randint(1, 8)))
               if c not in used]
        if run and run == list(range(run[0], run[0] + len(run))):
            used.update(run)
            runs.append([run[0] * chunk, len(run) * chunk])
    trace = os.path.join(workdir, 'system-trace.json')
    with open(trace, 'w') as f:
        json.dump(runs, f)
    return header.id, version, trace


def _dirty_bytes(size):
    where = scale_vm.layout(size)
    return where['checkpoint'][1] + len(where['summaries']) * \
        scale_vm.SUMMARY


def _cpu_times():
    """(busy, total) jiffies of this machine (all cores)."""
    with open('/proc/stat') as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]            # idle, iowait
    return sum(fields) - idle, sum(fields)


class Load(object):
    """What the shared services served between start() and stop(): OSD
    client ops and bytes (Ceph only), bytes relayed to the hosts, header
    compare-and-sets of all agents.
    """

    def __init__(self, cluster):
        self.cluster = cluster
        self.rados = cluster.args.backend == 'rados'

    def _sample(self):
        sample = {'t': time.time(), 'cpu': _cpu_times(),
                  'forwarded': self.cluster.network.forwarded()}
        if self.rados:
            sample['osd'] = ceph.osd_counters(self.cluster.args.ceph_conf)
        cas = [self.cluster.status(h)['header_cas']
               for h in self.cluster.hosts]
        sample['cas'] = {k: sum(c[k] for c in cas)
                         for k in ('writes', 'conflicts')}
        return sample

    def start(self):
        # The forwarder writes its counters every second.
        time.sleep(1.1)
        self.before = self._sample()

    def stop(self, seconds=None):
        time.sleep(1.1)
        after = self._sample()
        before = self.before
        elapsed = seconds or (after['t'] - before['t'])
        busy = after['cpu'][0] - before['cpu'][0]
        total = after['cpu'][1] - before['cpu'][1]
        load = {'seconds': round(elapsed, 3),
                'cpu_busy': round(busy / total, 3) if total else None,
                'header_cas': {k: after['cas'][k] - before['cas'][k]
                               for k in after['cas']},
                'relayed_bytes': sum(
                    v['to'] + v['from'] for v in after['forwarded'].values())
                - sum(v['to'] + v['from']
                      for v in before['forwarded'].values())}
        if self.rados:
            delta = {k: after['osd'][k] - before['osd'][k]
                     for k in after['osd']}
            load['osd'] = delta
            load['ops_per_s'] = round(delta['op'] / elapsed, 1)
            load['read_mib_s'] = round(delta['op_out_bytes'] / MIB /
                                       elapsed, 2)
            load['write_mib_s'] = round(delta['op_in_bytes'] / MIB /
                                        elapsed, 2)
        return load


def persist_rate(cluster, repo, base, size, log):
    """Bytes per second the store takes from one mirror's persister:
    ``size`` bytes written on a clone on the first host, checkpointed,
    timed from the ack until stable (the rate the group's time to
    stable is compared with).
    """
    host = cluster.hosts[0]
    name = cluster.name(host)
    image = repo.clone(base, 1, name='persist-rate').id
    path = cluster.api.attach(name, image)['path']
    rng = random.Random(0)
    fd = os.open(path, os.O_WRONLY)
    try:
        for offset in range(0, size, 1 << 20):
            os.pwrite(fd, rng.randbytes(1 << 20), offset)
        os.fsync(fd)
    finally:
        os.close(fd)
    version = cluster.api.checkpoint(name, image, quiesce='none')['version']
    acked = time.monotonic()
    state = cluster.api.wait_stable(name, image, version)
    seconds = time.monotonic() - acked
    cluster.api.detach(name, image)
    if state != 'stable':
        raise RuntimeError('the persist-rate checkpoint ended %s' % state)
    log('persist rate: %.1f MiB/s' % (size / MIB / seconds))
    return {'bytes': size, 'seconds': round(seconds, 3),
            'mib_s': round(size / MIB / seconds, 2)}


def checkpoint_phase(cluster, vms, args, label, log):
    """Baseline, then the same work with a global checkpoint per
    iteration; per-VM and per-group figures.
    """
    size = args.disk_size
    common_argv = ['run', '--size', str(size), '--iterations',
                   str(args.iterations), '--compute', str(args.compute)]

    def launch(with_group):
        procs = []
        for vm in vms:
            argv = common_argv + ['--path', vm.path, '--seed',
                                  str(vm.seed)]
            token = None
            if with_group:
                argv += ['--endpoint', cluster.endpoint(vm.run_host),
                         '--instance', vm.instance, '--group', label,
                         '--members', str(len(vms))]
                token = auth.Authenticator(
                    SECRET, host=cluster.name(vm.run_host)).token_for(
                        vm.instance, lifetime=86400)
            procs.append(_vm_process(vm.run_host, argv, token))
        return _results(procs)

    log('M=%d %s: baseline (no checkpoint)' % (len(vms), label))
    base = launch(False)
    load = Load(cluster)
    load.start()
    log('M=%d %s: with global checkpoints' % (len(vms), label))
    ckpt = launch(True)
    checkpoint_load = load.stop()
    per_vm, groups = [], {}
    for vm, b, c in zip(vms, base, ckpt):
        records = c['checkpoints']
        vm.version = records[-1]['version']
        per_vm.append({
            'vm': vm.index, 'host': vm.run_host.name,
            'baseline_s': round(b['run_s'], 3),
            'checkpointed_s': round(c['run_s'], 3),
            'slowdown': round(c['run_s'] / b['run_s'], 4),
            'ack_s': [round(r['ack_s'], 4) for r in records],
            'held_ms': [r['held_ms'] for r in records],
            'downtime_ms': [r['downtime_ms'] for r in records],
            # The agent answered busy (503) this many times before the
            # ack: its ack_s includes those waits.
            'busy_retries': [r.get('busy_retries', 0) for r in records]})
        for r in records:
            groups.setdefault(r['group'], []).append(r)
    group_stable = []
    for name, records in sorted(groups.items()):
        complete = [r.get('complete_at') for r in records]
        if None in complete or len(records) != len(vms):
            group_stable.append(None)
            continue
        group_stable.append(round(max(complete) -
                                  min(r['asked_at'] for r in records), 3))
    return {'vms': per_vm, 'group_stable_s': group_stable,
            'groups': len(groups),
            'groups_complete': sum(1 for g in group_stable
                                   if g is not None),
            'dirty_bytes_per_checkpoint': len(vms) * _dirty_bytes(size),
            'load': checkpoint_load}


def _write_once(vms, paths, args):
    """One iteration of each VM's work on ``paths`` (no checkpoint)."""
    _results([_vm_process(vm.run_host, [
        'run', '--size', str(args.disk_size), '--iterations', '1',
        '--compute', '0', '--path', path, '--seed', str(vm.seed)])
        for vm, path in zip(vms, paths)])


def _restart_argv(vm, path, args, trace, start_at):
    return ['restart', '--path', path, '--size', str(args.disk_size),
            '--trace', trace, '--start-at', '%.3f' % start_at,
            '--think-ms', str(args.think_ms), '--seed', str(vm.seed)]


def restart_lazy(cluster, repo, vms, args, trace, hints, log):
    """Clones of the VMs' last versions attached on their restart
    hosts, every rank reading at its start time.
    """
    cluster.set_hints(hints)
    heard = _hint_totals(cluster)
    clones, paths = {}, {}
    for vm in vms:
        clones[vm.index] = repo.clone(vm.image, vm.version).id
        paths[vm.index] = cluster.api.attach(
            cluster.name(vm.restart_host), clones[vm.index])['path']
    load = Load(cluster)
    load.start()
    t0 = time.time() + 1.0
    procs = []
    for k, vm in enumerate(vms):
        procs.append(_vm_process(vm.restart_host, _restart_argv(
            vm, paths[vm.index], args, trace, t0 + k * args.stagger)))
    results = _results(procs)
    mode_load = load.stop()
    per_vm = []
    for vm, r in zip(vms, results):
        stats = cluster.status(vm.restart_host)['attached'][clones[vm.index]]
        by = stats.get('fetched_by', {})
        per_vm.append({
            'vm': vm.index, 'host': vm.restart_host.name,
            'restart_s': round(r['restart_s'], 3),
            'blocking_read_bytes': by.get('read', 0),
            'fetched_bytes': stats['fetched_bytes'],
            'fetched_by': by,
            'hints_received': stats.get('hints_received', 0),
            'hints_published': stats.get('hints_published', 0),
            'hint_messages': stats.get('hint_messages', 0),
            'sha256': r['sha256']})
    after = _hint_totals(cluster)
    remote = sum(after[h][0] - heard[h][0] for h in after)
    # Messages each host took in from the others: flat in hosts when a
    # chunk index leaves one host once (mirror/hints.py).
    messages = [after[h][1] - heard[h][1] for h in sorted(after)]
    for vm in vms:
        cluster.api.detach(cluster.name(vm.restart_host), clones[vm.index],
                           discard=True)
    return {'vms': per_vm, 'load': mode_load,
            'remote_hints_received': remote,
            'hint_messages_received_per_host': messages}


def _hint_totals(cluster):
    """Per host name: (chunk indexes, messages) its agent's hub took
    in from other hosts since it started.
    """
    out = {}
    for h in cluster.hosts:
        hub = cluster.status(h).get('hints') or {}
        out[h.name] = (hub.get('remote_received', 0),
                       hub.get('remote_messages', 0))
    return out


def restart_precopy(cluster, vms, args, trace, log):
    """The new host's agent copies the whole version to a local file,
    then the rank reads that file.
    """
    load = Load(cluster)
    load.start()
    t0 = time.time() + 1.0
    results = [None] * len(vms)

    def one(k, vm):
        time.sleep(max(0.0, t0 + k * args.stagger - time.time()))
        path = os.path.join(vm.restart_host.workdir, 'exports',
                            'rank-%d.raw' % vm.index)
        started = time.time()
        cluster.api.export(cluster.name(vm.restart_host), vm.image,
                           vm.version, path, overwrite=True)
        copied = time.time() - started
        read = _results([_vm_process(vm.restart_host, _restart_argv(
            vm, path, args, trace, 0.0))])[0]
        results[k] = {'vm': vm.index, 'host': vm.restart_host.name,
                      'copy_s': round(copied, 3),
                      'restart_s': round(copied + read['restart_s'], 3),
                      'copied_bytes': os.stat(path).st_blocks * 512,
                      'sha256': read['sha256']}
        os.unlink(path)
    with concurrent.futures.ThreadPoolExecutor(len(vms)) as pool:
        for f in [pool.submit(one, k, vm) for k, vm in enumerate(vms)]:
            f.result()
    return {'vms': results, 'load': load.stop()}


def _moved_per_vm(mode, m):
    """Bytes moved from the store per VM: what the OSDs sent, else the
    agents' counters (local store).
    """
    osd = mode['load'].get('osd')
    if osd:
        return osd['op_out_bytes'] / m
    key = 'copied_bytes' if 'copied_bytes' in mode['vms'][0] else \
        'fetched_bytes'
    return statistics.mean(v[key] for v in mode['vms'])


def one_run(cluster, repo, base, m, r, args, trace, log):
    h = len(cluster.hosts)
    vms = [VM(j, cluster.hosts[j % h], cluster.hosts[(j + 1) % h],
              args.seed * 1000 + r * 100 + j) for j in range(m)]
    cluster.set_hints(True)
    label = 'job-m%d-r%d-%s' % (m, r, cluster.network.tag)
    for vm in vms:
        vm.image = repo.clone(base, 1, name='%s-rank%d' % (label, vm.index)).id
        vm.instance = '%s-vm%d' % (label, vm.index)
        vm.path = cluster.api.attach(
            cluster.name(vm.run_host), vm.image, instance=vm.instance,
            project=PROJECT)['path']
    result = {'m': m, 'run': r, 'hosts': h}
    result['checkpoint'] = checkpoint_phase(cluster, vms, args, label, log)
    if cluster.cinder is not None:
        log('M=%d run %d: Cinder group snapshot' % (m, r))
        result['cinder'] = cluster.cinder.measure(
            vms, label + '-cinder',
            lambda vms, paths: _write_once(vms, paths, args))
    for vm in vms:
        cluster.api.detach(cluster.name(vm.run_host), vm.image)
    result['restart'] = {}
    for mode in args.modes:
        log('M=%d run %d: restart, %s' % (m, r, mode))
        if mode == 'precopy':
            out = restart_precopy(cluster, vms, args, trace, log)
        else:
            out = restart_lazy(cluster, repo, vms, args, trace,
                               mode == 'hints', log)
        out['moved_bytes_per_vm'] = round(_moved_per_vm(out, m))
        result['restart'][mode] = out
    result['moved_hosts'] = all(vm.run_host is not vm.restart_host
                                for vm in vms)
    return result


def summarize(runs, args):
    """Medians per M over runs and VMs."""
    by_m = {}
    for run in runs:
        by_m.setdefault(run['m'], []).append(run)
    out = {}
    for m, rs in sorted(by_m.items()):
        vms = [v for r in rs for v in r['checkpoint']['vms']]
        s = {'ack_s': _median([a for v in vms for a in v['ack_s']]),
             'held_ms': _median([a for v in vms for a in v['held_ms']]),
             'slowdown': _median([v['slowdown'] for v in vms]),
             'group_stable_s': _median(
                 [g for r in rs for g in r['checkpoint']['group_stable_s']]),
             'dirty_bytes': rs[0]['checkpoint'][
                 'dirty_bytes_per_checkpoint'],
             'checkpoint_ops_per_s': _median(
                 [r['checkpoint']['load'].get('ops_per_s') for r in rs]),
             'cinder_group_snapshot_s': _median(
                 [r['cinder']['seconds'] for r in rs if 'cinder' in r]),
             'cinder_group_hold_ms': _median(
                 [r['cinder']['group_hold_ms'] for r in rs
                  if 'cinder' in r]),
             'cinder_member_ack_ms': _median(
                 _cinder_members(rs, 'member_ack_ms')),
             'cinder_member_served_ms': _median(
                 _cinder_members(rs, 'member_served_ms')),
             'cinder_member_commit_ms': _median(
                 _cinder_members(rs, 'member_commit_ms')),
             'checkpoint_cpu_busy': _median(
                 [r['checkpoint']['load'].get('cpu_busy') for r in rs]),
             # Beside each median, the slowest member's figure per run
             # (what the group waited for) and the median of those.
             'tails': {
                 'ack_s': _tail([[a for v in r['checkpoint']['vms']
                                  for a in v['ack_s']] for r in rs]),
                 'group_stable_s': _tail(
                     [r['checkpoint']['group_stable_s'] for r in rs]),
                 'cinder_group_hold_ms': _tail(
                     [[r['cinder']['group_hold_ms']] for r in rs
                      if 'cinder' in r]),
                 'cinder_member_ack_ms': _tail(
                     [_cinder_members([r], 'member_ack_ms') for r in rs])},
             'restart': {}}
        for mode in args.modes:
            modes = [r['restart'][mode] for r in rs]
            mvms = [v for x in modes for v in x['vms']]
            s['restart'][mode] = {
                'restart_s': _median([v['restart_s'] for v in mvms]),
                'restart_s_tail': _tail([[v['restart_s'] for v in x['vms']]
                                         for x in modes]),
                'blocking_read_bytes_tail': _tail(
                    [[v.get('blocking_read_bytes') for v in x['vms']]
                     for x in modes]),
                'blocking_read_bytes': _median(
                    [v.get('blocking_read_bytes') for v in mvms]),
                'moved_bytes_per_vm': _median(
                    [x['moved_bytes_per_vm'] for x in modes]),
                'hint_messages_received_per_host': _tail(
                    [x.get('hint_messages_received_per_host') or [None]
                     for x in modes]),
                'ops_per_s': _median([x['load'].get('ops_per_s')
                                      for x in modes]),
                'read_mib_s': _median([x['load'].get('read_mib_s')
                                       for x in modes]),
                'cpu_busy': _median([x['load'].get('cpu_busy')
                                     for x in modes])}
        out[m] = s
    return out


def goals(summary, args, rate):
    ms = sorted(summary)
    first, last = summary[ms[0]], summary[ms[-1]]
    out = {'largest_m': ms[-1]}
    if first['ack_s'] and first['held_ms']:
        out['ack_growth'] = common.ratio(last['ack_s'], first['ack_s'])
        out['held_growth'] = common.ratio(last['held_ms'], first['held_ms'])
        out['downtime_flat'] = max(out['ack_growth'],
                                   out['held_growth']) <= 1.5
    if rate and last['group_stable_s'] and first['group_stable_s']:
        # Growth from the smallest M at most that of the dirty bytes at
        # the store's persist rate, measured in the same run.
        out['persist_rate_mib_s'] = rate['mib_s']
        out['expected_stable_s'] = round(
            first['group_stable_s'] + (last['dirty_bytes'] -
                                       first['dirty_bytes']) /
            MIB / rate['mib_s'], 3)
        out['stable_vs_expected'] = common.ratio(last['group_stable_s'],
                                                 out['expected_stable_s'])
        out['stable_within_rate'] = out['stable_vs_expected'] <= 1.0
    r = last['restart']
    if 'hints' in r and 'lazy' in r and r['lazy']['blocking_read_bytes']:
        out['blocking_hints_vs_lazy'] = common.ratio(
            r['hints']['blocking_read_bytes'],
            r['lazy']['blocking_read_bytes'])
    if 'hints' in r and 'precopy' in r:
        out['moved_hints_vs_precopy'] = common.ratio(
            r['hints']['moved_bytes_per_vm'],
            r['precopy']['moved_bytes_per_vm'])
        out['restart_hints_vs_precopy'] = common.ratio(
            r['hints']['restart_s'], r['precopy']['restart_s'])
    if {'blocking_hints_vs_lazy', 'moved_hints_vs_precopy',
            'restart_hints_vs_precopy'} <= set(out):
        out['restart_met'] = (out['blocking_hints_vs_lazy'] <= 0.5 and
                              out['moved_hints_vs_precopy'] <= 1 / 3 and
                              out['restart_hints_vs_precopy'] <= 0.5)
    return out


def checks_of(runs, args):
    """Per run (the smallest run's count, not a sum over runs: a run in
    which a path did not run fails the result). Hints need another VM
    ahead: they are required of the runs with M > 1.
    """
    checks = common.Checks()
    modes = [r['restart'] for r in runs]
    shared = [r['restart'] for r in runs if r['m'] > 1]
    checks.require('complete group checkpoints per run (min)',
                   min(r['checkpoint']['groups_complete'] for r in runs),
                   'every global checkpoint became stable')
    checks.require_true(
        'every group complete',
        all(r['checkpoint']['groups_complete'] == r['checkpoint']['groups']
            for r in runs), 'no global checkpoint was left incomplete')
    if args.cinder:
        checks.require_true('Cinder group snapshots of every member', all(
            r['cinder']['members'] == r['m'] for r in runs),
            'each member has its version of the group snapshot')
    checks.require_true(
        'VMs restarted on other hosts', all(r['moved_hosts'] for r in runs),
        'no VM restarted on the host it ran on (needs --hosts >= 2)')
    if 'lazy' in args.modes:
        checks.require('lazy demand fetches per run (min)', min(
            sum(v['blocking_read_bytes'] for v in m['lazy']['vms'])
            for m in modes), 'lazy restarts fetched on read')
        checks.require_true('no hint in lazy mode', not any(
            v['fetched_by'].get('hint') for m in modes
            for v in m['lazy']['vms']), 'lazy agents had hints off')
    if 'hints' in args.modes and shared:
        checks.require('chunks prefetched by hint per run with M > 1 (min)',
                       min(sum(v['fetched_by'].get('hint', 0)
                               for v in m['hints']['vms']) for m in shared),
                       'hints were followed')
        if args.hosts > 1:
            checks.require(
                'hints received from other hosts per run with M > 1 (min)',
                min(m['hints']['remote_hints_received'] for m in shared),
                'hints crossed hosts through RPC casts')
    if 'precopy' in args.modes:
        checks.require('pre-copied bytes per run (min)', min(
            sum(v['copied_bytes'] for v in m['precopy']['vms'])
            for m in modes), 'the pre-copy copied the versions')
    same = True
    for m in modes:
        digests = [[v['sha256'] for v in m[mode]['vms']]
                   for mode in args.modes]
        same = same and all(d == digests[0] for d in digests)
    checks.require_true('same data in every mode', same,
                        'every mode read the same bytes')
    return checks


def run(args, log, open_repository):
    if args.from_json:
        return rederive(args.from_json, args.plot)
    ms = sorted({int(x) for x in args.vms.split(',') if x.strip()})
    if not ms or ms[0] < 1:
        raise SystemExit('--vms: positive counts, such as 1,2,4')
    if args.hosts < 2:
        raise SystemExit('--hosts: at least 2 (VMs restart elsewhere)')
    broker = None if args.transport_url else \
        rabbitmq.private_broker(args.workdir, log)
    url = args.transport_url or broker.url
    repo = open_repository(args, args.workdir)
    cluster = None
    runs = []
    cas_s = rate = capacity = None
    try:
        cluster = Cluster(args, repo.backend, url, args.workdir, log)
        cluster.start()
        if args.cinder:
            log('starting Keystone and Cinder')
            cluster.cinder = scale_cinder.CinderPath(
                cluster, args.workdir).start()
        base, _, trace = make_base(repo, args.disk_size, args.system_read,
                                   args.seed, args.workdir)
        cas_s = scale_model.measure_cas(repo)
        if args.backend == 'rados' and args.capacity_seconds > 0:
            capacity = scale_model.measure_capacity(
                args, args.capacity_seconds)
            log('capacity of the data pool: %s' % capacity)
        rate = persist_rate(cluster, repo, base, min(args.disk_size // 2,
                                                     64 * MIB), log)
        log('%d hosts up; base image %s' % (args.hosts, base))
        for r in range(args.runs):
            for m in ms:
                runs.append(one_run(cluster, repo, base, m, r, args, trace,
                                    log))
    finally:
        if cluster is not None:
            cluster.stop()
        repo.close()
        if broker is not None:
            broker.stop()
    setup = {
        'hosts': args.hosts, 'vms': ms, 'runs': args.runs,
        'backend': args.backend, 'disk_size': args.disk_size,
        'iterations': args.iterations, 'compute_s': args.compute,
        'think_ms': args.think_ms, 'stagger_s': args.stagger,
        'system_read': args.system_read, 'modes': list(args.modes),
        'cinder': args.cinder, 'in_flight': args.in_flight,
        'hosts_are': 'network namespaces on one bridge; Ceph and RabbitMQ '
                     'forwarded onto each host\'s loopback',
        'machine_cores': os.cpu_count()}
    return derive(setup, runs, rate, cas_s, args.plot, capacity)


def derive(setup, runs, rate, cas_s, plot_path=None, capacity=None):
    """The summary, goals, model, checks (and picture) of ``runs``."""
    args = argparse.Namespace(**dict({'cinder': False}, **setup))
    summary = summarize(runs, args)
    result = {'setup': setup, 'persist_rate': rate, 'runs': runs,
              'summary': summary, 'goals': goals(summary, args, rate),
              'model': scale_model.fit(runs, summary, args, cas_s,
                                       capacity)}
    result['checks'] = checks_of(runs, args).as_list()
    if plot_path:
        plot(result, plot_path)
    return result


def rederive(path, plot_path=None):
    """:func:`derive` again from a saved result (``--from-json``): the
    same runs, this release's summary, model and picture.
    """
    with open(path) as f:
        saved = json.load(f)
    return derive(saved['setup'], saved['runs'], saved.get('persist_rate'),
                  saved['model']['measured'].get('cas_s'), plot_path,
                  saved['model'].get('capacity'))


def plot(result, path):
    import matplotlib
    matplotlib.use('Agg')
    from matplotlib import pyplot
    summary = result['summary']
    ms = sorted(summary)
    fig, axes = pyplot.subplots(2, 3, figsize=(15, 8))
    ax = axes[0][0]
    ax.plot(ms, [summary[m]['ack_s'] * 1000 for m in ms], 'o-',
            label='ack (downtime)')
    ax.plot(ms, [summary[m]['held_ms'] for m in ms], 's-', label='held')
    if summary[ms[0]].get('cinder_group_hold_ms') is not None:
        ax.plot(ms, [summary[m]['cinder_group_hold_ms'] for m in ms],
                'd-', label='Cinder group snapshot: hold')
    ax.set_title('per-VM checkpoint downtime (ms)')
    ax = axes[0][1]
    ax.plot(ms, [summary[m]['slowdown'] for m in ms], 'o-')
    ax.set_title('application slowdown (x baseline)')
    ax = axes[0][2]
    ax.plot(ms, [summary[m]['group_stable_s'] for m in ms], 'o-',
            label='measured')
    rate = result['goals'].get('persist_rate_mib_s')
    if rate:
        first = summary[ms[0]]
        ax.plot(ms, [first['group_stable_s'] +
                     (summary[m]['dirty_bytes'] - first['dirty_bytes']) /
                     MIB / rate for m in ms],
                '--', label='growth of dirty bytes / persist rate')
    if summary[ms[0]].get('cinder_group_snapshot_s') is not None:
        ax.plot(ms, [summary[m]['cinder_group_snapshot_s'] for m in ms],
                'd-', label='Cinder group snapshot to available')
    ax.set_title('time to group-stable (s)')
    for k, (key, title, scale) in enumerate((
            ('restart_s', 'restart time per VM (s)', 1),
            ('blocking_read_bytes', 'blocking-read MiB per VM', MIB),
            ('moved_bytes_per_vm', 'MiB moved per VM', MIB))):
        ax = axes[1][k]
        for mode in result['setup']['modes']:
            ys = [summary[m]['restart'][mode][key] for m in ms]
            if any(y is None for y in ys):
                continue
            line, = ax.plot(ms, [y / scale for y in ys], 'o-', label=mode)
            # The slowest VM, where the group restart ends.
            tails = [summary[m]['restart'][mode].get(key + '_tail')
                     for m in ms]
            if all(t and t.get('median_of_max') is not None for t in tails):
                ax.plot(ms, [t['median_of_max'] / scale for t in tails],
                        'v--', color=line.get_color(),
                        label=mode + ' (slowest VM)')
        ax.set_title(title)
    for row in axes:
        for ax in row:
            ax.set_xlabel('VMs (M)')
            ax.set_xscale('log', base=2)
            ax.grid(alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend()
    setup = result['setup']
    fig.suptitle('blobcr-bench scale: %d hosts, %s store, medians of %d '
                 'runs (dashed: the slowest member)'
                 % (setup['hosts'], setup['backend'], setup['runs']))
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    pyplot.close(fig)
