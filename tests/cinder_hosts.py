"""The blobcr-agents behind the session's BlobCR Cinder backends.

For each backend (the local store, and a namespace on the micro Ceph
cluster) three real agents share the store: ``storage``, the agent
beside cinder-volume (``blobcr_agent_host``), and two compute hosts that
volumes are attached to. They serve RPC on the session's RabbitMQ and
live for the session, like the OpenStack stack that needs them up when
cinder-volume starts.

A third backend, ``small``, is for the fault tests
(tests/integration/test_cinder_faults.py): a local store on a tmpfs of
SMALL_STORE bytes (mounted here, unmounted at the end; a plain directory
when mounting is not allowed, and ``Hosts.mount`` is None), with a
storage agent and one compute agent. Those tests fill it up and kill
and restart its agents (``Hosts.agents``), no other test uses it.

``cinder_hosts``  ``{'local': Hosts, 'rados': Hosts, 'small': Hosts}``.
``BACKEND_SECTIONS``  what tests/openstack_fixtures.py puts in cinder.conf.

(PYTEST_DONT_REWRITE: loaded by conftest as a plugin.)
"""

import dataclasses
import os
import subprocess
import typing
import uuid

import pytest

from blobcr_agent.bench import harness
from blobcr_agent.repository.backends import local
from blobcr_agent.rpc import api as rpc_api
from tests import agent_rpc

KINDS = ('local', 'rados', 'small')
ROLES = ('storage', 'compute-a', 'compute-b')
SMALL_ROLES = ('storage', 'compute-a')
SMALL_STORE = 256 << 20


@dataclasses.dataclass
class Hosts(object):
    kind: str
    storage: str
    compute: typing.List[str]
    export_dir: str
    backend: object
    # role -> harness.AgentProcess (kill() then start() restarts one)
    agents: dict = dataclasses.field(default_factory=dict)
    mount: typing.Optional[str] = None      # the small store's tmpfs

    @property
    def section(self):
        return 'blobcr-%s' % self.kind

    # The stack names each volume type after its section.
    volume_type = section
    backend_name = section


def backend_section(hosts):
    section = {'volume_driver': 'blobcr_cinder.driver.BlobCRDriver',
               'volume_backend_name': hosts.section,
               'blobcr_agent_host': hosts.storage,
               'blobcr_rpc_timeout': '30',
               'blobcr_exchange_dir': hosts.export_dir}
    if hosts.kind == 'small':
        # Thin: the scheduler admits (total x ratio) - provisioned, and
        # a 1 GiB volume on a 0.25 GiB store needs a ratio above 4.
        section['max_over_subscription_ratio'] = '400'
    return section


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
                if kind == 'small' and role != 'storage':
                    # Slow persists (zstd's top level on every chunk):
                    # seconds in which the fault tests kill this agent.
                    settings['repository'] = {'compression': 'always',
                                              'compression_level': '19'}
                hosts.agents[role] = harness.AgentProcess(workdir, backend,
                                                          settings).start()
            for host in names.values():
                agent_rpc.wait_rpc(api, host)
        yield result
    finally:
        api.cleanup()
        for hosts in result.values():
            for agent in hosts.agents.values():
                agent.stop()
        for backend in backends:
            backend.close()
        for mount in mounts:
            _unmount(mount)
