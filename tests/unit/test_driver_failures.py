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

"""The Cinder driver's failure paths, mock-based, in milliseconds (issue
56, item 1): terminate_connection, _probe, _give_up_host,
_attached_epoch, _migrating_instance, _forget_superseded and a group
snapshot's phases, through agent timeouts, refusals mid-way (a Cinder
error, an unrebuilt remote error, an agent's builtin OSError), Nova's
os-services answers (up, down among several, forced down, unreachable
in four ways), a stale epoch, two attachments (a live migration's
rollback) and a group phase failing on one host (what is released and
forgotten, and the error Cinder sees).

Mocks by design: the real services' coverage is in
tests/integration/test_cinder_*.py; these exist to drive the failure
paths those cannot reach, fast. The cases are unittest TestCases in
Cinder's style, in driver_failures_cases.py; they run in one child
process (importing cinder's test fakes loads and monkey-patches
eventlet, which this process is better without), and each is one test
here, failing with the case's traceback.
"""

import ast
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, 'driver_failures_cases.py')
TOP = os.path.dirname(os.path.dirname(HERE))

RUNNER = r'''
import json, sys, unittest, warnings
warnings.simplefilter('ignore')
sys.path.insert(0, %r)
from tests.unit import driver_failures_cases as cases
result = unittest.TestResult()
unittest.defaultTestLoader.loadTestsFromModule(cases).run(result)
bad = {t.id(): trace for t, trace in result.failures + result.errors}
print(json.dumps({'bad': bad, 'ran': result.testsRun}))
'''


def case_names():
    """Class.test of every case, read without importing cinder here."""
    with open(CASES) as f:
        tree = ast.parse(f.read())
    return ['%s.%s' % (cls.name, func.name)
            for cls in tree.body if isinstance(cls, ast.ClassDef)
            for func in cls.body if isinstance(func, ast.FunctionDef) and
            func.name.startswith('test_')]


@pytest.fixture(scope='module')
def outcome():
    child = subprocess.run([sys.executable, '-c', RUNNER % TOP],
                           capture_output=True, text=True, timeout=300,
                           cwd=TOP)
    assert child.returncode == 0, child.stderr
    return json.loads(child.stdout.strip().splitlines()[-1])


def test_every_case_ran(outcome):
    assert outcome['ran'] == len(case_names())


@pytest.mark.parametrize('name', case_names())
def test_case(outcome, name):
    # A failed subTest's id is "Class.test_x (key=value)": the case's
    # name is before the first space.
    bad = {}
    for test_id, trace in outcome['bad'].items():
        bad.setdefault(test_id.split('.', 3)[-1].split(' ', 1)[0],
                       []).append(trace)
    assert name not in bad, bad[name]
