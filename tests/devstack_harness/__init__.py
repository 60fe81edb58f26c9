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

"""Run the devstack plugin's phases (devstack/) without devstack.

:class:`DevstackShell` is one bash process, as stack.sh is one: it
sources functions.sh (the devstack functions the plugin calls, see its
header for what is real and what is only recorded), then whatever the
test sends it (``harness_stack_configure``, ``harness_stack_finish``,
``harness_unstack``, ``harness_clean``), and reports each command's end,
so that the test can do stack.sh's own steps in between (start
cinder-volume, make the volume type) in the same shell's lifetime.

:func:`calls` reads what the functions recorded; :func:`kill_services`
stops, by their pid files, the services run_process started and that
an unstack did not stop (a failed test).
"""

import os
import queue
import signal
import subprocess
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TREE = os.path.dirname(os.path.dirname(HERE))
FUNCTIONS = os.path.join(HERE, 'functions.sh')
PLUGIN_FILES = [os.path.join(TREE, 'devstack', name)
                for name in ('plugin.sh', 'settings', 'override-defaults')]


class PhaseFailed(AssertionError):
    """A phase exited the shell (die, or a failing command under errexit)."""


class DevstackShell(object):
    """bash running the plugin with ``env`` (devstack's globals and the
    harness's HARNESS_* variables, see functions.sh); its stderr (and the
    plugin's messages) in ``HARNESS_DIR/shell-N.log``.
    """

    _count = 0

    def __init__(self, env, errexit=True):
        DevstackShell._count += 1
        self.workdir = env['HARNESS_DIR']
        self.log = os.path.join(self.workdir,
                                'shell-%d.log' % DevstackShell._count)
        self._lines = queue.Queue()
        self._marker = 0
        with open(self.log, 'ab') as log:
            self.proc = subprocess.Popen(
                ['bash', '--noprofile', '--norc', '-s'], env=env,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                text=True, cwd=self.workdir)
        threading.Thread(target=self._read, daemon=True).start()
        self._send('source %s\nGITDIR[blobcr]=%s\n' % (FUNCTIONS, TREE))
        if errexit:
            self._send('set -o errexit\n')

    def _read(self):
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _send(self, text):
        self.proc.stdin.write(text)
        self.proc.stdin.flush()

    def output(self):
        with open(self.log, errors='replace') as f:
            return f.read()

    def run(self, command, timeout=300):
        """Run ``command``; its stdout. PhaseFailed if the shell exits."""
        self._marker += 1
        marker = '__harness_done_%d__' % self._marker
        self._send('%s\necho %s\n' % (command, marker))
        out = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(
                    timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise PhaseFailed('%s: no end after %s s; shell log:\n%s'
                                  % (command, timeout, self.output()))
            if line is None:
                self.proc.wait()
                raise PhaseFailed('%s: the shell exited with %s; log:\n%s'
                                  % (command, self.proc.returncode,
                                     self.output()))
            if line.strip() == marker:
                return ''.join(out)
            out.append(line)

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def calls(workdir, name=None):
    """The recorded calls, as tuples (function, args...), in order."""
    path = os.path.join(workdir, 'calls')
    if not os.path.exists(path):
        return []
    with open(path) as f:
        found = [tuple(line.rstrip('\n').split('\x1f')) for line in f]
    return [c for c in found if name is None or c[0] == name]


def service_pid(workdir, service):
    try:
        with open(os.path.join(workdir, 'pids', service + '.pid')) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def service_log(workdir, service):
    try:
        with open(os.path.join(workdir, 'logs', service + '.log'),
                  errors='replace') as f:
            return f.read()
    except OSError:
        return ''


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie of ours is not alive.
    try:
        with open('/proc/%d/stat' % pid) as f:
            return f.read().split(')')[-1].split()[0] != 'Z'
    except OSError:
        return False


def kill_services(workdir):
    """SIGTERM, then SIGKILL, every service with a pid file left."""
    directory = os.path.join(workdir, 'pids')
    if not os.path.isdir(directory):
        return
    pids = [service_pid(workdir, name[:-4]) for name in os.listdir(directory)
            if name.endswith('.pid')]
    pids = [pid for pid in pids if pid and alive(pid)]
    for pid in pids:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    for pid in pids:
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
