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

"""Session fixture for a real Nova (blobcr_lab/nova.py), started lazily.

``nova_cloud``  ``(stack, nova, hosts)``: the session's OpenStack stack
    (tests/openstack_fixtures.py), a started
    :class:`~blobcr_lab.nova.NovaStack` beside it (with a Neutron API
    when blobcr_lab.nova.neutron_venv() finds Neutron's venv:
    ``nova.neutron``), and the BlobCR ``local`` backend's hosts
    (blobcr_lab/cinder_hosts.py).  nova-compute's host name is
    ``nova.compute_host``: a BlobCR agent of its own, on the
    same store as the ``local`` backend, started here.  Its libvirtd is a
    private session one (blobcr_lab.guest_vm.SessionLibvirt).

Only tests that ask for it start it (a minute or more, ~1 GB more).

(PYTEST_DONT_REWRITE: loaded by conftest as a plugin.)
"""

import os
import uuid

import pytest

from blobcr_agent.rpc import api as rpc_api
from blobcr_lab import agent_rpc
from blobcr_lab import agents
from blobcr_lab import guest_vm
from blobcr_lab import nova as nova_module


@pytest.fixture(scope='session')
def nova_cloud(openstack_cloud, cinder_hosts, rabbitmq_url,
               tmp_path_factory):
    hosts = cinder_hosts['local']
    directory = str(tmp_path_factory.mktemp('nova'))
    host = 'local-nova-%s' % uuid.uuid4().hex[:6]
    agent_dir = os.path.join(directory, 'agent')
    os.makedirs(agent_dir)
    agent = agents.AgentProcess(
        agent_dir, hosts.backend,
        agent_rpc.rpc_settings(rabbitmq_url, host,
                               export_dir=hosts.export_dir)).start()
    libvirtd = guest_vm.SessionLibvirt()
    nova = None
    api = rpc_api.AgentAPI(transport_url=rabbitmq_url, timeout=60)
    try:
        agent_rpc.wait_rpc(api, host)
        libvirtd.start()
        nova = nova_module.NovaStack(
            openstack_cloud, directory, host, libvirtd.uri,
            neutron=nova_module.neutron_venv())
        nova.agent = agent
        nova.start()
        yield openstack_cloud, nova, hosts
    finally:
        api.cleanup()
        if nova is not None:
            nova.stop()
        libvirtd.stop()
        agent.stop()
