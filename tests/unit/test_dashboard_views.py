"""The Checkpoints panel's view tests (tests/dashboard/views_tests.py),
run by Django's test runner with Horizon's test settings in a process of
their own: Django is configured once per process, and the rest of the
suite must not inherit Horizon's settings.
"""

import os
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
    assert 'Ran 10 tests' in done.stderr, done.stderr[-2000:]
