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

"""blobcr_bench/metadata.py (issue 10) on a real TCG guest: one run, two
checkpoints per route; only the counts are asserted, no timing. Its
verdict on a route without checkpoints or with an uncommitted version is
checked on made-up samples.
"""

import json
import os
import subprocess
import sys

from blobcr_bench import metadata


def test_bench_metadata_checkpoints_through_both_routes(tmp_path):
    proc = subprocess.run(
        [sys.executable, '-m', 'blobcr_bench.metadata', '--runs', '1',
         '--requests', '2', '--json', '--workdir', str(tmp_path)],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result['valid'] is True and result['errors'] == []
    for route in ('metadata', 'direct'):
        got = result['routes'][route]
        assert got['checkpoints'] == got['committed'] == 2, result
        assert got['request_to_ack_ms']['n'] == 2
        assert got['agent_downtime_ms']['n'] == 2
    # The metadata route's requests all went through the relay.
    assert result['relayed'] == 2
    assert result['ratio_metadata_direct'] > 0
    assert os.listdir(str(tmp_path)) == []


def test_verdict_without_checkpoints_or_commits():
    tool = metadata
    run = [{'route': 'metadata', 'ms': 10.0, 'downtime_ms': 5.0,
            'version': 2}]
    assert tool.summarize([run], {2})['valid'] is False     # no direct
    run.append({'route': 'direct', 'ms': 8.0, 'downtime_ms': 5.0,
                'version': 3})
    assert tool.summarize([run], {2})['valid'] is False     # 3 not stable
    good = tool.summarize([run], {2, 3})
    assert good['valid'] is True and good['ratio_metadata_direct'] == 1.25
