"""A real Keystone and Cinder on 127.0.0.1 for integration tests.

:class:`OpenStackStack` runs, in one work directory, the services as they
ship on PyPI (tools/install-openstack.sh installs them into the project
venv):

* Keystone on sqlite with fernet tokens, served by gunicorn;
* cinder-api (keystonemiddleware auth), cinder-scheduler and cinder-volume
  on sqlite and the caller's RabbitMQ, with the backend sections the caller
  gives, one volume type per backend.

Identities: ``admin`` (admin of project ``admin``), ``cinder`` (admin and
service in project ``service``, the services' own user) and ``demo``
(member of project ``demo``).  :meth:`OpenStackStack.openstack` runs the
real ``openstack`` CLI as one of them.

The slow constant parts (both databases after their migrations, Keystone's
bootstrap and catalog, fernet and credential keys) are built once and
copied afterwards: see :class:`StackTemplate`.  With BLOBCR_OPENSTACK_TEMPLATE
naming a directory, templates stay there across sessions (one per installed
keystone and cinder version).

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
import sqlite3
import subprocess
import sys
import tempfile
import time

from blobcr_agent.bench import harness

BIN = os.path.dirname(os.path.abspath(sys.executable))
VENV = os.path.dirname(BIN)
CINDER_ETC = os.path.join(VENV, 'etc', 'cinder')

REGION = 'RegionOne'
DOMAIN = 'Default'
# Fixed passwords: the template's databases hold their hashes, and nothing
# listens beyond 127.0.0.1.
PASSWORDS = {'admin': 'admin-secret', 'cinder': 'cinder-secret',
             'demo': 'demo-secret'}
PROJECTS = {'admin': 'admin', 'cinder': 'service', 'demo': 'demo'}

TEMPLATE_ENV = 'BLOBCR_OPENSTACK_TEMPLATE'
# Bump when what a template holds changes (schema of this module, not of
# the services: their versions are in the key already).
TEMPLATE_FORMAT = 1


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


def run(argv, log, timeout=120):
    """Run a setup command, its output appended to ``log``."""
    with open(log, 'ab') as out:
        out.write(('$ %s\n' % ' '.join(argv)).encode())
        out.flush()
        try:
            proc = subprocess.run(argv, stdin=subprocess.DEVNULL,
                                  stdout=out, stderr=subprocess.STDOUT,
                                  timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise StackError('%s timed out after %s s; log %s:\n%s' % (
                argv[0], timeout, log, tail(log)))
    if proc.returncode:
        raise StackError('%s exited with %s; log %s:\n%s' % (
            ' '.join(argv), proc.returncode, log, tail(log)))


class ServiceProcess:
    """One long-running service, in its own process group.

    Stopped by its pid (SIGTERM), then its group (SIGKILL) after a
    timeout: oslo.service and gunicorn fork workers that a SIGKILL of the
    parent alone would orphan.
    """

    def __init__(self, name, argv, env, log, cwd=None):
        self.name = name
        self.cwd = cwd
        self.argv = argv
        self.env = env
        self.log = log
        self.proc = None

    def start(self):
        with open(self.log, 'ab') as out:
            self.proc = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, env=self.env, cwd=self.cwd,
                start_new_session=True)
        return self

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def check_running(self):
        if self.proc and self.proc.poll() is not None:
            raise StackError('%s exited with %s; log %s:\n%s' % (
                self.name, self.proc.returncode, self.log, tail(self.log)))

    def terminate(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def wait_or_kill(self, timeout=20):
        """Wait for the exit; True if it took a SIGKILL."""
        if not self.proc:
            return False
        try:
            self.proc.wait(timeout)
            return False
        except subprocess.TimeoutExpired:
            # Not reaped yet, so the group (id = the leader's pid) is still
            # the one we started: this reaches only its forked workers.
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            return True

    def stop(self, timeout=20):
        self.terminate()
        self.wait_or_kill(timeout)


def installed_versions():
    return {name: metadata.version(name) for name in ('keystone', 'cinder')}


class StackTemplate:
    """The constant parts of a stack, to copy instead of rebuilding.

    ``keystone.db`` (migrated, bootstrapped, with the projects, users,
    roles, services and endpoints), ``cinder.db`` (migrated, before any
    service ran), ``fernet-keys/``, ``credential-keys/`` and ``meta.json``
    with the ports the endpoints were registered with: a copy rewrites
    them to its own ports.
    """

    COPIED = ('keystone.db', 'cinder.db', 'fernet-keys', 'credential-keys')

    def __init__(self, directory):
        self.directory = directory

    @classmethod
    def key(cls):
        versions = installed_versions()
        return 'keystone-%s-cinder-%s-format-%d' % (
            versions['keystone'], versions['cinder'], TEMPLATE_FORMAT)

    def exists(self):
        return os.path.exists(os.path.join(self.directory, 'meta.json'))

    def meta(self):
        with open(os.path.join(self.directory, 'meta.json')) as f:
            return json.load(f)

    def copy_to(self, workdir):
        for name in self.COPIED:
            source = os.path.join(self.directory, name)
            target = os.path.join(workdir, name)
            if os.path.isdir(source):
                shutil.copytree(source, target)
            else:
                shutil.copyfile(source, target)

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


def rewrite_endpoint_ports(database, ports):
    """Point the catalog's endpoints at this stack's ports.

    ``ports`` maps each port the template was registered with to the new
    one; done on the sqlite file before Keystone starts (no cache).
    """
    def replace(match):
        return '%s:%d' % (match.group(1), ports[int(match.group(2))])
    with contextlib.closing(sqlite3.connect(database)) as db, db:
        rows = db.execute('SELECT id, url FROM endpoint').fetchall()
        for endpoint_id, url in rows:
            new = re.sub(r'^(https?://127\.0\.0\.1):(\d+)', replace, url)
            db.execute('UPDATE endpoint SET url = ? WHERE id = ?',
                       (new, endpoint_id))
    return len(rows)


class OpenStackStack:
    """Keystone, cinder-api, cinder-scheduler and cinder-volume.

    ``backends`` is ``{section: {option: value}}``: each becomes a section
    of cinder.conf, is listed in ``enabled_backends`` and gets a volume
    type of the same name whose ``volume_backend_name`` extra spec is the
    section's ``volume_backend_name`` (the section name if absent).  The
    first backend's type is the default one.  ``extra_conf`` adds or
    overrides cinder.conf options (same shape, sections included).
    """

    def __init__(self, workdir, transport_url, backends, extra_conf=None,
                 cinder_host='cinder-1', template=None, debug=False):
        if not backends:
            raise ValueError('at least one backend section is needed')
        self.workdir = os.path.abspath(workdir)
        self.transport_url = transport_url
        self.backends = {name: dict(options)
                         for name, options in backends.items()}
        self.extra_conf = extra_conf or {}
        self.cinder_host = cinder_host
        self.debug = debug
        self.template = template or StackTemplate(
            os.path.join(template_root(), StackTemplate.key()))
        self.logdir = os.path.join(self.workdir, 'logs')
        self.keystone_port = None
        self.cinder_port = None
        self.processes = {}
        self.timings = {}
        self.from_template = None
        self._sessions = {}

    # -- paths and urls -------------------------------------------------

    def path(self, *parts):
        return os.path.join(self.workdir, *parts)

    @property
    def auth_url(self):
        return 'http://127.0.0.1:%d/v3' % self.keystone_port

    @property
    def cinder_url(self):
        return 'http://127.0.0.1:%d' % self.cinder_port

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
        self._write_keystone_conf()
        self._write_cinder_conf()
        self.from_template = self.template.exists()
        try:
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
            self._timed('databases and keys', self._build, staging)
            self._start_services()
            self._timed('keystone up', self._wait_keystone)
            self._timed('register identities', self._register)
            self._timed('save template', self._save_template, staging)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _write_keystone_conf(self):
        harness.write_conf(self.path('keystone.conf'), {
            'DEFAULT': {'debug': self.debug, 'use_stderr': True},
            'database': {'connection': 'sqlite:///' +
                         self.path('keystone.db')},
            'token': {'provider': 'fernet'},
            'fernet_tokens': {'key_repository': self.path('fernet-keys')},
            'fernet_receipts': {'key_repository': self.path('fernet-keys')},
            'credential': {'key_repository': self.path('credential-keys')},
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
            },
            # One cinder-volume process per backend writes at start-up:
            # wait for sqlite's lock rather than fail after 5 s.
            'database': {'connection': 'sqlite:///%s?timeout=120'
                         % self.path('cinder.db')},
            'oslo_concurrency': {'lock_path': self.path('cinder-locks')},
            'keystone_authtoken': dict(authentication('cinder'),
                                       www_authenticate_uri=self.auth_url,
                                       region_name=REGION),
            'service_user': dict(authentication('cinder'),
                                 send_service_user_token=True),
        }
        sections.update(self.backends)
        for name, options in self.extra_conf.items():
            sections.setdefault(name, {}).update(options)
        harness.write_conf(self.path('cinder.conf'), sections)

    def _manage(self, tool, *args, log):
        conf = self.path('%s.conf' % tool.split('-')[0])
        run([os.path.join(BIN, tool), '--config-file', conf] + list(args),
            os.path.join(self.logdir, log))

    def _build(self, staging):
        """Migrate the databases, bootstrap Keystone, make the keys.

        cinder.db goes to ``staging`` at once, before any cinder service
        writes its rows into it.
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
            # Write-ahead logging (kept in the file): readers no longer
            # block the one writer.
            with contextlib.closing(sqlite3.connect(
                    self.path('cinder.db'))) as db:
                db.execute('PRAGMA journal_mode=WAL')
            shutil.copyfile(self.path('cinder.db'),
                            os.path.join(staging, 'cinder.db'))
        # Independent steps, mostly interpreter start-up and imports;
        # bootstrap needs Keystone's schema and its fernet keys.
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            cinder = pool.submit(cinder_db)
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

    def _from_template(self):
        self.template.copy_to(self.workdir)
        old = self.template.meta()['ports']
        rewrite_endpoint_ports(self.path('keystone.db'), {
            old['keystone']: self.keystone_port,
            old['cinder']: self.cinder_port})

    def _save_template(self, staging):
        # Keystone is running: the backup API gives a consistent copy.
        copy = os.path.join(staging, 'keystone.db')
        with contextlib.closing(sqlite3.connect(self.path('keystone.db'))) \
                as source, contextlib.closing(sqlite3.connect(copy)) as target:
            source.backup(target)
        for name in ('fernet-keys', 'credential-keys'):
            shutil.copytree(self.path(name), os.path.join(staging, name))
        self.template.save(staging, {'keystone': self.keystone_port,
                                     'cinder': self.cinder_port})

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
        for user in ('cinder', 'demo'):
            project = keystone.projects.create(PROJECTS[user], domain)
            account = keystone.users.create(
                user, domain=domain, password=PASSWORDS[user],
                default_project=project)
            # Cinder's user needs service too: services' tokens are
            # checked for it (ARCHITECTURE.md 6b).
            granted = ('admin', 'service') if user == 'cinder' else (
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
        self._sessions.clear()

    def _wait_volume_rpc(self):
        """Wait until each backend's cinder-volume serves RPC.

        A starting scheduler asks the volume services for their
        capabilities once; one not yet listening answers only with its
        periodic report, up to two minutes later, and volume creates fail
        with "No valid backend" until then.  So the scheduler starts after
        every backend has logged the end of its RPC initialization.
        """
        log = os.path.join(self.logdir, 'cinder-volume.log')

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
            return ('cinder-scheduler', self.cinder_host) in up and all(
                ('cinder-volume', host) in up for host in hosts)

        def scheduler_knows_pools():
            # Volume creates fail with "No valid backend" until the
            # scheduler has each backend's capabilities.  Short timeout:
            # this RPC call is lost if the scheduler, up in the database,
            # does not consume yet, and the API waits a minute for it.
            pools = volume.get('/scheduler-stats/get_pools',
                               timeout=3).json()['pools']
            return hosts <= {pool['name'].split('#')[0] for pool in pools}
        self._poll('cinder services up', services_up, 90)
        self._poll('scheduler pools', scheduler_knows_pools, 90)

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
        proc = subprocess.run(argv, env=self.env(user, password),
                              stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=timeout, check=False)
        if proc.returncode:
            raise StackError('openstack %s (as %s) exited with %d:\n%s' % (
                ' '.join(argv[1:]), user, proc.returncode, proc.stderr))
        if json and proc.stdout.strip():
            import json as json_module
            return json_module.loads(proc.stdout)
        return proc.stdout

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
        """Stop every service by its pid (all at once: each takes 1-2 s)."""
        running = [p for p in self.processes.values()
                   if p.proc and p.proc.poll() is None]
        began = time.monotonic()
        for process in running:
            process.terminate()
        killed = [p.name for p in running if p.wait_or_kill(timeout)]
        self._sessions.clear()
        if running:
            sys.stderr.write('openstack stack stopped in %.1f s%s\n' % (
                time.monotonic() - began,
                '; killed ' + ', '.join(killed) if killed else ''))
