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

"""``blobcr-bench peers`` with a tiny workload: BlobCR on the local store
and on the session's Ceph cluster, QEMU incremental backup and qcow2
layers on real qemu-storage-daemons, RBD snapshots on the same cluster.

The benchmark runs as an operator runs it, in its own process. Only the
structure and what proves each path ran are asserted (bytes copied out,
writes during each checkpoint, a restart reading a point in time,
BlobCR's copy-on-write), no timing. A peer that cannot run must say
what refused.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

from blobcr_bench import peers

BENCH = os.path.join(os.path.dirname(sys.executable), 'blobcr-bench')
# CI runs a bounded form (1 run of 2 iterations); BLOBCR_BENCH_DEFAULTS=1
# the benchmark's own defaults (3 runs of 3), scaled only in size.
DEFAULTS = os.environ.get('BLOBCR_BENCH_DEFAULTS') == '1'
RUNS, ITERATIONS = (3, 3) if DEFAULTS else (1, 2)
FIGURES = ('ack_ms', 'pause_ms', 'pause_to_durable_ms',
           'write_p99_to_durable_ms', 'slowdown_s', 'durable_s',
           'stored_bytes_per_checkpoint', 'stored_total_bytes', 'restart_s')
PAUSES = ('pause_ms', 'pause_to_durable_ms', 'write_p99_to_durable_ms')


@pytest.fixture
def workdir():
    # Short: the control and QMP sockets below it must fit in sun_path.
    path = tempfile.mkdtemp(prefix='peers-', dir='/tmp')
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def quick_snap_trim(ceph_cluster):
    """The RBD peer deletes its snapshots, whose objects the OSDs then
    trim; wait_clean counts a trimming PG as not clean. The micro
    cluster trims without sleeping (tools/ceph-cluster.sh sets
    osd_snap_trim_sleep_hdd to 0; its default, 5 s per op, took
    minutes): the test leaves no trimming behind for the tests that
    follow.
    """
    yield
    deadline = time.monotonic() + 120
    while True:
        stat = subprocess.run(['ceph', '--conf', ceph_cluster.conffile, 'pg',
                               'stat'], capture_output=True, text=True,
                              check=True, timeout=60).stdout
        if 'snaptrim' not in stat or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert 'snaptrim' not in stat


def _bench(workdir, *argv):
    command = [BENCH, 'peers', '--json', '--workdir', workdir,
               '--size', '16M', '--block', '1M', '--random-writes', '512',
               '--paced-mib-s', '64'] + list(argv)
    if not DEFAULTS:
        # 16 MiB passes can end before a checkpoint's ack on a loaded
        # machine: such runs are listed, not dropped (the rule itself:
        # test_bench_peers_failure.py).
        command += ['--iterations', str(ITERATIONS), '--runs', str(RUNS),
                    '--late-runs', 'keep']
    return subprocess.run(command, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=300)


def test_every_peer_runs_or_says_why(ceph_cluster, quick_snap_trim, workdir,
                                     tmp_path):
    plot = tmp_path / 'peers.png'
    proc = _bench(workdir, '--ceph-conf', ceph_cluster.conffile,
                  '--plot', str(plot))
    result = json.loads(proc.stdout)
    failed = [c['what'] for c in result['checks'] if not c['ok']]
    # Scaled down to 16 MiB passes and one run, a pass may end before
    # the persist it should race, and the benchmark then rightly fails
    # the run (exit 3; seen once in CI): the only miss the bounded form
    # lets by. With the defaults (BLOBCR_BENCH_DEFAULTS=1) none is.
    raced = [w for w in failed if w.endswith(
        '/checkpoint: cow_copies + waits per run (min)')]
    if raced and not DEFAULTS and failed == raced:
        print('copy-on-write did not race in this scaled-down run: %s'
              % raced)
    else:
        assert proc.returncode == 0, (proc.returncode, failed,
                                      proc.stderr[-4000:])
        assert result['valid'] is True
    ran = set(result['peers'])
    assert ran | set(result['refused']) == set(peers.PEERS)
    for name, why in result['refused'].items():
        assert why, name
    # Both BlobCR references run here, and the QEMU peers with the
    # qemu-storage-daemon install-deps.sh installs.
    assert {'blobcr-local', 'blobcr-ceph', 'blobcr-ceph-loop', 'qemu-backup',
            'qcow2-layers'} <= ran
    # The RBD variants on this cluster: the EC one shaped like BlobCR's
    # data pool, the replicated one without a data pool; cache off, but
    # on the writeback one; RBD's default 4 MiB objects.
    assert {'rbd-snap', 'rbd-snap-rep', 'rbd-snap-wb'} <= ran
    shape = result['peers']['rbd-snap']['data_pool_shape']
    blobcr_pgs = json.loads(subprocess.run(
        ['ceph', '--conf', ceph_cluster.conffile, 'osd', 'pool', 'get',
         'blobcr-data', 'pg_num', '--format', 'json'], capture_output=True,
        text=True, check=True, timeout=60).stdout)['pg_num']
    assert shape['pg_num'] == blobcr_pgs
    assert result['peers']['rbd-snap-rep']['data_pool'] is None
    assert {n: p['rbd_cache'] for n, p in result['peers'].items()
            if n.startswith('rbd')} == {'rbd-snap': 'off', 'rbd-snap-rep':
                                        'off', 'rbd-snap-wb': 'writeback'}
    assert {p['object_size'] for n, p in result['peers'].items()
            if n.startswith('rbd')} == {4 << 20}
    # Each RBD snapshot cost the OSDs a clone of every object written
    # after it, counted from the OSDs (rados listsnaps).
    clones = [c for c in result['checks'] if 'OSD clones' in c['what']]
    assert len(clones) == 3 * len(peers.WORKLOADS)
    assert all(c['ok'] for c in clones), clones
    # The loop peer's writes went through its loop device.
    assert all(c['ok'] for c in result['checks']
               if 'the loop device wrote' in c['what'])
    assert len([c for c in result['checks']
                if 'the loop device wrote' in c['what']]) == \
        len(peers.WORKLOADS)
    # A random order per run and workload, recorded with its seed.
    assert [set(o['order']) for o in result['order']['runs']] == \
        [ran] * len(peers.WORKLOADS) * RUNS

    assert set(result['workloads']) == set(peers.WORKLOADS)
    for wname, w in result['workloads'].items():
        assert set(w['peers']) == ran
        for name, figures in w['peers'].items():
            assert figures['checkpoints'] == ITERATIONS, (wname, name)
            for key in FIGURES:
                if wname == 'paced' and key in PAUSES:
                    continue   # a quick checkpoint may fall between writes
                assert figures[key]['n'] >= 1, (wname, name, key)
            assert figures['restart_consistent'] == [True] * RUNS
            # The restart's trace: a BlobCR restart fetched the disk's
            # chunks (the whole 16 MiB pass is read) and timed the fetches'
            # phases; a QEMU one timed the chain's opening.
            for run in figures['runs']:
                trace = run['restart_trace']
                if name.startswith('blobcr'):
                    assert trace['fetched_chunks'] >= 16 * 4 // 2, trace
                    phases = trace['fetch_ms']
                    assert phases['total'] >= phases['load'] > 0, trace
                    assert phases['calls'] >= 1, trace
                elif name.startswith('q'):
                    assert trace['attach_ms'] > 0, trace
            assert figures['copied_bytes_per_checkpoint']['max'] > 0
            assert len(figures['late_checkpoints']) == RUNS
        ratios = w['ratios']['vs_blobcr_local']
        assert set(ratios) == ran - {'blobcr-local'}
        for name, per_key in ratios.items():
            assert set(per_key) == set(peers.RATIO_KEYS)
            assert per_key['stored_bytes']['median'] > 0
        # Each peer's copy-out proof is among the checks.
        for name in ran:
            assert any(c['what'].startswith('%s/%s: bytes copied out'
                                            % (name, wname))
                       for c in result['checks'])
    # Small writes into the used (prefilled) disk: stored as deltas.
    for name in ('blobcr-local', 'blobcr-ceph'):
        assert any(c['what'] == '%s/random4k: deltas stored per run (min)'
                   % name and c['ok'] for c in result['checks']), name
        # The restart of the in-order workload read ahead, every run.
        assert any(c['what'] == '%s/checkpoint: chunks read ahead by the '
                   'restart, per run (min)' % name and c['ok']
                   for c in result['checks']), name
    # The paced workload counts what crossed to the OSDs, for the peers
    # that store into Ceph, and only for them.
    paced = result['workloads']['paced']['peers']
    for name in ('blobcr-ceph', 'rbd-snap', 'rbd-snap-rep'):
        assert paced[name]['osd_in_bytes_per_checkpoint']['min'] > 0, name
        assert paced[name]['osd_in_over_stored']['min'] > 0, name
    assert 'osd_in_bytes_per_checkpoint' not in paced['blobcr-local']
    # RBD as set up: the cache read back from the client, and the image
    # locked by its writer at every snapshot.
    for name in ('rbd-snap', 'rbd-snap-rep', 'rbd-snap-wb'):
        assert result['peers'][name]['rbd_cache_client'] == (
            'true' if name == 'rbd-snap-wb' else 'false')
        for wname in peers.WORKLOADS:
            assert any(c['what'].startswith('%s/%s: the application owned '
                                            'the exclusive lock' % (name,
                                                                    wname))
                       and c['ok'] for c in result['checks']), name
    assert plot.stat().st_size > 0
    assert 'event=run' in proc.stderr


def test_a_peer_that_cannot_run_says_what_refused(workdir, tmp_path):
    missing = tmp_path / 'no-such-ceph.conf'
    proc = _bench(workdir, '--peers', 'blobcr-local', 'blobcr-ceph',
                  'rbd-snap', '--workloads', 'checkpoint',
                  '--ceph-conf', str(missing))
    # (BlobCR's own checks may fail on so small a run: not the point.)
    assert proc.returncode in (0, 3), proc.stderr[-4000:]
    result = json.loads(proc.stdout)
    assert set(result['peers']) == {'blobcr-local'}
    for name in ('blobcr-ceph', 'rbd-snap'):
        assert str(missing) in result['refused'][name]
    assert 'event=refused' in proc.stderr
