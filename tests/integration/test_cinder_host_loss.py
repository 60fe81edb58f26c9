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

"""A compute host lost for good, through cinder-api (issue 20, item 4).

The compute agent that has two volumes attached is SIGKILLed and stays
down. Then, with the same Cinder calls that real clients make:

* Nova's evacuate (nova/compute/manager.py, rebuild on another host
  with new-style attachments): an empty attachment for the same
  instance, the old attachment deleted, the new one updated with the
  destination's connector and completed. The driver gives a host up
  only on evidence that it is down (issue 32: a resize makes the same
  calls on a live host): Nova reporting its compute service down, or an
  operator's take-over. No Nova runs in this stack, so the delete of
  the old attachment is refused (nothing is lost; Nova's walk in
  tests/cinder_model_overlap.py has Nova report hosts down), and goes
  through once the operator took the volume over.
* An operator's detach of the other volume: refused at first (a host
  whose agent does not answer may only be slow); after
  ``blobcr-manage take-over`` (the operator says the host is lost), the
  admin's os-force_detach goes through (with a service token beside the
  admin's: without one Cinder asks Nova, which is not in this stack,
  whether the attachment is in use).

Each volume is then attached on the second compute host and reads its
newest stable version: what was written before the last snapshot is
there, and what came after it is either there (a protection checkpoint
took it) or zeros, never anything else. The old agent, restarted,
serves neither volume (its caches are fenced), and the volume moved
takes snapshots again.

Nova itself does not run in this test (the real-Nova tests are in
test_guest_vm.py); its evacuate is driven call by call, as named above.
"""

import random

from keystoneauth1 import exceptions as ks_exceptions
import pytest

from blobcr_lab import agent_rpc
from blobcr_lab.nova_attach import as_nova
from blobcr_lab.nova_attach import Attachment
from tests.functional.test_agent import manage
from tests.integration.test_cinder_faults import agent_api  # noqa: F401
from tests.integration.test_cinder_faults import content_of
from tests.integration.test_cinder_faults import create_snapshot
from tests.integration.test_cinder_faults import create_volume
from tests.integration.test_cinder_faults import delete
from tests.integration.test_cinder_faults import image_of
from tests.integration.test_cinder_faults import read
from tests.integration.test_cinder_faults import small  # noqa: F401
from tests.integration.test_cinder_faults import write

MiB = 1 << 20
MV = Attachment.MICROVERSION


def connector(host):
    return {'host': host, 'platform': 'x86_64', 'os_type': 'linux',
            'multipath': False, 'mountpoint': '/dev/vdb', 'initiator': None}


def reserve(stack, attachment):
    """Nova's first call for a volume of an instance it evacuates (or
    resizes, shelves): an attachment without a connector.
    """
    return as_nova(stack).post('/attachments', microversion=MV, json={
        'attachment': {'volume_uuid': attachment.volume_id,
                       'instance_uuid': attachment.instance}}
    ).json()['attachment']


def evacuate(stack, attachment, made, host):
    """The rest of what Nova's rebuild on ``host`` does with a volume of
    the evacuated instance (``made``: reserve()'s); the new attachment's
    device path.
    """
    api = as_nova(stack)
    api.delete('/attachments/%s' % attachment.id, microversion=MV)
    updated = api.put('/attachments/%s' % made['id'], microversion=MV,
                      json={'attachment': {'connector': connector(host)}}
                      ).json()['attachment']
    api.post('/attachments/%s/action' % made['id'], microversion=MV,
             json={'os-complete': None})
    return made['id'], updated['connection_info']['device_path']


def test_lost_host_evacuate_and_force_detach(small, agent_api):  # noqa
    stack, hosts = small
    lost_host, new_host = hosts.compute
    rng = random.Random(94)
    volumes = {label: create_volume(stack, hosts, label)['id']
               for label in ('evac', 'forced')}
    images = {label: image_of(stack, v) for label, v in volumes.items()}
    attached, kept, after = {}, {}, {}
    for label, volume_id in volumes.items():
        att = attached[label] = Attachment(stack, volume_id, lost_host)
        att.volume_id = volume_id
        kept[label] = rng.randbytes(MiB)
        write(att.path, 0, kept[label])
    snaps = {label: create_snapshot(stack, v)['id']
             for label, v in volumes.items()}
    for label, att in attached.items():
        after[label] = rng.randbytes(MiB)
        write(att.path, MiB, after[label])

    agent = hosts.agents['compute-a']
    agent.kill()
    try:
        # Nova's evacuate, with no evidence that the host is down: the
        # old attachment stays (the agent might only be slow).
        made = reserve(stack, attached['evac'])
        with pytest.raises(ks_exceptions.HttpError):
            as_nova(stack).delete('/attachments/%s' % attached['evac'].id,
                                  microversion=MV)
        assert 'Nova does not report that host down' in \
            stack.log('cinder-volume', 400)
        # The operator says the host is lost: the evacuate goes through.
        status, out, err = manage(hosts.agents['storage'], 'take-over',
                                  images['evac'])
        assert status == 0, err
        new_id, path = evacuate(stack, attached['evac'], made, new_host)
        stack.wait_status('volume', volumes['evac'], 'in-use')
        assert read(path, 0, MiB) == kept['evac']
        assert read(path, MiB, MiB) in (after['evac'], bytes(MiB))

        # A plain detach is refused: the agent might only be slow.
        with pytest.raises(ks_exceptions.HttpError):
            attached['forced'].detach()
        shown = stack.block_storage('admin').get(
            '/volumes/%s' % volumes['forced']).json()['volume']
        assert shown['status'] == 'in-use', shown
        assert 'does not answer' in stack.log('cinder-volume', 400)
        # The operator says the host is lost, then force-detaches.
        status, out, err = manage(hosts.agents['storage'], 'take-over',
                                  images['forced'])
        assert status == 0, err
        # Cinder asks Nova (absent here) whether the attachment is
        # still used, unless the call carries a service token: it does.
        as_nova(stack, user='admin').post(
            '/volumes/%s/action' % volumes['forced'],
            json={'os-force_detach': {
                'attachment_id': attached['forced'].id,
                'connector': connector(lost_host)}})
        stack.wait_status('volume', volumes['forced'], 'available')
        moved = Attachment(stack, volumes['forced'], new_host)
        assert read(moved.path, 0, MiB) == kept['forced']
        assert read(moved.path, MiB, MiB) in (after['forced'], bytes(MiB))
    finally:
        agent.start()
        agent_rpc.wait_rpc(agent_api, lost_host)

    # Back, the old agent serves neither volume: its caches are fenced.
    served = agent_api.status(lost_host)['attached']
    assert not set(images.values()) & set(served), served
    with open(agent.log.name, errors='replace') as f:
        assert f.read().count('is fenced') >= 2
    for image in images.values():       # the operator drops them
        status, out, err = manage(agent, 'detach', '--discard', image)
        assert status == 0, err

    # The volumes go on where they are now.
    newer = rng.randbytes(MiB)
    write(path, 0, newer)
    snap = create_snapshot(stack, volumes['evac'])['id']
    assert content_of(stack, hosts, snap, MiB) == newer
    as_nova(stack).delete('/attachments/%s' % new_id, microversion=MV)
    moved.detach()
    for label, volume_id in volumes.items():
        stack.wait_status('volume', volume_id, 'available')
    for snap_id in list(snaps.values()) + [snap]:
        delete(stack, 'snapshot', snap_id)
    for volume_id in volumes.values():
        delete(stack, 'volume', volume_id)
