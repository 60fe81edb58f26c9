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

"""A real Nova boots a server from a BlobCR volume; a snapshot taken
while the guest runs restarts it (blobcr_lab/nova.py).

Slow (the Nova stack and two TCG boots): skipped unless BLOBCR_REAL_NOVA=1.

The volume holds a disk that SeaBIOS boots (syslinux on FAT, the guest
kernel and initramfs of tools/build-guest.sh): without Glance, Nova boots
a volume through the firmware.  The guest writes a state record past the
file system, then runs on; ``openstack volume snapshot create`` takes the
snapshot of the running guest's volume, a volume made from it boots a
second server, whose guest finds the record.
"""

import os
import time
import uuid

import pytest

from blobcr_lab import guest_vm
from blobcr_lab import nova as nova_stack
from blobcr_lab.nova_attach import Attachment

pytestmark = pytest.mark.skipif(
    not os.environ.get('BLOBCR_REAL_NOVA'),
    reason='slow real Nova stack: set BLOBCR_REAL_NOVA=1')

# The state record: 1 MiB blocks past the 64 MiB file system.
STATE_BLOCK = 100
SCENARIO = r'''#!/bin/sh
state=$(dd if=/dev/vda bs=1M skip=%(block)d count=1 2>/dev/null \
        | tr -d '\000' | head -c 64)
case "$state" in
STATE-*) echo "BLOBCR-RESTORED $state" ;;
*) printf 'STATE-%%s' "$(cat /proc/sys/kernel/random/uuid)" > /tmp/state
   dd if=/tmp/state of=/dev/vda bs=1M seek=%(block)d conv=notrunc,fsync \
      2>/dev/null
   echo "BLOBCR-WROTE $(cat /tmp/state)" ;;
esac
while true; do sleep 5; done
''' % {'block': STATE_BLOCK}


def wait_console(path, marker, server, compute, timeout=300):
    deadline = time.monotonic() + timeout
    text = ''
    while time.monotonic() < deadline:
        try:
            with open(path, errors='replace') as f:
                text = f.read()
        except OSError:
            text = ''
        for line in text.splitlines():
            if marker in line:
                return line.strip()
        status = server_status(compute, server)
        assert status == 'ACTIVE', (status, text[-2000:])
        time.sleep(1)
    raise AssertionError('no %r on the console after %s s:\n%s' % (
        marker, timeout, text[-3000:]))


def server_status(compute, server_id):
    """ACTIVE, ERROR or BUILD, from the short list filtered by status:
    showing a server (or the detailed list) makes nova-api ask Neutron
    for its security groups: 500, EndpointNotFound, without Neutron.
    """
    def listed(query=''):
        return {s['id'] for s in compute.get('/servers' + query).json()[
            'servers']}
    for status in ('ACTIVE', 'ERROR'):
        if server_id in listed('?status=' + status):
            return status
    assert server_id in listed(), 'server %s is gone' % server_id
    return 'BUILD'


def boot(nova, volume_id, name):
    """POST /servers as ``openstack server create --nic none --volume V
    --flavor F`` sends it (2.37), then wait until ACTIVE.  (The CLI
    itself creates the server, then exits 1 as it shows it: see
    server_status.)
    """
    compute = nova.compute('demo')
    flavor = [f['id'] for f in compute.get('/flavors').json()['flavors']
              if f['name'] == nova_stack.FLAVOR][0]
    made = compute.post('/servers', json={'server': {
        'name': name, 'flavorRef': flavor, 'networks': 'none',
        'block_device_mapping_v2': [{
            'uuid': volume_id, 'source_type': 'volume',
            'destination_type': 'volume', 'boot_index': 0,
            'delete_on_termination': False}]}}).json()['server']
    deadline = time.monotonic() + 300
    while True:
        status = server_status(compute, made['id'])
        if status == 'ACTIVE':
            return made
        assert status != 'ERROR', (nova.log('nova-compute', 80),
                                   nova.log('nova-conductor', 40))
        assert time.monotonic() < deadline, status
        time.sleep(1)


def write_disk(stack, volume_id, host, disk):
    """Copy a disk image into a volume through an attachment to
    ``host``, as any host would.
    """
    attachment = Attachment(stack, volume_id, host)
    try:
        with open(disk, 'rb') as src, open(attachment.path, 'r+b') as dst:
            while True:
                block = src.read(1 << 20)
                if not block:
                    break
                dst.write(block)
            dst.flush()
            os.fsync(dst.fileno())
    finally:
        attachment.detach()
    stack.wait_status('volume', volume_id, 'available')


def guest_disk(path, scenario):
    """A boot disk (make_boot_disk) of the guest image with ``scenario``.
    """
    image = guest_vm.build_image()    # cached: tools/build-guest.sh
    return nova_stack.make_boot_disk(
        path, os.path.join(image, 'vmlinuz'),
        [os.path.join(image, 'initramfs.img'),
         guest_vm.make_overlay({'/scenario.sh': scenario})])


def console_log(nova, server_id):
    return nova.console_log(server_id)


def skip_without_boot_tools():
    missing = nova_stack.missing_boot_tools()
    if missing:
        pytest.skip('no %s: apt-get install dosfstools mtools syslinux'
                    % ', '.join(missing))


def boot_volume(nova_cloud, path, scenario, name):
    """A bootable volume holding the guest with ``scenario``."""
    stack, nova, hosts = nova_cloud
    disk = guest_disk(path, scenario)
    volume = stack.openstack('volume', 'create', '--type', hosts.volume_type,
                             '--size', '1', name)
    stack.wait_status('volume', volume['id'], 'available', timeout=120)
    write_disk(stack, volume['id'], nova.compute_host, disk)
    stack.openstack('volume', 'set', '--bootable', volume['id'], json=False)
    return volume


def test_boot_snapshot_and_restart_with_real_nova(nova_cloud, tmp_path):
    skip_without_boot_tools()
    stack, nova, hosts = nova_cloud
    suffix = uuid.uuid4().hex[:6]
    volume = boot_volume(nova_cloud, str(tmp_path / 'boot.img'), SCENARIO,
                         'boot-%s' % suffix)

    compute = nova.compute('demo')
    servers = []
    try:
        first = boot(nova, volume['id'], 'first-%s' % suffix)
        servers.append(first['id'])
        wrote = wait_console(console_log(nova, first['id']), 'BLOBCR-WROTE',
                             first['id'], compute)
        state = wrote.split()[-1]
        # The snapshot of the running guest's volume (in use: 3.66).
        snap = stack.openstack('--os-volume-api-version', '3.66', 'volume',
                               'snapshot', 'create', '--volume',
                               volume['id'], 'run-%s' % suffix)
        snap = stack.wait_status('snapshot', snap['id'], 'available',
                                 timeout=300)
        copy = stack.openstack('volume', 'create', '--snapshot', snap['id'],
                               '--size', '1', 'restart-%s' % suffix)
        stack.wait_status('volume', copy['id'], 'available', timeout=120)
        stack.openstack('volume', 'set', '--bootable', copy['id'],
                        json=False)
        second = boot(nova, copy['id'], 'second-%s' % suffix)
        servers.append(second['id'])
        restored = wait_console(console_log(nova, second['id']),
                                'BLOBCR-RESTORED', second['id'], compute)
        assert restored.split()[-1] == state
    finally:
        for server in servers:
            compute.delete('/servers/%s' % server, raise_exc=False)
