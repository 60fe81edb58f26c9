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

"""blobcr-bench's benchmarks, each run with tiny sizes.

Every benchmark must prove that the path it measures ran (copies, waits,
fetches, bytes), and fail when it did not. These tests check the shape of
each result, that those counters are not zero, and that a configuration
in which the path cannot run makes blobcr-bench exit non-zero.
"""

import json
import os

import pytest

from blobcr_bench import cli as bench
from blobcr_bench import guest_io

pytestmark = pytest.mark.skipif(not os.path.exists('/dev/fuse'),
                                reason='no /dev/fuse')


# Each benchmark as a newcomer runs it: its own defaults, with only the
# sizes scaled down (bytes, chunks, seconds). Runs, iterations, rounds,
# instances, migrations and variants stay the defaults: defaults that
# asked for more than a scaled-down run allows once made a benchmark
# refuse to start. The tests below run each of these.
SCALED = {
    'checkpoint': ['--size', '4M', '--downtime-sizes', '2M', '32M'],
    'restart': ['--size', '16M'],
    'persist': ['--persist-mib', '16'],
    'mirror': ['--size', '16M', '--runtime', '0.5'],
    'guest-io': ['--size', '32M', '--runtime', '0.3'],
    'repo': ['--image-size', '64G', '--dirty', '256', '--persist-mib', '16'],
    'flush': ['--size', '16M', '--runtime', '0.2'],
    'protect': ['--size', '16M', '--runtime', '3', '--interval', '1'],
    'proxy': ['--size', '4M', '--dirty', '1', '--flood-seconds', '0.5'],
    'handoff': ['--size', '16M', '--dirty', '1', '4', '16',
                '--precopy-ms', '100'],
    'host-loss': ['--runs', '1', '--seconds', '1.5', '--peers',
                  'blobcr-cluster,blobcr-host,rbd,local-file'],
}
# Those that need services of their own run in tests/integration: in
# CI a bounded form (fewer runs), with BLOBCR_BENCH_DEFAULTS=1 their
# defaults scaled only in size.
ELSEWHERE = {
    'cinder': 'test_bench_cinder.py',
    'hosts': 'test_many_hosts.py',
    'peers': 'test_bench_peers.py',
    'scale': 'test_scale_bench.py',
}


def test_every_benchmark_runs_scaled_in_size():
    assert sorted(set(SCALED) | set(ELSEWHERE)) == \
        bench.subcommands(bench.build_parser())
    here = os.path.dirname(os.path.abspath(__file__))
    for name, module in ELSEWHERE.items():
        with open(os.path.join(here, '..', 'integration', module)) as f:
            text = f.read()
        assert "'%s'" % name in text and 'BLOBCR_BENCH_DEFAULTS' in text, \
            (name, module)


def run_scaled(capsys, tmp_path, name, *extra):
    """``name`` with its defaults, sizes scaled (SCALED), and ``extra``
    (a backend: not a size, the place it runs).
    """
    return run_bench(capsys, tmp_path, name, *SCALED[name], *extra)


def run_bench(capsys, tmp_path, *argv):
    rc = bench.main(list(argv) + ['--workdir', str(tmp_path), '--json'])
    out, err = capsys.readouterr()
    return rc, json.loads(out), err


def rados_args(cluster):
    return ['--backend', 'rados', '--ceph-conf', cluster.conffile]


def counters_of(variant):
    return {k: min(v) for k, v in variant['counters'].items()}


def test_checkpoint_synthetic(capsys, tmp_path):
    rc, result, err = run_bench(
        capsys, tmp_path, 'checkpoint', '--size', '32M', '--iterations', '3',
        '--runs', '2', '--cow-chunks', '4', '--downtime-sizes', '4M', '16M',
        '--flush-workloads', 'random')
    assert rc == 0, err
    assert result['valid'] is True
    v = result['variants']
    assert set(v) == {'selective-cow', 'live-cow', 'live-precopy',
                      'offline', 'flush/random/adaptive',
                      'flush/random/in-order'}
    for name, variant in v.items():
        # ack and held apart, each a median with its spread
        for key in ('ack_ms', 'held_ms', 'slowdown_s', 'to_stable_s'):
            assert {'median', 'p10', 'p90', 'min', 'max'} <= set(
                variant[key]), (name, key)
        assert variant['held_ms']['median'] <= variant['ack_ms']['median']
        assert variant['chunks_per_checkpoint']['min'] == 128
        assert len(variant['runs']) == 2
    sel = counters_of(v['selective-cow'])
    # 32 MiB rewritten over 4 chunks of memory buffer: the copies past
    # memory go to the spill file (the default), so the writer need not
    # wait for the persister.
    assert sel['cow_copies'] > 0 and sel['spilled'] > 0
    assert result['cow_spill_mb'] == 1024
    live = counters_of(v['live-cow'])
    assert live['redirects'] + live['redirects_nocopy'] > 0
    assert live['cow_copies'] == 0
    for name, variant in v.items():
        if name != 'offline':       # offline persists before it acks
            assert min(variant['overlapped_persists']) > 0, name
    # The flush comparison writes slower than the persister, both orders
    # at the same pace; index order meets chunks not yet persisted.
    pace = v['flush/random/adaptive']['writer_pace_mib_s']
    assert pace and pace == v['flush/random/in-order']['writer_pace_mib_s']
    in_order = counters_of(v['flush/random/in-order'])
    assert in_order['cow_copies'] + in_order['waits'] > 0
    assert v['flush/random/adaptive']['adaptive'] is True
    assert v['flush/random/in-order']['adaptive'] is False
    # offline holds writes until the version is stable
    assert v['offline']['writes_held_ms'] == v['offline']['ack_ms']
    ratios = result['ratios']
    assert 'slowdown_selective_vs_live_cow' in ratios
    assert 'random_slowdown_s_adaptive_vs_in_order' in ratios
    d = result['downtime']
    assert d['16mib']['chunks'] == [64, 64]
    assert d['ack_ratio_16mib_vs_4mib']['n'] == 2
    assert all(c['ok'] for c in result['checks'])


def test_checkpoint_fails_when_no_copy_can_happen(capsys, tmp_path):
    # Waiting after each CHECKPOINT lets the persister finish before the
    # writer comes back (what the old benchmark's data generator did):
    # nothing is copied, nothing waits, and the run must say so.
    rc, result, err = run_bench(
        capsys, tmp_path, 'checkpoint', '--size', '4M', '--iterations', '2',
        '--runs', '1', '--modes', 'selective-cow', 'live-cow',
        '--flush-workloads', '--downtime-sizes', '--head-start', '1.5')
    assert rc == 3
    assert result['valid'] is False
    failed = {c['what'] for c in result['checks'] if not c['ok']}
    assert 'selective-cow: cow_copies (min over runs)' in failed
    assert 'live-cow: redirects (min over runs)' in failed
    assert 'FAILED' in err and 'cow_copies' in err


def test_checkpoint_defaults_scaled_in_size(capsys, tmp_path):
    """The defaults as a newcomer runs them, every size divided by 32
    (128M, 64M 1G: the downtime subject wraps the pattern 8 times). Runs,
    iterations and variants stay the defaults: they once asked for more
    distinct epochs than a wrapped pattern holds, and the benchmark
    refused to start.
    """
    rc, result, err = run_scaled(capsys, tmp_path, 'checkpoint')
    assert rc == 0, err
    assert result['valid'] is True
    assert result['runs'] == 3 and result['iterations'] == 3
    assert len(result['variants']['selective-cow']['runs']) == 3
    assert {'2mib', '32mib'} <= set(result['downtime'])


@pytest.mark.parametrize('backend', ['local', 'rados'])
def test_checkpoint_interval(capsys, tmp_path, backend, request):
    extra = rados_args(request.getfixturevalue('ceph_cluster')) \
        if backend == 'rados' else []
    rc, result, err = run_bench(
        capsys, tmp_path, 'checkpoint', '--interval', '0.3',
        '--checkpoints', '4', '--runs', '2', '--image-size', '8M',
        '--cow-chunks', '4', *extra)
    assert rc == 0, err
    m = result['modes']['selective-cow']
    assert m['checkpoints'] == 8
    for key in ('ack_ms', 'held_ms', 'ack_ms_median_per_run',
                'ack_ms_p99_per_run', 'to_stable_s', 'backlog'):
        assert m[key]['n'] >= 2, key
    assert m['held_ms']['median'] <= m['ack_ms']['median']
    assert 'busy_refusals' in m and 'backlog_max' in m
    assert len(m['runs']) == 2 and len(m['runs'][0]['ack_ms']) == 4
    assert len(m['runs'][0]['backlog_chunks']) == 4
    assert min(m['counters']['cow_copies'][k] + m['counters']['waits'][k]
               for k in range(2)) > 0
    assert m['chunks_per_checkpoint']['min'] > 0
    assert m['writer_mib_s']['min'] > 0


def test_checkpoint_interval_under_a_queue_depth_writer(capsys, tmp_path):
    """--iodepth: fio keeps 8 O_DIRECT writes in flight through the FUSE
    mirror while checkpoints are taken; every phase of the ack is there.
    """
    rc, result, err = run_bench(
        capsys, tmp_path, 'checkpoint', '--interval', '0.3',
        '--checkpoints', '3', '--runs', '1', '--image-size', '8M',
        '--write-size', '4K', '--iodepth', '8', '--cow-chunks', '4')
    assert rc == 0, err
    assert result['iodepth'] == 8
    m = result['modes']['selective-cow']
    assert m['checkpoints'] == 3 and m['writer_mib_s']['min'] > 0
    assert m['chunks_per_checkpoint']['min'] > 0
    phases = m['phases_ms']
    assert {'record', 'commit', 'room', 'reserved_wait', 'reply'} <= \
        set(phases)
    # The caller's round trip holds the mirror's: a reply is never
    # negative, and it is where the ack's remainder went.
    assert phases['reply']['min'] >= 0
    assert m['ack_ms']['max'] >= phases['reply']['max']


def test_checkpoint_interval_interleaves_reserve_ahead(capsys, tmp_path):
    rc, result, err = run_bench(
        capsys, tmp_path, 'checkpoint', '--interval', '0.3',
        '--checkpoints', '3', '--runs', '2', '--image-size', '8M',
        '--cow-chunks', '4', '--reserve-ahead', 'both')
    assert rc == 0, err
    assert result['reserve_ahead'] == ['0', '1']
    with_, without = (result['modes']['selective-cow/reserve-ahead-%s' % s]
                      for s in ('1', '0'))
    assert with_['checkpoints'] == without['checkpoints'] == 6
    # Only the mirror told to registers versions ahead, and its
    # checkpoints take them.
    assert sum(with_['counters']['reservations_used']) > 0
    assert sum(without['counters']['reservations_used']) == 0
    ratio = result['ratios']['selective-cow_ack_reserve_ahead_over_not']
    assert ratio['n'] == 2 and ratio['median'] > 0


def test_restart(capsys, tmp_path):
    rc, result, err = run_scaled(capsys, tmp_path, 'restart')
    assert rc == 0, err
    modes = result['modes']
    # 4 instances, the first one records the trace; 3 runs.
    assert result['measured_instances'] == 3
    assert modes['precopy']['mib']['median'] == 16
    for mode in ('lazy', 'lazy_prefetch', 'precopy'):
        assert modes[mode]['seconds']['n'] == 9
        assert len(modes[mode]['per_run']) == 3
        assert len(modes[mode]['per_run'][0]['bytes']) == 3
    # Without prefetch an instance fetches what it reads and nothing else
    # (O_DIRECT: no kernel readahead); with prefetch, also some of the
    # recorder's chunks it never reads.
    assert modes['lazy']['chunks_not_read_by_trace']['max'] == 0
    assert modes['lazy_prefetch']['chunks_not_read_by_trace']['min'] > 0
    assert 0 < result['bytes_ratio']['median'] < 1
    assert result['profile_chunks'] > 0
    assert all(c['ok'] for c in result['checks'])


@pytest.mark.parametrize('backend', ['local', 'rados'])
def test_persist(capsys, tmp_path, backend, request):
    extra = rados_args(request.getfixturevalue('ceph_cluster')) \
        if backend == 'rados' else []
    rc, result, err = run_scaled(capsys, tmp_path, 'persist', *extra)
    assert rc == 0, err
    assert result['persist_mib_s']['min'] > 0
    assert result['backend_put_mib_s']['min'] > 0
    assert result['ratio_vs_backend_put']['n'] == 3
    # Every chunk of the 16 MiB (256 KiB chunks), in each of the 3 runs.
    assert result['checks'][0]['value'] == [64] * 3
    if backend == 'rados':
        assert result['rados_bench_mib_s']['n'] == 3
        assert result['ratio']['median'] > 0
    else:
        assert 'rados_bench_mib_s' not in result


def test_mirror_io(capsys, tmp_path):
    rc, result, err = run_scaled(capsys, tmp_path, 'mirror')
    assert rc == 0, err
    conns = result['connections']
    # Both mounts with the same options and the same kernel settings.
    assert conns['mirror']['options'] == conns['passthrough']['options']
    for key in ('max_background', 'congestion_threshold', 'read_ahead_kb'):
        assert conns['mirror'][key] == conns['passthrough'][key]
    for job, entry in result['jobs'].items():
        assert entry['ratio']['n'] == 3
        # The sides took turns going first.
        firsts = (entry['ratio_when_mirror_first']['n'],
                  entry['ratio_when_passthrough_first']['n'])
        assert sorted(firsts) == [1, 2], firsts
        assert entry['mirror_cpu_us_per_io']['min'] > 0
        assert entry['passthrough_cpu_us_per_io']['min'] > 0
        if result['loop_device']:
            assert entry['loop_over_mirror']['n'] == 3
    assert result['loop_device'] == os.path.exists('/dev/loop-control')
    assert all(c['ok'] for c in result['checks'])


def test_repo_commit(capsys, tmp_path):
    rc, result, err = run_scaled(capsys, tmp_path, 'repo')
    assert rc == 0, err
    assert result['commit_ms']['n'] == 5
    assert result['commit_ms_cold']['median'] > 0
    assert 0 < result['tree_overhead'] < 1
    assert 'commit_ms_4096_of_1tib' not in result     # not that figure
    assert all(c['ok'] for c in result['checks'])


def test_proxy(capsys, tmp_path, rabbitmq_url):
    rc, result, err = run_scaled(capsys, tmp_path, 'proxy',
                                 '--transport-url', rabbitmq_url)
    assert rc == 0, err
    for mode in ('none', 'fsfreeze', 'suspend'):
        for path in ('admin', 'http', 'rpc'):
            assert result[mode][path]['n'] == 30
        # The agent's own replies carry the time the guest was held.
        for path in ('admin', 'rpc'):
            held = result[mode][path]['held']
            assert held['median_ms'] <= result[mode][path]['median_ms']
    assert result['forged']['requests'] > 0
    assert result['forged']['not_refused'] == 0
    assert all(c['ok'] for c in result['checks'])


def test_flush(capsys, tmp_path, request):
    """The flush benchmark runs fio's flushes through BlobCR mirrors of
    both durabilities, on a plain file and on RBD (cache off, data
    erasure-coded, writeback cache), and its checks count them: the
    mirror cores' flushes and the cluster volume's write log in RADOS.
    """
    cluster = request.getfixturevalue('ceph_cluster')
    rc, result, err = run_scaled(capsys, tmp_path, 'flush', '--rbd',
                                 *rados_args(cluster))
    assert rc == 0, err
    assert result['targets'] == ['blobcr-cluster', 'blobcr-host', 'plain',
                                 'rbd', 'rbd-ec', 'rbd-writeback']
    assert all(c['ok'] for c in result['checks'])
    commits = result['jobs']['fsync-every-write']
    assert commits['targets']['blobcr-cluster']['commit_ms_p99'][
        'median'] > 0
    for pair in ('blobcr-cluster/plain', 'blobcr-cluster/rbd', 'rbd-ec/rbd'):
        assert commits['ratios'][pair]['flush_ms_p50']['median'] > 0
    assert result['jobs']['no-flush']['ratios'][
        'blobcr-cluster/blobcr-host']['mib_s']['median'] > 0
    assert result['write_log_at_end']['blobcr-host']['state'] is None


def test_guest_io(capsys, tmp_path, request):
    """The guest's path (a loop device over the mirror file of a
    cluster volume) against the file, a plain file and RBD: every job
    on every target, ratios per run, the loop device's own block
    statistics counting what fio wrote through it, and a lazy restart
    whose every read fetched its chunk.
    """
    cluster = request.getfixturevalue('ceph_cluster')
    rc, result, err = run_scaled(capsys, tmp_path, 'guest-io', '--rbd',
                                 *rados_args(cluster))
    failed = [c['what'] for c in result['checks'] if not c['ok']]
    # Scaled down to 32 MiB, a persist may end before the job does: the
    # only miss let by (with the defaults, 1 GiB, it outlasts a job).
    assert failed in ([], ['persist: share of each job a persist '
                           'overlapped (median), at least half']), err
    assert rc == (3 if failed else 0), err
    assert result['targets'] == ['loop', 'mirror', 'plain', 'rbd',
                                 'rbd-writeback']
    assert result['rbd']['rbd-writeback']['librbd']['rbd_cache'] == 'true'
    jobs = [j[0] for j in result['jobs']]
    assert len(jobs) == 8
    # The flushed jobs' flushes went to the write-ahead log (checked
    # against their count in the checks above).
    assert result['durability'] == 'cluster' and result['log_entries'] > 0
    # During a persist: the default subset of the jobs (each waits for a
    # persist of the whole image).
    assert result['persist_jobs'] == sorted(guest_io.PERSIST_JOBS)
    for name, run in (('loop_over_mirror', jobs), ('loop_over_plain', jobs),
                      ('loop_over_rbd', jobs),
                      ('loop_over_rbd_writeback', jobs),
                      ('loop_persist_over_idle', guest_io.PERSIST_JOBS)):
        assert set(result['ratios'][name]) == set(run), name
        assert all(s['n'] == 3 for s in result['ratios'][name].values())
    for target, figures in result['figures']['idle'].items():
        for job in jobs:
            assert figures[job]['lat_ms_p99']['median'] >= \
                figures[job]['lat_ms_p50']['median'] > 0, (target, job)
    restart = result['restart']
    assert restart['ios'] == 32 * 4 and restart['read_fetches'] >= 0.9 * \
        restart['ios']
    assert set(result['goals']) == {'loop_over_mirror', 'loop_over_rbd',
                                    'loop_over_rbd_equal_durability',
                                    'persist_over_idle'}


def test_host_loss(capsys, tmp_path, request):
    """Hosts lost for good, peer by peer: a cluster volume and RBD lose
    no flushed write, a host volume and a local file lose what was
    flushed since their last checkpoint or backup (here: all of it).
    """
    cluster = request.getfixturevalue('ceph_cluster')
    rc, result, err = run_scaled(capsys, tmp_path, 'host-loss',
                                 '--ceph-conf', cluster.conffile)
    assert rc == 0, err
    peers = result['peers']
    assert sorted(peers) == ['blobcr-cluster', 'blobcr-host', 'local-file',
                             'rbd']
    for name in ('blobcr-cluster', 'rbd'):
        assert peers[name]['lost_flushed_blocks'] == 0, (name, peers[name])
    for name in ('blobcr-host', 'local-file'):
        assert peers[name]['lost_flushed_blocks'] == \
            peers[name]['flushed_blocks'] > 0, (name, peers[name])


def test_protect(capsys, tmp_path):
    """The protection benchmark runs both variants on real agents, and
    its check sees the protection checkpoints taken.
    """
    rc, result, err = run_scaled(capsys, tmp_path, 'protect')
    assert rc == 0, err
    assert len(result['protection_taken']) == 3
    assert min(result['protection_taken']) >= 1
    assert result['slowdown']['median'] > 0


def test_handoff(capsys, tmp_path, rabbitmq_url):
    """Both connections: every migration hands off, reads back what the
    source wrote and leaves the source detached. The loop device (the
    default) runs the defaults scaled in size; its memory copy sees the
    guest write a chunk, and the source checkpointed at the
    destination's attach, so the switch commits that chunk at most (a
    check of the bench). The file's run, its switches at once, is
    shorter.
    """
    runs = {
        'local': (run_scaled, ['handoff'], 10, ('1', '4', '16')),
        'file': (run_bench, ['handoff', '--size', '16M', '--migrations', '2',
                             '--dirty', '1', '4', '--connection', 'file',
                             '--precopy-ms', '0'], 2, ('1', '4'))}
    for connection, (how, argv, migrations, dirties) in runs.items():
        (tmp_path / connection).mkdir()
        rc, result, err = how(capsys, tmp_path / connection, *argv,
                              '--transport-url', rabbitmq_url)
        assert rc == 0, err
        assert result['valid'], result['checks']
        named = {c['what'] for c in result['checks']}
        assert ("the switch committed only the copy's writes" in named) == \
            (connection == 'local'), named
        assert set(result['runs']) == set(dirties)
        for dirty in dirties:
            run = result['runs'][dirty]
            assert run['extra_ms']['n'] == migrations
            # The source's phases are part of the wait it caused.
            phases = sum(run['source_%s_ms' % name]['median']
                         for name in ('commit', 'persist', 'detach'))
            assert phases <= run['waited_ms']['max'] + 1
