"""The blobcr-agents behind the session's BlobCR Cinder backends.

For each backend (the local store, and a namespace on the micro Ceph
cluster) three real agents share the store: ``storage``, the agent
beside cinder-volume (``blobcr_agent_host``), and two compute hosts that
volumes are attached to. They serve RPC on the session's RabbitMQ and
live for the session, like the OpenStack stack that needs them up when
cinder-volume starts.

``cinder_hosts``  ``{'local': Hosts, 'rados': Hosts}``.
``BACKEND_SECTIONS``  what tests/openstack_fixtures.py puts in cinder.conf.

(PYTEST_DONT_REWRITE: loaded by conftest as a plugin.)
"""

import dataclasses
import os
import typing
import uuid

import pytest

from blobcr_agent.bench import harness
from blobcr_agent.repository.backends import local
from blobcr_agent.rpc import api as rpc_api
from tests import agent_rpc

KINDS = ('local', 'rados')
ROLES = ('storage', 'compute-a', 'compute-b')


@dataclasses.dataclass
class Hosts(object):
    kind: str
    storage: str
    compute: typing.List[str]
    export_dir: str
    backend: object

    @property
    def section(self):
        return 'blobcr-%s' % self.kind

    # The stack names each volume type after its section.
    volume_type = section
    backend_name = section


def backend_section(hosts):
    return {'volume_driver': 'blobcr_cinder.driver.BlobCRDriver',
            'volume_backend_name': hosts.section,
            'blobcr_agent_host': hosts.storage,
            'blobcr_rpc_timeout': '30',
            'blobcr_exchange_dir': hosts.export_dir}


def _backend(kind, directory, request):
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
    agents, backends, result = [], [], {}
    try:
        for kind in KINDS:
            directory = str(tmp_path_factory.mktemp('cinder-%s' % kind))
            backend = _backend(kind, directory, request)
            backends.append(backend)
            export_dir = os.path.join(directory, 'exchange')
            names = {role: '%s-%s-%s' % (kind, role, uuid.uuid4().hex[:6])
                     for role in ROLES}
            for role, host in names.items():
                workdir = os.path.join(directory, role)
                os.makedirs(workdir)
                settings = agent_rpc.rpc_settings(rabbitmq_url, host,
                                                  export_dir=export_dir)
                agents.append(harness.AgentProcess(workdir, backend,
                                                   settings).start())
            for host in names.values():
                agent_rpc.wait_rpc(api, host)
            result[kind] = Hosts(kind, names['storage'],
                                 [names['compute-a'], names['compute-b']],
                                 export_dir, backend)
        yield result
    finally:
        api.cleanup()
        for agent in agents:
            agent.stop()
        for backend in backends:
            backend.close()
