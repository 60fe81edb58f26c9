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

"""``blobcr-bench peers`` keeps going when one run of one peer fails.

A long all-peer run once lost everything to one RBD timeout in its
13th minute. The benchmark runs in-process here on BlobCR's local store
(real mirror processes, a real store), and one write of the second run
fails as a store's timeout would: that is the only injected part. The
run is recorded with its error, the figures come from the other runs,
the runs after it happen on the same peer, and the result is marked
invalid.
"""

import tempfile
import time

from blobcr_bench import cli
from blobcr_bench import common
from blobcr_bench import peers

RUNS = 3


def test_a_failed_run_is_recorded_and_the_others_go_on(monkeypatch):
    workdir = tempfile.mkdtemp(prefix='pf-', dir='/tmp')
    args = cli.build_parser().parse_args([
        'peers', '--peers', 'blobcr-local', '--workloads', 'checkpoint',
        '--size', '8M', '--block', '1M', '--iterations', '2',
        '--runs', str(RUNS), '--workdir', workdir])
    opened = []
    real_open, real_write = peers.BlobcrPeer.open, peers.BlobcrPeer.write

    def open_(self, path, size):
        opened.append(path)
        return real_open(self, path, size)

    def write(self, offset, data):
        if opened[-1].endswith('-checkpoint-1'):
            raise TimeoutError('injected: the store timed out')
        return real_write(self, offset, data)

    monkeypatch.setattr(peers.BlobcrPeer, 'open', open_)
    monkeypatch.setattr(peers.BlobcrPeer, 'write', write)
    result = peers.run(args, common.Log('peers', quiet=True),
                       cli.open_repository)

    assert [(f['peer'], f['workload'], f['run']) for f in
            result['failed_runs']] == [('blobcr-local', 'checkpoint', 2)]
    assert 'injected' in result['failed_runs'][0]['error']
    # The third run happened after the failed one, on the same peer.
    assert [p.rsplit('-', 1)[1] for p in opened] == ['0', '1', '2']
    figures = result['workloads']['checkpoint']['peers']['blobcr-local']
    assert len(figures['runs']) == RUNS - 1
    assert figures['slowdown_s']['n'] == RUNS - 1
    by_what = {c['what']: c for c in result['checks']}
    assert by_what['every run of every peer completed']['ok'] is False
    assert by_what['blobcr-local/checkpoint: restarts at a point in '
                   'time']['ok'] is True


def test_a_checkpoint_acknowledged_after_the_last_write_invalidates_its_run(
        monkeypatch):
    """A checkpoint whose ack comes after the workload's last write
    raced with nothing: its run is listed and left out of the figures,
    and the checks fail; with --late-runs keep it is listed and kept.
    """
    real_checkpoint = peers.BlobcrPeer.checkpoint
    opened = []
    real_open = peers.BlobcrPeer.open

    def open_(self, path, size):
        opened.append(path)
        return real_open(self, path, size)

    def slow_checkpoint(self):
        # The second run's checkpoints answer late: the store slow to
        # acknowledge, the 8 MiB pass long written by then.
        if opened[-1].endswith('-checkpoint-1'):
            time.sleep(1.5)
        return real_checkpoint(self)

    monkeypatch.setattr(peers.BlobcrPeer, 'open', open_)
    monkeypatch.setattr(peers.BlobcrPeer, 'checkpoint', slow_checkpoint)
    for late_runs in ('drop', 'keep'):
        opened.clear()
        workdir = tempfile.mkdtemp(prefix='pl-', dir='/tmp')
        args = cli.build_parser().parse_args([
            'peers', '--peers', 'blobcr-local', '--workloads', 'checkpoint',
            '--size', '8M', '--block', '1M', '--iterations', '2',
            '--runs', str(RUNS), '--workdir', workdir,
            '--late-runs', late_runs])
        result = peers.run(args, common.Log('peers', quiet=True),
                           cli.open_repository)
        invalid = result['invalid_runs']
        # The slow second run, and any other a loaded machine made late
        # (an 8 MiB pass may end before an ack there too).
        assert ('blobcr-local', 2) in [(i['peer'], i['run'])
                                       for i in invalid], invalid
        assert all(i['kept'] is (late_runs == 'keep') and
                   i['late_checkpoints'] >= 1 for i in invalid), invalid
        peers_figures = result['workloads']['checkpoint']['peers']
        if late_runs == 'drop' and len(invalid) == RUNS:
            assert 'blobcr-local' not in peers_figures     # all dropped
            continue
        figures = peers_figures['blobcr-local']
        assert len(figures['runs']) == (
            RUNS if late_runs == 'keep' else RUNS - len(invalid))
        assert sum(figures['late_checkpoints']) == (
            0 if late_runs == 'drop' else
            sum(i['late_checkpoints'] for i in invalid))
        by_what = {c['what']: c for c in result['checks']}
        assert by_what['no run had a checkpoint acknowledged after its '
                       'last write']['ok'] is (late_runs == 'keep')
