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

"""A real Nova and Placement beside a started OpenStackStack.

:class:`NovaStack` adds, to an :class:`~blobcr_lab.openstack.OpenStackStack`
that runs already (its Keystone, its PostgreSQL, the caller's RabbitMQ):

* placement-api and nova-api under gunicorn (their own gunicorn.conf.py,
  each in a directory of its own: both parse sys.argv with oslo.config);
* nova-conductor, nova-scheduler and nova-compute with the libvirt
  driver (``virt_type=qemu``, TCG) on a private session libvirtd
  (blobcr_lab.guest_vm.SessionLibvirt), whose QEMU runs as root and so opens
  the files of a BlobCR agent's FUSE mirror;
* databases ``nova_api``, ``nova_cell0``, ``nova`` (cell1) and
  ``placement`` in the stack's PostgreSQL; users ``nova`` and
  ``placement`` (admin and service in project ``service``), services and
  endpoints registered from Python;
* privsep through the venv's ``privsep-helper`` (we are root: no sudo,
  no rootwrap), set for every privsep context Nova and os-brick use.

nova-compute's ``host`` is the caller's: the name of a BlobCR agent host,
since the connector Nova sends Cinder names CONF.host and the driver asks
that host's agent for the mirror.

No Glance and no Neutron: servers boot from volume with ``--nic none``
(microversion 2.37).  The guest needs a bootable disk: see
:func:`make_boot_disk`.

``neutron=VENV`` adds a real neutron-api (ML2, no mechanism driver, no
agent, no network: database ``neutron``, user ``neutron``) under
gunicorn, so that what nova-api and nova-compute ask Neutron is
answered: a server with no port has no security group (show, detailed
list) and nothing to deallocate (delete).  Servers still get no NIC.
VENV is a virtualenv of its own with Neutron (:func:`neutron_venv`):
neutron-lib registers flake8 checks (N5xx) that the project venv's
flake8 would then run on the project.

Logs: ``WORKDIR/logs/<service>.log``.  Everything is the real service.
"""

import concurrent.futures
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time

from blobcr_lab import agents
from blobcr_lab import openstack as stack_module
from blobcr_lab.openstack import BIN
from blobcr_lab.openstack import DOMAIN
from blobcr_lab.openstack import REGION
from blobcr_lab.openstack import StackError
from blobcr_lab.openstack import VENV

NOVA_ETC = os.path.join(VENV, 'etc', 'nova')
PASSWORDS = {'nova': 'nova-secret', 'placement': 'placement-secret',
             'neutron': 'neutron-secret'}


def neutron_venv():
    """The virtualenv with Neutron (``BLOBCR_NEUTRON_VENV``, else
    build/neutron-venv, which tools/install-neutron.sh makes), or None
    when it has none.
    """
    top = os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    path = os.environ.get('BLOBCR_NEUTRON_VENV',
                          os.path.join(top, 'build', 'neutron-venv'))
    python = os.path.join(path, 'bin', 'python')
    if not os.path.exists(python):
        return None
    found = subprocess.run([python, '-c', 'import neutron.wsgi'],
                           capture_output=True)
    return path if found.returncode == 0 else None


PROJECT = 'service'
FLAVOR = 'blobcr.tiny'
COMPUTE_MICROVERSION = '2.37'   # --nic none

# Kernel command line of a guest booted from a BlobCR volume.
CMDLINE = 'console=ttyS0 quiet panic=-1 tsc=reliable no_timer_check'
SYSLINUX_TOOLS = ('mkfs.vfat', 'mcopy', 'syslinux')


def missing_boot_tools():
    """The tools :func:`make_boot_disk` needs that are not installed
    (Debian: dosfstools, mtools, syslinux).
    """
    return [tool for tool in SYSLINUX_TOOLS if not shutil.which(tool)]


def make_boot_disk(path, kernel, initrds, cmdline=CMDLINE, size_mib=64):
    """A raw disk image that SeaBIOS boots: an unpartitioned FAT file
    system with syslinux in its boot sector, the kernel and the initrds
    (concatenated into one: Linux unpacks them in order).

    Nova's libvirt driver boots a volume as a disk through the firmware
    (without Glance there is no kernel_id/ramdisk_id image property for a
    direct kernel boot), so the volume must hold a boot loader.
    """
    work = tempfile.mkdtemp(prefix='blobcr-bootdisk-')
    try:
        initrd = os.path.join(work, 'initrd.img')
        with open(initrd, 'wb') as out:
            for item in initrds:
                if isinstance(item, bytes):
                    out.write(item)
                else:
                    with open(item, 'rb') as f:
                        shutil.copyfileobj(f, out)
        config = os.path.join(work, 'syslinux.cfg')
        with open(config, 'w') as f:
            f.write('DEFAULT linux\nPROMPT 0\nTIMEOUT 0\nLABEL linux\n'
                    '  KERNEL vmlinuz\n  APPEND initrd=initrd.img %s\n'
                    % cmdline)
        if os.path.exists(path):
            os.unlink(path)
        steps = [['mkfs.vfat', '-C', path, str(size_mib * 1024)],
                 ['mcopy', '-i', path, kernel, '::vmlinuz'],
                 ['mcopy', '-i', path, initrd, '::initrd.img'],
                 ['mcopy', '-i', path, config, '::syslinux.cfg'],
                 ['syslinux', '--install', path]]
        for argv in steps:
            done = subprocess.run(argv, capture_output=True, text=True)
            if done.returncode:
                raise StackError('%s failed (%d): %s' % (
                    ' '.join(argv), done.returncode, done.stderr))
        return path
    finally:
        shutil.rmtree(work, ignore_errors=True)


class NovaStack:
    """Placement, nova-api, conductor, scheduler and compute.

    ``stack``: a started OpenStackStack.  ``compute_host``: nova-compute's
    CONF.host.  ``libvirt_uri``: the session libvirtd nova-compute drives.
    """

    SERVICES = ('nova-conductor', 'nova-scheduler', 'nova-compute')

    # The stack's own helpers: they use only timings, logdir, processes
    # and postgres (the stack's, checked while polling).
    _timed = stack_module.OpenStackStack._timed
    _spawn = stack_module.OpenStackStack._spawn
    _poll = stack_module.OpenStackStack._poll

    def __init__(self, stack, workdir, compute_host, libvirt_uri,
                 debug=True, neutron=None, migration_uri=None):
        self.stack = stack
        self.postgres = stack.postgres
        self.workdir = os.path.abspath(workdir)
        self.logdir = os.path.join(self.workdir, 'logs')
        self.compute_host = compute_host
        self.libvirt_uri = libvirt_uri
        # Nova's [libvirt] live_migration_uri: '%s' is the destination's
        # host (each compute's libvirtd has its socket under a path
        # named after its host; see add_compute).
        self.migration_uri = migration_uri
        self.computes = [compute_host]
        self.debug = debug
        self.neutron = neutron
        self.nova_port = None
        self.placement_port = None
        self.neutron_port = None
        self.processes = {}
        self.timings = {}
        self._sessions = {}

    def path(self, *parts):
        return os.path.join(self.workdir, *parts)

    @property
    def nova_url(self):
        return 'http://127.0.0.1:%d' % self.nova_port

    @property
    def placement_url(self):
        return 'http://127.0.0.1:%d' % self.placement_port

    @property
    def neutron_url(self):
        return 'http://127.0.0.1:%d' % self.neutron_port

    def _apis(self):
        """(name, port, WSGI app, env, argv) of each API under gunicorn.
        """
        gunicorn = [os.path.join(BIN, 'gunicorn')]
        apis = [('nova-api', self.nova_port,
                 'nova.wsgi.osapi_compute:application',
                 {'OS_NOVA_CONFIG_DIR': self.workdir,
                  'OS_NOVA_CONFIG_FILES': os.path.join(
                      NOVA_ETC, 'api-paste.ini') + ';nova.conf'}, gunicorn),
                ('placement', self.placement_port,
                 'placement.wsgi.api:application',
                 {'OS_PLACEMENT_CONFIG_DIR': self.workdir}, gunicorn)]
        if self.neutron:
            apis.append(('neutron-api', self.neutron_port,
                         'neutron.wsgi.api:application',
                         {'OS_NEUTRON_CONFIG_DIR': self.workdir,
                          'OS_NEUTRON_CONFIG_FILES':
                          'neutron.conf;ml2_conf.ini'},
                         [os.path.join(self.neutron, 'bin', 'python'),
                          '-m', 'gunicorn']))
        return apis

    # -- start ------------------------------------------------------------

    def start(self):
        began = time.monotonic()
        for sub in ('logs', 'nova-api', 'placement', 'neutron-api',
                    'instances', 'state', 'locks'):
            os.makedirs(self.path(sub), exist_ok=True)
        self.nova_port = stack_module.free_port()
        self.placement_port = stack_module.free_port()
        self.neutron_port = stack_module.free_port()
        databases = ['nova_api', 'nova_cell0', 'nova', 'placement']
        if self.neutron:
            databases.append('neutron')
        try:
            self._timed('databases', self.stack.postgres.execute,
                        'postgres', *['CREATE DATABASE %s' % name
                                      for name in databases])
            self._write_confs()
            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                register = pool.submit(self._timed, 'register identities',
                                       self._register)
                placement = pool.submit(self._timed, 'placement db',
                                        self._manage, 'placement-manage',
                                        'db', 'sync')
                neutron = pool.submit(self._timed, 'neutron db',
                                      self._neutron_db)
                self._timed('nova dbs', self._nova_dbs)
                placement.result()
                register.result()
                neutron.result()
            self._start_services()
            self._timed('apis up', self._wait_apis)
            self._timed('compute up', self.wait_compute)
            self._timed('flavor', self._create_flavor)
        except BaseException:
            self.stop()
            raise
        self.timings['total'] = round(time.monotonic() - began, 2)
        sys.stderr.write('nova stack started in %.1f s (%s)\n' % (
            self.timings['total'], ', '.join(
                '%s %.1f s' % item for item in self.timings.items()
                if item[0] != 'total')))
        return self

    def _authentication(self, user):
        return {'auth_type': 'password', 'auth_url': self.stack.auth_url,
                'username': user, 'password': PASSWORDS[user],
                'project_name': PROJECT, 'user_domain_name': DOMAIN,
                'project_domain_name': DOMAIN, 'region_name': REGION}

    def _write_confs(self):
        postgres = self.stack.postgres
        auth = self._authentication
        helper = '%s --config-file %s' % (os.path.join(BIN, 'privsep-helper'),
                                          self.path('nova.conf'))
        sections = {
            'DEFAULT': {
                'debug': self.debug, 'use_stderr': True,
                'host': self.compute_host,
                'my_ip': '127.0.0.1',
                'transport_url': self.stack.transport_url,
                'compute_driver': 'libvirt.LibvirtDriver',
                'state_path': self.path('state'),
                'instances_path': self.path('instances'),
                'rootwrap_config': os.path.join(NOVA_ETC, 'rootwrap.conf'),
                'use_rootwrap_daemon': False,
                # No metadata API here (no Neutron, no config drive).
                'enabled_apis': 'osapi_compute',
                # One compute host: a resize stays on it.
                'allow_resize_to_same_host': True,
                # The guest has no ACPI shutdown handler: a power off is
                # immediate rather than 60 s of waiting (what the guest
                # fsynced is on the volume either way).
                'shutdown_timeout': 0,
                # A stopped nova-compute left 20 s later, at the SIGKILL:
                # oslo.service waits this long for it before it exits.
                'graceful_shutdown_timeout':
                    stack_module.GRACEFUL_SHUTDOWN_S,
            },
            'api': {'auth_strategy': 'keystone'},
            'wsgi': {'api_paste_config': os.path.join(NOVA_ETC,
                                                      'api-paste.ini')},
            'api_database': {'connection': postgres.url('nova_api')},
            'database': {'connection': postgres.url('nova')},
            'keystone_authtoken': dict(
                auth('nova'), www_authenticate_uri=self.stack.auth_url),
            'service_user': dict(auth('nova'), send_service_user_token=True),
            'placement': dict(auth('placement'), valid_interfaces='public'),
            'cinder': dict(auth('nova'), os_region_name=REGION),
            'neutron': dict(auth('nova'), valid_interfaces='public'),
            'libvirt': dict({'virt_type': 'qemu', 'cpu_mode': 'none',
                             'connection_uri': self.libvirt_uri},
                            **({'live_migration_uri': self.migration_uri}
                               if self.migration_uri else {})),
            'oslo_concurrency': {'lock_path': self.path('locks')},
            'scheduler': {'discover_hosts_in_cells_interval': 2,
                          'workers': 1},
            'conductor': {'workers': 1},
            'vnc': {'enabled': False},
            'spice': {'enabled': False},
            'oslo_messaging_notifications': {'driver': 'noop'},
            # We are root: the venv's helper, not "sudo nova-rootwrap".
            'privsep': {'helper_command': helper},
            'nova_sys_admin': {'helper_command': helper},
            'privsep_osbrick': {'helper_command': helper},
        }
        agents.write_conf(self.path('nova.conf'), sections)
        agents.write_conf(self.path('placement.conf'), {
            'DEFAULT': {'debug': self.debug, 'use_stderr': True},
            'api': {'auth_strategy': 'keystone'},
            'placement_database': {'connection': postgres.url('placement')},
            'keystone_authtoken': dict(
                auth('placement'), www_authenticate_uri=self.stack.auth_url),
        })
        if self.neutron:
            self._write_neutron_confs()
        for name, port, app, _env, _argv in self._apis():
            with open(self.path(name, 'gunicorn.conf.py'), 'w') as f:
                if name == 'neutron-api':
                    # get_ports names Port.port_forwardings, a backref
                    # that exists once every model is imported and the
                    # mappers are configured, which this WSGI entry point
                    # leaves to the first query (nova-api's server show
                    # then fails with a 500).
                    f.write('import neutron.db.migration.models.head  '
                            '# noqa\nfrom sqlalchemy import orm\n'
                            'orm.configure_mappers()\n')
                f.write('bind = %r\n' % ('127.0.0.1:%d' % port)
                        + 'workers = 1\nthreads = 4\ntimeout = 300\n'
                        + 'pidfile = %r\n' % self.path(name, 'pid')
                        + 'wsgi_app = %r\n' % app
                        + 'control_socket_disable = True\n')

    def _write_neutron_confs(self):
        auth = self._authentication
        agents.write_conf(self.path('neutron.conf'), {
            'DEFAULT': {
                'debug': self.debug, 'use_stderr': True,
                'host': self.compute_host,
                'auth_strategy': 'keystone',
                'core_plugin': 'ml2', 'service_plugins': '',
                'transport_url': self.stack.transport_url,
                'api_paste_config': os.path.join(
                    self.neutron, 'etc', 'neutron', 'api-paste.ini'),
                # No port ever binds: nothing to tell Nova.
                'notify_nova_on_port_status_changes': False,
                'notify_nova_on_port_data_changes': False},
            'database': {'connection':
                         self.stack.postgres.url('neutron')},
            'keystone_authtoken': dict(
                auth('neutron'), www_authenticate_uri=self.stack.auth_url),
            'nova': auth('nova'),
            'oslo_concurrency': {'lock_path': self.path('locks')},
            'oslo_messaging_notifications': {'driver': 'noop'},
        })
        # ML2 with no mechanism driver: the API and its database only.
        agents.write_conf(self.path('ml2_conf.ini'), {
            'ml2': {'type_drivers': 'flat', 'tenant_network_types': '',
                    'mechanism_drivers': '', 'extension_drivers': ''},
        })

    def _neutron_db(self):
        """Neutron's tables from its models, then its migrations stamped
        as done: Neutron's migrations are MySQL's (one runs ``ALTER TABLE
        tags CONVERT TO CHARACTER SET utf8mb4``, a syntax error on
        PostgreSQL), the models are not (Neutron's own tests build the
        schema the same way).
        """
        if not self.neutron:
            return
        log = os.path.join(self.logdir, 'neutron-db-manage.log')
        stack_module.run(
            [os.path.join(self.neutron, 'bin', 'python'), '-c',
             'import sys, sqlalchemy\n'
             'from neutron.db.migration.models import head\n'
             'head.get_metadata().create_all('
             'sqlalchemy.create_engine(sys.argv[1]))',
             self.stack.postgres.url('neutron')], log, timeout=300)
        stack_module.run(
            [os.path.join(self.neutron, 'bin', 'neutron-db-manage'),
             '--config-file', self.path('neutron.conf'), '--config-file',
             self.path('ml2_conf.ini'), 'stamp', 'heads'], log, timeout=300)

    def _manage(self, tool, *args, log=None):
        conf = self.path('%s.conf' % tool.split('-')[0])
        stack_module.run(
            [os.path.join(BIN, tool), '--config-file', conf] + list(args),
            os.path.join(self.logdir, log or '%s.log' % tool), timeout=300)

    def _nova_dbs(self):
        manage = self._manage
        manage('nova-manage', 'api_db', 'sync')
        manage('nova-manage', 'cell_v2', 'map_cell0', '--database_connection',
               self.stack.postgres.url('nova_cell0'))
        manage('nova-manage', 'cell_v2', 'create_cell', '--name', 'cell1')
        manage('nova-manage', 'db', 'sync')

    def _register(self):
        from keystoneclient.v3 import client
        keystone = client.Client(session=self.stack.session('admin'))
        domain = keystone.domains.get('default')
        roles = {role.name: role for role in keystone.roles.list()}
        project = keystone.projects.find(name=PROJECT)
        users = ['nova', 'placement'] + (['neutron'] if self.neutron
                                         else [])
        for user in users:
            account = keystone.users.create(user, domain=domain,
                                            password=PASSWORDS[user],
                                            default_project=project)
            for role in ('admin', 'service'):
                keystone.roles.grant(roles[role], user=account,
                                     project=project)
        services = [('nova', 'compute', self.nova_url + '/v2.1'),
                    ('placement', 'placement', self.placement_url)]
        if self.neutron:
            services.append(('neutron', 'network', self.neutron_url))
        for name, kind, url in services:
            service = keystone.services.create(name, type=kind)
            for interface in ('public', 'internal'):
                keystone.endpoints.create(service, url, interface,
                                          region=REGION)
        self.stack._sessions.clear()

    def _start_services(self):
        for name, _port, _app, env, argv in self._apis():
            self._spawn('placement-api' if name == 'placement' else name,
                        argv, env=dict(os.environ, **env),
                        cwd=self.path(name))
        for service in self.SERVICES:
            self._spawn(service, [os.path.join(BIN, service),
                                  '--config-file', self.path('nova.conf')])

    def _wait_apis(self):
        import requests
        urls = [self.placement_url, self.nova_url]
        if self.neutron:
            urls.append(self.neutron_url)
        for url in urls:
            self._poll('%s answering' % url,
                       lambda: requests.get(url, timeout=5).status_code
                       < 500, 120)

    def wait_compute(self, host=None):
        """Until Nova reports nova-compute on ``host`` up with its
        hypervisor, then map it to cell1.
        """
        host = host or self.compute_host
        compute = self.compute('admin')

        def hypervisor():
            services = compute.get('/os-services').json()['services']
            up = {(s['binary'], s['host']) for s in services
                  if s['state'] == 'up'}
            if ('nova-compute', host) not in up:
                return False
            return [h for h in compute.get('/os-hypervisors/detail').json()[
                'hypervisors'] if h['service']['host'] == host]
        self._poll('nova-compute on %s up' % host, hypervisor, 240)
        # Map the host to cell1 now rather than on the scheduler's period.
        self._manage('nova-manage', 'cell_v2', 'discover_hosts',
                     log='nova-discover.log')

    def _create_flavor(self):
        self.compute('admin').post('/flavors', json={'flavor': {
            'name': FLAVOR, 'ram': 512, 'vcpus': 1, 'disk': 0}})

    # -- more compute hosts -------------------------------------------------

    def add_compute(self, host, libvirt_uri):
        """A second (third...) nova-compute, as another host: its own
        CONF.host (a BlobCR agent's host name), libvirtd, state directory
        and lock path; nova.conf for the rest. Its libvirtd must call
        itself by another name (SessionLibvirt's ``hostname``: Nova's
        node name, unique in Placement) and have a host UUID of its own
        (libvirt migrates to no host with its own).

        The instances directory is shared, as on a cloud with shared
        instance storage: every compute here has my_ip 127.0.0.1, and
        Nova takes two hosts with one address for hosts that share it
        (a cold migration then skips the copy over ssh to the other).
        """
        for sub in ('state', 'locks'):
            os.makedirs(self.path(host, sub), exist_ok=True)
        agents.write_conf(self.path(host, 'nova-compute.conf'), {
            'DEFAULT': {'host': host,
                        'state_path': self.path(host, 'state')},
            'libvirt': {'connection_uri': libvirt_uri},
            'oslo_concurrency': {'lock_path': self.path(host, 'locks')},
        })
        self.computes.append(host)
        self.start_compute(host)
        self._timed('compute %s up' % host, self.wait_compute, host)

    def compute_service(self, host):
        return 'nova-compute' if host == self.compute_host else \
            'nova-compute-%s' % host

    def start_compute(self, host):
        """(Re)start nova-compute on ``host``."""
        argv = [os.path.join(BIN, 'nova-compute'),
                '--config-file', self.path('nova.conf')]
        if host != self.compute_host:
            argv += ['--config-file', self.path(host, 'nova-compute.conf')]
        self._spawn(self.compute_service(host), argv)

    def kill_compute(self, host):
        """SIGKILL nova-compute on ``host``, as a host that dies."""
        process = self.processes.pop(self.compute_service(host), None)
        if process is not None and process.proc.poll() is None:
            process.proc.kill()
            process.proc.wait()

    def console_log(self, server_id):
        """A server's console log (instances are shared by the computes).
        """
        return self.path('instances', server_id, 'console.log')

    # -- use --------------------------------------------------------------

    def compute(self, user='demo', microversion=COMPUTE_MICROVERSION):
        """A keystoneauth1 adapter on Nova's API (raises on >= 400)."""
        from keystoneauth1 import adapter
        # connect_retries: nova-api closes an idle kept-alive connection
        # (a request sent on it as it closes is never read: a test
        # polling every 2 s once got RemoteDisconnected).
        return adapter.Adapter(self.stack.session(user),
                               service_type='compute', interface='public',
                               region_name=REGION, connect_retries=2,
                               default_microversion=microversion)

    def log(self, name, lines=60):
        return stack_module.tail(os.path.join(self.logdir, name + '.log'),
                                 lines)

    def compute_errors(self, lines=20):
        """The last ERROR lines of every nova-compute's log, by log: what
        a failed server explains itself with.
        """
        found = []
        for path in sorted(glob.glob(os.path.join(self.logdir,
                                                  'nova-compute*.log'))):
            with open(path, errors='replace') as f:
                errors = [line for line in f if ' ERROR ' in line]
            found.append('%s:\n%s' % (os.path.basename(path),
                                      ''.join(errors[-lines:])))
        return '\n'.join(found)

    def stop(self, timeout=20):
        """Stop every service by its pid (SIGTERM, then SIGKILL to its
        process group: nova-compute may ignore SIGTERM).
        """
        killed = stack_module.stop_services(self.processes.values(), timeout)
        if killed:
            sys.stderr.write('nova stack: killed %s\n' % ', '.join(killed))
