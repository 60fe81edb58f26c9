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

"""Nova's own call sequences on a server booted from a BlobCR volume,
with stock Nova and os-brick (the default 'local' connection: nothing
patched) and a guest that writes all along.

The guest numbers its writes: record k is the 4 KiB block BASE + k of
its boot disk, written and fsynced, then announced on the console
(``BLOBCR-WROTE k``). At each boot it counts the records it finds and
says so (``BLOBCR-BOOT b FOUND n``). So every flow is checked against
what the guest was told was safe:

* a snapshot taken while it writes holds at least every record
  announced before the request, and no record announced after the
  answer but one in flight;
* resize (to this one host) and shelve with offload then unshelve
  power the guest off and boot it again through new Cinder
  attachments: it finds at least every record it announced;
* a second volume attached to the running server and detached again.

Live migration, cold migration and evacuate move the server between two
nova-computes: tests/integration/test_nova_moves.py.

It runs in CI (a Nova stack with Neutron's API, three TCG boots: a few
minutes); BLOBCR_REAL_NOVA=0 leaves it out. Neutron's API is needed
since Nova's resize and shelve ask it about the server's ports even when
it has none: tools/install-neutron.sh (run by install-deps.sh) makes its
venv, and the test fails without it rather than pass by skipping.
"""

import os
import re
import time
import uuid

import pytest

from blobcr_lab.nova_attach import Attachment
from tests.integration import test_nova_real as real

pytestmark = pytest.mark.skipif(
    os.environ.get('BLOBCR_REAL_NOVA') == '0',
    reason='BLOBCR_REAL_NOVA=0: no real Nova stack')

BLOCK = 4096
BASE = 25600            # 100 MiB: past the 64 MiB boot file system
SCENARIO = r'''#!/bin/sh
base=%(base)d
rec() { dd if=/dev/vda bs=%(block)d skip=$((base + $1)) count=1 2>/dev/null \
        | tr -d '\000' | head -c 32; }
put() { printf '%%s' "$2" > /tmp/rec
        dd if=/tmp/rec of=/dev/vda bs=%(block)d seek=$((base + $1)) \
           conv=notrunc,fsync 2>/dev/null; }
boot=$(rec -1 | sed -n 's/^BOOT-//p')
boot=$(( ${boot:-0} + 1 ))
put -1 "BOOT-$boot"
n=0
while [ "$(rec $n)" = "REC-$n" ]; do n=$((n + 1)); done
echo "BLOBCR-BOOT $boot FOUND $n"
while true; do
    put $n "REC-$n" && echo "BLOBCR-WROTE $n"
    n=$((n + 1))
    sleep 1
done
''' % {'base': BASE, 'block': BLOCK}


class Guest(object):
    """What the guest of one server said on its console."""

    def __init__(self, nova, server_id):
        self.nova = nova
        self.server = server_id
        self.compute = nova.compute('demo')

    def text(self):
        try:
            with open(self.nova.console_log(self.server),
                      errors='replace') as f:
                return f.read()
        except OSError:
            return ''

    def wrote(self):
        """The highest record announced so far (-1: none).

        Since the guest's last boot: the records it found then count as
        announced (a boot that has found n and not yet written record n
        has announced n - 1; counting from -1 there once made a wait
        for record 1 that a guest writing from 13 on never prints).
        """
        text = self.text()
        boots = list(re.finditer(r'BLOBCR-BOOT \d+ FOUND (\d+)', text))
        highest = -1
        if boots:
            highest = int(boots[-1].group(1)) - 1
            text = text[boots[-1].end():]
        found = [int(k) for k in re.findall(r'BLOBCR-WROTE (\d+)', text)]
        return max(found + [highest])

    def wait(self, pattern, timeout=300):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(pattern, self.text())
            if found:
                return found
            time.sleep(1)
        age = time.time() - os.stat(self.nova.console_log(
            self.server)).st_mtime
        said = 'no %r on the console of %s after %s s' % (
            pattern, self.server, timeout)
        # The summary again at the end: CI shows a failure's two ends.
        raise AssertionError('%s:\n%s\nnova-compute:\n%s\n%s (the console '
                             'last changed %.0f s ago)'
                             % (said, self.text()[-3000:],
                                self.nova.log('nova-compute', 60), said, age))

    def booted(self, boot):
        """Records found at boot number ``boot``."""
        return int(self.wait(r'BLOBCR-BOOT %d FOUND (\d+)' % boot).group(1))

    def wait_writes(self, count):
        """Until ``count`` more records are announced; the highest."""
        target = self.wrote() + count
        self.wait(r'BLOBCR-WROTE %d\b' % target)
        return target


def wait_server(compute, server_id, status, timeout=300, nova=None):
    deadline = time.monotonic() + timeout
    while True:
        shown = compute.get('/servers/%s' % server_id).json()['server']
        if shown['status'] == status and not shown.get(
                'OS-EXT-STS:task_state'):
            return shown
        # A string, so that pytest shows it whole.
        assert shown['status'] != 'ERROR', 'fault %r\n%s' % (
            shown.get('fault'), nova.compute_errors() if nova else '')
        assert time.monotonic() < deadline, (shown['status'], status)
        time.sleep(1)


def action(compute, server_id, body):
    compute.post('/servers/%s/action' % server_id, json=body)


def records_in(stack, volume_id, host):
    """The consecutive records a detached volume holds."""
    attachment = Attachment(stack, volume_id, host)
    try:
        with open(attachment.path, 'rb') as f:
            n = 0
            while True:
                f.seek((BASE + n) * BLOCK)
                if f.read(32).rstrip(b'\0') != b'REC-%d' % n:
                    return n
                n += 1
    finally:
        attachment.detach()
        stack.wait_status('volume', volume_id, 'available')


def test_novas_flows_lose_no_write(nova_cloud, tmp_path):
    real.skip_without_boot_tools()
    stack, nova, hosts = nova_cloud
    assert nova.neutron, 'no Neutron venv: run tools/install-neutron.sh'
    suffix = uuid.uuid4().hex[:6]
    volume = real.boot_volume(nova_cloud, str(tmp_path / 'boot.img'),
                              SCENARIO, 'flows-%s' % suffix)
    admin = nova.compute('admin')
    bigger = admin.post('/flavors', json={'flavor': {
        'name': 'flows-%s' % suffix, 'ram': 576, 'vcpus': 1,
        'disk': 0}}).json()['flavor']['id']
    compute = nova.compute('demo')
    made = []
    server = None
    try:
        server = real.boot(nova, volume['id'], 'flows-%s' % suffix)['id']
        guest = Guest(nova, server)
        assert guest.booted(1) == 0

        # -- a snapshot while the guest writes --------------------------
        before = guest.wait_writes(2)
        snap = stack.openstack('--os-volume-api-version', '3.66', 'volume',
                               'snapshot', 'create', '--volume',
                               volume['id'], 'flows-%s' % suffix)
        snap = stack.wait_status('snapshot', snap['id'], 'available',
                                 timeout=300)
        after = guest.wrote()
        copy = stack.openstack('volume', 'create', '--snapshot', snap['id'],
                               '--size', '1', 'flows-copy-%s' % suffix)
        made.append(copy['id'])
        stack.wait_status('volume', copy['id'], 'available', timeout=120)
        held = records_in(stack, copy['id'], nova.compute_host)
        # Every record announced before the request; none announced
        # after the answer but the one in flight.
        assert before + 1 <= held <= after + 2, (before, held, after)
        print('snapshot: records 0..%d announced before the request, %d '
              'held, %d announced at the answer' % (before, held, after))

        # -- a second volume attached to the running server and detached -
        data = stack.openstack('volume', 'create', '--type',
                               hosts.volume_type, '--size', '1',
                               'flows-data-%s' % suffix)
        made.append(data['id'])
        stack.wait_status('volume', data['id'], 'available', timeout=120)
        compute.post('/servers/%s/os-volume_attachments' % server,
                     json={'volumeAttachment': {'volumeId': data['id']}})
        stack.wait_status('volume', data['id'], 'in-use', timeout=180)
        compute.delete('/servers/%s/os-volume_attachments/%s'
                       % (server, data['id']))
        stack.wait_status('volume', data['id'], 'available', timeout=180)

        # -- resize, shelve and unshelve --------------------------------
        flows = (
            ('resize', {'resize': {'flavorRef': bigger}}, 'VERIFY_RESIZE',
             {'confirmResize': None}),
            ('shelve', {'shelve': None}, 'SHELVED_OFFLOADED',
             {'unshelve': None}))
        boot = 1
        for name, body, middle, finish in flows:
            announced = guest.wait_writes(2)
            action(compute, server, body)
            wait_server(compute, server, middle, nova=nova)
            action(compute, server, finish)
            wait_server(compute, server, 'ACTIVE', nova=nova)
            boot += 1
            found = guest.booted(boot)
            assert found >= announced + 1, (name, announced, found)
            print('%s: records 0..%d announced before it, %d found at '
                  'boot %d' % (name, announced, found, boot))
    finally:
        if server is not None:
            compute.delete('/servers/%s' % server, raise_exc=False)
        admin.delete('/flavors/%s' % bigger, raise_exc=False)
    for volume_id in [volume['id']] + made:
        stack.wait_status('volume', volume_id, 'available', timeout=180)
