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

"""Cinder's host-assisted migration between two BlobCR backends (issue
33, item 4): a retype from the local store's backend to the Ceph one,
with ``--retype-policy on-demand``, on real services.

Cinder creates the new volume on the destination and copies it on the
source's cinder-volume host: it connects both volumes there with a
connector named after that machine's host name (os-brick's
``gethostname()``), and dd copies the one device into the other. The
driver has each backend's storage agent serve its own volume for that
machine (``BlobCRDriver._agent_for``), so each side is a loop device of
its own store's agent. Checked: every byte the guest wrote is on the
destination, what it never wrote reads zero, the source's image is
deleted, and the volume answers on the new backend (a snapshot).
"""

import os
import random
import time

from blobcr_common import exception as agent_exception
from blobcr_common.rpc import api as rpc_api
from blobcr_lab.nova_attach import Attachment
from tests.integration.test_cinder_driver import create_snapshot
from tests.integration.test_cinder_driver import create_volume
from tests.integration.test_cinder_driver import read_file

MiB = 1 << 20
# (offset, length) of what is written: the start, a piece in the middle
# that straddles a chunk boundary, the very end.
WRITES = ((0, 3 * MiB), (700 * MiB - 4096, 64 * 1024), ((1 << 30) - MiB, MiB))


def _wait_migrated(stack, volume_id, timeout=300):
    volume = stack.block_storage('admin')
    deadline = time.monotonic() + timeout
    while True:
        shown = volume.get('/volumes/%s' % volume_id).json()['volume']
        state = shown.get('migration_status')
        if state == 'error':
            raise AssertionError('migration failed; cinder-volume log:\n%s'
                                 % stack.log('cinder-volume'))
        if state == 'success' and shown['status'] == 'available':
            return shown
        assert time.monotonic() < deadline, (shown['status'], state)
        time.sleep(1)


def _image_gone(api, host, image, timeout=120):
    deadline = time.monotonic() + timeout
    while True:
        try:
            api.list_versions(host, image)
        except agent_exception.ImageNotFound:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(1)


def test_retype_with_migration_between_two_blobcr_backends(
        openstack_cloud, cinder_hosts, rabbitmq_url):
    stack = openstack_cloud
    source, dest = cinder_hosts['local'], cinder_hosts['rados']
    vol = create_volume(stack, source, 'migrating', '--size', '1')
    rng = random.Random(33)
    written = {}
    att = Attachment(stack, vol['id'], source.compute[0])
    old_image = att.connection['blobcr_image']
    with open(att.path, 'r+b', buffering=0) as f:
        for offset, length in WRITES:
            written[offset] = rng.randbytes(length)
            f.seek(offset)
            f.write(written[offset])
        os.fsync(f.fileno())
    att.detach()
    stack.wait_status('volume', vol['id'], 'available')

    started = time.monotonic()
    stack.openstack('volume', 'set', '--type', dest.volume_type,
                    '--retype-policy', 'on-demand', vol['id'], json=False)
    shown = _wait_migrated(stack, vol['id'])
    took = time.monotonic() - started
    assert shown['volume_type'] == dest.volume_type
    assert '@%s#' % dest.section in shown['os-vol-host-attr:host'], shown

    # On the destination's compute host: what was written, and zeros
    # around it (a 1 MiB sample either side of each write).
    att = Attachment(stack, vol['id'], dest.compute[0])
    new_image = att.connection['blobcr_image']
    assert new_image != old_image
    for offset, data in written.items():
        assert read_file(att.path, offset, len(data)) == data, offset
        before = max(0, offset - MiB)
        assert not any(read_file(att.path, before, offset - before))
        after = offset + len(data)
        assert not any(read_file(att.path, after, MiB))
    att.detach()
    stack.wait_status('volume', vol['id'], 'available')
    snap = create_snapshot(stack, vol['id'], 'after-migration')
    assert snap['status'] == 'available'

    api = rpc_api.AgentAPI(transport_url=rabbitmq_url, timeout=60)
    try:
        assert _image_gone(api, source.storage, old_image), \
            'the source image of a migrated volume was not deleted'
        assert api.list_versions(dest.storage, new_image)['head'] \
            is not None
    finally:
        api.cleanup()
    print('\nretype with migration local -> rados of a 1 GiB volume '
          '(%d MiB written): %.1f s' % (
              sum(len(d) for d in written.values()) // MiB, took))
    stack.openstack('volume', 'snapshot', 'delete', snap['id'], json=False)
    stack.wait_status('snapshot', snap['id'], 'deleted')
    stack.openstack('volume', 'delete', vol['id'], json=False)
    stack.wait_status('volume', vol['id'], 'deleted', timeout=120)
