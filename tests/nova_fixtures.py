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
    ``nova.neutron``), and the BlobCR ``rados`` backend's hosts
    (blobcr_lab/cinder_hosts.py).  nova-compute's host name is
    ``nova.compute_host``: a BlobCR agent of its own, on the
    same store as the ``rados`` backend (the micro Ceph cluster),
    started here.  Its libvirtd is a
    private session one (blobcr_lab.guest_vm.SessionLibvirt).

Only tests that ask for it start it (a minute or more, ~1 GB more).

(PYTEST_DONT_REWRITE: loaded by conftest as a plugin.)
"""

import os
import shutil
import tempfile
import uuid

import pytest

from blobcr_common.rpc import api as rpc_api
from blobcr_lab import agent_rpc
from blobcr_lab import agents
from blobcr_lab import guest_vm
from blobcr_lab import hosts as lab_hosts
from blobcr_lab import nova as nova_module


class LabHost(object):
    """A compute host of the lab: its BlobCR agent and libvirtd."""

    def __init__(self, name, agent, libvirtd):
        self.name = name
        self.agent = agent
        self.libvirtd = libvirtd


def _migration_uri(links):
    """Nova's [libvirt] live_migration_uri: the destination's libvirtd
    socket through ``links/<host>``, a link to its (short) directory.
    """
    return 'qemu+unix:///session?socket=%s' % os.path.join(
        links, '%s', 'run', 'libvirt', 'libvirt-sock')


def _start_host(name, directory, links, hosts, rabbitmq_url, api,
                **libvirt_args):
    """A libvirtd, then a BlobCR agent on the ``rados`` backend's store
    that watches it (the source of a live migration asks it whether its
    guest still runs).
    """
    libvirtd = guest_vm.SessionLibvirt(**libvirt_args).start()
    os.symlink(libvirtd.directory, os.path.join(links, name))
    agent_dir = os.path.join(directory, 'agent')
    os.makedirs(agent_dir)
    try:
        agent = agents.AgentProcess(
            agent_dir, hosts.backend,
            agent_rpc.rpc_settings(rabbitmq_url, name,
                                   export_dir=hosts.export_dir,
                                   libvirt_uri=libvirtd.uri)).start()
        agent_rpc.wait_rpc(api, name)
    except BaseException:
        libvirtd.stop()
        raise
    return LabHost(name, agent, libvirtd)


def _stop_host(lab_host):
    lab_host.agent.stop()
    lab_host.libvirtd.stop()


@pytest.fixture(scope='session')
def nova_cloud(openstack_cloud, cinder_hosts, rabbitmq_url,
               tmp_path_factory):
    # On RADOS: its volumes are `cluster` (the default there), so a
    # host lost for good loses nothing a guest flushed (issue 53;
    # test_nova_moves.py's evacuate shows it).
    hosts = cinder_hosts['rados']
    directory = str(tmp_path_factory.mktemp('nova'))
    host = 'local-nova-%s' % uuid.uuid4().hex[:6]
    links = tempfile.mkdtemp(prefix='blobcr-lvl-')
    nova = None
    lab_host = None
    api = rpc_api.AgentAPI(transport_url=rabbitmq_url, timeout=60)
    try:
        lab_host = _start_host(host, directory, links, hosts, rabbitmq_url,
                               api)
        nova = nova_module.NovaStack(
            openstack_cloud, directory, host, lab_host.libvirtd.uri,
            neutron=nova_module.neutron_venv(),
            migration_uri=_migration_uri(links))
        nova.lab_hosts = {host: lab_host}
        nova.links = links
        nova.start()
        yield openstack_cloud, nova, hosts
    finally:
        api.cleanup()
        if nova is not None:
            nova.stop()
        if lab_host is not None:
            _stop_host(lab_host)
        shutil.rmtree(links, ignore_errors=True)


@pytest.fixture(scope='session')
def nova_pair(nova_cloud, rabbitmq_url, tmp_path_factory):
    """``nova_cloud`` with a second nova-compute: ``(stack, nova, hosts,
    second)``, ``second`` its host name (``nova.lab_hosts[second]``: its
    agent and libvirtd). Its libvirtd calls itself by that name in a UTS
    namespace of its own (Nova's node name) and has its own host UUID.
    Once started, every later test of the session sees two hosts.
    """
    stack, nova, hosts = nova_cloud
    second = nova.compute_host + '-b'
    directory = str(tmp_path_factory.mktemp('nova-b'))
    api = rpc_api.AgentAPI(transport_url=rabbitmq_url, timeout=60)
    lab_host = None
    network = lab_hosts.LinkedNamespace()
    try:
        network.start()
        lab_host = _start_host(second, directory, nova.links, hosts,
                               rabbitmq_url, api, host_uuid=str(uuid.uuid4()),
                               hostname=second, network=network)
        nova.lab_hosts[second] = lab_host
        nova.add_compute(second, lab_host.libvirtd.uri)
        yield stack, nova, hosts, second
    finally:
        api.cleanup()
        if second in nova.computes:
            nova.kill_compute(second)
        if lab_host is not None:
            _stop_host(lab_host)
        network.stop()
