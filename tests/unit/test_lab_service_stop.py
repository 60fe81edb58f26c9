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

"""The lab's service stop (blobcr_lab.openstack.stop_services) on real
processes: a parent that honours SIGTERM but leaves a worker behind (as
cinder-volume does within a short graceful_shutdown_timeout) loses the
worker too, and a parent that ignores SIGTERM is killed at the timeout.
"""

import os
import sys
import time

from blobcr_lab import openstack

# The parent forks a worker that ignores SIGTERM, writes its pid, then
# waits; on SIGTERM the parent alone exits at once.
PARENT = r'''
import os, signal, sys, time
worker = os.fork()
if worker == 0:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        time.sleep(1)
with open(sys.argv[1], 'w') as f:
    f.write(str(worker))
if sys.argv[2] == 'ignore':
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
while True:
    time.sleep(1)
'''


def _start(tmp_path, name, mode):
    pidfile = tmp_path / (name + '.pid')
    process = openstack.ServiceProcess(
        name, [sys.executable, '-c', PARENT, str(pidfile), mode],
        dict(os.environ), str(tmp_path / (name + '.log'))).start()
    deadline = time.monotonic() + 10
    while not pidfile.exists() or not pidfile.read_text():
        assert time.monotonic() < deadline, 'the worker never started'
        time.sleep(0.02)
    return process, int(pidfile.read_text())


def _gone(pid, within=5.0):
    """The worker is gone (or a zombie its new parent has not reaped)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with open('/proc/%d/stat' % pid) as f:
                if f.read().rsplit(')', 1)[1].split()[0] == 'Z':
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def test_a_parent_that_exits_on_sigterm_takes_its_workers_along(tmp_path):
    process, worker = _start(tmp_path, 'leaves-worker', 'exit')
    try:
        started = time.monotonic()
        killed = openstack.stop_services([process], timeout=20)
        took = time.monotonic() - started
        assert killed == []
        assert took < 10, 'the stop waited for the timeout (%.1f s)' % took
        assert _gone(worker), 'the worker %d outlived the stop' % worker
    finally:
        _kill_left(worker)


def test_a_parent_that_ignores_sigterm_is_killed_at_the_timeout(tmp_path):
    process, worker = _start(tmp_path, 'stubborn', 'ignore')
    try:
        killed = openstack.stop_services([process], timeout=1)
        assert killed == ['stubborn']
        assert process.proc.returncode is not None
        assert _gone(worker), 'the worker %d outlived the stop' % worker
    finally:
        _kill_left(worker)


def _kill_left(pid):
    # Only a worker still there (a failed test): one this test started.
    if not _gone(pid, within=0.1):
        os.kill(pid, 9)
