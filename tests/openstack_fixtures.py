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

"""Session fixtures for a real Keystone and Cinder (blobcr_lab/openstack.py).

``openstack_backends``  the session's one set of Cinder backend sections
    (``{section: {option: value}}``).  Tests needing other backends add
    them here, to this one dict, so that every test shares one stack.
    Besides the harness's fake backend and the BlobCR ones, Cinder's RBD
    driver on pool ``rbd`` of the session's Ceph cluster (section and
    volume type ``RBD_BACKEND``): the baseline of ``blobcr-bench cinder``.
``openstack_stack``  factory: ``openstack_stack(backends,
    backup_host=None)`` starts the
    stack on the first call (on the session's RabbitMQ) and returns the
    same started :class:`~blobcr_lab.openstack.OpenStackStack` to every
    later call with the same backends; other backends are an error (one
    stack per session).  Stopped at the end of the session.
``openstack_cloud``  ``openstack_stack(openstack_backends,
    backup_host=...)``: with cinder-backup, as the local BlobCR
    backend's storage agent's host.

Environment: BLOBCR_OPENSTACK_TEMPLATE keeps the stack template across
sessions (see blobcr_lab/openstack.py); BLOBCR_OPENSTACK_DEBUG=1 turns on
the services' debug logs.  The logs are under pytest's basetemp
(``openstack0/logs``), kept after the session like any tmp_path.

(PYTEST_DONT_REWRITE: loaded by conftest as a plugin.)
"""

import os

import pytest

from blobcr_bench import cinder as bench_cinder
from blobcr_bench import rbd_common as bench_rbd
from blobcr_lab import cinder_hosts as cinder_hosts_module
from blobcr_lab import openstack as stack_module

# cinder's own test driver: it logs calls and stores nothing (see
# tests/integration/test_openstack_stack.py for why the harness uses it).
HARNESS_BACKEND = 'harness-fake'
HARNESS_BACKEND_SECTION = {
    'volume_driver': 'cinder.tests.fake_driver.FakeLoggingVolumeDriver',
    # The driver reports this name whatever the section says.
    'volume_backend_name': 'fake',
}

# The default volume type: BlobCR on the local store.
DEFAULT_TYPE = 'blobcr-local'

# Cinder's RBD driver on the session's Ceph cluster.
RBD_BACKEND = 'rbd'
RBD_POOL = 'rbd'
# Its volumes' data: an erasure-coded pool shaped like BlobCR's
# (blobcr-data), so that both backends write to the same kind of pool.
RBD_DATA_POOL = bench_cinder.RBD_DATA_POOL


@pytest.fixture(scope='session')
def openstack_backends(cinder_hosts, ceph_cluster, tmp_path_factory):
    """The harness's fake backend, the BlobCR ones, whose agents
    (blobcr_lab/cinder_hosts.py) must answer when cinder-volume starts, and
    Cinder's RBD driver on the session's Ceph cluster (its pool made
    here if missing; its images' data in ``RBD_DATA_POOL``, through the
    ``rbd_default_data_pool`` of the ceph.conf its driver reads).
    """
    backends = {HARNESS_BACKEND: dict(HARNESS_BACKEND_SECTION)}
    for hosts in cinder_hosts.values():
        backends[hosts.section] = cinder_hosts_module.backend_section(hosts)
    bench_rbd.ensure_rbd_pool(ceph_cluster.conffile, RBD_POOL)
    conffile = bench_cinder.rbd_data_pool_conf(
        ceph_cluster.conffile, str(tmp_path_factory.mktemp('cinder-rbd')))
    backends[RBD_BACKEND] = bench_cinder.rbd_backend_section(
        conffile, RBD_POOL, backend_name=RBD_BACKEND)
    return backends


@pytest.fixture(scope='session')
def openstack_stack(rabbitmq_url, tmp_path_factory):
    started = []
    failed = []

    def factory(backends, backup_host=None):
        if failed:
            pytest.fail('the OpenStack stack failed to start earlier in '
                        'this session: %s' % failed[0], pytrace=False)
        if started:
            stack = started[0]
            if backends != stack.backends:
                pytest.fail(
                    'one OpenStack stack per session: it was started with '
                    'backends %r, not %r; add the backends to the '
                    'openstack_backends fixture (tests/openstack_fixtures.py)'
                    % (stack.backends, backends), pytrace=False)
            return stack
        # BlobCR is the default volume type, as on a cloud that runs it
        # (Tempest's volumes, and anything else made without a type).
        default = {'DEFAULT': {'default_volume_type': DEFAULT_TYPE}} \
            if DEFAULT_TYPE in backends else None
        stack = stack_module.OpenStackStack(
            str(tmp_path_factory.mktemp('openstack')), rabbitmq_url,
            backends, extra_conf=default, backup_host=backup_host,
            debug=bool(os.environ.get('BLOBCR_OPENSTACK_DEBUG')))
        try:
            stack.start()  # stops what it started if it fails
        except Exception as exc:
            failed.append(exc)
            raise
        started.append(stack)
        return stack
    yield factory
    for stack in started:
        stack.stop()


@pytest.fixture(scope='session')
def openstack_cloud(openstack_stack, openstack_backends, cinder_hosts):
    # cinder-backup runs as the local backend's storage agent's host:
    # the agent beside Cinder's services, which connects the volumes a
    # backup reads or a restore writes.
    return openstack_stack(openstack_backends,
                           backup_host=cinder_hosts['local'].storage)
