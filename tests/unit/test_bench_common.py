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

"""The pieces blobcr-bench's benchmarks share: summaries, checks, the
random data pattern, rewrite orders and restart traces.
"""

import io

import pytest

from blobcr_bench import checkpoint
from blobcr_bench import common
from blobcr_bench import restart

CHUNK = 256 * 1024


def test_summary_gives_median_and_spread():
    s = common.summary([5, 1, 4, 2, 3])
    assert s['median'] == 3
    assert (s['min'], s['max']) == (1, 5)
    assert s['p10'] == 1.4 and s['p90'] == 4.6
    assert s['n'] == 5
    assert common.summary([]) is None
    assert common.summary([None, 2])['median'] == 2


def test_ratio_refuses_a_zero_baseline():
    assert common.ratio(1, 4) == 0.25
    assert common.ratio(1, 0) is None
    assert common.ratio(None, 1) is None


def test_checks_fail_on_zero_and_say_why():
    checks = common.Checks()
    checks.require('copies', 3, 'copied')
    checks.require('waits', 0, 'the writer never waited')
    checks.require_true('stable', False, 'not stable', value=[1])
    failed = checks.failed
    assert [c['what'] for c in failed] == ['waits', 'stable']
    message = common.failure_message('checkpoint', failed)
    assert 'FAILED' in message
    assert 'waits = 0: the writer never waited' in message


def test_pattern_chunks_never_repeat():
    pattern = common.Pattern(4 << 20, laps=4, windows=32)
    seen = set()
    # Eight epochs of an image four times the pattern: all distinct.
    for epoch in range(8):
        for offset in range(0, 16 << 20, CHUNK):
            chunk = bytes(pattern.block(offset, CHUNK, epoch))
            assert len(chunk) == CHUNK
            assert chunk not in seen
            seen.add(chunk)
    with pytest.raises(ValueError):
        pattern.block(16 << 20, CHUNK, 0)          # a fifth lap


def test_pattern_streams_share_no_chunk():
    # Three writers of a benchmark (variants), each its epochs: no chunk
    # is written twice, across streams or epochs.
    pattern = common.Pattern(2 << 20, windows=16, streams=3)
    seen = set()
    for stream in range(3):
        for epoch in range(pattern.epochs):
            for offset in range(0, 2 << 20, CHUNK):
                chunk = bytes(pattern.block(offset, CHUNK, epoch, stream))
                assert chunk not in seen, (stream, epoch, offset)
                seen.add(chunk)
    with pytest.raises(ValueError):
        pattern.block(0, CHUNK, 0, stream=3)


def test_block_orders():
    assert checkpoint.block_order(4, 'sequential', 1) == [0, 1, 2, 3]
    assert checkpoint.block_order(4, 'reverse', 1) == [3, 2, 1, 0]
    shuffled = checkpoint.block_order(64, 'random', 7)
    assert sorted(shuffled) == list(range(64))
    assert shuffled != list(range(64))
    assert shuffled == checkpoint.block_order(64, 'random', 7)


def test_instance_traces_differ_from_the_recorded_one():
    base = restart.base_runs(1024, 0.25, 42)
    touched = {c for r in base for c in r}
    assert len(touched) >= 256
    recorder = restart.instance_runs(base, 1024, 0, 0.1, 8)
    other = restart.instance_runs(base, 1024, 1, 0.1, 8)
    a, b = restart.first_read_order(recorder), restart.first_read_order(other)
    assert a != b
    # Mostly the same chunks, some of each instance's own.
    common_chunks = set(a) & set(b)
    assert 0.7 * len(a) < len(common_chunks) < len(a)
    # Every trace read is 64 KiB inside a chunk of its runs.
    trace = restart.trace_of(other)
    assert {o // CHUNK for o in trace} == set(b)


def test_log_is_structured_off_a_tty():
    out = io.StringIO()
    log = common.Log('checkpoint', stream=out)
    log.event('run', run=1, ack_ms=2.5, text='x y')
    line = out.getvalue().strip()
    assert 'bench=checkpoint event=run run=1 ack_ms=2.5 text="x y"' in line
    assert line.startswith('ts=')
    rate = log.rate('write', 10 << 20)
    rate.add(1 << 20)
    rate.finish()
