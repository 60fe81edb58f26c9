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

"""Fixtures of the tests that call real agents over RPC: the client, a
repository on either backend, and agents serving RPC on the session's
RabbitMQ (blobcr_lab/agent_rpc.py has the helpers).
"""

import pytest

from blobcr_agent.repository.backends import local
from blobcr_agent.repository import repository
from blobcr_common.rpc import api as rpc_api
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
