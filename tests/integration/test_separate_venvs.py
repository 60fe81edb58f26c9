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

"""The product's distributions installed as an operator installs them,
each into a virtualenv of its own (blobcr_lab/service_venvs.py):

- cinder-volume's: Cinder from PyPI and the wheels of blobcr-common and
  blobcr-cinder, nothing of the agent. That cinder-volume joins the
  session's stack as another backend host, whose driver calls the
  session's real agents, and serves volumes, snapshots and clones
  through the real API.
- the agent's: the wheels of blobcr-common and of the agent (its C core
  built by pip). That blobcr-agent serves RPC on the session's bus, and
  a volume attached through it takes a checkpoint the store holds.
- nova-compute's: Nova from PyPI and the wheels of blobcr-common and
  blobcr-nova. Its blobcr-vendordata answers Nova's own vendordata code
  (run with that venv's Nova), and a guest checkpoints with the
  credentials Nova hands it.
- Horizon's: Horizon from PyPI and the wheels of python-blobcrclient and
  blobcr-dashboard. The panel's view tests pass there, under Django's
  test runner.

Opt-in (``BLOBCR_SEPARATE_VENVS=1``): the venv takes minutes to build
the first time (Cinder and its libraries from PyPI); it is kept under
``build/service-venvs`` for later runs.
"""

import os
import re
import subprocess
import time
import uuid

import pytest

import blobcr_lab
from blobcr_lab import agent_rpc
from blobcr_lab import agents
from blobcr_lab import cinder_hosts as cinder_hosts_module
from blobcr_lab import openstack as stack_module
from blobcr_lab import service_venvs
from tests import fake_nova_api
from tests.integration import test_nova_vendordata as vendordata
from tests.integration.test_nova_vendordata import identities  # noqa

pytestmark = pytest.mark.skipif(
    not os.environ.get('BLOBCR_SEPARATE_VENVS'),
    reason='builds a venv with Cinder from PyPI: set BLOBCR_SEPARATE_VENVS=1')

CHUNK = 64 * 1024
# What cinder-volume's environment must do without.
AGENT_ONLY = ['blobcr_agent', 'blobcr_agent._native', 'pyfuse3', 'trio',
              'libvirt', 'zstandard']


def _venv(tmp_path_factory, requirements, distributions):
    log = str(tmp_path_factory.mktemp('venv') / 'build.log')
    return service_venvs.service_venv(
        os.path.join(blobcr_lab.SOURCE, 'build', 'service-venvs'),
        requirements, distributions, log)


@pytest.fixture(scope='module')
def cinder_volume_bin(tmp_path_factory):
    # Cinder and the driver of its database (the stack's PostgreSQL).
    return _venv(tmp_path_factory, ['cinder==29.*', 'psycopg2-binary'],
                 ['blobcr-common', 'blobcr-cinder'])


@pytest.fixture(scope='module')
def nova_bin(tmp_path_factory):
    return _venv(tmp_path_factory, ['nova==34.*'],
                 ['blobcr-common', 'blobcr-nova'])


@pytest.fixture(scope='module')
def horizon_bin(tmp_path_factory):
    return _venv(tmp_path_factory, ['horizon==27.*'],
                 ['python-blobcrclient', 'blobcr-dashboard'])


@pytest.fixture(scope='module')
def agent_bin(tmp_path_factory):
    return _venv(tmp_path_factory, [], ['blobcr-common', '.'])


def test_the_agent_runs_from_its_own_venv(agent_bin, local_store, api,
                                          agent_factory, rabbitmq_url,
                                          export_dir):
    # Its own code, C core included; nothing of Cinder, Nova or the lab.
    assert service_venvs.importable(agent_bin, [
        'blobcr_agent._native', 'pyfuse3', 'blobcr_common.rpc.api']) == [
        'blobcr_agent._native', 'pyfuse3', 'blobcr_common.rpc.api']
    assert service_venvs.importable(agent_bin, [
        'cinder', 'nova', 'blobcr_cinder', 'blobcr_nova', 'blobcr_lab']) \
        == []
    repo = local_store
    base = os.urandom(4 * CHUNK)
    image_id = repo.create_image('venv-disk', len(base)).id
    repo.commit(image_id, {i: base[i * CHUNK:(i + 1) * CHUNK]
                           for i in range(4)})
    host = agent_rpc.host_name('venv')
    agent = agent_factory(repo.backend, agent_rpc.rpc_settings(
        rabbitmq_url, host, export_dir=str(export_dir)),
        command=[os.path.join(agent_bin, 'blobcr-agent')])
    assert agent.args[0] == os.path.join(agent_bin, 'blobcr-agent')
    assert agent_rpc.wait_rpc(api, host)['host'] == host
    attached = api.attach(host, 'venv-disk', instance='vm-venv')
    written = os.urandom(CHUNK)
    with open(attached['path'], 'r+b') as f:
        f.seek(CHUNK)
        f.write(written)
    done = api.checkpoint(host, image_id)
    assert api.wait_stable(host, image_id, done['version'],
                           timeout=60) == 'stable'
    assert repo.read(image_id, done['version'], 0, len(base)) == \
        base[:CHUNK] + written + base[2 * CHUNK:]
    api.detach(host, image_id)


def test_the_driver_runs_from_cinder_volumes_own_venv(
        cinder_volume_bin, openstack_cloud, cinder_hosts, tmp_path):
    stack = openstack_cloud
    # Nothing of the agent there; the driver and Cinder import.
    assert service_venvs.importable(cinder_volume_bin, AGENT_ONLY) == []
    assert service_venvs.importable(cinder_volume_bin, [
        'blobcr_cinder.driver', 'blobcr_common.rpc.api', 'cinder']) == [
        'blobcr_cinder.driver', 'blobcr_common.rpc.api', 'cinder']

    # Another backend host: the session's local store and agents, under
    # a backend name of its own, so that its volumes go to this service.
    hosts = cinder_hosts['local']
    name = 'blobcr-venv-%s' % uuid.uuid4().hex[:6]
    section = dict(cinder_hosts_module.backend_section(hosts),
                   volume_backend_name=name)
    conf = str(tmp_path / 'cinder-venv.conf')
    host = 'venv-%s' % name
    agents.write_conf(conf, {'DEFAULT': {'host': host,
                                         'enabled_backends': name},
                             name: section})
    service = stack_module.ServiceProcess(
        'cinder-volume-venv',
        [os.path.join(cinder_volume_bin, 'cinder-volume'), '--config-file',
         stack.path('cinder.conf'), '--config-file', conf],
        dict(os.environ, PATH=cinder_volume_bin + os.pathsep +
             os.environ.get('PATH', '')),
        str(tmp_path / 'cinder-volume-venv.log')).start()
    admin = stack.block_storage('admin')
    type_id = None
    try:
        deadline = time.monotonic() + 120
        while not any(
                s['binary'] == 'cinder-volume' and s['state'] == 'up' and
                s['host'] == '%s@%s' % (host, name) for s in admin.get(
                    '/os-services', timeout=5).json()['services']):
            service.check_running()
            assert time.monotonic() < deadline, stack_module.tail(
                service.log)
            time.sleep(1)
        # The scheduler knows its pool (a create fails with "No valid
        # backend" until it does).
        while not any(pool['name'].startswith('%s@%s' % (host, name))
                      for pool in admin.get('/scheduler-stats/get_pools',
                                            timeout=10).json()['pools']):
            assert time.monotonic() < deadline, 'no pool of %s' % name
            time.sleep(1)
        type_id = admin.post('/types', json={'volume_type': {
            'name': name, 'extra_specs': {
                'volume_backend_name': name}}}).json()['volume_type']['id']
        volume = stack.openstack('volume', 'create', '--size', '1',
                                 '--type', name, name)
        stack.wait_status('volume', volume['id'], 'available', timeout=120)
        shown = stack.openstack('volume', 'show', volume['id'],
                                user='admin')
        assert shown['os-vol-host-attr:host'].startswith(
            '%s@%s' % (host, name)), shown
        snapshot = stack.openstack('volume', 'snapshot', 'create',
                                   '--volume', volume['id'], name + '-s')
        stack.wait_status('snapshot', snapshot['id'], 'available',
                          timeout=120)
        clone = stack.openstack('volume', 'create', '--snapshot',
                                snapshot['id'], '--size', '1',
                                name + '-c')
        stack.wait_status('volume', clone['id'], 'available', timeout=120)
        for kind, resource in (('volume', clone), ('snapshot', snapshot),
                               ('volume', volume)):
            command = ['volume'] if kind == 'volume' else ['volume',
                                                           'snapshot']
            stack.openstack(*command, 'delete', resource['id'], json=False)
            stack.wait_status(kind, resource['id'], 'deleted', timeout=120)
        # The driver in that venv did the work: its log says so.
        with open(service.log, errors='replace') as f:
            log = f.read()
        assert 'BlobCRDriver' in log and ' ERROR ' not in log, log[-3000:]
    finally:
        if type_id:
            admin.delete('/types/%s' % type_id, raise_exc=False)
        service.stop()
        # Its service record goes too: later tests see the stack's own.
        subprocess.run([os.path.join(stack_module.BIN, 'cinder-manage'),
                        '--config-file', stack.path('cinder.conf'),
                        'service', 'remove', 'cinder-volume',
                        '%s@%s' % (host, name)], capture_output=True,
                       timeout=120)


def test_the_nova_side_runs_from_novas_own_venv(nova_bin, openstack_cloud,
                                                identities,  # noqa: F811
                                                tmp_path):
    # Nova and the Nova side; nothing of the agent, Cinder or the lab.
    assert service_venvs.importable(
        nova_bin, AGENT_ONLY + ['cinder', 'blobcr_cinder', 'blobcr_lab']) \
        == []
    nova_side = ['nova.api.metadata.vendordata_dynamic',
                 'blobcr_nova.vendordata', 'blobcr_nova.listener',
                 'blobcr_nova.brick_connector', 'blobcr_nova.libvirt_volume']
    assert service_venvs.importable(nova_bin, nova_side) == nova_side
    users, projects = identities
    host = vendordata.Host(str(tmp_path), projects).start()
    nova_api = fake_nova_api.FakeAPI()
    nova_api.server(host.instances['A'], vendordata.HOST,
                    project=host.projects['A'])
    service = None
    try:
        service = vendordata.VendordataService(
            str(tmp_path), openstack_cloud, users['blobcr'], host.url,
            nova_api, users['nova'],
            command=[os.path.join(nova_bin, 'blobcr-vendordata')]).start()
        conf = vendordata.nova_conf(str(tmp_path / 'nova.conf'),
                                    openstack_cloud, service.url,
                                    user=users['nova'])
        out = vendordata.run_nova(
            conf, [{'uuid': host.instances['A'],
                    'project': host.projects['A'], 'hostname': 'vm-a'}],
            python=os.path.join(nova_bin, 'python'))
        document, = out['vendordata']
        assert document['blobcr']['instance_id'] == host.instances['A'], \
            document
        guest = vendordata.guest_of(document, tmp_path)
        before = host.committed('A')
        taken = guest.checkpoint(sync=False)
        assert guest.wait_stable(taken.version, timeout=60) == 'stable'
        assert host.committed('A') == before + [taken.version]
    finally:
        if service is not None:
            assert service.stop() == 0, service.log()
        host.stop()
        nova_api.stop()


def test_the_panel_runs_from_horizons_own_venv(horizon_bin):
    assert service_venvs.importable(
        horizon_bin, AGENT_ONLY + ['cinder', 'nova', 'blobcr_cinder',
                                   'blobcr_nova', 'blobcr_lab']) == []
    panel = ['openstack_dashboard', 'blobcr_dashboard.enabled',
             'blobcrclient.osc.plugin']
    assert service_venvs.importable(horizon_bin, panel) == panel
    # The view tests of the tree, the panel and client from the wheels
    # (the tree's top holds neither package: they sit one level down).
    env = dict(os.environ, PYTHONWARNINGS='ignore')
    env.pop('DJANGO_SETTINGS_MODULE', None)
    done = subprocess.run(
        [os.path.join(horizon_bin, 'python'), '-m', 'django', 'test',
         '--noinput', '--settings=tests.dashboard.settings',
         'tests.dashboard.views_tests'],
        cwd=blobcr_lab.SOURCE, env=env, capture_output=True, text=True,
        timeout=900)
    assert done.returncode == 0, done.stderr[-6000:]
    ran = re.search(r'Ran (\d+) test', done.stderr)
    assert ran and int(ran.group(1)) > 0, done.stderr[-3000:]
    where = subprocess.run(
        [os.path.join(horizon_bin, 'python'), '-c',
         'import blobcr_dashboard; print(blobcr_dashboard.__file__)'],
        cwd=blobcr_lab.SOURCE, capture_output=True, text=True, check=True)
    assert where.stdout.startswith(os.path.dirname(horizon_bin)), \
        where.stdout
