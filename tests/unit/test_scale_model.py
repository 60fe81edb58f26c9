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
    at = {p['vms']: p for p in model['at']}
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
