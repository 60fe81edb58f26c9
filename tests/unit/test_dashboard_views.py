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

"""The Checkpoints panel's view tests (tests/dashboard/views_tests.py),
run by Django's test runner with Horizon's test settings in a process of
their own: Django is configured once per process, and the rest of the
suite must not inherit Horizon's settings.
"""

import os
import re
import subprocess
import sys

TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def test_horizon_view_tests_pass():
    env = dict(os.environ, PYTHONWARNINGS='ignore')
    env.pop('DJANGO_SETTINGS_MODULE', None)
    done = subprocess.run(
        [sys.executable, '-m', 'django', 'test', '--noinput',
         '--settings=tests.dashboard.settings', 'tests.dashboard.views_tests'],
        cwd=TOP, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-6000:]
    # Every test of the module ran (none skipped or lost to an import).
    with open(os.path.join(TOP, 'tests', 'dashboard', 'views_tests.py')) as f:
        defined = len(re.findall(r'^    def test_', f.read(), re.M))
    ran = re.search(r'^Ran (\d+) tests?', done.stderr, re.M)
    assert ran and int(ran.group(1)) == defined >= 11, done.stderr[-2000:]
