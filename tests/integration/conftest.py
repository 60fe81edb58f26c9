"""Fixtures of the tests that call real agents over RPC: the client, a
repository on either backend, and agents serving RPC on the session's
RabbitMQ (blobcr_lab/agent_rpc.py has the helpers).
"""

import pytest

from blobcr_agent.repository.backends import local
from blobcr_agent.repository import repository
from blobcr_agent.rpc import api as rpc_api
from blobcr_lab import agent_rpc

CHUNK = 64 * 1024


@pytest.fixture
def api(rabbitmq_url):
    client = rpc_api.AgentAPI(transport_url=rabbitmq_url, timeout=60)
    yield client
    client.cleanup()


@pytest.fixture
def store(backend_factory):
    repo = repository.Repository(backend_factory(), chunk_size=CHUNK)
    yield repo
    repo.close()


@pytest.fixture
def local_store(tmp_path):
    repo = repository.Repository(
        local.LocalBackend(str(tmp_path / 'store')), chunk_size=CHUNK)
    yield repo
    repo.close()


@pytest.fixture
def export_dir(tmp_path):
    """The agents' [agent] export_dir (made by the first export)."""
    return tmp_path / 'exports'


@pytest.fixture
def rpc_agent(agent_factory, rabbitmq_url, api, export_dir):
    """start(repo, label, **agent options) -> (agent, host): an agent
    serving RPC.
    """
    def start(repo, label='a', **agent):
        host = agent_rpc.host_name(label)
        agent.setdefault('export_dir', str(export_dir))
        settings = agent_rpc.rpc_settings(rabbitmq_url, host, **agent)
        agent = agent_factory(repo.backend, settings)
        assert agent_rpc.wait_rpc(api, host)['host'] == host
        return agent, host
    return start
