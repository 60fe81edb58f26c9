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

"""Active-active cinder-volume (issue 56, item 5): two cinder-volume
services, ``aa-1`` and ``aa-2``, in one Cinder cluster (``[DEFAULT]
cluster``), serving one BlobCR backend on the session's RADOS store,
its agents the session's (blobcr_lab/cinder_hosts.py). ``aa-1``'s
storage agent is the backend's storage agent, ``aa-2``'s another agent
of the same store: the two machines share nothing but the store and
the bus.

The stack is a Cinder of its own (Keystone, cinder-api, -scheduler,
two cinder-volumes; its own database), on a vhost of its own on the
session's RabbitMQ (the session's stack has its own scheduler and
volume services on the default vhost); the driver reaches the agents
on theirs (``blobcr_transport_url``).

One volume is made, attached to a compute host through the attachments
API (as Nova attaches it), written, and snapshotted; then ``aa-1`` is
SIGKILLed, workers and all, as a machine lost. Everything after is
served by ``aa-2`` alone, through the cluster's queue: a second
snapshot, a volume from the first snapshot attached on the other
compute host holding exactly the data written before it, a clone of the
in-use volume, the detaches, the deletes.
"""

import os
import secrets
import urllib.parse
import uuid

import pytest

from blobcr_lab import cinder_hosts as cinder_hosts_module
from blobcr_lab.nova_attach import Attachment
from blobcr_lab.nova_attach import write_at
from blobcr_lab import openstack as stack_module

CLUSTER = 'blobcr-aa'
SECTION = 'blobcr-aa'
MIB = 1 << 20


def _own_vhost(broker, prefix):
    """A vhost and user of their own on the session's broker: the
    transport url for them.
    """
    if getattr(broker, 'external', False):
        pytest.skip('the session broker is not ours (BLOBCR_RABBIT_URL): '
                    'no vhost can be added to it')
    vhost, user = prefix, prefix
    password = secrets.token_hex(12)
    broker.ctl('add_vhost', vhost)
    broker.ctl('add_user', user, password)
    broker.ctl('set_permissions', '-p', vhost, user, '.*', '.*', '.*')
    base = urllib.parse.urlsplit(broker.url)
    return 'rabbit://%s:%s@%s:%d/%s' % (user, password, base.hostname,
                                        base.port, vhost)


@pytest.fixture(scope='module')
def cluster(rabbitmq_broker, rabbitmq_url, cinder_hosts, tmp_path_factory):
    hosts = cinder_hosts['rados']
    url = _own_vhost(rabbitmq_broker, 'aa-%s' % uuid.uuid4().hex[:8])
    section = cinder_hosts_module.backend_section(hosts)
    section.update(volume_backend_name=SECTION,
                   blobcr_transport_url=rabbitmq_url)
    stack = stack_module.OpenStackStack(
        str(tmp_path_factory.mktemp('cinder-aa')), url, {SECTION: section},
        extra_conf={'DEFAULT': {'cluster': CLUSTER}}, cinder_host='aa-1')
    stack.start()
    try:
        # aa-2's own storage agent: another agent of the same store.
        second = stack.start_volume_service(
            'cinder-volume-aa-2', 'aa-2',
            {SECTION: {'blobcr_agent_host': hosts.compute[1]}})
        yield stack, hosts, second
    finally:
        stack.stop()


def _services(stack):
    listed = stack.block_storage('admin').get(
        '/os-services?binary=cinder-volume', microversion='3.7').json()
    return {s['host']: s for s in listed['services']}


def _read(path, offset, length):
    with open(path, 'rb') as f:
        f.seek(offset)
        return f.read(length)


def test_one_service_lost_the_other_serves_every_volume(cluster):
    stack, hosts, second = cluster
    # Both services are members of the one cluster.
    services = _services(stack)
    for host in ('aa-1@%s' % SECTION, 'aa-2@%s' % SECTION):
        assert services[host]['cluster'] == '%s@%s' % (CLUSTER, SECTION), \
            services
        assert services[host]['state'] == 'up', services

    vol = stack.openstack('volume', 'create', '--size', '1', 'aa-vol')
    vol = stack.wait_status('volume', vol['id'], 'available', timeout=120)
    att = Attachment(stack, vol['id'], hosts.compute[0])
    before = os.urandom(4 * MIB)
    write_at(att.path, 0, before)
    snap = stack.openstack('--os-volume-api-version', '3.66', 'volume',
                           'snapshot', 'create', '--volume', vol['id'],
                           'aa-snap-1')
    stack.wait_status('snapshot', snap['id'], 'available', timeout=300)
    # Written after the snapshot: not in it.
    write_at(att.path, 0, os.urandom(4 * MIB))

    # aa-1 is lost: SIGKILL, workers and all.
    stack.processes['cinder-volume'].kill()

    # aa-2 alone now: a snapshot of the in-use volume...
    snap2 = stack.openstack('--os-volume-api-version', '3.66', 'volume',
                            'snapshot', 'create', '--volume', vol['id'],
                            'aa-snap-2')
    stack.wait_status('snapshot', snap2['id'], 'available', timeout=300)
    # ... a volume from the first snapshot, holding what was written
    # before it, attached on the other compute host...
    restored = stack.openstack('volume', 'create', '--size', '1',
                               '--snapshot', snap['id'], 'aa-restored')
    restored = stack.wait_status('volume', restored['id'], 'available',
                                 timeout=300)
    att2 = Attachment(stack, restored['id'], hosts.compute[1])
    assert _read(att2.path, 0, len(before)) == before
    # ... a clone of the in-use volume...
    clone = stack.openstack('volume', 'create', '--size', '1', '--source',
                            vol['id'], 'aa-clone')
    stack.wait_status('volume', clone['id'], 'available', timeout=300)
    # ... detaches, and deletes.
    for attachment, volume_id in ((att, vol['id']),
                                  (att2, restored['id'])):
        attachment.detach()
        stack.wait_status('volume', volume_id, 'available', timeout=120)
    for snapshot_id in (snap['id'], snap2['id']):
        stack.openstack('volume', 'snapshot', 'delete', snapshot_id,
                        json=False)
        stack.wait_status('snapshot', snapshot_id, 'deleted', timeout=120)
    for volume_id in (clone['id'], restored['id'], vol['id']):
        stack.openstack('volume', 'delete', volume_id, json=False)
        stack.wait_status('volume', volume_id, 'deleted', timeout=120)

    # aa-1 was gone: the work was aa-2's, as its log says.
    with open(os.path.join(stack.logdir, 'cinder-volume-aa-2.log')) as f:
        log = f.read()
    for done in ('Create snapshot completed successfully',
                 'Created volume successfully',
                 'Delete snapshot completed successfully'):
        assert done in log, (done, log[-3000:])
    assert second.proc.poll() is None
