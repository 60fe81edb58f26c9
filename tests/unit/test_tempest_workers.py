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

"""Tempest's classes spread over workers by cost (blobcr_lab/
tempest_workers.py): every selected test on exactly one worker, loads
within the greedy bound, and the costs measured from a subunit stream.
"""

import json
import os
import re
import statistics
import subprocess

from hypothesis import given
from hypothesis import strategies as st
import pytest
import yaml

from blobcr_lab import tempest
from blobcr_lab import tempest_workers

NAMES = st.from_regex(r'[a-z][a-z0-9_]{0,6}', fullmatch=True)
CLASSES = st.lists(st.tuples(NAMES, NAMES), min_size=1, max_size=30,
                   unique=True).map(
    lambda pairs: ['pkg.%s.%s' % p for p in pairs])


@given(classes=CLASSES, tests=st.integers(1, 4), workers=st.integers(1, 6),
       data=st.data())
def test_every_test_runs_on_exactly_one_worker(tmp_path_factory, classes,
                                               tests, workers, data):
    costs = {c: data.draw(st.floats(0.1, 500)) for c in classes
             if data.draw(st.booleans())}
    # Some ids have Tempest's [id-...] tags, some are class fixtures.
    ids = ['%s.test_%d[id-%d]' % (c, n, n) for c in classes
           for n in range(tests)] + ['setUpClass (%s)' % classes[0]]
    bins = tempest_workers.plan(ids, workers, costs)
    assert 1 <= len(bins) <= workers
    placed = [c for _, names in bins for c in names]
    assert sorted(placed) == sorted(set(classes))
    # Longest first onto the least loaded: no worker ends more than one
    # class past the mean (the greedy schedule's bound).
    default = statistics.median(costs.values()) if costs else 1.0
    cost = [costs.get(c, default) for c in classes]
    total = sum(cost)
    assert max(load for load, _ in bins) <= total / workers + max(cost) \
        + 1e-6
    path = str(tmp_path_factory.mktemp('w') / 'workers.yaml')
    tempest_workers.write(path, bins)
    with open(path) as f:
        patterns = [w['worker'] for w in yaml.safe_load(f)]
    for test_id in ids:
        matched = [n for n, pats in enumerate(patterns)
                   if any(re.search(p, test_id) for p in pats)]
        if test_id.startswith('setUpClass'):
            continue    # stestr lists no fixtures; Tempest runs them
        assert len(matched) == 1, (test_id, matched)


def test_a_class_named_like_the_start_of_another_is_its_own():
    bins = tempest_workers.plan(['p.m.Foo.test_a', 'p.m.FooBar.test_b'], 2,
                                {'p.m.Foo': 5.0, 'p.m.FooBar': 4.0})
    assert sorted(names for _, names in bins) == [['p.m.Foo'],
                                                  ['p.m.FooBar']]


def test_no_worker_is_refused():
    with pytest.raises(ValueError):
        tempest_workers.plan(['p.m.C.test'], 0, {})


def test_the_shipped_costs_have_both_ci_runs():
    for run in ('volume_api', 'with_nova'):
        costs = tempest_workers.load_costs(run)
        assert len(costs) >= 5 and all(v >= 0 for v in costs.values())


STREAM = '''time: 2026-11-29 02:00:00.000000Z
tags: worker-0
test: a.m.X.test_1[id-1]
time: 2026-11-29 02:00:10.000000Z
successful: a.m.X.test_1[id-1]
tags: -worker-0
tags: worker-1
test: a.m.Z.test_1
time: 2026-11-29 02:00:13.000000Z
successful: a.m.Z.test_1
tags: -worker-1
time: 2026-11-29 02:00:10.000000Z
tags: worker-0
test: a.m.X.test_2
time: 2026-11-29 02:00:15.000000Z
successful: a.m.X.test_2
tags: -worker-0
time: 2026-11-29 02:00:20.000000Z
tags: worker-0
test: setUpClass (a.m.Y)
time: 2026-11-29 02:00:30.000000Z
skip: setUpClass (a.m.Y)
tags: -worker-0
'''


@pytest.mark.skipif(
    not os.path.exists(os.path.join(tempest.venv(), 'bin', 'python')),
    reason="no Tempest virtualenv (python-subunit is Tempest's): "
           'tools/install-tempest.sh installs it')
def test_costs_come_from_the_gaps_on_each_worker(tmp_path):
    stream = tmp_path / '0'
    stream.write_text(STREAM)
    lab = os.path.dirname(os.path.dirname(tempest_workers.__file__))
    out = subprocess.run(
        [os.path.join(tempest.venv(), 'bin', 'python'), '-m',
         'blobcr_lab.tempest_workers', 'demo=%s' % stream],
        env=dict(os.environ, PYTHONPATH=lab), capture_output=True,
        text=True, check=True).stdout
    # X: 10 s, then 5 s; Y: from X's end on worker-0 (15 s) to 30 s,
    # its set-up wait included; Z: its own 3 s on worker-1.
    assert json.loads(out) == {'demo': {'a.m.X': 15.0, 'a.m.Y': 15.0,
                                        'a.m.Z': 3.0}}
