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

"""The pytest fixtures over the lab's services (blobcr_lab), loaded by
tests/conftest.py as a plugin:

``rabbitmq_broker``  session-scoped
    :class:`~blobcr_lab.rabbitmq.RabbitMQBroker` (or
    :class:`~blobcr_lab.rabbitmq.ExternalBroker`). With ``BLOBCR_RABBIT_URL``
    set, that broker is used and nothing is started.
    With ``BLOBCR_RABBIT_DIR`` set, the broker in that directory is started
    if needed and left running (faster reruns). Otherwise one is started in
    a temporary directory and stopped at the end of the session.
``rabbitmq_url``  the transport url of that broker.
``cinder_hosts``  ``{'local': Hosts, 'rados': Hosts, 'small': Hosts}``:
    the agents behind the session's Cinder backends
    (:mod:`blobcr_lab.cinder_hosts` says what each is).
``guest_image``, ``session_libvirt``  the guest's base image, built once,
    and a libvirtd of the session's own (:mod:`blobcr_lab.guest_vm`).

(PYTEST_DONT_REWRITE: loaded by conftest as a plugin.)
"""

import os
import shutil
import subprocess
import tempfile
import uuid

import pytest

from blobcr_agent.repository.backends import local
from blobcr_common.rpc import api as rpc_api
from blobcr_lab import agent_rpc
from blobcr_lab import agents
from blobcr_lab.cinder_hosts import Hosts
from blobcr_lab.cinder_hosts import KINDS
from blobcr_lab.cinder_hosts import ROLES
from blobcr_lab.cinder_hosts import SMALL_GC
from blobcr_lab.cinder_hosts import SMALL_ROLES
from blobcr_lab.cinder_hosts import SMALL_STORE
from blobcr_lab import guest_vm
from blobcr_lab.rabbitmq import DIR_ENV
from blobcr_lab.rabbitmq import ExternalBroker
from blobcr_lab.rabbitmq import RabbitMQBroker
from blobcr_lab.rabbitmq import RabbitMQError
from blobcr_lab.rabbitmq import URL_ENV


@pytest.fixture(scope="session")
def rabbitmq_broker():
    """A running RabbitMQ on 127.0.0.1 for the whole test session."""
    url = os.environ.get(URL_ENV)
    if url:
        yield ExternalBroker(url)
        return
    keep = os.environ.get(DIR_ENV)
    directory = keep or tempfile.mkdtemp(prefix="blobcr-rabbit-")
    broker = RabbitMQBroker(directory)
    try:
        broker.start()
    except RabbitMQError:
        # The script already stops what it started; make sure, and keep
        # the directory for its logs (the error names it).
        try:
            broker.stop()
        except RabbitMQError:
            pass
        raise
    try:
        yield broker
    finally:
        if not keep:
            broker.stop()
            shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session")
def rabbitmq_url(rabbitmq_broker):
    """Transport url of the session's broker, for get_rpc_transport()."""
    return rabbitmq_broker.url


def _mount_small(directory):
    """A tmpfs of SMALL_STORE bytes at ``directory``/fs, or None."""
    mnt = os.path.join(directory, 'fs')
    os.makedirs(mnt)
    done = subprocess.run(['mount', '-t', 'tmpfs', '-o',
                           'size=%d' % SMALL_STORE, 'tmpfs', mnt],
                          capture_output=True)
    return mnt if done.returncode == 0 else None


def _unmount(mnt):
    if subprocess.run(['umount', mnt], capture_output=True).returncode:
        subprocess.run(['umount', '-l', mnt], capture_output=True)


def _backend(kind, directory, request, mount=None):
    if kind == 'small':
        return local.LocalBackend(os.path.join(mount or directory, 'store'))
    if kind == 'local':
        return local.LocalBackend(os.path.join(directory, 'store'))
    from blobcr_agent.repository.backends import rados
    cluster = request.getfixturevalue('ceph_cluster')
    return rados.RadosBackend(cluster.conffile, 'blobcr-data', 'blobcr-meta',
                              namespace='cinder-' + uuid.uuid4().hex,
                              connect_timeout=10, op_timeout=60)


@pytest.fixture(scope='session')
def cinder_hosts(request, rabbitmq_url, tmp_path_factory):
    api = rpc_api.AgentAPI(transport_url=rabbitmq_url, timeout=60)
    backends, mounts, result = [], [], {}
    try:
        for kind in KINDS:
            directory = str(tmp_path_factory.mktemp('cinder-%s' % kind))
            mount = _mount_small(directory) if kind == 'small' else None
            if mount:
                mounts.append(mount)
            backend = _backend(kind, directory, request, mount)
            backends.append(backend)
            export_dir = os.path.join(directory, 'exchange')
            roles = SMALL_ROLES if kind == 'small' else ROLES
            names = {role: '%s-%s-%s' % (kind, role, uuid.uuid4().hex[:6])
                     for role in roles}
            hosts = result[kind] = Hosts(
                kind, names['storage'],
                [names[r] for r in roles if r != 'storage'], export_dir,
                backend, mount=mount)
            for role, host in names.items():
                workdir = os.path.join(directory, role)
                os.makedirs(workdir)
                settings = agent_rpc.rpc_settings(rabbitmq_url, host,
                                                  export_dir=export_dir)
                if kind == 'small':
                    settings['repository'] = dict(SMALL_GC)
                if kind == 'small' and role != 'storage':
                    # Slow persists (zstd's top level on every chunk):
                    # seconds in which the fault tests kill this agent.
                    settings['repository'].update(compression='always',
                                                  compression_level='19')
                hosts.agents[role] = agents.AgentProcess(workdir, backend,
                                                         settings).start()
            for host in names.values():
                agent_rpc.wait_rpc(api, host)
        yield result
    finally:
        api.cleanup()
        agents.stop_all([agent for hosts in result.values()
                         for agent in hosts.agents.values()])
        for backend in backends:
            backend.close()
        for mount in mounts:
            _unmount(mount)


@pytest.fixture(scope='session')
def guest_image():
    """The base image directory, built (or found up to date) once."""
    try:
        return guest_vm.build_image()
    except (guest_vm.GuestError, OSError, subprocess.SubprocessError) as e:
        pytest.fail('cannot build the guest image: %s' % e)


@pytest.fixture(scope='session')
def session_libvirt(guest_image):
    """A SessionLibvirt for the test session (after the build installed
    libvirtd and QEMU).
    """
    lv = guest_vm.SessionLibvirt()
    try:
        lv.start()
    except (guest_vm.GuestError, OSError) as e:
        lv.stop()
        pytest.fail('cannot start a session libvirtd: %s' % e)
    yield lv
    lv.stop()
