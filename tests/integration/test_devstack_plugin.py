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

"""The devstack plugin (devstack/), run phase by phase without devstack.

devstack's function library is not on any package registry, so the
plugin runs on the harness's stand-ins (tests/devstack_harness: real
config edits and real processes, recorded package installs and Keystone
accounts). What the phases write is then given to the real services:

* the agent that post-config starts (run_process, as root) answers on
  its admin socket and over RPC on the session's RabbitMQ;
* cinder.conf, the test stack's own with the backend section
  configure_cinder_backend_blobcr wrote (lib/cinder's loop, in the
  harness), runs a second cinder-volume that joins the stack's database
  and broker: it reports up, and a volume of devstack's type for that
  backend is created in the agent's store;
* blobcr-cinder-sync with its generated file logs in to the real
  Keystone and asks the real Cinder (one round, no error);
  blobcr-vendordata answers with keystonemiddleware in front (401
  without a token); blobcr-nova-listener listens; nova.conf's settings
  parse with Nova's own options; the Horizon enabled files are copied;
* unstack stops all of them and unmounts; clean removes what the plugin
  made.

Also: shellcheck on the plugin's files, settings refused with a message
that names them, and the Ceph option on the session's micro cluster
(pools made by the plugin, an agent on them).
"""

import configparser
import glob
import json
import os
import pwd
import re
import subprocess
import sys
import time
import uuid

import pytest
import requests

from blobcr_common.rpc import api as rpc_api
from blobcr_common.rpc import bus
from blobcr_lab import agent_rpc
from blobcr_lab import bus_split
from blobcr_lab import openstack as stack_module
from tests import devstack_harness as harness

BIN = os.path.dirname(os.path.abspath(sys.executable))
BACKEND = 'blobcr'  # override-defaults: CINDER_ENABLED_BACKENDS=blobcr:blobcr
ENABLED_FILES = sorted(glob.glob(os.path.join(
    harness.TREE, 'blobcr-dashboard', 'blobcr_dashboard', 'enabled',
    '_[0-9]*.py')))


def read_conf(path):
    parser = configparser.ConfigParser(interpolation=None)
    with open(path) as f:
        parser.read_file(f)
    return parser


def devstack_env(tmp_path, transport_url, **settings):
    """devstack's globals (stackrc's, as the plugin reads them) in a
    directory of the test's own, and the harness's variables.
    """
    work = str(tmp_path)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(('BLOBCR_', 'CINDER_', 'OS_'))}
    env.update({
        'PATH': BIN + os.pathsep + env.get('PATH', ''),
        'HARNESS_DIR': work,
        'HARNESS_BINDIR': BIN,
        'HARNESS_TRANSPORT_URL': transport_url,
        'DEST': os.path.join(work, 'opt-stack'),
        'DATA_DIR': os.path.join(work, 'data'),
        'STACK_USER': pwd.getpwuid(os.getuid()).pw_name,
        'HOST_IP': '127.0.0.1',
        'ENABLE_DEBUG_LOG_LEVEL': 'True',
        'SERVICE_PROJECT_NAME': 'service',
        'SERVICE_DOMAIN_NAME': 'Default',
        'SERVICE_PASSWORD': 'devstack-secret',
        'DEVSTACK_PLUGINS': 'blobcr',
        'ENABLED_SERVICES': 'c-vol',
        'CINDER_CONF': os.path.join(work, 'cinder.conf'),
        'NOVA_CONF': os.path.join(work, 'nova.conf'),
        'HORIZON_DIR': os.path.join(work, 'horizon'),
        'TEMPEST_CONFIG': os.path.join(work, 'tempest.conf'),
        # Paths and ports of the test's own, one agent per test.
        'BLOBCR_CONF_DIR': os.path.join(work, 'etc-blobcr'),
        'BLOBCR_ADMIN_SOCKET': os.path.join(work, 'run', 'agent.sock'),
        'BLOBCR_AGENT_HOST': 'devstack-' + uuid.uuid4().hex[:8],
        'BLOBCR_PROXY_LISTEN': '127.0.0.1',
        'BLOBCR_PROXY_PORT': '0',
        'BLOBCR_QUIESCE': 'none',
        'BLOBCR_LIBVIRT_URI': 'test:///default',
        'BLOBCR_START_TIMEOUT': '60',
    })
    env.update(settings)
    return env


def mounted(path):
    with open('/proc/mounts') as f:
        return any(line.split()[1] == path for line in f)


@pytest.fixture
def cleanup_services(tmp_path):
    """Whatever run_process started and no unstack stopped, and a mirror
    left mounted, are gone at the end.
    """
    yield
    harness.kill_services(str(tmp_path))
    mnt = os.path.join(str(tmp_path), 'data', 'blobcr', 'mnt')
    for path in (mnt + '/images', mnt + '/versions', mnt):
        if mounted(path):
            subprocess.run(['fusermount3', '-u', '-z', path], check=False)


def test_shellcheck_clean():
    """The plugin's files and the harness pass shellcheck (bash)."""
    files = harness.PLUGIN_FILES + [harness.FUNCTIONS]
    done = subprocess.run(['shellcheck', '-s', 'bash', '-x'] + files,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_harness_iniset_keeps_devstack_rules(tmp_path):
    """The harness's iniset: what devstack's inc/ini-config documents."""
    path = str(tmp_path / 'x.conf')
    with open(path, 'w') as f:
        f.write('# kept\n[a]\nold = 1\n[b]\nz = 2\n')
    ini = [sys.executable, os.path.join(harness.HERE, 'ini.py')]
    for args in (('a', 'new', 'x  y'), ('a', 'old', '3'), ('c', 'k', 'v'),
                 ('', 'ignored', 'v')):
        subprocess.run(ini + ['set', path] + list(args), check=True)
    with open(path) as f:
        assert f.read() == ('# kept\n[a]\nnew = x y\nold = 3\n[b]\n'
                            'z = 2\n\n[c]\nk = v\n')
    got = subprocess.run(ini + ['get', path, 'b', 'z'], check=True,
                         capture_output=True, text=True).stdout
    assert got == '2\n'


@pytest.mark.parametrize('settings, message', [
    ({'BLOBCR_BACKEND': 'nfs'},
     'BLOBCR_BACKEND=nfs is not one of: local ceph'),
    ({'BLOBCR_QUIESCE': 'pause'},
     'BLOBCR_QUIESCE=pause is not one of: none fsfreeze suspend'),
    ({'BLOBCR_BACKEND': 'ceph', 'BLOBCR_CEPH_CONF': '/nonexistent/ceph.conf'},
     'BLOBCR_BACKEND=ceph needs a cluster'),
    ({'BLOBCR_BACKEND': 'ceph', 'BLOBCR_CEPH_CLUSTER': 'rook'},
     'BLOBCR_CEPH_CLUSTER=rook is not one of'),
    ({'BLOBCR_CONNECTION_TYPE': 'iscsi'},
     'BLOBCR_CONNECTION_TYPE=iscsi is not one of: local gpfs blobcr'),
    # One password for every broker user (issue 54, finding 7).
    ({'BLOBCR_BUS_PASSWORD': 'x'}, 'BLOBCR_BUS_PASSWORD is gone'),
    ({'BLOBCR_AGENT_BUS_PASSWORD': 'x', 'BLOBCR_CONTROL_BUS_PASSWORD': 'x'},
     'BLOBCR_AGENT_BUS_PASSWORD and BLOBCR_CONTROL_BUS_PASSWORD are the '
     'same'),
])
def test_bad_settings_stop_pre_install(tmp_path, settings, message):
    env = devstack_env(tmp_path, 'rabbit://unused', **settings)
    shell = harness.DevstackShell(env)
    try:
        with pytest.raises(harness.PhaseFailed) as failed:
            shell.run('harness_stack_configure')
    finally:
        shell.close()
    assert message in str(failed.value)
    # Nothing was installed, configured or started.
    done = [c[0] for c in harness.calls(str(tmp_path))]
    assert 'die' in done
    for name in ('install_package', 'setup_develop', 'run_process'):
        assert name not in done


def cinder_conf_from_stack(stack, path, host):
    """The stack's cinder.conf, as devstack's configure_cinder leaves it
    for the backend loop: its own backends gone, another host name.
    """
    parser = read_conf(stack.path('cinder.conf'))
    for section in stack.backends:
        parser.remove_section(section)
    for option in ('enabled_backends', 'default_volume_type'):
        parser.remove_option('DEFAULT', option)
    parser.set('DEFAULT', 'host', host)
    with open(path, 'w') as f:
        parser.write(f)


def wait_for(what, check, timeout, process=None):
    deadline = time.monotonic() + timeout
    while True:
        if process is not None:
            process.check_running()
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError('%s not reached in %s s' % (what, timeout))
        time.sleep(0.5)


def remove_volume_service(env, backend_host):
    return subprocess.run(
        [os.path.join(BIN, 'cinder-manage'), '--config-file',
         env['CINDER_CONF'], 'service', 'remove', 'cinder-volume',
         backend_host], capture_output=True, check=False, timeout=60)


def volume_service_state(admin, host):
    services = admin.get('/os-services?binary=cinder-volume').json()[
        'services']
    return {s['host']: s['state'] for s in services}.get(host)


def test_stack_local_store_real_services(tmp_path, rabbitmq_url,
                                         rabbitmq_broker, openstack_cloud,
                                         cleanup_services):
    stack = openstack_cloud
    work = str(tmp_path)
    cinder_host = 'devstack-cinder-' + uuid.uuid4().hex[:6]
    vendordata_port = stack_module.free_port()
    # RabbitMQ on this host (devstack's "rabbit"): the split bus.
    split = not rabbitmq_broker.external
    env = devstack_env(
        tmp_path, rabbitmq_url,
        ENABLED_SERVICES='c-vol,c-api,n-api,horizon,tempest,'
                         'blobcr-vendordata,blobcr-nova-listener,'
                         'blobcr-cinder-sync' + (',rabbit' if split else ''),
        HARNESS_RABBIT_DIR=rabbitmq_broker.directory or '',
        # The stack's Keystone, its unversioned root as devstack names
        # it; the stack's Cinder user is devstack's "cinder" service user.
        KEYSTONE_SERVICE_URI=stack.auth_url.rsplit('/v3', 1)[0],
        SERVICE_PASSWORD=stack_module.PASSWORDS['cinder'],
        # The sync's Keystone user: the stack's, as the harness makes no
        # account (its grant is only recorded, check_recorded).
        BLOBCR_SYNC_USER='cinder',
        BLOBCR_VENDORDATA_LISTEN='127.0.0.1',
        BLOBCR_VENDORDATA_PORT=str(vendordata_port))
    cinder_conf_from_stack(stack, env['CINDER_CONF'], cinder_host)
    # nova.conf as lib/nova leaves it before post-config.
    with open(env['NOVA_CONF'], 'w') as f:
        f.write('[DEFAULT]\ntransport_url = %s\n' % rabbitmq_url)
    # Horizon's checkout: its local/enabled is a package.
    enabled_dir = os.path.join(env['HORIZON_DIR'], 'openstack_dashboard',
                               'local', 'enabled')
    os.makedirs(enabled_dir)
    open(os.path.join(enabled_dir, '__init__.py'), 'w').close()
    data = os.path.join(env['DATA_DIR'], 'blobcr')
    host = env['BLOBCR_AGENT_HOST']
    admin = stack.block_storage('admin')
    api = None
    volume_service = None
    type_id = None
    backend_host = '%s@%s' % (cinder_host, BACKEND)
    shell = harness.DevstackShell(env)
    try:
        shell.run('harness_stack_configure')

        # -- what post-config left: the agent, up -----------------------
        assert harness.alive(harness.service_pid(work, 'blobcr-agent'))
        status = json.loads(subprocess.run(
            [os.path.join(BIN, 'blobcr-manage'), '--config-file',
             os.path.join(env['BLOBCR_CONF_DIR'], 'blobcr.conf'),
             'status', '--json'],
            capture_output=True, text=True, check=True).stdout)
        assert status['host'] == host
        assert status['mountpoint'] == os.path.join(data, 'mnt')
        assert 'local' in json.dumps(status['backend'])
        assert os.path.join(data, 'repository') in json.dumps(
            status['backend'])
        assert mounted(os.path.join(data, 'mnt')) or mounted(
            os.path.join(data, 'mnt', 'versions'))
        conf = read_conf(env['CINDER_CONF'])
        if split:
            # The agent on its own vhost as its own user; cinder-volume
            # (and this test) as the control user, on each agent's vhost.
            agent_conf = read_conf(os.path.join(env['BLOBCR_CONF_DIR'],
                                                'blobcr.conf'))
            assert agent_conf.get('DEFAULT', 'transport_url').endswith(
                '/blobcr-%s' % host)
            assert agent_conf.get('blobcr_bus', 'host_vhosts') == 'True'
            control_url = conf.get(BACKEND, 'blobcr_transport_url')
            assert conf.get('blobcr_bus', 'host_vhosts') == 'True'
            api = bus_split.caller(control_url, 'blobcr-%(host)s')
        else:
            api = rpc_api.AgentAPI(transport_url=rabbitmq_url, timeout=30)
        assert agent_rpc.wait_rpc(api, host)['host'] == host
        if split:
            queues = rabbitmq_broker.ctl(
                'list_queues', '-p', 'blobcr-%s' % host, 'name', '-q',
                '--no-table-headers').split()
            assert 'blobcr-agent.%s' % host in queues, queues
            assert 'blobcr-agent.%s' % host not in rabbitmq_broker.ctl(
                'list_queues', 'name', '-q', '--no-table-headers').split()
            # The peer side: authenticated, the agent's user confined to
            # its own two queues there (the patterns the agent's code
            # states), and the agent serving them.
            assert agent_conf.get('blobcr_bus',
                                  'authenticated_peers') == 'True'
            granted = rabbitmq_broker.ctl(
                'list_user_permissions', 'blobcr-%s' % host, '-q',
                '--no-table-headers').splitlines()
            assert '\t'.join(('blobcr-peer',) + bus.peer_permissions(
                host)) in granted, granted
            deadline = time.monotonic() + 60
            while bus.reply_queue(host) not in rabbitmq_broker.ctl(
                    'list_queues', '-p', 'blobcr-peer', 'name', '-q',
                    '--no-table-headers').split():
                assert time.monotonic() < deadline, 'no peer queues'
                time.sleep(0.5)

        # -- stack.sh's "Launch Services": cinder-volume with the
        # generated cinder.conf joins the stack, and devstack's
        # create_volume_types makes type NAME for backend NAME.
        assert conf.get('DEFAULT', 'enabled_backends') == BACKEND
        section = dict(conf.items(BACKEND))
        assert section['volume_driver'] == \
            'blobcr_cinder.driver.BlobCRDriver'
        assert section['volume_backend_name'] == BACKEND
        assert section['blobcr_agent_host'] == host
        assert section['blobcr_exchange_dir'] == os.path.join(data,
                                                              'exports')
        # Stock Nova and os-brick: the default type patches nothing.
        assert section['blobcr_connection_type'] == 'local'
        check = os.path.join(harness.TREE, 'tools', 'check_stock.py')
        assert subprocess.run([sys.executable, check, 'nova', 'os-brick'],
                              timeout=120).returncode == 0
        volume_service = stack_module.ServiceProcess(
            'cinder-volume-devstack',
            [os.path.join(BIN, 'cinder-volume'), '--config-file',
             env['CINDER_CONF']], dict(os.environ),
            os.path.join(work, 'cinder-volume.log')).start()
        wait_for('cinder-volume %s up' % backend_host,
                 lambda: volume_service_state(admin, backend_host) == 'up',
                 90, volume_service)
        type_id = admin.post('/types', json={'volume_type': {
            'name': BACKEND, 'os-volume-type-access:is_public': True,
            'extra_specs': {'volume_backend_name': BACKEND}}}).json()[
                'volume_type']['id']
        wait_for('scheduler pool %s' % backend_host, lambda: any(
            p['name'].startswith(backend_host + '#') for p in admin.get(
                '/scheduler-stats/get_pools').json()['pools']),
            90, volume_service)
        volume = stack.block_storage('demo').post('/volumes', json={
            'volume': {'size': 1, 'volume_type': BACKEND,
                       'name': 'devstack-plugin'}}).json()['volume']
        created = stack.wait_status('volume', volume['id'], 'available',
                                    timeout=90)
        assert created['os-vol-host-attr:host'].startswith(backend_host)
        images = {i['name'] for i in api.list_images(host)}
        assert 'volume-%s' % volume['id'] in images

        # -- the optional services, started by the extra phase ----------
        shell.run('harness_stack_finish')
        shell.close()

        vendordata = 'http://127.0.0.1:%d/' % vendordata_port
        # keystonemiddleware in front: no token, no answer.
        answer, = wait_for('blobcr-vendordata answering', lambda: _post(
            vendordata), 60)
        assert answer.status_code == 401, answer.text

        sync_conf = os.path.join(env['BLOBCR_CONF_DIR'],
                                 'blobcr-cinder-sync.conf')
        assert read_conf(sync_conf).get('blobcr_sync', 'backends') == \
            backend_host
        once = subprocess.run(
            [os.path.join(BIN, 'blobcr-cinder-sync'), '--config-file',
             sync_conf, '--once'], capture_output=True, text=True,
            timeout=120)
        assert once.returncode == 0, once.stdout + once.stderr
        assert 'sync round: 0 registered, 0 deferred, 0 failed' in \
            once.stdout + once.stderr

        # The service the extra phase started makes its rounds too.
        wait_for('a blobcr-cinder-sync round', lambda: re.search(
            r'sync round: \d+ registered, \d+ deferred, 0 failed',
            harness.service_log(work, 'blobcr-cinder-sync')), 60)
        wait_for('blobcr-nova-listener listening', lambda: re.search(
            r'listening on versioned_notifications \(exchange nova',
            harness.service_log(work, 'blobcr-nova-listener')), 60)
        for service in ('blobcr-agent', 'blobcr-vendordata',
                        'blobcr-nova-listener', 'blobcr-cinder-sync'):
            assert harness.alive(harness.service_pid(work, service)), \
                harness.service_log(work, service)

        check_nova_conf(env['NOVA_CONF'], vendordata_port)
        check_tempest_conf(env['TEMPEST_CONFIG'])
        check_horizon(env['HORIZON_DIR'], work)
        check_recorded(work, env)

        # The volume goes as it came, through the agent; then this
        # cinder-volume leaves the stack's database.
        stack.block_storage('demo').delete('/volumes/%s' % volume['id'])
        stack.wait_status('volume', volume['id'], 'deleted', timeout=90)
        volume_service.stop()
        assert remove_volume_service(env, backend_host).returncode == 0
        assert volume_service_state(admin, backend_host) is None
        volume_service = None
    finally:
        shell.close()
        if type_id:
            admin.delete('/types/%s' % type_id, raise_exc=False)
        if volume_service:
            volume_service.stop()
            remove_volume_service(env, backend_host)
        if api is not None:
            api.cleanup()

    pids = {service: harness.service_pid(work, service) for service in (
        'blobcr-agent', 'blobcr-vendordata', 'blobcr-nova-listener',
        'blobcr-cinder-sync')}
    unstack = harness.DevstackShell(env, errexit=False)
    try:
        unstack.run('harness_unstack', timeout=120)
    finally:
        unstack.close()
    for service, pid in pids.items():
        assert not harness.alive(pid), '%s still runs' % service
    assert not mounted(os.path.join(data, 'mnt'))
    assert os.path.isdir(os.path.join(data, 'repository'))

    clean = harness.DevstackShell(env, errexit=False)
    try:
        clean.run('harness_clean', timeout=120)
    finally:
        clean.close()
    assert not os.path.exists(data)
    assert not os.path.exists(os.path.join(env['BLOBCR_CONF_DIR'],
                                           'blobcr.conf'))
    assert os.listdir(enabled_dir) == ['__init__.py']


def _post(url):
    """[the answer] ([] while nothing listens: a 4xx answer is falsy)."""
    try:
        return [requests.post(url, json={}, timeout=5)]
    except requests.ConnectionError:
        return []


def check_nova_conf(path, port):
    """Nova's own options read what post-config wrote."""
    code = (
        'import json, sys\n'
        'import nova.conf\n'
        'conf = nova.conf.CONF\n'
        'conf(["--config-file", sys.argv[1]], project="nova")\n'
        # As nova's services do: registers the notification options.
        'import nova.rpc\n'
        'nova.rpc.init(conf)\n'
        'from keystoneauth1 import loading\n'
        'auth = loading.load_auth_from_conf_options(\n'
        '    conf, "vendordata_dynamic_auth")\n'
        'print(json.dumps({\n'
        '    "providers": conf.api.vendordata_providers,\n'
        '    "targets": conf.api.vendordata_dynamic_targets,\n'
        '    "format": conf.notifications.notification_format,\n'
        '    "bdms": conf.notifications.bdms_in_notifications,\n'
        '    "driver": conf.oslo_messaging_notifications.driver,\n'
        '    "auth": type(auth).__name__}))\n')
    done = subprocess.run([sys.executable, '-c', code, path],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    nova = json.loads(done.stdout)
    assert nova == {
        'providers': ['StaticJSON', 'DynamicJSON'],
        'targets': ['blobcr@http://127.0.0.1:%d/' % port],
        'format': 'both', 'bdms': True, 'driver': ['messagingv2'],
        'auth': 'Password'}


def check_tempest_conf(path):
    conf = read_conf(path)
    assert conf.get('volume', 'storage_protocol') == 'file'
    assert conf.get('volume', 'vendor_name') == 'BlobCR for OpenStack'
    assert conf.getboolean('volume-feature-enabled', 'volume_revert')
    assert conf.get('volume', 'manage_snapshot_ref') == \
        'source-name,snapshot-%s'
    assert not conf.getboolean('volume-feature-enabled',
                               'extend_attached_volume')


def check_horizon(horizon_dir, work):
    """The tree's enabled files are copied, and Horizon's own loader
    (openstack_dashboard.utils.settings.update_dashboards, what its
    settings run on local/enabled) takes them: the app is installed and
    each panel class it adds imports (Django set up with Horizon's
    settings; the panel's distribution on the path, as devstack's
    setup_develop installs it). None in the tree: a warning says so.
    """
    enabled = os.path.join(horizon_dir, 'openstack_dashboard', 'local',
                           'enabled')
    copied = sorted(n for n in os.listdir(enabled) if n != '__init__.py')
    assert copied == [os.path.basename(f) for f in ENABLED_FILES]
    if not ENABLED_FILES:
        warnings = [c[1] for c in harness.calls(work, 'warn')]
        assert any('no Horizon enabled file' in w for w in warnings)
        return
    code = (
        'import importlib, json, os, sys\n'
        'sys.path.insert(0, os.path.dirname(sys.argv[1]))\n'
        'os.environ["DJANGO_SETTINGS_MODULE"] = '
        '"openstack_dashboard.settings"\n'
        'import django\n'
        'django.setup()\n'
        'import enabled\n'
        'from openstack_dashboard.utils import settings\n'
        'config, apps = {}, []\n'
        'settings.update_dashboards([enabled], config, apps)\n'
        'panels = []\n'
        'for panel in config.get("panel_customization", []):\n'
        '    module, name = panel["ADD_PANEL"].rsplit(".", 1)\n'
        '    panels.append(getattr(importlib.import_module(module), name)'
        '.__name__)\n'
        'print(json.dumps({"apps": apps, "panels": panels}))\n')
    env = dict(os.environ, PYTHONPATH=os.path.join(harness.TREE,
                                                   'blobcr-dashboard'),
               PYTHONDONTWRITEBYTECODE='1')
    done = subprocess.run([sys.executable, '-c', code, enabled], env=env,
                          cwd=work, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    horizon = json.loads(done.stdout.splitlines()[-1])
    assert 'blobcr_dashboard' in horizon['apps']
    # Installed as devstack installs it (the panel's own distribution).
    assert ('setup_develop', os.path.join(harness.TREE, 'blobcr-dashboard')) \
        in harness.calls(work, 'setup_develop')
    assert len(horizon['panels']) == len(ENABLED_FILES), horizon


def check_recorded(work, env):
    recorded = harness.calls(work)
    names = [c[0] for c in recorded]
    assert ('define_plugin', 'blobcr') in recorded
    assert ('enable_service', 'blobcr-agent') in recorded
    # Each distribution of the tree, what the others require first.
    develop = [c[1] for c in recorded if c[0] == 'setup_develop']
    assert develop[:5] == [os.path.join(harness.TREE, 'blobcr-common'),
                           harness.TREE] + [
        os.path.join(harness.TREE, name)
        for name in ('blobcr-cinder', 'blobcr-nova', 'blobcr-guest')]
    assert ('setup_develop', os.path.join(harness.TREE,
                                          'python-blobcrclient')) in recorded
    assert ('create_service_user', 'blobcr') in recorded
    # The sync's user is granted the role as install.rst grants it.
    assert ('openstack', '--os-cloud', 'devstack-system-admin', 'role',
            'add', '--user', 'cinder', '--user-domain', 'Default',
            '--domain', 'Default', '--inherited', 'admin') in recorded
    # The agent runs as root with the generated file; the others as the
    # stack user.
    agent = [c for c in recorded if c[:2] == ('run_process', 'blobcr-agent')]
    assert agent == [('run_process', 'blobcr-agent', '%s --config-file %s'
                      % (os.path.join(BIN, 'blobcr-agent'), os.path.join(
                          env['BLOBCR_CONF_DIR'], 'blobcr.conf')),
                      '', 'root')]
    # Phases in stack.sh's order: configure (post-config) before any
    # optional service starts (extra).
    assert names.index('setup_develop') < names.index('run_process')
    packages = installed_packages(work)
    assert {'fuse3', 'libfuse3-dev', 'qemu-utils'} <= packages


def installed_packages(work):
    """What install_package was asked for; every name one Debian has."""
    packages = {p for c in harness.calls(work, 'install_package')
                for p in c[1:]}
    known = subprocess.run(['apt-cache', 'show', '--no-all-versions'] +
                           sorted(packages), capture_output=True, text=True)
    found = set(re.findall(r'^Package: (\S+)$', known.stdout, re.M))
    assert found == packages, packages - found
    return packages


def test_stack_ceph_option_on_micro_cluster(tmp_path, rabbitmq_url,
                                            ceph_cluster, cleanup_services):
    """BLOBCR_BACKEND=ceph on an existing cluster (its ceph.conf, as
    devstack-plugin-ceph leaves /etc/ceph/ceph.conf): post-config makes
    the pools, erasure-coded data with 3 OSDs up, and the agent it
    starts uses them.
    """
    work = str(tmp_path)
    suffix = uuid.uuid4().hex[:6]
    pools = ('devstack-data-' + suffix, 'devstack-meta-' + suffix)
    env = devstack_env(
        tmp_path, rabbitmq_url, ENABLED_SERVICES='',
        BLOBCR_BACKEND='ceph', BLOBCR_CEPH_CONF=ceph_cluster.conffile,
        BLOBCR_CEPH_DATA_POOL=pools[0], BLOBCR_CEPH_META_POOL=pools[1],
        BLOBCR_CEPH_NAMESPACE='devstack')
    shell = harness.DevstackShell(env)
    try:
        shell.run('harness_stack_configure', timeout=240)
        shell.run('harness_stack_finish')
        detail = subprocess.run(
            ['ceph', '-c', ceph_cluster.conffile, 'osd', 'pool', 'ls',
             'detail', '-f', 'json'], capture_output=True, text=True,
            check=True, timeout=60).stdout
        kinds = {p['pool_name']: p for p in json.loads(detail)}
        # Pool type 3 is erasure, 1 replicated (Ceph's pg_pool_t).
        assert kinds[pools[0]]['type'] == 3
        assert kinds[pools[1]]['type'] == 1
        assert 'blobcr' in kinds[pools[0]]['application_metadata']
        conf = read_conf(os.path.join(env['BLOBCR_CONF_DIR'],
                                      'blobcr.conf'))
        assert conf.get('repository', 'backend') == 'rados'
        status = json.loads(subprocess.run(
            [os.path.join(BIN, 'blobcr-manage'), '--config-file',
             os.path.join(env['BLOBCR_CONF_DIR'], 'blobcr.conf'),
             'status', '--json'],
            capture_output=True, text=True, check=True).stdout)
        assert pools[0] in json.dumps(status['backend'])
        assert {'ceph-common', 'python3-rados'} <= installed_packages(work)
    finally:
        shell.close()
        unstack = harness.DevstackShell(env, errexit=False)
        try:
            unstack.run('harness_clean', timeout=120)
        finally:
            unstack.close()
        for pool in pools:
            subprocess.run(['ceph', '-c', ceph_cluster.conffile, 'osd',
                            'pool', 'rm', pool, pool,
                            '--yes-i-really-really-mean-it'],
                           capture_output=True, check=False, timeout=60)
    assert not os.path.exists(os.path.join(env['DATA_DIR'], 'blobcr'))


def test_zuul_jobs_use_what_the_plugin_defines():
    """.zuul.yaml's devstack jobs enable the plugin by its define_plugin
    name, only services the plugin runs, and only BLOBCR_* settings that
    devstack/settings reads, with values the plugin takes.
    """
    import yaml
    with open(os.path.join(harness.TREE, '.zuul.yaml')) as f:
        jobs = {item['job']['name']: item['job']
                for item in yaml.safe_load(f) if 'job' in item}
    with open(harness.PLUGIN_FILES[1]) as f:
        settings = f.read()
    with open(harness.PLUGIN_FILES[0]) as f:
        services = re.search(r'^BLOBCR_SERVICES="([^"]+)"', f.read(),
                             re.M).group(1).split()
    defined = set(re.findall(r'^(BLOBCR_\w+)=', settings, re.M))
    plugin = re.search(r'^define_plugin (\S+)$', settings, re.M).group(1)
    base = jobs['blobcr-devstack-functional']
    assert base['parent'] == 'devstack-tox-functional'
    assert list(base['vars']['devstack_plugins']) == [plugin]
    assert 'openstack/cinder' in base['required-projects']
    for name, job in jobs.items():
        local = job['vars'].get('devstack_localrc', {})
        assert set(k for k in local if k.startswith('BLOBCR_')) <= defined
        assert local.get('BLOBCR_BACKEND', 'local') in ('local', 'ceph')
        for service in job['vars'].get('devstack_services', {}):
            if service.startswith('blobcr'):
                assert service in services, (name, service)
        backends = local.get('CINDER_ENABLED_BACKENDS')
        if backends:
            assert any(b.split(':')[0] == 'blobcr'
                       for b in backends.split(','))
    with open(os.path.join(harness.TREE, '.zuul.yaml')) as f:
        project = [item['project'] for item in yaml.safe_load(f)
                   if 'project' in item]
    assert len(project) == 1
    # The jobs the Python PTI's tox envs feed, and the OSC plugin's.
    assert {'openstack-python3-jobs', 'publish-openstack-docs-pti',
            'release-notes-jobs-python3', 'openstackclient-plugin-jobs'} \
        <= set(project[0]['templates'])
    for pipeline in ('check', 'gate'):
        named = [j if isinstance(j, str) else next(iter(j))
                 for j in project[0][pipeline]['jobs']]
        assert set(named) <= set(jobs), (pipeline, named)


# -- Issue 54, finding 7: the defaults (no stack needed) ----------------------

# devstack's own passwords, each shared by many of its services.
SHARED = ('SERVICE_PASSWORD', 'RABBIT_PASSWORD', 'ADMIN_PASSWORD',
          'DATABASE_PASSWORD')


def _plugin_texts():
    texts = []
    for path in harness.PLUGIN_FILES[:2]:
        with open(path) as f:
            texts.append(f.read())
    return texts


def test_no_bus_user_or_secret_defaults_to_a_shared_password():
    """Lint: no BLOBCR_* setting defaults to one of devstack's shared
    passwords; each broker user the plugin makes gets a password setting
    of its own, which its URLs carry; the secrets left empty are made at
    random (blobcr_secrets), the host secret among them.
    """
    plugin, settings = _plugin_texts()
    for name, value in re.findall(r'^(BLOBCR_\w+)=(.*)$', settings, re.M):
        assert not [s for s in SHARED if s in value], (name, value)
    for line in re.findall(r'rabbitmqctl (?:add_user|change_password).*',
                           plugin):
        assert not [s for s in SHARED if s in line], line
    generated = re.search(r'^BLOBCR_SECRETS="([^"]*)"', plugin, re.M)
    generated = set(generated.group(1).split()) if generated else set()
    users = re.findall(r'^\s*blobcr_bus_user (\S+) "\$\{?(\w+)\}?"',
                       plugin, re.M)
    assert len(users) >= 2, users
    passwords = [password for _, password in users]
    assert len(set(passwords)) == len(passwords), users
    assert set(passwords) <= generated, (passwords, generated)
    in_urls = set(re.findall(r'blobcr_bus_url \S+ "\$\{?(\w+)\}?"', plugin))
    assert in_urls == set(passwords), in_urls
    secret = re.search(r'iniset "\$conf" proxy host_secret "\$(\w+)"',
                       plugin).group(1)
    token = re.search(r'iniset "\$conf" vendordata token_secret '
                      r'"\$(\w+)"', plugin).group(1)
    assert secret == token and secret in generated
    assert secret not in passwords


def test_the_sync_grants_itself_nothing_by_default():
    """Lint: as install.rst has it, the sync has a Keystone user of its
    own, granted the admin role on the domain's projects (inherited) by
    the plugin, and [blobcr_sync] assign_admin_role is not turned on.
    """
    plugin, settings = _plugin_texts()
    assert not re.search(r'assign_admin_role\s+"?(?i:true|yes|1|on)',
                         plugin + settings)
    assert re.search(r'configure_keystoneauth "\$conf" "\$BLOBCR_SYNC_USER" '
                     r'blobcr_sync', plugin)
    assert re.search(r'role add --user "\$BLOBCR_SYNC_USER" .*--inherited '
                     r'admin', plugin.replace('\\\n', ' '))
    assert re.search(r'^BLOBCR_SYNC_USER=\$\{BLOBCR_SYNC_USER:-blobcr-sync\}',
                     settings, re.M)


# What the plugin does for the split bus, with rabbitmqctl recorded only.
STACK_SECRETS = """
harness_load_plugins
harness_run_phase stack pre-install
function rabbitmqctl { harness_record rabbitmqctl "$@"; }
harness_configure_cinder_backends
configure_blobcr
"""


def _stack_secrets(env, work):
    """Run STACK_SECRETS with ``env``, its calls recorded in ``work``."""
    os.makedirs(work)
    shell = harness.DevstackShell(dict(env, HARNESS_DIR=work))
    try:
        shell.run(STACK_SECRETS)
    finally:
        shell.close()


def test_stack_makes_a_secret_per_user_and_keeps_it(tmp_path):
    """A stack (the split bus's broker users recorded, not made) gives
    each broker user a password of its own, made at random, and the
    agents and vendordata a host secret of their own; none is one of
    devstack's. A second stack keeps them; clean forgets them. The sync
    logs in as its own Keystone user, granted as install.rst grants it,
    and does not grant itself the role.
    """
    env = devstack_env(
        tmp_path, 'rabbit://stackrabbit:rabbit-secret@127.0.0.1:5672/',
        RABBIT_PASSWORD='rabbit-secret',
        ENABLED_SERVICES='c-vol,rabbit,blobcr-vendordata,'
                         'blobcr-nova-listener,blobcr-cinder-sync',
        KEYSTONE_SERVICE_URI='http://127.0.0.1/identity')
    first = str(tmp_path / 'first')
    _stack_secrets(env, first)
    confs = {name: os.path.join(env['BLOBCR_CONF_DIR'], name) for name in (
        'blobcr.conf', 'nova-vendordata.conf', 'nova-listener.conf',
        'blobcr-cinder-sync.conf', 'devstack-secrets')}
    for path in confs.values():
        assert os.stat(path).st_mode & 0o777 == 0o600, path
    host = env['BLOBCR_AGENT_HOST']
    recorded = harness.calls(first, 'rabbitmqctl')
    passwords = {}
    for call in recorded:
        if call[1] in ('add_user', 'change_password'):
            passwords.setdefault(call[2], set()).add(call[3])
    assert set(passwords) == {'blobcr-%s' % host, 'blobcr-control'}
    assert all(len(p) == 1 for p in passwords.values()), passwords
    agent_pw, = passwords['blobcr-%s' % host]
    control_pw, = passwords['blobcr-control']
    agent = read_conf(confs['blobcr.conf'])
    secret = agent.get('proxy', 'host_secret')
    values = [agent_pw, control_pw, secret]
    assert len(set(values)) == 3
    for value in values:
        assert re.fullmatch(r'[0-9a-f]{48}', value), value
        assert value not in (env['SERVICE_PASSWORD'], 'rabbit-secret')
    assert read_conf(confs['nova-vendordata.conf']).get(
        'vendordata', 'token_secret') == secret
    # Each URL carries its own user's password, and only that.
    for url in (agent.get('DEFAULT', 'transport_url'),
                agent.get('blobcr_bus', 'peer_transport_url')):
        assert ':%s@' % agent_pw in url and control_pw not in url
    listener = read_conf(confs['nova-listener.conf'])
    cinder = read_conf(env['CINDER_CONF'])
    for url in (listener.get('DEFAULT', 'transport_url'),
                cinder.get(BACKEND, 'blobcr_transport_url')):
        assert 'blobcr-control:%s@' % control_pw in url
        assert agent_pw not in url
    sync = read_conf(confs['blobcr-cinder-sync.conf'])
    assert not sync.has_option('blobcr_sync', 'assign_admin_role')
    assert sync.get('blobcr_sync', 'username') == 'blobcr-sync'
    assert ('openstack', '--os-cloud', 'devstack-system-admin', 'role',
            'add', '--user', 'blobcr-sync', '--user-domain', 'Default',
            '--domain', 'Default', '--inherited', 'admin') in \
        harness.calls(first, 'openstack')

    # A second stack keeps every secret.
    second = str(tmp_path / 'second')
    _stack_secrets(env, second)
    assert read_conf(confs['blobcr.conf']).get(
        'proxy', 'host_secret') == secret
    again = {c[2]: c[3] for c in harness.calls(second, 'rabbitmqctl')
             if c[1] == 'change_password'}
    assert again == {'blobcr-%s' % host: agent_pw,
                     'blobcr-control': control_pw}

    shell = harness.DevstackShell(env, errexit=False)
    try:
        shell.run('harness_clean', timeout=120)
    finally:
        shell.close()
    assert not os.path.exists(confs['devstack-secrets'])


def test_stack_ceph_micro_cluster(tmp_path, rabbitmq_url, cleanup_services):
    """BLOBCR_CEPH_CLUSTER=micro: post-config starts the project's micro
    cluster under $DATA_DIR/blobcr/ceph and the agent stores there;
    unstack stops its daemons, clean removes it.
    """
    env = devstack_env(tmp_path, rabbitmq_url, ENABLED_SERVICES='',
                       BLOBCR_BACKEND='ceph', BLOBCR_CEPH_CLUSTER='micro')
    ceph_dir = os.path.join(env['DATA_DIR'], 'blobcr', 'ceph')
    conf_file = os.path.join(env['BLOBCR_CONF_DIR'], 'blobcr.conf')
    shell = harness.DevstackShell(env)
    try:
        shell.run('harness_stack_configure', timeout=300)
        shell.run('harness_stack_finish')
        shell.close()
        conf = read_conf(conf_file)
        assert conf.get('rados', 'conffile') == os.path.join(ceph_dir,
                                                             'ceph.conf')
        status = json.loads(subprocess.run(
            [os.path.join(BIN, 'blobcr-manage'), '--config-file', conf_file,
             'status', '--json'],
            capture_output=True, text=True, check=True).stdout)
        assert status['backend'] == 'rados:blobcr-data/blobcr-meta'
        daemons = []
        for pidfile in glob.glob(os.path.join(ceph_dir, 'run', '*.pid')):
            with open(pidfile) as f:
                daemons.append(int(f.read()))
        assert len(daemons) >= 4 and all(map(harness.alive, daemons))
        clean = harness.DevstackShell(env, errexit=False)
        try:
            clean.run('harness_clean', timeout=180)
        finally:
            clean.close()
        assert not any(map(harness.alive, daemons))
        assert not os.path.exists(ceph_dir)
    finally:
        shell.close()
        if os.path.exists(os.path.join(ceph_dir, 'ceph.conf')):
            harness.kill_services(str(tmp_path))
            subprocess.run(['bash', os.path.join(harness.TREE, 'tools',
                                                 'ceph-cluster.sh'),
                            'stop', ceph_dir], capture_output=True,
                           check=False, timeout=120)
