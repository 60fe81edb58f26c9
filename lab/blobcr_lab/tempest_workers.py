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

"""Tempest's test classes spread over its workers by what they cost.

Without earlier timings, stestr deals test classes to its workers in
turn. Here the classes differ by 20x (a backup class spends 100 s, most
of it in class set-up and tear-down that stestr's own timings do not
count), so one worker ran 462 s while another idled after 270 s.
:func:`plan` assigns classes longest first to the least loaded worker,
from a table (seconds per class, set-up and tear-down included,
measured from a run's subunit stream by :func:`measure`); a class not in
the table costs the table's median. :func:`write` makes the YAML that
``tempest run --worker-file`` reads.

Refresh the table after a CI run (in Tempest's virtualenv, which has
python-subunit)::

    PYTHONPATH=lab .tempest-venv/bin/python -m blobcr_lab.tempest_workers \\
        volume_api=BASETEMP/test_tempest_volume_api0/tempest/.stestr/0 \\
        with_nova=BASETEMP/test_tempest_volume_api_classe0/tempest/.stestr/0 \\
        > lab/blobcr_lab/tempest_costs.json
"""

import json
import os
import re
import statistics
import sys

COSTS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                          'tempest_costs.json')


def class_of(test_id):
    """The class a test id belongs to: ``pkg.mod.Class.test[tags]`` and
    ``setUpClass (pkg.mod.Class)`` both give ``pkg.mod.Class``.
    """
    fixture = re.match(r'^(?:setUpClass|tearDownClass) \((.+)\)$', test_id)
    if fixture:
        return fixture.group(1)
    return test_id.split('[', 1)[0].rsplit('.', 1)[0]


def load_costs(run, path=COSTS_FILE):
    """Seconds per class measured in the CI run named ``run`` (the same
    class can be skipped in one run and cost minutes in another).
    """
    with open(path) as f:
        return json.load(f).get(run, {})


def plan(test_ids, workers, costs):
    """``workers`` lists of test classes (each class on one worker: its
    set-up is shared by its tests) and the load of each, classes longest
    first onto the least loaded list. Returns ``[(load, [class, ...])]``.
    """
    if workers < 1:
        raise ValueError('workers must be at least 1, not %r' % workers)
    classes = sorted({class_of(i) for i in test_ids})
    default = statistics.median(costs.values()) if costs else 1.0
    bins = [[0.0, []] for _ in range(workers)]
    for name in sorted(classes, key=lambda c: (-costs.get(c, default), c)):
        least = min(bins, key=lambda b: (b[0], len(b[1])))
        least[0] += costs.get(name, default)
        least[1].append(name)
    return [(load, names) for load, names in bins if names]


def write(path, bins):
    """The worker file for ``tempest run --worker-file``: one anchored
    pattern per class, so no test runs on two workers.
    """
    with open(path, 'w') as f:
        for _, names in bins:
            f.write('- worker:\n')
            for name in names:
                # YAML single quotes: a regex backslash stays as it is.
                f.write("  - '^%s\\.'\n" % re.escape(name).replace("'", "''"))


def measure(stream):
    """Seconds per class from a subunit v1 stream (bytes: what stestr's
    repository keeps in ``.stestr/N``): on each
    worker, the time from the end of its previous test to the end of
    each test goes to that test's class, so class set-up and tear-down
    are counted where stestr's own timings leave them out.
    """
    import subunit
    import testtools

    ends = []

    def on_test(test):
        start, end = test['timestamps']
        worker = [t for t in test['tags'] if t.startswith('worker-')]
        if start is not None and end is not None:
            ends.append((worker[0] if worker else '', start, end, test['id']))

    result = testtools.ExtendedToStreamDecorator(
        testtools.StreamToDict(on_test))
    result.startTestRun()
    subunit.ProtocolTestCase(stream).run(result)
    result.stopTestRun()
    seconds = {}
    last = {}
    for worker, start, end, test_id in sorted(ends, key=lambda e: e[2]):
        since = last.get(worker, start)
        name = class_of(test_id)
        seconds[name] = seconds.get(name, 0.0) + (end - since).total_seconds()
        last[worker] = end
    return seconds


def main(args):
    runs = {}
    for arg in args:
        name, _, path = arg.partition('=')
        with open(path, 'rb') as f:
            runs[name] = {k: round(v, 1) for k, v in measure(f).items()}
    json.dump(runs, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write('\n')


if __name__ == '__main__':
    main(sys.argv[1:])
