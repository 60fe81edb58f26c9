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

"""Run real blobcr-mirror and blobcr-agent processes, for benchmarks,
the demo and tests.
"""

import atexit
import configparser
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid

from blobcr_agent import conf as blobcr_conf
from blobcr_agent import control
from blobcr_agent.manager import loopdevs
from blobcr_agent.mirror import client
from blobcr_lab import fdstore


# Where an unprivileged agent's configuration goes (AgentProcess's
# _run_as): blobcr-privsep-helper reads none from elsewhere.
LAB_CONFIG_DIR = '/etc/blobcr/lab'
# sun_path holds 108 bytes with its terminating NUL.
SOCKET_PATH_MAX = 107


class ServiceProcess(object):
    """A daemon with a FUSE mount and a control socket under ``workdir``."""

    module = None
    client_class = control.Client

    def __init__(self, workdir, args, pid_namespace=False, fd_store=False,
                 command=None):
        self.workdir = workdir
        # In a PID namespace of its own, with its own /proc and mount
        # namespace (``unshare --pid --fork --mount-proc``), as services
        # in containers run: it is PID 1 there, and its FUSE mounts are
        # seen from here through /proc/PID/root (path()). --kill-child:
        # it dies with unshare.
        self.pid_namespace = pid_namespace
        self.mount = os.path.join(self.workdir, 'mnt')
        self.control = os.path.join(self.workdir, 'control.sock')
        if len(self.control.encode()) > SOCKET_PATH_MAX:
            # A deep workdir (pytest's numbered ones grow a digit with
            # time) would make bind() fail: the socket goes to a short
            # directory of its own instead, removed at exit.
            short = tempfile.mkdtemp(prefix='blobcr-ctl-')
            atexit.register(shutil.rmtree, short, True)
            self.control = os.path.join(short, 'control.sock')
        self.log = open(os.path.join(self.workdir, 'service.log'), 'ab')
        # command: the service's console script from another install
        # (blobcr_lab/service_venvs.py), not this venv's module.
        self.args = list(command or [sys.executable, '-m', self.module]) + \
            list(args)
        self.wrapper = ['unshare', '--pid', '--fork', '--mount-proc',
                        '--kill-child'] if pid_namespace else []
        self.args = self.wrapper + self.args
        self.proc = None
        self.client = None
        # A service manager's descriptor store, as systemd's with
        # FileDescriptorStoreMax= (etc/systemd/blobcr-agent.service).
        if fd_store and pid_namespace:
            raise ValueError('a descriptor store needs the service\'s PID')
        self.fd_store = fdstore.FdStore() if fd_store else None

    def start(self, timeout=60):
        if os.path.exists(self.control):
            os.unlink(self.control)
        args, pass_fds, env = self.args, (), None
        if self.fd_store is not None:
            args, pass_fds = self.fd_store.wrap(self.args)
            env = self.fd_store.env()
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=self.log,
                                     env=env, pass_fds=pass_fds)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                # The log's end in the error itself: a test's directory
                # (and the log with it) may be gone when someone reads it.
                raise RuntimeError(self.death())
            if os.path.exists(self.control) and self._mounted():
                self.client = self.client_class(self.control)
                return self
            time.sleep(0.05)
        raise RuntimeError('%s did not come up: see %s'
                           % (self.module, self.log.name))

    @property
    def pid(self):
        """The service's PID here (in a PID namespace: unshare's child),
        None if it is not running.
        """
        if self.proc is None or self.proc.poll() is not None:
            return None
        if not self.pid_namespace:
            return self.proc.pid
        try:
            with open('/proc/%d/task/%d/children'
                      % (self.proc.pid, self.proc.pid)) as f:
                children = f.read().split()
        except OSError:
            return None
        return int(children[0]) if children else None

    def path(self, path):
        """``path`` as this process sees it (its mounts), from here."""
        if not self.pid_namespace:
            return path
        pid = self.pid
        if pid is None:
            raise RuntimeError('%s is not running' % self.module)
        return '/proc/%d/root%s' % (pid, os.path.abspath(path))

    def send_signal(self, signum):
        """Send ``signum`` to the service itself (not to unshare)."""
        pid = self.pid
        if pid is not None:
            os.kill(pid, signum)

    def _mounted(self):
        try:
            mount = self.path(self.mount)
        except RuntimeError:
            return False
        return os.path.ismount(mount) or os.path.ismount(
            os.path.join(mount, 'versions'))

    def _unmount(self):
        for path in (os.path.join(self.mount, 'images'),
                     os.path.join(self.mount, 'versions'), self.mount):
            subprocess.run(['fusermount3', '-u', '-z', path], check=False,
                           capture_output=True)

    def _close_client(self):
        if self.client is not None:
            self.client.close()
            self.client = None

    def death(self, lines=30):
        """None while the process runs (or was stopped here); else its
        exit status and the end of its log, to say why a run failed.
        """
        if self.proc is None or self.proc.poll() is None:
            return None
        self.log.flush()
        with open(self.log.name, 'rb') as f:
            tail = f.read().decode(errors='replace').splitlines()[-lines:]
        return '%s exited with status %s; end of %s:\n%s' % (
            self.module, self.proc.returncode, self.log.name,
            '\n'.join(tail))

    def kill(self):
        """SIGKILL and nothing else, as a service manager's kill: the
        dead mounts stay for the next start to clear (or stop_all).
        """
        self._close_client()
        self.send_signal(signal.SIGKILL)
        self.proc.kill()
        self.proc.wait()

    def restart(self, signum, timeout=60):
        """``signum`` (SIGTERM or SIGKILL), wait for the exit, start
        again, as a service manager's restart: nothing cleaned between.
        """
        self._close_client()
        self.send_signal(signum)
        self.proc.wait(timeout)
        return self.start(timeout)

    def stop(self, timeout=60):
        """SIGTERM and wait; returns the exit status."""
        return stop_all([self], timeout)[0]

    def _terminate(self):
        """SIGTERM if running; True if it was sent."""
        if self.proc is None or self.proc.poll() is not None:
            return False
        self._close_client()
        if self.pid_namespace:
            self.send_signal(signal.SIGTERM)
        else:
            self.proc.terminate()
        return True

    def _reap(self, deadline):
        try:
            self.proc.wait(timeout=max(0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.send_signal(signal.SIGKILL)
            self.proc.kill()
            self.proc.wait()
        self._unmount()
        self._forget()

    def _forget(self):
        """The manager forgets the service: a kept connection ends with
        its mount (already unmounted) and its stored descriptor.
        """
        if self.fd_store is not None:
            self.fd_store.close()
            self.fd_store = fdstore.FdStore()


def stop_all(services, timeout=60):
    """Stop ``services`` at once (SIGTERM to all, then wait up to
    ``timeout`` for all, SIGKILL to those left): an agent takes a few
    seconds to leave RabbitMQ, and one after another the test session's
    agents took most of a minute. Returns their exit statuses (None for
    one never started).
    """
    stopping = [s for s in services if s._terminate()]
    deadline = time.monotonic() + timeout
    for service in stopping:
        service._reap(deadline)
    for service in services:
        if service.proc is not None and service not in stopping:
            service._unmount()          # killed: its dead mounts
            service._forget()
    return [None if s.proc is None else s.proc.returncode for s in services]


class MirrorProcess(ServiceProcess):
    """A blobcr-mirror process."""

    module = 'blobcr_agent.cmd.mirror'
    client_class = client.MirrorClient

    def __init__(self, workdir, store_args, extra=()):
        super().__init__(workdir, [])
        self.cache = os.path.join(self.workdir, 'cache')
        self.args += ['--mount', self.mount, '--cache', self.cache,
                      '--control', self.control] + list(store_args) + \
            list(extra)


class AgentProcess(ServiceProcess):
    """A blobcr-agent process with its own configuration file.

    ``settings`` are extra ``{section: {option: value}}`` merged into the
    generated file (transport_url, [proxy] secrets, quiesce...).
    """

    module = 'blobcr_agent.cmd.agent'

    def __init__(self, workdir, backend, settings=None, pid_namespace=False,
                 fd_store=False, command=None, user=None):
        super().__init__(workdir, [], pid_namespace, fd_store, command)
        self.user = user
        self.state_path = os.path.join(self.workdir, 'state')
        conf = store_conf(backend)
        conf.setdefault('agent', {}).update(
            state_path=self.state_path, mountpoint=self.mount,
            admin_socket=self.control, rpc_enabled='false')
        conf.setdefault('proxy', {}).update(port='0')
        for section, values in (settings or {}).items():
            conf.setdefault(section, {}).update(values)
        self.conffile = os.path.join(self.workdir, 'blobcr.conf')
        if user:
            self._run_as(user, conf)
        write_conf(self.conffile, conf)
        self.args += ['--config-file', self.conffile]

    def _run_as(self, user, conf):
        """Run the agent as ``user`` (made by tools/agent-user.sh), as
        etc/systemd/blobcr-agent.service does with User=: its own
        directories become the user's; its configuration stays root's,
        under /etc/blobcr (the privileged daemon reads it, and
        blobcr-privsep-helper takes no file from elsewhere); the daemon
        starts through sudo, whose rule the same script wrote.
        """
        pw = pwd.getpwnam(user)
        os.makedirs(LAB_CONFIG_DIR, mode=0o755, exist_ok=True)
        self.conffile = os.path.join(LAB_CONFIG_DIR, 'agent-%s.conf'
                                     % uuid.uuid4().hex)
        atexit.register(_remove, self.conffile)
        helper = os.path.join(os.path.dirname(sys.executable),
                              'blobcr-privsep-helper')
        conf.setdefault(blobcr_conf.PRIVILEGED_SECTION, {}).update(
            helper_command='sudo %s --config-file %s'
            % (helper, self.conffile))
        for path in (self.workdir, os.path.dirname(self.control)):
            os.chown(path, pw.pw_uid, pw.pw_gid)
        if self.fd_store is not None:
            self.fd_store.allow(pw.pw_uid)
        at = len(self.wrapper)
        self.args = self.args[:at] + [
            'setpriv', '--reuid', str(pw.pw_uid), '--regid',
            str(pw.pw_gid), '--init-groups', '--'] + self.args[at:]

    # An agent SIGKILLed (by a test, or here when it does not stop in
    # time) leaves its loop devices for the next agent to release: at a
    # stop the harness releases them itself, so none outlives it.

    def _terminate(self):
        sent = super()._terminate()
        if not sent:
            self._release_loop_devices()
        return sent

    def _reap(self, deadline):
        super()._reap(deadline)
        self._release_loop_devices()

    def _release_loop_devices(self):
        loopdevs.LoopDevices(self.state_path,
                             os.path.join(self.mount, 'images')).release_all()

    def proxy_port(self):
        with open(os.path.join(self.state_path, 'proxy.port')) as f:
            return int(f.read())


def _remove(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def store_conf(backend):
    """Configuration sections that open the same store as ``backend``."""
    if backend.name == 'local':
        return {'repository': {'backend': 'local'},
                'local_store': {'path': backend.root}}
    return {'repository': {'backend': 'rados'},
            'rados': {'conffile': backend.conffile,
                      'namespace': backend.namespace}}


def write_conf(path, sections):
    parser = configparser.ConfigParser(interpolation=None)
    for section, values in sections.items():
        parser[section] = {k: str(v) for k, v in values.items()}
    with open(path, 'w') as f:
        parser.write(f)


def store_args(backend):
    """blobcr-mirror arguments that open the same store as ``backend``."""
    if backend.name == 'local':
        return ['--backend', 'local', '--store', backend.root]
    conf = os.path.join(os.path.dirname(backend.conffile),
                        'blobcr-%s.conf' % backend.namespace)
    write_conf(conf, store_conf(backend))
    return ['--config-file', conf]
