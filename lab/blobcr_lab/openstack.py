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

"""A real Keystone and Cinder on 127.0.0.1 for integration tests.

:class:`OpenStackStack` runs, in one work directory, the services as they
ship on PyPI (tools/install-openstack.sh installs them into the project
venv):

* a private PostgreSQL server (Debian's, run as the ``postgres`` user
  when we are root) on 127.0.0.1, holding both services' databases: see
  :class:`PostgresServer` (sqlite answered "database is locked" at once
  with several cinder processes writing);
* Keystone with fernet tokens, served by gunicorn;
* cinder-api (keystonemiddleware auth), cinder-scheduler and cinder-volume
  on the caller's RabbitMQ, with the backend sections the caller gives, one
  volume type per backend;
* glance-api (keystonemiddleware auth, served by gunicorn) with a file
  store under the work directory, in the catalog as the ``image`` service
  and named to Cinder by ``glance_api_servers``.

Identities: ``admin`` (admin of project ``admin``), ``cinder`` and
``glance`` (admin and service in project ``service``, the services' own
users) and ``demo`` (member of project ``demo``).
:meth:`OpenStackStack.openstack` runs the real ``openstack`` CLI as one
of them.

The slow constant parts (the three databases after their migrations,
Keystone's bootstrap and catalog, fernet and credential keys) are built
once and copied afterwards: see :class:`StackTemplate`.  With
BLOBCR_OPENSTACK_TEMPLATE naming a directory, templates stay there across
sessions (one per installed keystone, cinder, glance and PostgreSQL
version).

Logs: ``WORKDIR/logs/<service>.log``, one file per process (stdout and
stderr together).  No mocks: everything here is the real service.
"""

import atexit
import concurrent.futures
import contextlib
import grp
from importlib import metadata
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from blobcr_lab import agents
from blobcr_lab import hosts
from blobcr_lab import osc_server

BIN = os.path.dirname(os.path.abspath(sys.executable))
VENV = os.path.dirname(BIN)
CINDER_ETC = os.path.join(VENV, 'etc', 'cinder')
GLANCE_ETC = os.path.join(VENV, 'etc', 'glance')

REGION = 'RegionOne'
DOMAIN = 'Default'
# Fixed passwords: the template's databases hold their hashes, and nothing
# listens beyond 127.0.0.1.
PASSWORDS = {'admin': 'admin-secret', 'cinder': 'cinder-secret',
             'glance': 'glance-secret', 'demo': 'demo-secret'}
PROJECTS = {'admin': 'admin', 'cinder': 'service', 'glance': 'service',
            'demo': 'demo'}
SERVICE_USERS = ('cinder', 'glance')

TEMPLATE_ENV = 'BLOBCR_OPENSTACK_TEMPLATE'
# Bump when what a template holds changes (schema of this module, not of
# the services: their versions are in the key already).
TEMPLATE_FORMAT = 4     # 4: passwords hashed with 4 bcrypt rounds

# Debian's server binaries: /usr/lib/postgresql/<major>/bin.
POSTGRES_ROOT = '/usr/lib/postgresql'
# [DEFAULT] graceful_shutdown_timeout of the lab's oslo.service daemons
# (default 60): a SIGTERM ends them within it, not at the stop's SIGKILL.
GRACEFUL_SHUTDOWN_S = 3


class StackError(RuntimeError):
    """A step of the stack failed; the message carries the log tail."""


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def tail(path, lines=40):
    try:
        with open(path, errors='replace') as f:
            return ''.join(f.readlines()[-lines:])
    except OSError as exc:
        return '(no log: %s)\n' % exc


def run(argv, log, timeout=120, **popen):
    """Run a setup command, its output appended to ``log``.

    ``popen``: more arguments for subprocess (``user``, ``cwd``...).
    """
    with open(log, 'ab') as out:
        out.write(('$ %s\n' % ' '.join(argv)).encode())
        out.flush()
        try:
            proc = subprocess.run(argv, stdin=subprocess.DEVNULL,
                                  stdout=out, stderr=subprocess.STDOUT,
                                  timeout=timeout, check=False, **popen)
        except subprocess.TimeoutExpired:
            raise StackError('%s timed out after %s s; log %s:\n%s' % (
                argv[0], timeout, log, tail(log)))
    if proc.returncode:
        raise StackError('%s exited with %s; log %s:\n%s' % (
            ' '.join(argv), proc.returncode, log, tail(log)))


class ServiceProcess:
    """One long-running service, in its own process group.

    Stopped by its pid (SIGTERM), then its group (SIGKILL) once it
    exited or after a timeout: oslo.service and gunicorn fork workers
    that would outlive the parent.
    """

    def __init__(self, name, argv, env, log, cwd=None, **popen):
        self.name = name
        self.cwd = cwd
        self.argv = argv
        self.env = env
        self.log = log
        self.popen = popen
        self.proc = None

    def start(self):
        with open(self.log, 'ab') as out:
            self.proc = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, env=self.env, cwd=self.cwd,
                start_new_session=True, **self.popen)
        return self

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def check_running(self):
        if self.proc and self.proc.poll() is not None:
            raise StackError('%s exited with %s; log %s:\n%s' % (
                self.name, self.proc.returncode, self.log, tail(self.log)))

    def terminate(self):
        # os.kill, not send_signal: that polls, and would reap a leader
        # that just exited before wait_or_kill could kill its group.
        if self.proc and self.proc.returncode is None:
            os.kill(self.proc.pid, signal.SIGTERM)

    def wait_or_kill(self, timeout=20):
        """Wait for the exit, then SIGKILL what is left of the group;
        True if the leader itself needed the SIGKILL.

        The group goes in any case: a parent that ends within its
        graceful_shutdown_timeout may leave workers (cinder-volume's
        per-backend children, privsep helpers) behind it. The leader
        is reaped only after the group's kill, so that the group id
        cannot have been given to anyone else in between.
        """
        if not self.proc or self.proc.returncode is not None:
            return False
        exited = _wait_unreaped(self.proc.pid, timeout)
        if exited is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()
        return exited is False

    def stop(self, timeout=20):
        self.terminate()
        self.wait_or_kill(timeout)

    def kill(self):
        """SIGKILL the whole group at once, workers included, as a
        machine lost takes them: nothing shuts down cleanly.
        """
        if self.proc and self.proc.returncode is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def _wait_unreaped(pid, timeout):
    """True once child ``pid`` has exited within ``timeout`` seconds,
    leaving it unreaped (WNOWAIT): its pid, hence its group's id, stays
    ours until Popen.wait(). False if it still runs; None if something
    else reaped it (its group id is then no longer known to be ours).
    """
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        try:
            if os.waitid(os.P_PID, pid,
                         os.WEXITED | os.WNOWAIT | os.WNOHANG) is not None:
                return True
        except ChildProcessError:
            return None
        if time.monotonic() >= deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.2)


def stop_services(processes, timeout=20):
    """SIGTERM every running one of ``processes`` at once, then wait
    for them all within one ``timeout`` (SIGKILL to the groups of those
    still there); the names of the killed ones.
    """
    # No poll() here: it would reap an exited leader before its group's
    # kill (wait_or_kill).
    running = [p for p in processes if p.proc and p.proc.returncode is None]
    for process in running:
        process.terminate()
    deadline = time.monotonic() + timeout
    return [p.name for p in running
            if p.wait_or_kill(max(0.0, deadline - time.monotonic()))]


def postgres_bindir():
    """The newest PostgreSQL server installed (Debian's layout)."""
    try:
        majors = [int(name) for name in os.listdir(POSTGRES_ROOT)
                  if name.isdigit() and os.path.exists(
                      os.path.join(POSTGRES_ROOT, name, 'bin', 'postgres'))]
    except OSError:
        majors = []
    if not majors:
        raise StackError('no PostgreSQL server under %s: run '
                         'tools/install-openstack.sh' % POSTGRES_ROOT)
    return os.path.join(POSTGRES_ROOT, str(max(majors)), 'bin')


class PostgresServer:
    """A private PostgreSQL server on 127.0.0.1, for the stack's databases.

    PostgreSQL refuses to run as root: when we are root, every one of its
    programs runs as the ``postgres`` system user (set by subprocess
    itself, so the pid held is the postmaster's, with no runuser or su in
    between), in a directory of its own that this user owns, made under
    the system temp dir (pytest's directories are 0700 root) and removed
    by :meth:`remove`.  It listens on a free port of 127.0.0.1 only, with
    no unix socket; initdb's pg_hba.conf with trust admits loopback (and
    replication, for :meth:`snapshot`) only.  Durability is off (fsync,
    synchronous commit): the data are thrown away with the stack.
    Logs go to ``log`` (the server's stderr).
    """

    USER = 'postgres'  # the superuser initdb makes; the services use it
    SETTINGS = {
        'listen_addresses': '127.0.0.1',
        'unix_socket_directories': '',
        'fsync': 'off',
        'synchronous_commit': 'off',
        'full_page_writes': 'off',
        # A pool per service process (oslo.db: 5, overflow 50).
        'max_connections': 300,
        'shared_buffers': '64MB',
        'min_wal_size': '2MB',
    }

    def __init__(self, log):
        self.bindir = postgres_bindir()
        self.log = log
        self.port = free_port()
        self.owner = pwd.getpwnam('postgres') if os.geteuid() == 0 else None
        self.directory = None
        self.process = None

    @property
    def datadir(self):
        return os.path.join(self.directory, 'data')

    def url(self, database):
        """The SQLAlchemy URL of ``database`` (oslo.db's connection)."""
        return 'postgresql+psycopg2://%s@127.0.0.1:%d/%s' % (
            self.USER, self.port, database)

    def _as_owner(self):
        popen = {'cwd': self.directory}
        if self.owner:
            popen.update(user=self.owner.pw_uid, group=self.owner.pw_gid,
                         extra_groups=[])
        return popen

    def _make_directory(self):
        self.directory = tempfile.mkdtemp(prefix='blobcr-openstack-pg-')
        if self.owner:
            os.chown(self.directory, self.owner.pw_uid, self.owner.pw_gid)

    def _tool(self, name):
        return os.path.join(self.bindir, name)

    def init(self):
        """A new, empty cluster."""
        self._make_directory()
        run([self._tool('initdb'), '-D', self.datadir, '-U', self.USER,
             '-A', 'trust', '-E', 'UTF8', '--locale=C.UTF-8', '--no-sync',
             # 1 MiB WAL segments, not 16: a smaller template to copy.
             '--wal-segsize=1'],
            self.log, **self._as_owner())

    def init_from(self, datadir):
        """A copy of a stopped cluster's data directory, owner included."""
        self._make_directory()
        run(['cp', '-a', datadir, self.datadir], self.log)
        if self.owner and os.stat(self.datadir).st_uid != self.owner.pw_uid:
            owner = '%d:%d' % (self.owner.pw_uid, self.owner.pw_gid)
            run(['chown', '-R', owner, self.datadir], self.log)

    def start(self, timeout=60):
        """Start the postmaster; return once it accepts connections."""
        settings = dict(self.SETTINGS, port=self.port)
        argv = [self._tool('postgres'), '-D', self.datadir]
        for name, value in settings.items():
            argv += ['-c', '%s=%s' % (name, value)]
        self.process = ServiceProcess('postgres', argv, dict(os.environ),
                                      self.log, **self._as_owner()).start()
        import psycopg2
        deadline = time.monotonic() + timeout
        while True:
            self.process.check_running()
            try:
                self.connect('postgres').close()
                return self
            except psycopg2.OperationalError as exc:
                if time.monotonic() > deadline:
                    raise StackError('postgres not accepting connections '
                                     'after %s s (%s); log %s:\n%s' % (
                                         timeout, exc, self.log,
                                         tail(self.log)))
            time.sleep(0.05)

    def connect(self, database):
        """A psycopg2 connection to ``database``."""
        import psycopg2
        return psycopg2.connect(host='127.0.0.1', port=self.port,
                                user=self.USER, dbname=database,
                                connect_timeout=5)

    def execute(self, database, *statements):
        """Run SQL statements, each in its own transaction (autocommit:
        CREATE DATABASE needs it), on ``database``.
        """
        with contextlib.closing(self.connect(database)) as db:
            db.autocommit = True
            with db.cursor() as cursor:
                for statement in statements:
                    cursor.execute(statement)

    def check_running(self):
        if self.process:
            self.process.check_running()

    def stop(self, timeout=20):
        """Stop the postmaster by its pid.

        Fast shutdown (SIGINT, as pg_ctl stop -m fast sends), then
        immediate (SIGQUIT), then SIGKILL to its process group.

        Returns the signal that stopped it (None if it was not running).
        """
        proc = self.process.proc if self.process else None
        if not proc or proc.poll() is not None:
            return None
        for sig, wait in ((signal.SIGINT, timeout), (signal.SIGQUIT, 5)):
            proc.send_signal(sig)
            try:
                proc.wait(wait)
                return sig
            except subprocess.TimeoutExpired:
                pass
        # Not reaped yet: the group is still ours (see ServiceProcess).
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return signal.SIGKILL

    def remove(self):
        if self.directory:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None

    def snapshot(self, target, *statements):
        """Copy the running cluster to ``target``, consistently.

        The copy is stopped cleanly after ``statements`` ran on it (in
        database postgres).

        pg_basebackup copies it online; a second server on the copy then
        recovers it, runs the statements and shuts down (fast, so with a
        checkpoint).
        """
        copy = PostgresServer(self.log)
        copy._make_directory()
        try:
            run([self._tool('pg_basebackup'), '-h', '127.0.0.1',
                 '-p', str(self.port), '-U', self.USER, '-D', copy.datadir,
                 '-X', 'stream', '-c', 'fast', '--no-sync'],
                self.log, **copy._as_owner())
            copy.start()
            try:
                copy.execute('postgres', *statements)
            finally:
                stopped = copy.stop()
            if stopped != signal.SIGINT:
                raise StackError('the copy of postgres did not shut down '
                                 'cleanly (%s); log %s:\n%s' % (
                                     stopped, self.log, tail(self.log)))
            os.remove(os.path.join(copy.datadir, 'backup_manifest'))
            run(['cp', '-a', copy.datadir, target], self.log)
        finally:
            copy.remove()


def installed_versions():
    versions = {name: metadata.version(name)
                for name in ('keystone', 'cinder', 'glance')}
    versions['postgres'] = os.path.basename(
        os.path.dirname(postgres_bindir()))
    return versions


class StackTemplate:
    """The constant parts of a stack, to copy instead of rebuilding.

    ``pgdata/``, the data directory of a cleanly stopped PostgreSQL
    cluster (owned by the user the server ran as) holding the databases
    ``keystone`` (migrated, bootstrapped, with the projects, users, roles,
    services and endpoints), ``cinder`` (migrated, before any service
    ran) and ``glance`` (migrated); ``fernet-keys/``,
    ``credential-keys/`` and ``meta.json`` with the ports the endpoints
    were registered with: a copy rewrites them to its own ports.
    """

    COPIED = ('fernet-keys', 'credential-keys')

    def __init__(self, directory):
        self.directory = directory

    @classmethod
    def key(cls):
        versions = installed_versions()
        return 'keystone-%s-cinder-%s-glance-%s-postgres-%s-format-%d' % (
            versions['keystone'], versions['cinder'], versions['glance'],
            versions['postgres'], TEMPLATE_FORMAT)

    @property
    def pgdata(self):
        return os.path.join(self.directory, 'pgdata')

    def exists(self):
        return os.path.exists(os.path.join(self.directory, 'meta.json'))

    def meta(self):
        with open(os.path.join(self.directory, 'meta.json')) as f:
            return json.load(f)

    def copy_to(self, workdir):
        """The keys (the cluster: see PostgresServer.init_from)."""
        for name in self.COPIED:
            shutil.copytree(os.path.join(self.directory, name),
                            os.path.join(workdir, name))

    def save(self, staging, ports):
        """Publish a template built in ``staging`` (first writer wins)."""
        with open(os.path.join(staging, 'meta.json'), 'w') as f:
            json.dump({'ports': ports, 'versions': installed_versions()}, f)
        os.makedirs(os.path.dirname(self.directory), exist_ok=True)
        try:
            os.rename(staging, self.directory)
        except OSError:
            # Another session published the same template meanwhile.
            shutil.rmtree(staging, ignore_errors=True)


_session_template_root = None


def template_root():
    """BLOBCR_OPENSTACK_TEMPLATE, or a directory for this process only."""
    global _session_template_root
    keep = os.environ.get(TEMPLATE_ENV)
    if keep:
        return keep
    if _session_template_root is None:
        _session_template_root = tempfile.mkdtemp(
            prefix='blobcr-openstack-template-')
        atexit.register(shutil.rmtree, _session_template_root, True)
    return _session_template_root


def rewrite_endpoint_ports(postgres, ports, database='keystone'):
    """Point the catalog's endpoints at this stack's ports.

    ``ports`` maps each port the template was registered with to the new
    one (all in one pass: a new port may be another's old one); done in
    Keystone's database before Keystone starts (no cache).  Returns the
    number of endpoints.
    """
    def replace(match):
        return '%s:%d' % (match.group(1), ports[int(match.group(2))])
    with contextlib.closing(postgres.connect(database)) as db, db:
        with db.cursor() as cursor:
            cursor.execute('SELECT id, url FROM endpoint')
            rows = cursor.fetchall()
            for endpoint_id, url in rows:
                new = re.sub(r'^(https?://127\.0\.0\.1):(\d+)', replace,
                             url)
                cursor.execute('UPDATE endpoint SET url = %s WHERE id = %s',
                               (new, endpoint_id))
    return len(rows)


class OpenStackStack:
    """Keystone, cinder-api, cinder-scheduler, cinder-volume, glance-api.

    ``backends`` is ``{section: {option: value}}``: each becomes a section
    of cinder.conf, is listed in ``enabled_backends`` and gets a volume
    type of the same name whose ``volume_backend_name`` extra spec is the
    section's ``volume_backend_name`` (the section name if absent).  The
    first backend's type is the default one.  ``extra_conf`` adds or
    overrides cinder.conf options (same shape, sections included).

    ``backup_host``: also run cinder-backup (the POSIX driver, into
    ``backups/``) as that host: a generic backup connects the volume on
    the backup service's host, so a BlobCR agent must serve that name.
    """

    def __init__(self, workdir, transport_url, backends, extra_conf=None,
                 cinder_host='cinder-1', template=None, debug=False,
                 backup_host=None):
        if not backends:
            raise ValueError('at least one backend section is needed')
        self.workdir = os.path.abspath(workdir)
        self.transport_url = transport_url
        self.backends = {name: dict(options)
                         for name, options in backends.items()}
        self.extra_conf = extra_conf or {}
        self.cinder_host = cinder_host
        self.backup_host = backup_host
        self.debug = debug
        self.template = template or StackTemplate(
            os.path.join(template_root(), StackTemplate.key()))
        self.logdir = os.path.join(self.workdir, 'logs')
        self.keystone_port = None
        self.cinder_port = None
        self.glance_port = None
        self.processes = {}
        self.postgres = None
        self.timings = {}
        self.from_template = None
        self._sessions = {}
        self._osc_socket = None     # the CLI server's (osc_server.py)

    # -- paths and urls -------------------------------------------------

    def path(self, *parts):
        return os.path.join(self.workdir, *parts)

    @property
    def auth_url(self):
        return 'http://127.0.0.1:%d/v3' % self.keystone_port

    @property
    def cinder_url(self):
        return 'http://127.0.0.1:%d' % self.cinder_port

    @property
    def glance_url(self):
        return 'http://127.0.0.1:%d' % self.glance_port

    def backend_name(self, section):
        return self.backends[section].get('volume_backend_name', section)

    # -- start ------------------------------------------------------------

    def _timed(self, step, func, *args):
        began = time.monotonic()
        result = func(*args)
        self.timings[step] = round(time.monotonic() - began, 2)
        return result

    def start(self):
        """Start every service; return self once volumes can be created."""
        began = time.monotonic()
        os.makedirs(self.logdir, exist_ok=True)
        self.keystone_port = free_port()
        self.cinder_port = free_port()
        self.glance_port = free_port()
        self.postgres = PostgresServer(os.path.join(self.logdir,
                                                    'postgres.log'))
        self._write_keystone_conf()
        self._write_cinder_conf()
        self._write_glance_conf()
        self.from_template = self.template.exists()
        try:
            self._timed('postgres up', self._start_postgres)
            if self.from_template:
                self._timed('copy template', self._from_template)
                self._start_services()
                self._timed('keystone up', self._wait_keystone)
            else:
                self._cold_start()
            self._timed('cinder-volume rpc', self._wait_volume_rpc)
            self._start('cinder-scheduler')
            self._timed('cinder up', self._wait_cinder)
            self._timed('volume types', self._create_volume_types)
            self._timed('glance up', self._wait_glance)
            if os.environ.get('BLOBCR_OSC_FORK', '1') != '0':
                self._timed('openstack CLI', self._start_osc_server)
        except BaseException:
            self.stop()
            raise
        self.timings['total'] = round(time.monotonic() - began, 2)
        steps = ', '.join('%s %.1f s' % item for item in self.timings.items()
                          if item[0] != 'total')
        sys.stderr.write('openstack stack started in %.1f s (%s; %s)\n' % (
            self.timings['total'],
            'from template' if self.from_template else 'cold', steps))
        return self

    def _cold_start(self):
        root = os.path.dirname(self.template.directory)
        os.makedirs(root, exist_ok=True)
        staging = tempfile.mkdtemp(prefix='.staging-', dir=root)
        try:
            self._timed('databases and keys', self._build)
            self._start_services()
            self._timed('keystone up', self._wait_keystone)
            self._timed('register identities', self._register)
            self._timed('save template', self._save_template, staging)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _write_keystone_conf(self):
        agents.write_conf(self.path('keystone.conf'), {
            'DEFAULT': {'debug': self.debug, 'use_stderr': True},
            'database': {'connection': self.postgres.url('keystone')},
            'token': {'provider': 'fernet'},
            'fernet_tokens': {'key_repository': self.path('fernet-keys')},
            'fernet_receipts': {'key_repository': self.path('fernet-keys')},
            'credential': {'key_repository': self.path('credential-keys')},
            # bcrypt's fewest rounds: Keystone hashes every password it
            # checks, and at the default 12 rounds the tests' logins
            # (each CLI call, Tempest's users per test class) kept it busy
            # on one of the two cores. A test stack; not for a cloud.
            'identity': {'password_hash_rounds': 4},
        })
        # Keystone parses sys.argv with oslo.config: gunicorn gets its
        # settings from this file, not from its command line (any option
        # there, even --config, is an error for Keystone).
        with open(self.path('gunicorn.conf.py'), 'w') as f:
            f.write('bind = %r\n' % ('127.0.0.1:%d' % self.keystone_port)
                    + 'workers = 1\nthreads = 4\ntimeout = 120\n'
                    + 'pidfile = %r\n' % self.path('keystone.pid')
                    + "wsgi_app = 'keystone.wsgi.api:application'\n"
                    + 'control_socket_disable = True\n')

    def _write_cinder_conf(self):
        def authentication(user):
            return {'auth_type': 'password', 'auth_url': self.auth_url,
                    'username': user, 'password': PASSWORDS[user],
                    'project_name': PROJECTS[user],
                    'user_domain_name': DOMAIN,
                    'project_domain_name': DOMAIN}
        helper = '%s --config-file %s' % (
            os.path.join(BIN, 'privsep-helper'), self.path('cinder.conf'))
        sections = {
            'DEFAULT': {
                'debug': self.debug,
                'use_stderr': True,
                'host': self.cinder_host,
                'my_ip': '127.0.0.1',
                'transport_url': self.transport_url,
                'auth_strategy': 'keystone',
                'state_path': self.path('cinder-state'),
                'api_paste_config': os.path.join(CINDER_ETC,
                                                 'api-paste.ini'),
                'resource_query_filters_file': os.path.join(
                    CINDER_ETC, 'resource_filters.json'),
                'rootwrap_config': os.path.join(CINDER_ETC,
                                                'rootwrap.conf'),
                'osapi_volume_listen': '127.0.0.1',
                'osapi_volume_listen_port': self.cinder_port,
                'osapi_volume_workers': 1,
                'enabled_backends': ','.join(self.backends),
                'default_volume_type': next(iter(self.backends)),
                'glance_api_servers': self.glance_url,
                # "openstack image create --volume V --force" of an
                # attached volume (the driver uploads a live checkpoint).
                'enable_force_upload': True,
                # cinder-volume stopped only at the SIGKILL, 20 s later.
                'graceful_shutdown_timeout': GRACEFUL_SHUTDOWN_S,
            },
            'database': {'connection': self.postgres.url('cinder')},
            'oslo_concurrency': {'lock_path': self.path('cinder-locks')},
            'keystone_authtoken': dict(authentication('cinder'),
                                       www_authenticate_uri=self.auth_url,
                                       region_name=REGION),
            'service_user': dict(authentication('cinder'),
                                 send_service_user_token=True),
            # Cinder's privileged calls to Nova (its external events, and
            # the driver's question whether a compute host is down before
            # it gives that host up: blobcr_cinder/compute_hosts.py).
            'nova': dict(authentication('cinder'), region_name=REGION),
            # Cinder inspects image formats in its privsep daemon (before
            # any copy of an image to a volume), and cinder-backup asks
            # os-brick's for its connector: the venv's helper, not the
            # default "sudo cinder-rootwrap ... privsep-helper".
            'cinder_sys_admin': {'helper_command': helper},
            'privsep_osbrick': {'helper_command': helper},
        }
        if self.backup_host:
            os.makedirs(self.path('backups'), exist_ok=True)
            sections['DEFAULT'].update({
                'backup_driver': 'cinder.backup.drivers.posix.'
                                 'PosixBackupDriver',
                'backup_posix_path': self.path('backups'),
                # Cinder's own zstd, not its zlib default: 0.55 s of CPU
                # per GiB here against 5.1 s, and Tempest backs up 21
                # one-GiB volumes on two cores.
                'backup_compression_algorithm': 'zstd'})
            # cinder-backup's own host name (another file: CONF.host).
            agents.write_conf(self.path('cinder-backup.conf'), {
                'DEFAULT': {'host': self.backup_host}})
        sections.update(self.backends)
        for name, options in self.extra_conf.items():
            sections.setdefault(name, {}).update(options)
        agents.write_conf(self.path('cinder.conf'), sections)

    def _write_glance_conf(self):
        """glance-api.conf in ``glance/`` (read from OS_GLANCE_CONFIG_DIR:
        Glance's WSGI application takes no command line), a file store
        under ``glance-images/`` and the staging and tasks stores beside
        it, and gunicorn's settings in the same directory (its cwd).
        """
        os.makedirs(self.path('glance'), exist_ok=True)
        stores = {}
        for name in ('glance-images', 'glance-staging', 'glance-tasks'):
            stores[name] = self.path(name)
            os.makedirs(stores[name], exist_ok=True)
        agents.write_conf(self.path('glance', 'glance-api.conf'), {
            'DEFAULT': {
                'debug': self.debug, 'use_stderr': True,
                'enabled_backends': 'fs:file',
                'worker_self_reference_url': self.glance_url,
                'image_cache_dir': self.path('glance-cache'),
            },
            'database': {'connection': self.postgres.url('glance')},
            'glance_store': {'default_backend': 'fs'},
            'fs': {'filesystem_store_datadir': stores['glance-images']},
            'os_glance_staging_store': {
                'filesystem_store_datadir': stores['glance-staging']},
            'os_glance_tasks_store': {
                'filesystem_store_datadir': stores['glance-tasks']},
            'oslo_concurrency': {'lock_path': self.path('glance-locks')},
            'paste_deploy': {
                'flavor': 'keystone',
                'config_file': os.path.join(GLANCE_ETC,
                                            'glance-api-paste.ini')},
            'keystone_authtoken': {
                'auth_type': 'password', 'auth_url': self.auth_url,
                'www_authenticate_uri': self.auth_url,
                'username': 'glance', 'password': PASSWORDS['glance'],
                'project_name': PROJECTS['glance'],
                'user_domain_name': DOMAIN, 'project_domain_name': DOMAIN,
                'region_name': REGION},
        })
        with open(self.path('glance', 'gunicorn.conf.py'), 'w') as f:
            f.write('bind = %r\n' % ('127.0.0.1:%d' % self.glance_port)
                    + 'workers = 1\nthreads = 4\ntimeout = 300\n'
                    + 'pidfile = %r\n' % self.path('glance.pid')
                    + "wsgi_app = 'glance.wsgi.api:application'\n"
                    + 'control_socket_disable = True\n')

    def _manage(self, tool, *args, log):
        conf = self.path('%s.conf' % tool.split('-')[0])
        run([os.path.join(BIN, tool), '--config-file', conf] + list(args),
            os.path.join(self.logdir, log))

    def _start_postgres(self):
        """The cluster: the template's copy, or a new one.

        A new one gets empty keystone and cinder databases.
        """
        if self.from_template:
            self.postgres.init_from(self.template.pgdata)
            self.postgres.start()
        else:
            self.postgres.init()
            self.postgres.start()
            self.postgres.execute('postgres', 'CREATE DATABASE keystone',
                                  'CREATE DATABASE cinder',
                                  'CREATE DATABASE glance')

    def _build(self):
        """Migrate the databases, bootstrap Keystone, make the keys.

        Cinder's database is copied at once (to ``cinder_template``),
        before any cinder service writes its rows into it: the template
        gets the copy (see _save_template).
        """
        def bootstrap():
            self._manage('keystone-manage', 'bootstrap',
                         '--bootstrap-password', PASSWORDS['admin'],
                         '--bootstrap-username', 'admin',
                         '--bootstrap-project-name', 'admin',
                         '--bootstrap-role-name', 'admin',
                         '--bootstrap-service-name', 'keystone',
                         '--bootstrap-region-id', REGION,
                         '--bootstrap-public-url', self.auth_url,
                         # keystonemiddleware looks for internal endpoints.
                         '--bootstrap-internal-url', self.auth_url,
                         log='keystone-db.log')

        def cinder_db():
            self._manage('cinder-manage', 'db', 'sync', log='cinder-db.log')
            # Nothing else is connected to it yet, as a template needs.
            self.postgres.execute(
                'postgres', 'CREATE DATABASE cinder_template TEMPLATE cinder')

        def glance_db():
            conf = self.path('glance', 'glance-api.conf')
            log = os.path.join(self.logdir, 'glance-db.log')
            run([os.path.join(BIN, 'glance-manage'), '--config-file',
                 conf, 'db_sync'], log)
        # Independent steps, mostly interpreter start-up and imports;
        # bootstrap needs Keystone's schema and its fernet keys.
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            cinder = pool.submit(cinder_db)
            glance = pool.submit(glance_db)
            owner = ('--keystone-user', pwd.getpwuid(os.getuid()).pw_name,
                     '--keystone-group', grp.getgrgid(os.getgid()).gr_name)
            keystone = [
                pool.submit(self._manage, 'keystone-manage', *step,
                            log='keystone-%s.log' % step[0])
                for step in (('db_sync',), ('fernet_setup',) + owner,
                             ('credential_setup',) + owner)]
            for future in keystone:
                future.result()
            bootstrap()
            cinder.result()
            glance.result()

    def _from_template(self):
        self.template.copy_to(self.workdir)
        old = self.template.meta()['ports']
        rewrite_endpoint_ports(self.postgres, {
            old['keystone']: self.keystone_port,
            old['cinder']: self.cinder_port,
            old['glance']: self.glance_port})

    def _save_template(self, staging):
        # Keystone and cinder run: an online copy, where the database the
        # cinder services write is then replaced by its copy from before
        # they started.
        self.postgres.snapshot(
            os.path.join(staging, 'pgdata'),
            'DROP DATABASE cinder',
            'ALTER DATABASE cinder_template RENAME TO cinder')
        for name in ('fernet-keys', 'credential-keys'):
            shutil.copytree(self.path(name), os.path.join(staging, name))
        self.template.save(staging, {'keystone': self.keystone_port,
                                     'cinder': self.cinder_port,
                                     'glance': self.glance_port})

    def _start_services(self):
        keystone_env = dict(os.environ,
                            OS_KEYSTONE_CONFIG_FILES=self.path(
                                'keystone.conf'))
        # Bare gunicorn, run in the work directory: it reads
        # ./gunicorn.conf.py, and Keystone sees no argument it would reject.
        self._spawn('keystone', [os.path.join(BIN, 'gunicorn')],
                    env=keystone_env, cwd=self.workdir)
        # These need no Keystone to start: start them now. The scheduler
        # comes later (see _wait_volume_rpc).
        self._start('cinder-api')
        self._start('cinder-volume')
        if self.backup_host:
            # Its connector names the host by gethostname() (os-brick):
            # the backup host's, which its BlobCR agent serves.
            self._spawn('cinder-backup', hosts.with_hostname(
                self.backup_host, [
                    os.path.join(BIN, 'cinder-backup'), '--config-file',
                    self.path('cinder.conf'), '--config-file',
                    self.path('cinder-backup.conf')]))
        # Glance checks tokens only when asked: it needs no Keystone to
        # start either.
        self._spawn('glance-api', [os.path.join(BIN, 'gunicorn')],
                    env=dict(os.environ,
                             OS_GLANCE_CONFIG_DIR=self.path('glance')),
                    cwd=self.path('glance'))

    def _start_osc_server(self):
        """The openstack CLI imported once (blobcr_lab/osc_server.py)."""
        path = self.path('osc.sock')
        if os.path.exists(path):
            os.unlink(path)
        self._spawn('openstack-cli', [sys.executable, '-m',
                                      'blobcr_lab.osc_server', path])
        self._poll('the openstack CLI server', lambda: os.path.exists(path),
                   60)
        self._osc_socket = path

    def _start(self, service):
        self._spawn(service, [os.path.join(BIN, service), '--config-file',
                              self.path('cinder.conf')])

    def _spawn(self, name, argv, env=None, cwd=None):
        log = os.path.join(self.logdir, name + '.log')
        process = ServiceProcess(name, argv, env or dict(os.environ), log,
                                 cwd)
        self.processes[name] = process.start()

    def _poll(self, what, check, timeout):
        deadline = time.monotonic() + timeout
        last = None
        while True:
            if self.postgres:
                self.postgres.check_running()
            for process in self.processes.values():
                process.check_running()
            try:
                result = check()
                if result:
                    return result
            except StackError:
                raise
            except Exception as exc:  # not up yet: keep the last reason
                last = exc
            if time.monotonic() > deadline:
                raise StackError('%s not reached in %s s (last: %r); logs '
                                 'in %s' % (what, timeout, last, self.logdir))
            time.sleep(0.25)

    def _wait_keystone(self):
        import requests
        self._poll('keystone answering',
                   lambda: requests.get(self.auth_url, timeout=5).ok, 60)

    def _register(self):
        """Projects, users, roles and Cinder's catalog entries.

        From Python: each ``openstack`` CLI call costs seconds.
        """
        from keystoneclient.v3 import client
        keystone = client.Client(session=self.session('admin'))
        domain = keystone.domains.get('default')
        roles = {role.name: role for role in keystone.roles.list()}
        projects = {}
        for user in SERVICE_USERS + ('demo',):
            name = PROJECTS[user]
            if name not in projects:
                projects[name] = keystone.projects.create(name, domain)
            project = projects[name]
            account = keystone.users.create(
                user, domain=domain, password=PASSWORDS[user],
                default_project=project)
            # Cinder's user needs service too: services' tokens are
            # checked for it (ARCHITECTURE.md 6b).
            granted = ('admin', 'service') if user in SERVICE_USERS else (
                'member',)
            for role in granted:
                keystone.roles.grant(roles[role], user=account,
                                     project=project)
        # keystoneauth matches block-storage and its alias volumev3 alike,
        # but cinderclient-based OSC commands ask for volumev3 by name.
        url = self.cinder_url + '/v3/%(project_id)s'
        for name, kind in (('cinderv3', 'block-storage'),
                           ('cinderv3-legacy', 'volumev3')):
            service = keystone.services.create(name, type=kind)
            for interface in ('public', 'internal'):
                keystone.endpoints.create(service, url, interface,
                                          region=REGION)
        service = keystone.services.create('glance', type='image')
        for interface in ('public', 'internal'):
            keystone.endpoints.create(service, self.glance_url, interface,
                                      region=REGION)
        self._sessions.clear()

    def start_volume_service(self, name, host, extra_conf=None):
        """Another cinder-volume, ``name`` (its log ``logs/NAME.log``),
        with the same cinder.conf but its own ``host`` (and
        ``extra_conf``, ``{section: {option: value}}``, over it): with
        ``[DEFAULT] cluster`` set, a second member of that cluster
        (active-active). Returns once its backends serve RPC.
        """
        conf = self.path(name + '.conf')
        sections = {'DEFAULT': {'host': host}}
        for section, options in (extra_conf or {}).items():
            sections.setdefault(section, {}).update(options)
        agents.write_conf(conf, sections)
        self._spawn(name, [os.path.join(BIN, 'cinder-volume'),
                           '--config-file', self.path('cinder.conf'),
                           '--config-file', conf])
        self._wait_volume_rpc(name)
        return self.processes[name]

    def _wait_volume_rpc(self, name='cinder-volume'):
        """Wait until each backend's cinder-volume serves RPC.

        A starting scheduler asks the volume services for their
        capabilities once; one not yet listening answers only with its
        periodic report, up to two minutes later, and volume creates fail
        with "No valid backend" until then.  So the scheduler starts after
        every backend has logged the end of its RPC initialization.
        """
        log = os.path.join(self.logdir, name + '.log')

        def initialized():
            with open(log, errors='replace') as f:
                text = f.read()
            for failure in ('Cannot complete RPC initialization',
                            'failed to start'):
                if failure in text:
                    raise StackError('cinder-volume: %s; log %s:\n%s' % (
                        failure, log, tail(log)))
            done = text.count('Driver post RPC initialization completed')
            return done >= len(self.backends)
        try:
            self._poll('cinder-volume RPC initialized', initialized, 90)
        except StackError as exc:
            raise StackError('%s\n%s' % (exc, tail(log)))

    def _wait_cinder(self):
        import requests
        self._poll('cinder-api answering',
                   lambda: requests.get(self.cinder_url, timeout=5)
                   .status_code < 500, 60)
        volume = self.block_storage('admin')
        hosts = {'%s@%s' % (self.cinder_host, name) for name in self.backends}

        def services_up():
            services = volume.get('/os-services', timeout=5).json()[
                'services']
            up = {(s['binary'], s['host']) for s in services
                  if s['state'] == 'up'}
            backup = ('cinder-backup', self.backup_host) in up \
                if self.backup_host else True
            return ('cinder-scheduler', self.cinder_host) in up and \
                backup and all(('cinder-volume', host) in up
                               for host in hosts)

        def scheduler_knows_pools():
            # Volume creates fail with "No valid backend" until the
            # scheduler has each backend's capabilities.  Short timeout:
            # this RPC call is lost if the scheduler, up in the database,
            # does not consume yet, and the API waits a minute for it.
            pools = volume.get('/scheduler-stats/get_pools',
                               timeout=3).json()['pools']
            return pooled <= {pool['name'].split('#')[0] for pool in pools}
        # A clustered service's pools are named after its cluster.
        cluster = self.extra_conf.get('DEFAULT', {}).get('cluster')
        pooled = hosts if not cluster else {
            '%s@%s' % (cluster, name) for name in self.backends}
        self._poll('cinder services up', services_up, 90)
        self._poll('scheduler pools', scheduler_knows_pools, 90)

    def _wait_glance(self):
        """glance-api answers an authenticated image list."""
        self._poll('glance-api answering',
                   lambda: self.session('demo').get(
                       self.glance_url + '/v2/images', timeout=5).ok, 60)

    def _create_volume_types(self):
        volume = self.block_storage('admin')
        for section in self.backends:
            volume.post('/types', json={'volume_type': {
                'name': section,
                'os-volume-type-access:is_public': True,
                'extra_specs': {
                    'volume_backend_name': self.backend_name(section)}}})

    # -- use --------------------------------------------------------------

    def session(self, user='demo'):
        """A keystoneauth1 session authenticated as ``user``."""
        if user not in self._sessions:
            from keystoneauth1.identity import v3
            from keystoneauth1 import session
            self._sessions[user] = session.Session(auth=v3.Password(
                auth_url=self.auth_url, username=user,
                password=PASSWORDS[user], project_name=PROJECTS[user],
                user_domain_name=DOMAIN, project_domain_name=DOMAIN))
        return self._sessions[user]

    def block_storage(self, user='demo'):
        """A keystoneauth1 adapter on the Cinder v3 API (raises on >= 400)."""
        from keystoneauth1 import adapter
        return adapter.Adapter(self.session(user),
                               service_type='block-storage',
                               interface='public', region_name=REGION)

    def env(self, user='demo', password=None):
        """Environment for running ``openstack`` as ``user``.

        Every OS_* variable of the caller's environment is dropped first so
        that none of it leaks into the stack's credentials.
        """
        env = {k: v for k, v in os.environ.items()
               if not k.startswith('OS_')}
        env.update({
            'OS_AUTH_TYPE': 'password',
            'OS_AUTH_URL': self.auth_url,
            'OS_IDENTITY_API_VERSION': '3',
            'OS_USERNAME': user,
            'OS_PASSWORD': PASSWORDS[user] if password is None else password,
            'OS_PROJECT_NAME': PROJECTS[user],
            'OS_USER_DOMAIN_NAME': DOMAIN,
            'OS_PROJECT_DOMAIN_NAME': DOMAIN,
            'OS_REGION_NAME': REGION,
            'OS_INTERFACE': 'public',
            'PATH': BIN + os.pathsep + env.get('PATH', ''),
        })
        return env

    def openstack(self, *args, user='demo', json=True, password=None,
                  timeout=120):
        """Run the real ``openstack`` CLI; return its parsed output.

        ``json`` adds ``-f json`` (for commands that print something) and
        parses the output; otherwise the output is returned as text.
        Raises :class:`StackError` carrying stderr when it fails.
        """
        argv = [os.path.join(BIN, 'openstack')] + [str(a) for a in args]
        if json:
            argv += ['-f', 'json']
        env = self.env(user, password)
        done = None
        if self._osc_socket:
            try:
                done = osc_server.request(self._osc_socket, argv[1:], env,
                                          timeout)
            except (ConnectionError, FileNotFoundError):
                done = None     # the server is gone: run it the long way
            except TimeoutError:
                raise StackError('openstack %s (as %s) timed out after %s s'
                                 % (' '.join(argv[1:]), user, timeout))
        if done is None:
            proc = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True,
                                  timeout=timeout, check=False)
            done = proc.returncode, proc.stdout, proc.stderr
        returncode, stdout, stderr = done
        if returncode:
            raise StackError('openstack %s (as %s) exited with %d:\n%s' % (
                ' '.join(argv[1:]), user, returncode, stderr))
        if json and stdout.strip():
            import json as json_module
            return json_module.loads(stdout)
        return stdout

    def wait_status(self, kind, resource_id, status, timeout=60,
                    user='admin'):
        """Wait until a volume or snapshot has ``status``; return it.

        ``status='deleted'`` waits until it is gone.  Polls the API (not
        the CLI, which costs seconds a call) and fails at once on an
        error status that was not asked for.
        """
        path = {'volume': '/volumes/%s', 'snapshot': '/snapshots/%s'}[kind]
        volume = self.block_storage(user)
        deadline = time.monotonic() + timeout
        while True:
            response = volume.get(path % resource_id, raise_exc=False)
            if response.status_code == 404 and status == 'deleted':
                return None
            response.raise_for_status()
            resource = response.json()[kind]
            if resource['status'] == status:
                return resource
            if resource['status'].startswith('error') and status != \
                    resource['status']:
                raise StackError('%s %s is %s (waiting for %s); cinder-volume'
                                 ' log:\n%s' % (kind, resource_id,
                                                resource['status'], status,
                                                self.log('cinder-volume')))
            if time.monotonic() > deadline:
                raise StackError('%s %s still %s after %s s (waiting for %s)'
                                 % (kind, resource_id, resource['status'],
                                    timeout, status))
            time.sleep(0.25)

    def log(self, name, lines=40):
        """The last lines of a service's log (keystone, cinder-api, ...)."""
        return tail(os.path.join(self.logdir, name + '.log'), lines)

    def stop(self, timeout=20):
        """Stop every service by its pid (all at once: each takes 1-2 s).

        Then PostgreSQL (see PostgresServer.stop), and remove its data.
        """
        began = time.monotonic()
        running = any(p.proc and p.proc.returncode is None
                      for p in self.processes.values())
        killed = stop_services(self.processes.values(), timeout)
        self._sessions.clear()
        self._osc_socket = None
        postgres = ''
        if self.postgres:
            stopping = time.monotonic()
            stopped = self.postgres.stop(timeout)
            self.postgres.remove()
            if stopped:
                postgres = '; postgres %.1f s' % (time.monotonic() - stopping)
            if stopped not in (None, signal.SIGINT):
                killed.append('postgres (%s)' % stopped.name)
        if running or postgres:
            sys.stderr.write('openstack stack stopped in %.1f s%s%s\n' % (
                time.monotonic() - began, postgres,
                '; killed ' + ', '.join(killed) if killed else ''))
