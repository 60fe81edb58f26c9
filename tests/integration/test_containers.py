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

"""The images of etc/container built and run (install.rst, "In
containers"): tools/build-images.sh builds them with podman (rootful, no
daemon) from Debian's mirror and PyPI alone, then

- the agent's container runs with etc/container/compose.yaml's options
  (its host paths under a directory of the test's own, made a shared
  mount), configured through kolla's config.json, on the session's
  RabbitMQ and a local store in a bind-mounted directory. Over RPC it
  creates and attaches an image with a loop device; the host writes and
  reads the file the FUSE mount made inside the container shows on the
  host (rshared), and reads the loop device in the host's /dev; then a
  checkpoint, whose version the host reads from the store, a detach, and
  a stop that unmounts;
- the cinder-volume image runs cinder-volume (kolla_start, the cinder
  user) with the BlobCR backend against that agent: its driver
  initializes, the service reports itself up, and a volume cast to it
  (as cinder-scheduler would) becomes an image of that agent's, then is
  deleted.

Skipped only when podman cannot run a container on this host
(build-images.sh's exit status 77, with what podman said).
"""

import os
import random
import shutil
import subprocess
import time

import pytest

from blobcr_agent import conf as blobcr_conf
from blobcr_agent.repository.backends import local
from blobcr_agent.repository import repository
from blobcr_common import exception
from blobcr_common.rpc import api as rpc_api
from blobcr_lab import agent_rpc
from blobcr_lab import agents
from blobcr_lab import containers
from tests.functional.test_agent import CHUNK
from tests.functional.test_agent import expected as apply
from tests.functional.test_agent import fill as write_at  # same CHUNK

NCHUNKS = 16
# The agent's state_path (its default): the mount is <it>/mnt, the
# exports <it>/exports.
STATE = '/var/lib/blobcr'
STORE = '/var/lib/blobcr-store'
# kolla's cinder user (kolla/common/users.py), the image's.
CINDER_UID = 42407


@pytest.fixture(scope='module')
def images():
    status, log, seconds = containers.build_images()
    if status == containers.CANNOT_RUN:
        pytest.skip(log.strip().splitlines()[-1])
    assert status == 0, log[-6000:]
    # The steps' times, in the test's output.
    print(log, 'images built in %.0f s' % seconds)
    return seconds


def _mounts_under(top):
    with open('/proc/self/mountinfo') as f:
        points = [line.split()[4] for line in f]
    return [p for p in points if p.startswith(top + '/')]


def _loops_over(top):
    """The host's loop devices whose backing file is under ``top``."""
    found = []
    for name in os.listdir('/sys/block'):
        try:
            with open('/sys/block/%s/loop/backing_file' % name) as f:
                backing = f.read().strip()
        except OSError:
            continue
        if backing.startswith(top + '/'):
            found.append('/dev/' + name)
    return found


@pytest.fixture(scope='module')
def host(tmp_path_factory):
    """The host's paths for the containers: a directory bound on itself
    and made shared (rshared binds need a shared source; a systemd
    host's / is, this test's need not be).
    """
    top = str(tmp_path_factory.mktemp('containers') / 'host')
    os.makedirs(top)
    subprocess.run(['mount', '--bind', top, top], check=True)
    subprocess.run(['mount', '--make-rshared', top], check=True)
    yield top
    for device in _loops_over(top):
        subprocess.run(['losetup', '-d', device], capture_output=True)
    for point in reversed(_mounts_under(top)):
        subprocess.run(['umount', '-l', point], capture_output=True)
    subprocess.run(['umount', '-l', top], capture_output=True)


class AgentContainer(object):

    def __init__(self, container, host, paths):
        self.container = container
        self.host = host
        self.paths = paths

    def on_host(self, path):
        """A path under the container's STATE, as the host sees it."""
        assert path.startswith(STATE + '/'), path
        return os.path.join(self.paths['state'],
                            os.path.relpath(path, STATE))


@pytest.fixture(scope='module')
def api(rabbitmq_url):
    client = rpc_api.AgentAPI(transport_url=rabbitmq_url, timeout=60)
    yield client
    client.cleanup()


def _run_agent(top, rabbitmq_url, api, user=None):
    """The agent's container with compose.yaml's options, its host paths
    under ``top``; run as ``user`` (the image's own), with its
    privileged daemon started through sudo, if given.
    """
    paths = {name: os.path.join(top, name) for name in
             ('config', 'state', 'libvirt', 'run', 'log', 'store')}
    for path in paths.values():
        os.makedirs(path)
    name = agent_rpc.host_name('container')
    shutil.copy(os.path.join(containers.RECIPES, 'blobcr-agent',
                             'config.json'), paths['config'])
    conf = {'DEFAULT': {'transport_url': rabbitmq_url},
            'agent': {'host': name, 'rpc_enabled': 'true',
                      'quiesce': 'none'},
            'repository': {'backend': 'local'},
            'local_store': {'path': STORE},
            'proxy': {'port': '0'}}
    options = containers.run_options(
        containers.compose_service('blobcr_agent'),
        {'/etc/kolla/blobcr-agent': paths['config'],
         '/var/lib/blobcr': paths['state'],
         '/run/libvirt': paths['libvirt'], '/run/blobcr': paths['run'],
         '/var/log/kolla/blobcr': paths['log']})
    # The store: Ceph in compose.yaml, a local one here.
    options += ['--volume', '%s:%s' % (paths['store'], STORE)]
    if user:
        conf[blobcr_conf.PRIVILEGED_SECTION] = {
            'helper_command': 'sudo /opt/blobcr/bin/blobcr-privsep-helper '
                              '--config-file /etc/blobcr/blobcr.conf'}
        options += ['--user', user]
        uid = containers.podman(
            'run', '--rm', *containers.limit_options(), '--entrypoint', 'id',
            containers.AGENT_IMAGE, '-u', user).stdout
        os.chown(paths['store'], int(uid), -1)
    agents.write_conf(os.path.join(paths['config'], 'blobcr.conf'), conf)
    container = containers.Container(name, containers.AGENT_IMAGE, options)
    container.start()
    try:
        agent_rpc.wait_rpc(api, name, timeout=120)
    except Exception as e:
        logs = container.logs()
        container.remove()
        pytest.fail('the agent container does not answer (%s); its '
                    'log:\n%s' % (e, logs[-6000:]))
    return AgentContainer(container, name, paths)


@pytest.fixture(scope='module')
def agent_container(images, host, rabbitmq_url, api):
    agent = _run_agent(os.path.join(host, 'root'), rabbitmq_url, api)
    yield agent
    agent.container.remove()


def _serve_a_volume(agent, api):
    """An image attached with a loop device, written and read from the
    host, checkpointed, detached; the checkpoint read from the store.
    """
    host = agent.host
    size = NCHUNKS * CHUNK
    image = api.create_image(host, 'in-a-container', size)['id']
    attached = api.attach(host, image, block_device=True)
    # The FUSE mount made inside the container reached the host.
    path = agent.on_host(attached['path'])
    assert os.path.ismount(os.path.dirname(path)), _mounts_under(
        agent.paths['state'])
    writes = write_at(path, random.Random(8), [0, 5, NCHUNKS - 1])
    content = apply(bytes(size), writes)
    with open(path, 'rb') as f:
        assert f.read() == content
    # Its loop device, made in the container, is the host's, over that
    # file; the connection's link to it (under STATE, like the mount)
    # opens it from the host, as Nova would from nova_libvirt.
    link = agent.on_host(attached['device'])
    device = os.readlink(link)
    name = os.path.basename(device)
    assert device == '/dev/' + name and name.startswith('loop'), device
    with open('/sys/block/%s/loop/backing_file' % name) as f:
        assert f.read().strip() == attached['path']
    with open(link, 'rb') as f:
        assert f.read(size) == content
    cp = api.checkpoint(host, image)
    assert api.wait_stable(host, image, cp['version'], 60) == 'stable'
    api.detach(host, image)
    assert not os.path.exists(path)
    assert not os.path.exists('/sys/block/%s/loop/backing_file' % name)
    # The checkpoint is in the store the host bound.
    repo = repository.Repository(local.LocalBackend(agent.paths['store']))
    try:
        assert repo.read(image, cp['version'], 0, size) == content
    finally:
        repo.close()


def test_the_agent_container_serves_a_volume_to_the_host(
        agent_container, api):
    _serve_a_volume(agent_container, api)


def _processes(container):
    """{args: user} of the container's processes."""
    out = container.execute('ps', '-eo', 'user:16,args',
                            '--no-headers').stdout
    return {line.split(None, 1)[1]: line.split(None, 1)[0]
            for line in out.splitlines() if line.strip()}


def test_an_agent_container_run_as_its_user_serves_too(
        images, host, rabbitmq_url, api):
    """--user blobcr: kolla_start runs kolla_set_configs through sudo,
    the agent runs as blobcr, its privileged daemon (the loop devices)
    as root, started through sudo and blobcr-privsep-helper, the mount
    made through the set-user-ID fusermount3.
    """
    agent = _run_agent(os.path.join(host, 'blobcr'), rabbitmq_url, api,
                       user='blobcr')
    try:
        running = _processes(agent.container)
        assert {user for args, user in running.items()
                if 'blobcr-agent --config-file' in args} == {'blobcr'}, \
            running
        _serve_a_volume(agent, api)
        running = _processes(agent.container)
        assert {user for args, user in running.items()
                if 'privsep' in args and 'sudo' not in args} == {'root'}, \
            running
        assert agent.container.stop(timeout=60) == 0, \
            agent.container.logs()[-4000:]
        assert not _mounts_under(agent.paths['state'])
    finally:
        agent.container.remove()


# What cinder-scheduler would do: a volume row, then create_volume cast
# to the backend; then delete_volume. Run in the cinder-volume container
# (its Cinder, its database), as the cinder user.
CAST = '''
import sys
import time

from oslo_config import cfg

from cinder.common import config  # noqa
from cinder import context
from cinder import exception
from cinder import objects
from cinder import rpc
from cinder.volume import rpcapi
from cinder.volume import volume_types

cfg.CONF(['--config-file', '/etc/cinder/cinder.conf'], project='cinder')
objects.register_all()
rpc.init(cfg.CONF)
ctxt = context.get_admin_context()
volume = objects.Volume(
    context=ctxt, size=1, host=sys.argv[1], status='creating',
    attach_status='detached', project_id='containers',
    user_id='containers', display_name='in-a-container',
    availability_zone='nova',
    volume_type_id=volume_types.get_default_volume_type(ctxt)['id'])
volume.create()
volumes = rpcapi.VolumeAPI()
volumes.create_volume(ctxt, volume, None, {}, allow_reschedule=False)
deadline = time.monotonic() + 180
while volume.status == 'creating' and time.monotonic() < deadline:
    time.sleep(1)
    volume.refresh()
print(volume.status, volume.provider_id, flush=True)
if volume.status != 'available':
    sys.exit(3)
volumes.delete_volume(ctxt, volume)
deadline = time.monotonic() + 180
while time.monotonic() < deadline:
    time.sleep(1)
    try:
        volume.refresh()
    except exception.VolumeNotFound:
        print('deleted')
        break
else:
    print(volume.status)
'''


def test_cinder_volume_runs_the_driver_in_its_image(agent_container, api,
                                                    host, rabbitmq_url):
    agent = agent_container
    paths = {name: os.path.join(host, name) for name in
             ('cinder-config', 'cinder-state')}
    for path in paths.values():
        os.makedirs(path)
    os.chown(paths['cinder-state'], CINDER_UID, CINDER_UID)
    # blobcr_exchange_dir: the agent's export_dir, bound into both; the
    # cinder user writes the images it converts there, the agent (root)
    # reads them.
    exchange = os.path.join(agent.paths['state'], 'exports')
    os.makedirs(exchange, exist_ok=True)
    os.chown(exchange, CINDER_UID, CINDER_UID)
    os.chmod(exchange, 0o700)
    backend = 'cv-' + agent.host[-10:]
    shutil.copy(os.path.join(containers.RECIPES, 'cinder-volume',
                             'config.json'), paths['cinder-config'])
    conf = os.path.join(paths['cinder-config'], 'cinder.conf')
    agents.write_conf(conf, {
        'DEFAULT': {'transport_url': rabbitmq_url,
                    'enabled_backends': 'blobcr', 'host': backend,
                    'state_path': '/var/lib/cinder'},
        'database': {'connection':
                     'sqlite:////var/lib/cinder/cinder.sqlite'},
        'oslo_concurrency': {'lock_path': '/var/lib/cinder/tmp'},
        'blobcr': {'volume_driver': 'blobcr_cinder.driver.BlobCRDriver',
                   'volume_backend_name': 'blobcr',
                   'blobcr_agent_host': agent.host,
                   'blobcr_transport_url': rabbitmq_url,
                   'blobcr_exchange_dir': STATE + '/exports'}})
    os.chmod(conf, 0o644)       # the cinder user reads it in the bootstrap
    options = ['--network', 'host',
               '--env', 'KOLLA_CONFIG_STRATEGY=COPY_ALWAYS',
               '--volume', '%s:/var/lib/kolla/config_files:ro'
               % paths['cinder-config'],
               '--volume', '%s:/var/lib/cinder' % paths['cinder-state'],
               '--volume', '%s:%s/exports' % (exchange, STATE)]
    # The database first, as kolla-ansible's bootstrap container.
    containers.podman(
        'run', '--rm', *containers.limit_options(), *options,
        containers.CINDER_VOLUME_IMAGE,
        'cinder-manage', '--config-file',
        '/var/lib/kolla/config_files/cinder.conf', 'db', 'sync',
        timeout=600)
    container = containers.Container(backend, containers.CINDER_VOLUME_IMAGE,
                                     options)
    try:
        container.start()
        log = container.wait_log('Driver initialization completed '
                                 'successfully', timeout=300)
        assert 'blobcr_cinder.driver' in log or 'BlobCRDriver' in log
        # Up in Cinder's service table, as cinder-manage sees it.
        deadline = time.monotonic() + 60
        while True:
            services = container.execute(
                'cinder-manage', '--config-file', '/etc/cinder/cinder.conf',
                'service', 'list').stdout
            up = [line for line in services.splitlines()
                  if '%s@blobcr' % backend in line and ':-)' in line]
            if up or time.monotonic() > deadline:
                break
            time.sleep(2)
        assert up, services
        # A volume cast to it becomes an image of the agent's, then goes.
        done = container.execute(
            'python3', '-c', CAST, '%s@blobcr#blobcr' % backend,
            timeout=600, check=False)
        assert done.returncode == 0, (done.stdout, done.stderr[-4000:],
                                      container.logs()[-4000:])
        status, image = done.stdout.split()[:2]
        assert status == 'available'
        assert done.stdout.split()[-1] == 'deleted', done.stdout
        with pytest.raises(exception.ImageNotFound):
            api.list_versions(agent.host, image)
        assert container.stop(timeout=60) in (0, 143)
    finally:
        container.remove()


def test_the_agent_container_stops_and_unmounts(agent_container):
    agent = agent_container
    mount = os.path.join(agent.paths['state'], 'mnt')
    assert _mounts_under(agent.paths['state']), 'not mounted on the host'
    began = time.monotonic()
    code = agent.container.stop(timeout=60)
    took = time.monotonic() - began
    assert code == 0, (code, agent.container.logs()[-4000:])
    assert took < 55, took      # SIGTERM, not podman's SIGKILL
    assert not _mounts_under(agent.paths['state']), mount
    assert not _loops_over(agent.paths['state'])
