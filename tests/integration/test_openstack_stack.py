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

"""Smoke test of the OpenStack test harness (blobcr_lab/openstack.py).

The real ``openstack`` CLI drives real Keystone, cinder-api (with
keystonemiddleware), cinder-scheduler and cinder-volume over the session's
RabbitMQ.  The backend is cinder's own test driver,
``cinder.tests.fake_driver.FakeLoggingVolumeDriver``, which only logs the
calls: this tests the harness (identities, catalog, tokens, API, scheduler,
RPC to the volume service, CLI), not a driver.  No driver of cinder 29 can
stand in: LVM needs a volume group, NFS and the other file drivers mount,
and the rest need a storage array or cluster.
"""

import pytest

from blobcr_lab import openstack as openstack_stack
from tests import openstack_fixtures

TYPE = openstack_fixtures.HARNESS_BACKEND
# The harness is meant to add little to a CI run (target: 60 s).
START_BUDGET = 90


@pytest.fixture(scope='module')
def cloud(openstack_cloud):
    if TYPE not in openstack_cloud.backends:
        pytest.skip('the session backends have no %s' % TYPE)
    return openstack_cloud


def test_stack_started_in_time(cloud):
    assert cloud.timings['total'] < START_BUDGET, cloud.timings


def test_volume_services_are_up(cloud):
    services = cloud.openstack('volume', 'service', 'list', user='admin')
    up = {s['Host'] for s in services
          if s['Binary'] == 'cinder-volume' and s['State'] == 'up'}
    assert '%s@%s' % (cloud.cinder_host, TYPE) in up, services
    assert any(s['Binary'] == 'cinder-scheduler' and s['State'] == 'up'
               for s in services), services


def test_volume_and_snapshot_lifecycle(cloud):
    volume = cloud.openstack('volume', 'create', '--size', '1',
                             '--type', TYPE, 'smoke-volume')
    assert cloud.wait_status('volume', volume['id'], 'available')['size'] \
        == 1
    snapshot = cloud.openstack('volume', 'snapshot', 'create', '--volume',
                               volume['id'], 'smoke-snapshot')
    assert cloud.wait_status('snapshot', snapshot['id'], 'available')[
        'volume_id'] == volume['id']
    shown = cloud.openstack('volume', 'snapshot', 'show', snapshot['id'])
    assert shown['status'] == 'available'

    cloud.openstack('volume', 'snapshot', 'delete', snapshot['id'],
                    json=False)
    cloud.wait_status('snapshot', snapshot['id'], 'deleted')
    cloud.openstack('volume', 'delete', volume['id'], json=False)
    cloud.wait_status('volume', volume['id'], 'deleted')


def test_wrong_password_is_refused_with_401(cloud):
    with pytest.raises(openstack_stack.StackError) as refused:
        cloud.openstack('token', 'issue', password='not-the-password')
    assert 'HTTP 401' in str(refused.value)
