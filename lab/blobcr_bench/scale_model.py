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

"""``blobcr-bench scale``'s model: from what one machine measured to
1,000 hosts, on paper.

Fitted from the runs (per VM, per global checkpoint or restart):

* Ceph client write ops and bytes of a checkpoint, read ops and bytes of
  a restart with hints (OSD perf counters);
* header compare-and-sets and the conflicts among them, against M (the
  group's index record is one object every member updates);
* one compare-and-set's latency (measured on the same store);
* hint messages a host takes in from the others during a restart
  (each chunk index leaves one host once, and every host hears it);
* with ``--cinder``, how much longer a Cinder group snapshot holds its
  members per member (its phases go to every host at once, at most
  GROUP_PARALLEL calls in flight: past that many hosts a phase is
  several rounds of calls).

Assumptions (in ``ASSUMPTIONS``, printed with the figures): one VM per
host; OSDs are added with hosts (``hosts_per_osd``), each serving
``osd_ops_per_s`` and ``osd_mib_s`` (data spreads over them by CRUSH,
so this part scales out); one RabbitMQ node delivers
``broker_deliveries_per_s`` messages; the group index is one object, so
its compare-and-sets run one after another, each ``cas`` long, plus
every conflict's retry.

What the run measured replaces two of them: ``rados bench`` on the data
pool (chunk-sized objects, written then read back) gives the cluster's
ops and MiB per second, divided by its OSDs (``capacity``). On one
machine the OSDs share its cores with everything else: that capacity is
the CPU's, and taints every data figure projected from it.

Before projecting, the model is checked (:func:`validate`): each group
tail (the slowest member's figure, median over runs) is fitted on the
group sizes up to ``FIT_UP_TO`` and predicts the largest size run;
``within`` says whether each prediction is within ``TOLERANCE`` of what
was measured. The fit is a queue's: ``a + b M / (1 - rho)``, with rho
the CPU utilization measured in that phase at each size (every host
here shares one machine's cores), or ``a + b M`` where rho was not
measured; both are in the JSON. The projection is marked ``validated``
only if every tail is within.
"""

import math
import statistics
import time

from blobcr_agent.repository import records
from blobcr_bench import persist
from blobcr_lab import ceph

ASSUMPTIONS = {
    'hosts_per_osd': 4,
    'osd_ops_per_s': 5000,
    'osd_mib_s': 200,
    'broker_deliveries_per_s': 20000,
    'sizes': [16, 64, 256, 1000],
}
FIT_UP_TO = 8
TOLERANCE = 0.3
# The group tails validated: (name, where in a summary entry, where the
# machine's CPU utilization during that phase is; None: not measured).
TAILS = (('checkpoint_ack_s', ('tails', 'ack_s'),
          ('checkpoint_cpu_busy',)),
         ('group_stable_s', ('tails', 'group_stable_s'),
          ('checkpoint_cpu_busy',)),
         ('cinder_group_hold_ms', ('tails', 'cinder_group_hold_ms'), None),
         ('restart_lazy_s', ('restart', 'lazy', 'restart_s_tail'),
          ('restart', 'lazy', 'cpu_busy')),
         ('restart_hints_s', ('restart', 'hints', 'restart_s_tail'),
          ('restart', 'hints', 'cpu_busy')))
# Utilization counted at most this (a queue's wait grows as 1/(1-rho)).
RHO_MAX = 0.95


class _Counter(object):

    def __init__(self, data):
        self.n = int(data or b'0')

    def to_bytes(self):
        return str(self.n).encode()


def measure_cas(repo, n=20):
    """Median seconds of one compare-and-set of a record on ``repo``
    (uncontended).
    """
    name = 'bench.cas-%d' % time.time_ns()
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()

        def bump(c):
            c.n += 1
        repo.update_record(name, _Counter, bump, 'bench record')
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def measure_capacity(args, seconds=5):
    """The data pool's capacity, measured (``rados bench``, chunk-sized
    objects, ``--in-flight`` at once): ops and MiB per second written,
    then read back, and the OSDs that served them.
    """
    capacity = persist.rados_bench(args, seconds, read_back=True)
    capacity['osds'] = len(ceph.osd_ids(args.ceph_conf))
    capacity['seconds'] = seconds
    capacity['object_bytes'] = persist.CHUNK
    return capacity


def _loglog_slope(points):
    """Least-squares slope of log(y) on log(x) (the growth exponent)."""
    pts = [(math.log(x), math.log(y)) for x, y in points if x > 0 and y > 0]
    if len(pts) < 2:
        return None
    mx = statistics.mean(p[0] for p in pts)
    my = statistics.mean(p[1] for p in pts)
    den = sum((p[0] - mx) ** 2 for p in pts)
    if not den:
        return None
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / den


def _slope(points):
    """Least-squares slope of y on x."""
    if len({x for x, _ in points}) < 2:
        return None
    mx = statistics.mean(x for x, _ in points)
    my = statistics.mean(y for _, y in points)
    return sum((x - mx) * (y - my) for x, y in points) / \
        sum((x - mx) ** 2 for x, _ in points)


def _per_vm(runs, get):
    values = [v for v in (get(r) for r in runs) if v is not None]
    return statistics.median(values) if values else None


def _tail_at(entry, path):
    for key in path:
        entry = (entry or {}).get(key)
    return (entry or {}).get('median_of_max')


def _value_at(entry, path):
    for key in path or ():
        entry = (entry or {}).get(key) if isinstance(entry, dict) else None
    return entry if isinstance(entry, (int, float)) else None


def _line(points):
    """``(a, b)`` of the least-squares line through ``points``."""
    b = _slope(points)
    a = statistics.mean(y for _, y in points) - b * statistics.mean(
        x for x, _ in points)
    return a, b


def _check(points, x_top, measured):
    a, b = _line(points)
    predicted = a + b * x_top
    error = abs(predicted - measured) / measured if measured else None
    return {'intercept': round(a, 4), 'per_member': round(b, 5),
            'predicted': round(predicted, 4),
            'error': None if error is None else round(error, 3),
            'within': error is not None and error <= TOLERANCE}


def validate(summary):
    """Each group tail fitted on the sizes up to FIT_UP_TO and checked
    against the largest size run (see the module's doc), two ways:

    * ``size_only``: ``a + b M``;
    * ``queueing`` (the model's, where the phase's CPU utilization rho
      was measured): ``a + b M / (1 - rho)``, M members' work queued on
      the cores every host here shares, rho as measured at each size,
      the largest one's included. It predicts the tail from the group's
      size and the machine's load, not from the size alone.
    """
    sizes = sorted(int(m) for m in summary)
    fit_on = [m for m in sizes if m <= FIT_UP_TO]
    out = {'fit_on': fit_on, 'check_at': None, 'tolerance': TOLERANCE,
           'tails': {}}
    if len(fit_on) < 2 or sizes[-1] <= FIT_UP_TO:
        out['why_not'] = ('needs at least two group sizes up to %d and one '
                          'above' % FIT_UP_TO)
        return out
    top = sizes[-1]
    out['check_at'] = top

    def entry(m):
        return summary.get(m, summary.get(str(m)))
    for name, path, busy_path in TAILS:
        points = [(m, _tail_at(entry(m), path)) for m in fit_on]
        points = [(m, y) for m, y in points if y is not None]
        measured = _tail_at(entry(top), path)
        if len(points) < 2 or measured is None:
            continue
        size_only = _check(points, top, measured)
        tail = dict(size_only, fitted=dict(points), measured=measured,
                    size_only=size_only, model='size_only')
        rho = {m: _value_at(entry(m), busy_path) for m in fit_on + [top]}
        if all(rho[m] is not None for m, _ in points) and \
                rho[top] is not None:
            def x(m):
                return m / (1 - min(rho[m], RHO_MAX))
            queueing = _check([(x(m), y) for m, y in points], x(top),
                              measured)
            queueing['cpu_busy'] = {m: rho[m] for m in rho}
            tail.update(queueing, queueing=queueing, model='queueing')
        out['tails'][name] = tail
    out['all_within'] = bool(out['tails']) and all(
        t['within'] for t in out['tails'].values())
    return out


def fit(runs, summary, args, cas_s=None, capacity=None):
    checkpoints = args.iterations
    measured = {'cas_s': cas_s}
    assumptions = dict(ASSUMPTIONS)
    if capacity and capacity.get('osds'):
        # Measured in the same run, per OSD (module doc: the CPU's).
        assumptions['osd_ops_per_s'] = round(
            capacity['write_ops_per_s'] / capacity['osds'], 1)
        assumptions['osd_mib_s'] = round(
            capacity['write_mib_s'] / capacity['osds'], 2)
        assumptions['from_capacity'] = True

    def ck(key):
        return lambda r: (r['checkpoint']['load'].get('osd') or {}).get(
            key, 0) / (r['m'] * checkpoints) or None
    measured['checkpoint_write_ops_per_vm'] = _per_vm(runs, ck('op_w'))
    measured['checkpoint_write_bytes_per_vm'] = _per_vm(
        runs, ck('op_in_bytes'))
    measured['header_cas_per_vm'] = _per_vm(
        runs, lambda r: r['checkpoint']['load']['header_cas']['writes'] /
        (r['m'] * checkpoints))
    conflicts = {}
    for r in runs:
        conflicts.setdefault(r['m'], []).append(
            r['checkpoint']['load']['header_cas']['conflicts'] / checkpoints)
    conflict_points = [(m, statistics.median(v))
                       for m, v in sorted(conflicts.items())]
    measured['cas_conflicts_per_checkpoint'] = dict(conflict_points)
    measured['cas_conflict_growth_exponent'] = _loglog_slope(
        conflict_points)
    hinted = [r['restart']['hints'] for r in runs
              if 'hints' in r['restart']]
    if hinted:
        measured['restart_read_ops_per_vm'] = _per_vm(
            [h for h in hinted if h['load'].get('osd')],
            lambda h: h['load']['osd']['op_r'] / len(h['vms']))
        measured['restart_read_bytes_per_vm'] = statistics.median(
            h['moved_bytes_per_vm'] for h in hinted)
        measured['hint_messages_per_vm'] = statistics.mean(
            v.get('hint_messages', 0) for h in hinted for v in h['vms'])
        heard = [n for h in hinted
                 for n in h.get('hint_messages_received_per_host') or ()]
        if heard:
            measured['hint_messages_per_host'] = statistics.median(heard)
        measured['restart_s'] = statistics.median(
            v['restart_s'] for h in hinted for v in h['vms'])
    holds = [(r['m'], r['cinder']['group_hold_ms']) for r in runs
             if r.get('cinder', {}).get('group_hold_ms') is not None]
    if holds:
        # The driver holds every member, then checkpoints them one
        # after another: the hold grows with each member's RPC.
        measured['cinder_hold_ms_per_member'] = _slope(holds)
    validation = validate(summary)
    validated = validation.get('all_within', False)
    out = {'measured': measured, 'assumptions': assumptions,
           'capacity': capacity, 'validation': validation,
           'validated': validated, 'at': []}
    if validated:
        out['at'] = [project(n, measured, assumptions)
                     for n in assumptions['sizes']]
    else:
        out['projection_withheld'] = (
            'the fit on small groups did not predict the largest group '
            'within %d%% (validation)' % (TOLERANCE * 100))
    return out


def project(n, m, a=None):
    """Seconds each shared part needs for one global checkpoint and one
    restart of ``n`` VMs on ``n`` hosts; the largest is the bottleneck.
    ``a``: the assumptions (default ASSUMPTIONS).
    """
    a = a or ASSUMPTIONS
    osds = max(3, math.ceil(n / a['hosts_per_osd']))
    out = {'vms': n, 'hosts': n, 'osds': osds}
    parts = {}
    if m.get('checkpoint_write_bytes_per_vm'):
        parts['checkpoint_data_s'] = max(
            n * m['checkpoint_write_ops_per_vm'] /
            (osds * a['osd_ops_per_s']),
            n * m['checkpoint_write_bytes_per_vm'] / (1 << 20) /
            (osds * a['osd_mib_s']))
    if m.get('cas_s'):
        growth = m.get('cas_conflict_growth_exponent') or 0.0
        per = m.get('cas_conflicts_per_checkpoint') or {}
        top = max(per) if per else None
        conflicts = 0.0
        if top and per[top]:
            conflicts = per[top] * (n / top) ** max(growth, 1.0)
        # One object: every member's update, and every retry, in turn.
        parts['group_index_s'] = (n + conflicts) * m['cas_s']
        out['group_index_tries_per_member'] = round(1 + conflicts / n, 1)
        out['over_cas_tries'] = 1 + conflicts / n > records.CAS_TRIES
    if m.get('restart_read_bytes_per_vm'):
        ops = m.get('restart_read_ops_per_vm') or 0
        parts['restart_data_s'] = max(
            n * ops / (osds * a['osd_ops_per_s']),
            n * m['restart_read_bytes_per_vm'] / (1 << 20) /
            (osds * a['osd_mib_s']))
    if m.get('hint_messages_per_host') is not None:
        # What a host hears grows with the chunks the group reads, not
        # with the hosts (hints.py): hosts times what one heard.
        deliveries = n * m['hint_messages_per_host']
        out['hint_deliveries'] = int(deliveries)
        parts['hint_fanout_s'] = deliveries / a['broker_deliveries_per_s']
    elif m.get('hint_messages_per_vm') is not None:
        # An older run's JSON: each VM's messages to every host.
        deliveries = n * m['hint_messages_per_vm'] * n
        out['hint_deliveries'] = int(deliveries)
        parts['hint_fanout_s'] = deliveries / a['broker_deliveries_per_s']
    if m.get('cinder_hold_ms_per_member'):
        # Not a shared service: how long the operator's group snapshot
        # holds every guest (reported, not a bottleneck of the store).
        out['cinder_group_hold_s'] = round(
            n * m['cinder_hold_ms_per_member'] / 1000, 2)
    out['seconds'] = {k: round(v, 3) for k, v in parts.items()}
    if parts:
        out['bottleneck'] = max(parts, key=parts.get)
    return out
