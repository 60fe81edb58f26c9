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

"""``blobcr-bench cinder`` on the session's stack: a BlobCR volume on the
Ceph backend (attached to a compute agent, written live) against
Cinder's RBD driver on the same cluster, two runs.

The benchmark runs as an operator runs it: its own process, Keystone
credentials in the OS_* environment. Only what proves the path ran is
asserted (every BlobCR snapshot carries the agent's ack and bytes
written, every RBD snapshot is in the pool, everything it made is
gone), no timing.
"""

import json
import os
import subprocess
import sys

import pytest

from tests import openstack_fixtures

# CI runs a bounded form; BLOBCR_BENCH_DEFAULTS=1 the benchmark's
# default number of runs, writes scaled down.
RUNS = 5 if os.environ.get('BLOBCR_BENCH_DEFAULTS') == '1' else 2


@pytest.fixture(scope='module')
def cloud(openstack_cloud, cinder_hosts, ceph_cluster):
    if openstack_fixtures.RBD_BACKEND not in openstack_cloud.backends:
        pytest.skip('the session backends have no RBD backend')
    return openstack_cloud, cinder_hosts['rados'], ceph_cluster


def test_bench_cinder_runs_both_paths(cloud, tmp_path):
    stack, hosts, ceph = cloud
    plot = tmp_path / 'cinder.png'
    command = [os.path.join(os.path.dirname(sys.executable), 'blobcr-bench'),
               'cinder', '--json', '--runs', str(RUNS), '--write-mib', '16,8',
               '--blobcr-type', hosts.volume_type,
               '--baseline-type', openstack_fixtures.RBD_BACKEND,
               '--compute-host', hosts.compute[0],
               '--ceph-conf', ceph.conffile,
               '--rbd-pool', openstack_fixtures.RBD_POOL,
               '--workdir', str(tmp_path), '--plot', str(plot)]
    proc = subprocess.run(command, env=stack.env('demo'),
                          stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, (proc.returncode, proc.stdout,
                                  proc.stderr[-4000:])
    result = json.loads(proc.stdout)
    assert result['valid'] is True
    assert all(c['ok'] for c in result['checks']), result['checks']
    n = 2 * RUNS        # two dirty sizes
    assert result['counts'] == {'blobcr_snapshots': n,
                                'blobcr_acked_with_bytes': n,
                                'rbd_snapshots': n,
                                'rbd_snapshots_in_pool': n,
                                'rbd_attached_snapshots': n,
                                'rbd_attached_snapshots_in_pool': n,
                                'rbd_attached_lock_held': n}
    # Smallest first; the volumes hold the largest, rounded up to GiB,
    # plus 1.
    assert result['write_mib'] == [8, 16] and result['size_gb'] == 2
    assert [r['write_mib'] for r in result['by_write_mib']] == [8, 16]
    for row in result['by_write_mib']:
        for backend in ('blobcr', 'rbd', 'rbd-attached'):
            assert row[backend]['available_s']['n'] == RUNS
        assert row['blobcr']['ack_ms']['n'] == RUNS
        # Each checkpoint stored at least its dirty data.
        assert row['blobcr']['bytes_written']['min'] >= \
            row['write_mib'] << 20
    assert result['attached'] == ['blobcr', 'rbd-attached']
    # Where the RBD volumes' data is, as the cluster says: an EC pool,
    # as BlobCR's chunks.
    assert result['rbd_pool'] == {
        'pool': openstack_fixtures.RBD_POOL,
        'data_pool': openstack_fixtures.RBD_DATA_POOL, 'erasure_coded': True}
    for baseline in ('rbd', 'rbd_attached'):
        for row in result['by_write_mib']:
            assert row['ratios_blobcr_over_%s' % baseline][
                'available_s']['median'] > 0
    assert plot.stat().st_size > 0
    assert 'errors=0' in proc.stderr, proc.stderr[-2000:]

    # Nothing it made is left: volumes and snapshots of the demo project.
    api = stack.block_storage('demo')
    for kind in ('volumes', 'snapshots'):
        left = [r['name'] for r in api.get('/%s' % kind).json()[kind]
                if (r.get('name') or '').startswith('blobcr-bench-')]
        assert left == [], (kind, left)


def _result_of(blobcr, rbd, rbd_attached):
    import argparse

    from blobcr_bench import cinder
    args = argparse.Namespace(client='api', runs=2, write_mib=[8],
                              size_gb=1, blobcr_type='b', baseline_type='r',
                              poll_interval=0.1, rbd_pool='rbd')
    sample = {'available_s': 1.0, 'server_s': 0.9, 'request_s': 0.1,
              'write_s': 0.1, 'delete_s': 0.1, 'run': 0, 'write_mib': 8}
    result = cinder._result(args, {
        'blobcr': [dict(sample, **b) for b in blobcr],
        'rbd': [dict(sample, **r) for r in rbd],
        'rbd-attached': [dict(sample, **r) for r in rbd_attached]})
    return {c['what'] for c in result['checks'] if not c['ok']}


def test_result_is_invalid_without_the_proofs():
    """One run of two short of its proof on each side fails its check
    (blobcr-bench then exits with 3): a checkpoint that stored less than
    the data written before it, an RBD snapshot not in the pool, an
    in-use image whose writer lost its lock. With every proof there,
    nothing fails.
    """
    ok = {'bytes_written': float(8 << 20), 'ack_ms': 5.0}
    held = {'in_pool': True, 'lock_owned': True, 'lock_owned_after': True}
    assert _result_of([ok, ok], [held, held], [held, held]) == set()
    assert _result_of(
        [ok, dict(ok, bytes_written=float(4 << 20))],
        [held, dict(held, in_pool=False)],
        [held, dict(held, lock_owned_after=False)]) == {
            'blobcr_acked_with_bytes', 'rbd_snapshots_in_pool',
            'rbd_attached_lock_held'}
