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

"""blobcr-bench scale's model (lab/blobcr_bench/scale_model.py): what it
fits from runs and how it projects them, on runs made up here so that
every figure is known.
"""

import argparse

import pytest

from blobcr_bench import scale_model

A = scale_model.ASSUMPTIONS


def _run(m, conflicts, hint_messages, hold_ms=None):
    run = {'m': m,
           'checkpoint': {'load': {
               'osd': {'op_w': 10 * m * 2, 'op_in_bytes': (1 << 20) * m * 2},
               'header_cas': {'writes': 3 * m * 2,
                              'conflicts': conflicts * 2}}},
           'restart': {'hints': {
               'load': {'osd': {'op_r': 40 * m}},
               'moved_bytes_per_vm': 8 << 20,
               'vms': [{'hint_messages': hint_messages, 'restart_s': 1.0}]
               * m}}}
    if hold_ms is not None:
        run['cinder'] = {'group_hold_ms': hold_ms}
    return run


def test_fit_then_project():
    args = argparse.Namespace(iterations=2)
    runs = [_run(1, 1, 3, 10.0), _run(2, 4, 3, 30.0), _run(4, 16, 3, 70.0)]
    model = scale_model.fit(runs, {}, args, cas_s=0.002)
    got = model['measured']
    assert got['checkpoint_write_ops_per_vm'] == 10
    assert got['checkpoint_write_bytes_per_vm'] == 1 << 20
    assert got['header_cas_per_vm'] == 3
    # Conflicts 1, 4, 16 for M = 1, 2, 4: they grow as M squared.
    assert got['cas_conflict_growth_exponent'] == pytest.approx(2.0)
    assert got['restart_read_ops_per_vm'] == 40
    assert got['cinder_hold_ms_per_member'] == pytest.approx(20.0)
    # No group size above FIT_UP_TO: nothing validated, no projection.
    assert not model['validated'] and model['at'] == []
    at = {n: scale_model.project(n, got) for n in A['sizes']}
    n = 1000
    one = at[n]
    osds = n // A['hosts_per_osd']
    assert one['osds'] == osds
    # Each of n VMs sends 3 messages to each of n hosts.
    assert one['hint_deliveries'] == 3 * n * n
    assert one['seconds']['hint_fanout_s'] == pytest.approx(
        3 * n * n / A['broker_deliveries_per_s'], rel=1e-3)
    # The index: n updates plus the conflicts, extrapolated from M=4.
    conflicts = 16 * (n / 4) ** 2
    assert one['seconds']['group_index_s'] == pytest.approx(
        (n + conflicts) * 0.002, rel=1e-3)
    assert one['over_cas_tries'] == (1 + conflicts / n > 100)
    assert one['cinder_group_hold_s'] == pytest.approx(20.0)
    assert one['bottleneck'] == max(one['seconds'],
                                    key=one['seconds'].get)
    # Data spreads over the OSDs: flat while OSDs come with hosts.
    assert at[256]['seconds']['checkpoint_data_s'] == pytest.approx(
        one['seconds']['checkpoint_data_s'], rel=0.05)


def _summary(tails):
    """A summary whose group tails are ``tails(m)`` for each size."""
    out = {}
    for m in (1, 4, 8, 16):
        ack, stable, lazy = tails(m)
        out[m] = {'tails': {'ack_s': {'median_of_max': ack},
                            'group_stable_s': {'median_of_max': stable},
                            'cinder_group_hold_ms': {'median_of_max': None}},
                  'restart': {'lazy': {'restart_s_tail':
                                       {'median_of_max': lazy}}}}
    return out


def test_tails_linear_in_members_validate_and_project():
    args = argparse.Namespace(iterations=2)
    runs = [_run(1, 1, 3), _run(4, 4, 3), _run(8, 8, 3), _run(16, 16, 3)]
    summary = _summary(lambda m: (0.01 + 0.002 * m, 0.5 + 0.1 * m,
                                  0.3 + 0.01 * m * 1.1))
    capacity = {'write_ops_per_s': 600.0, 'write_mib_s': 90.0, 'osds': 3}
    model = scale_model.fit(runs, summary, args, 0.002, capacity)
    v = model['validation']
    assert v['fit_on'] == [1, 4, 8] and v['check_at'] == 16
    stable = v['tails']['group_stable_s']
    assert stable['predicted'] == pytest.approx(2.1)
    assert stable['within'] and model['validated']
    assert 'cinder_group_hold_ms' not in v['tails']     # never measured
    # The measured capacity, per OSD, replaces the assumed one.
    assert model['assumptions']['osd_mib_s'] == pytest.approx(30.0)
    assert model['assumptions']['osd_ops_per_s'] == pytest.approx(200.0)
    assert [p['vms'] for p in model['at']] == A['sizes']


def test_a_tail_that_bends_at_the_largest_group_withholds_the_projection():
    args = argparse.Namespace(iterations=2)
    runs = [_run(m, m, 3) for m in (1, 4, 8, 16)]
    # Linear up to 8, then four times the line at 16 (a queue filling).

    def tails(m):
        return 0.01, 0.5 + 0.1 * m * (4 if m == 16 else 1), 0.3
    summary = _summary(tails)
    model = scale_model.fit(runs, summary, args, 0.002)
    stable = model['validation']['tails']['group_stable_s']
    assert not stable['within']
    assert stable['error'] == pytest.approx(abs(2.1 - 6.9) / 6.9, abs=1e-3)
    assert not model['validated'] and model['at'] == []
    assert 'projection_withheld' in model


def test_a_tail_bent_by_the_machines_load_validates_as_a_queue():
    """Group stable grows as M / (1 - rho) with the CPU utilization rho
    measured at each size: the size-only line misses the largest group,
    the queueing fit (the model's) predicts it. Where rho is not
    measured (the Cinder hold here), the size-only line is the model.
    """
    args = argparse.Namespace(iterations=2)
    runs = [_run(m, m, 3) for m in (1, 4, 8, 16)]
    rho = {1: 0.2, 4: 0.35, 8: 0.5, 16: 0.75}
    summary = _summary(lambda m: (0.01 + 0.002 * m,
                                  0.1 + 0.05 * m / (1 - rho[m]), 0.3))
    for m, entry in summary.items():
        entry['checkpoint_cpu_busy'] = rho[m]
    model = scale_model.fit(runs, summary, args, 0.002)
    stable = model['validation']['tails']['group_stable_s']
    assert stable['model'] == 'queueing'
    assert stable['predicted'] == pytest.approx(0.1 + 0.05 * 16 / 0.25)
    assert stable['within'] and not stable['size_only']['within']
    assert stable['cpu_busy'][16] == 0.75
    lazy = model['validation']['tails']['restart_lazy_s']
    assert lazy['model'] == 'size_only' and lazy['within']
    # A utilization past RHO_MAX counts as RHO_MAX: no division by zero.
    summary[16]['checkpoint_cpu_busy'] = 1.0
    capped = scale_model.validate(summary)['tails']['group_stable_s']
    assert capped['predicted'] == pytest.approx(
        0.1 + 0.05 * 16 / (1 - scale_model.RHO_MAX))
