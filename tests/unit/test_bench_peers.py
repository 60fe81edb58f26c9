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

"""The pure parts of ``blobcr-bench peers``: recognising a point in time
of the application's writes in what a restart read, per-run ratios
against BlobCR, and the checks that make a run invalid.
"""

import argparse

import pytest

from blobcr_bench import common
from blobcr_bench import peers


class _Pattern(object):
    """Block k of epoch e is (k, e): enough to tell epochs apart."""

    def block(self, offset, length, epoch, stream=0):
        return (offset, length, epoch)


def _expected(low, high, n=5):
    workload = peers.Workload('w', 1, list(range(n)))
    return peers._Expected(_Pattern(), workload, low, high)


def _state(expected, epoch, written):
    """Blocks [0, written) of ``epoch``, the rest of ``epoch - 1``."""
    n = len(expected.workload.offsets)
    return [expected(k, epoch if k < written else epoch - 1)
            for k in range(n)]


def test_state_epoch_finds_a_prefix_of_the_next_pass():
    expected = _expected(10, 13)
    for epoch in (11, 12, 13):
        for written in (1, 3, 5):
            assert peers.state_epoch(_state(expected, epoch, written),
                                     expected) == epoch


def test_state_epoch_refuses_a_torn_state():
    expected = _expected(10, 13)
    blocks = _state(expected, 12, 2)
    blocks[3] = expected(3, 12)          # a later write without an earlier
    blocks[2] = expected(2, 11)
    blocks[1] = expected(1, 11)
    assert peers.state_epoch(blocks, expected) is None
    blocks = _state(expected, 12, 5)
    blocks[4] = expected(4, 9)           # two passes behind
    assert peers.state_epoch(blocks, expected) is None
    assert peers.state_epoch([b'zeros'] * 5, expected) is None


def test_state_epoch_takes_writes_in_flight_within_the_window():
    expected = _expected(10, 13)
    # Block 1 of epoch 12 still in flight while block 2 completed.
    blocks = _state(expected, 12, 1)
    blocks[2] = expected(2, 12)
    assert peers.state_epoch(blocks, expected) is None
    assert peers.state_epoch(blocks, expected, window=2) == 12
    # Block 0 in flight, block 1 done: the head itself may lag.
    blocks = _state(expected, 12, 0)
    blocks[1] = expected(1, 12)
    assert peers.state_epoch(blocks, expected, window=2) == 12
    # Beyond the window, a torn state still.
    blocks = _state(expected, 12, 1)
    blocks[4] = expected(4, 12)
    assert peers.state_epoch(blocks, expected, window=2) is None


class _BytesPattern(object):
    """Two 4 KiB pages a block, their bytes telling (block, epoch)."""

    def block(self, offset, length, epoch, stream=0):
        return bytes([offset % 251, epoch % 251]) * (length // 2)


def test_state_epoch_takes_a_write_torn_between_pages():
    workload = peers.Workload('w', 2 * peers.PAGE, list(range(0, 6 * 8192,
                                                              8192)))
    expected = peers._Expected(_BytesPattern(), workload, 10, 13)
    blocks = [expected(k, 12 if k < 2 else 11) for k in range(6)]
    # Block 2 in flight: its first page written, not its second.
    blocks[2] = expected(2, 12)[:peers.PAGE] + expected(2, 11)[peers.PAGE:]
    assert peers.state_epoch(blocks, expected, window=1) == 12
    assert peers.describe_state(blocks, expected) == [
        [12, 2], ['torn 12', 1], [11, 3]]
    # A page of neither epoch is no point in time.
    blocks[2] = bytes(2 * peers.PAGE)
    assert peers.state_epoch(blocks, expected, window=8) is None


def test_state_epoch_takes_completions_out_of_order():
    """Two states a QD-8 run read (CI and here): writes completed out of
    order, the last done one further than 8 blocks past the first still
    in flight. Points in time with 8 in flight, not with one.
    """
    expected = _expected(4, 6, n=16)
    epochs = [6] * 3 + [5] * 5 + [6, 5, 6, 5, 6] + [5] * 3
    blocks = [expected(k, e) for k, e in enumerate(epochs)]
    assert peers.state_epoch(blocks, expected, window=8) == 6
    assert peers.state_epoch(blocks, expected, window=1) is None
    # Eight still in flight before the last done block: one too many.
    epochs = [6] + [5] * 8 + [6] + [5] * 6
    blocks = [expected(k, e) for k, e in enumerate(epochs)]
    assert peers.state_epoch(blocks, expected, window=8) is None
    assert peers.state_epoch(blocks, expected, window=9) == 6


def _run(ack_ms, stored, slowdown=1.0, restart=0.5, copied=1):
    cps = [{'ack_ms': a, 'pause_ms': a / 2, 'pause_to_durable_ms': a,
            'durable_s': 1.0,
            'stored_bytes': stored, 'copied_bytes': copied} for a in ack_ms]
    return {'checkpoints': cps, 'slowdown_s': slowdown, 'run_s': 2.0,
            'baseline_s': 1.0, 'restart_s': restart,
            'restart_consistent': True, 'restart_epoch_lag': 0,
            'counters': {'cow_copies': 3, 'waits': 0}}


def test_ratios_pair_runs_with_the_reference():
    results = {'blobcr-local': [_run([1, 3], 100), _run([2, 2], 100)],
               'qemu-backup': [_run([4, 8], 150), _run([10, 10], 50)]}
    out = peers.ratios(results, 'blobcr-local')
    assert set(out) == {'qemu-backup'}
    # per-run medians over the reference: 6/2 = 3 and 10/2 = 5
    assert out['qemu-backup']['ack_ms']['median'] == 4.0
    assert out['qemu-backup']['stored_bytes']['min'] == 0.5
    assert out['qemu-backup']['stored_bytes']['max'] == 1.5
    assert peers.ratios(results, 'blobcr-ceph') is None


def test_checks_fail_when_a_path_did_not_run():
    checks = common.Checks()
    peers.check(checks, 'qemu-backup', 'checkpoint', [_run([1], 10)])
    assert not checks.failed
    nothing = _run([1], 10, copied=0)
    nothing['checkpoints'][0]['pause_ms'] = None
    nothing['restart_consistent'] = False
    nothing['counters'] = {'cow_copies': 0, 'waits': 0}
    checks = common.Checks()
    peers.check(checks, 'blobcr-local', 'random4k', [nothing])
    peers.check_cow(checks, 'blobcr-local', [nothing])
    failed = {c['what'] for c in checks.failed}
    assert failed == {
        'blobcr-local/random4k: bytes copied out by the checkpoints of a '
        'run (min)',
        'blobcr-local/random4k: checkpoints the application wrote '
        'through, per run (min)',
        'blobcr-local/random4k: restarts at a point in time',
        'blobcr-local/checkpoint: cow_copies + waits per run (min)'}


def test_a_run_must_copy_out_half_a_pass_at_least():
    """Not merely some bytes: a peer whose checkpoints copied out a
    header and nothing of the pass fails.
    """
    pass_bytes = 16 << 20
    for copied, ok in ((4096, False), (pass_bytes // 2 - 1, False),
                       (pass_bytes // 2, True), (pass_bytes, True)):
        checks = common.Checks()
        peers.check(checks, 'rbd-snap', 'checkpoint',
                    [_run([1], 10, copied=copied)], pass_bytes=pass_bytes)
        assert (not checks.failed) == ok, (copied, checks.failed)


def test_checks_hold_per_run_not_summed():
    """A run where a path did not run fails its check even when the
    other runs, summed, would pass.
    """
    good = _run([1], 10)
    good['counters'] = {'cow_copies': 5, 'waits': 0, 'deltas_stored': 3,
                        'deltas_packed': 3}
    bad = _run([1], 10)
    bad['checkpoints'][0]['pause_ms'] = None
    bad['counters'] = {'cow_copies': 0, 'waits': 0, 'deltas_stored': 0,
                       'deltas_packed': 0}
    checks = common.Checks()
    peers.check(checks, 'blobcr-ceph', 'checkpoint', [good, bad])
    peers.check_cow(checks, 'blobcr-ceph', [good, bad])
    peers.check_deltas(checks, 'blobcr-ceph', [good, bad], packed=True)
    assert {c['what'] for c in checks.failed} == {
        'blobcr-ceph/checkpoint: checkpoints the application wrote '
        'through, per run (min)',
        'blobcr-ceph/checkpoint: cow_copies + waits per run (min)',
        'blobcr-ceph/random4k: deltas stored per run (min)',
        'blobcr-ceph/random4k: deltas put in packs per run (min)'}


def test_workloads_write_fixed_distinct_offsets():
    args = argparse.Namespace(workloads=['checkpoint', 'random4k'],
                              size=4 << 20, block=1 << 20, seed=1,
                              random_writes=64)
    seq, rnd = peers.workloads(args)
    assert seq.offsets == [0, 1 << 20, 2 << 20, 3 << 20]
    assert len(set(rnd.offsets)) == 64 and rnd.block == 4096
    assert all(o % 4096 == 0 and o < 4 << 20 for o in rnd.offsets)
    assert peers.workloads(args)[1].offsets == rnd.offsets


def test_the_paced_workload_writes_on_a_schedule_with_data_of_its_own():
    args = argparse.Namespace(workloads=['checkpoint', 'paced'],
                              size=4 << 20, block=1 << 20, seed=1,
                              random_writes=64, paced_mib_s=8.0)
    seq, paced = peers.workloads(args)
    assert paced.offsets == seq.offsets
    assert seq.interval is None and paced.interval == 0.125
    assert (seq.stream, paced.stream) == (0, 1)
    args.paced_mib_s = 0
    with pytest.raises(SystemExit):
        peers.workloads(args)


def test_small_writes_cost_per_stored_mib_run_by_run():
    """random4k's time to durable per stored MiB over the checkpoint
    workload's, paired by run; a peer on one workload only is left out.
    """
    mib = 1 << 20

    def peer(durable, stored):
        return {'runs': [{'durable_s': d, 'stored_bytes': s}
                         for d, s in zip(durable, stored)]}
    out = {'workloads': {
        'checkpoint': {'peers': {
            'blobcr-ceph': peer([[2.0, 4.0, 3.0], [1.0]],
                                [[100 * mib] * 3, [100 * mib]]),
            'rbd-snap': peer([[1.0]], [[mib]])}},
        'random4k': {'peers': {
            'blobcr-ceph': peer([[0.5, 0.6, None], [0.3]],
                                [[10 * mib] * 3, [10 * mib]])}}}}
    got = peers.small_writes_cost(out)
    # run 1: 0.055 s/MiB against 0.03; run 2: 0.03 against 0.01
    assert got == {'blobcr-ceph': {'per_run': [1.833, 3.0],
                                   'median': 2.4165}}
    del out['workloads']['random4k']
    assert peers.small_writes_cost(out) == {}
