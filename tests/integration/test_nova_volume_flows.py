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

"""Nova's remaining volume flows on a server booted from a BlobCR volume
(issue 56 item 4 and item 10's last point), with the real Nova, Cinder
and Glance of the session (tests/nova_fixtures.py), stock Nova and
os-brick, the default ``local`` connection. One server serves every
test here (TCG boots are slow); its guest numbers its writes as
test_nova_flows.SCENARIO's does (record k at 4 KiB block BASE + k of
its boot disk, fsynced, then ``BLOBCR-WROTE k``), and while a second
disk is there it also writes ``DATA-d`` at block d of it, fsynced, then
``BLOBCR-DATA d`` (d counts from 0 again once the disk has gone).

* multiattach: a volume of a multiattach type on a BlobCR backend ends
  in ``error`` (no BlobCR backend reports multiattach); a BlobCR volume
  in use by the server, attached to a second server, is refused by
  Nova's API; nothing changes for the first server;
* a Nova detach whose terminate_connection fails (the compute host's
  agent refuses the detach: another domain holds the volume's loop
  device open): what Nova and Cinder record, then the way out, and
  every record the guest announced on the volume is in it;
* ``openstack server image create`` of the server with two volumes:
  Nova freezes the guest's file systems through qemu-ga, then
  ``create_snapshot_force`` for each volume;
* ``openstack server image create`` of the server with three volumes
  (one with a file system the guest mounted): Nova freezes the guest's
  file systems through qemu-ga, then ``create_snapshot_force`` for each
  volume; the agent's checkpoints leave Nova's freeze alone;
* rebuild (reimage, 2.93) with a Glance image: Cinder's reimage
  replaces the boot volume's content (the driver's copy_image_to_volume),
  the guest boots the new image and finds nothing of the old disk.

BLOBCR_REAL_NOVA=0 leaves it out, as the other real-Nova flows.
"""

import datetime
import json
import os
import re
import threading
import time
import uuid
from xml.etree import ElementTree

import libvirt
import libvirt_qemu
import pytest

from blobcr_lab import guest_vm
from blobcr_lab import nova as nova_stack
from blobcr_lab.nova_attach import Attachment
from tests.integration import test_nova_flows as flows
from tests.integration import test_nova_real as real

pytestmark = pytest.mark.skipif(
    os.environ.get('BLOBCR_REAL_NOVA') == '0',
    reason='BLOBCR_REAL_NOVA=0: no real Nova stack')

BLOCK = flows.BLOCK
# test_nova_flows.SCENARIO, and a record on the second disk each turn;
# a third disk gets a file system, mounted (what qemu-ga freezes: with
# none mounted its freeze freezes nothing and leaves the guest thawed).
DATA_WRITES = r'''    if [ -b /dev/vdb ]; then
        d=${d:-0}
        printf 'DATA-%%s' "$d" > /tmp/data
        dd if=/tmp/data of=/dev/vdb bs=%(block)d seek=$d conv=notrunc,fsync \
           2>/dev/null && echo "BLOBCR-DATA $d" && d=$((d + 1))
    else
        d=0
    fi
    if [ -b /dev/vdc ] && ! grep -q ' /mnt ' /proc/mounts; then
        mke2fs -i 65536 /dev/vdc >/dev/null 2>&1 \
            && mount -t ext4 /dev/vdc /mnt && echo "BLOBCR-MOUNTED vdc"
    fi
''' % {'block': BLOCK}
LOOP_END = '    sleep 1\ndone\n'
# Nova's rebuild waits for Cinder's reimage [DEFAULT]
# reimage_timeout_per_gb (20 s) per started GiB of the image: a small one.
REBUILD_DISK_MIB = 32
COMPUTE_ADMIN = '2.84'      # instance action events with their details
REBUILD = '2.93'            # rebuild of a volume-backed server (reimage)
MULTIATTACH = '2.60'        # attach a volume to a second server
# nova/virt/libvirt/driver.py, _add_qga_device.
QGA_SOCKET_DIR = '/var/lib/libvirt/qemu'


def scenario(marker=''):
    """The guest's script; ``marker``, a first command."""
    assert flows.SCENARIO.endswith(LOOP_END)
    text = flows.SCENARIO[:-len(LOOP_END)] + DATA_WRITES + LOOP_END
    return text.replace('#!/bin/sh\n', '#!/bin/sh\n%s\n' % marker, 1)


class Scene(object):
    """The server, its boot volume and what the tests made."""

    def __init__(self, nova_cloud, work):
        self.stack, self.nova, self.hosts = nova_cloud
        self.work = work
        self.suffix = uuid.uuid4().hex[:6]
        self.compute = self.nova.compute('demo')
        self.admin = self.nova.compute('admin', COMPUTE_ADMIN)
        self.cinder = self.stack.block_storage('demo')
        self.volumes = []       # deleted at the end
        self.servers = []
        self.images = []
        self.types = []
        self.server = None
        self.guest = None
        self.boot = None
        self.data = None
        self.freezing = None    # the volume type of the server's volumes

    def name(self, what):
        return 'vflows-%s-%s' % (what, self.suffix)

    def volume(self, what, type_name=None, size=1):
        made = self.stack.openstack(
            'volume', 'create', '--type', type_name or self.hosts.volume_type,
            '--size', str(size), self.name(what))
        self.volumes.append(made['id'])
        return made

    def volume_type(self, what, *properties):
        """A public volume type on the BlobCR RADOS backend (admin)."""
        argv = ['volume', 'type', 'create', '--property',
                'volume_backend_name=%s' % self.hosts.backend_name]
        for prop in properties:
            argv += ['--property', prop]
        made = self.stack.openstack(*(argv + [self.name(what)]),
                                    user='admin')
        self.types.append(made['id'])
        return made

    def start(self):
        """The boot volume (the guest's qemu-ga enabled through its image
        properties, as Nova reads them from a volume), and the server.
        """
        # Nova names the guest agent's socket in the system libvirt's
        # directory, whatever its connection_uri: the lab's session
        # libvirtd makes no such directory.
        os.makedirs(QGA_SOCKET_DIR, exist_ok=True)
        disk = real.guest_disk(str(self.work / 'boot.img'), scenario())
        # Snapshots hold the guest still by fsfreeze (qemu-ga).
        self.freezing = self.volume_type('fsfreeze',
                                         'blobcr:quiesce=fsfreeze')['id']
        self.boot = self.volume('boot', type_name=self.freezing)
        self.stack.wait_status('volume', self.boot['id'], 'available',
                               timeout=120)
        real.write_disk(self.stack, self.boot['id'], self.nova.compute_host,
                        disk)
        self.stack.openstack('volume', 'set', '--bootable', '--image-property',
                             'hw_qemu_guest_agent=yes', self.boot['id'],
                             json=False)
        self.server = real.boot(self.nova, self.boot['id'],
                                self.name('server'))['id']
        self.servers.append(self.server)
        self.guest = flows.Guest(self.nova, self.server)
        assert self.guest.booted(1) == 0

    # -- the second disk ----------------------------------------------------

    def attach_data(self):
        """The data volume attached to the server; the console's length
        then (DATA records are counted from there).
        """
        if self.data is None:
            self.data = self.volume('data', type_name=self.freezing)
            self.stack.wait_status('volume', self.data['id'], 'available',
                                   timeout=120)
        mark = len(self.guest.text())
        self.compute.post('/servers/%s/os-volume_attachments' % self.server,
                          json={'volumeAttachment': {
                              'volumeId': self.data['id']}})
        self.stack.wait_status('volume', self.data['id'], 'in-use',
                               timeout=180)
        self.wait_data(mark, 1)
        return mark

    def attach_mounted(self):
        """A third volume, which the guest formats and mounts on /mnt."""
        made = self.volume('fs', type_name=self.freezing)
        self.stack.wait_status('volume', made['id'], 'available',
                               timeout=120)
        mark = len(self.guest.text())
        self.compute.post('/servers/%s/os-volume_attachments' % self.server,
                          json={'volumeAttachment': {
                              'volumeId': made['id']}})
        self.stack.wait_status('volume', made['id'], 'in-use', timeout=180)
        deadline = time.monotonic() + 120
        while 'BLOBCR-MOUNTED vdc' not in self.guest.text()[mark:]:
            assert time.monotonic() < deadline, self.guest.text()[mark:]
            time.sleep(1)
        return made

    def data_announced(self, mark):
        found = [int(k) for k in re.findall(r'BLOBCR-DATA (\d+)',
                                            self.guest.text()[mark:])]
        return max(found + [-1])

    def wait_data(self, mark, count, timeout=120):
        deadline = time.monotonic() + timeout
        while self.data_announced(mark) < count - 1:
            assert time.monotonic() < deadline, (
                'the guest wrote no DATA record on its second disk:\n%s'
                % self.guest.text()[mark:][-2000:])
            time.sleep(1)
        return self.data_announced(mark)

    def detach_data(self):
        self.compute.delete('/servers/%s/os-volume_attachments/%s'
                            % (self.server, self.data['id']))
        self.stack.wait_status('volume', self.data['id'], 'available',
                               timeout=180)

    def data_attached(self):
        if self.data is None:
            return False
        shown = self.cinder.get('/volumes/%s' % self.data['id']).json()
        return shown['volume']['status'] == 'in-use'

    def lab_host(self):
        """The lab host (its libvirtd and agent) the server runs on:
        with test_nova_moves' second nova-compute up, Nova may place it
        on either.
        """
        host = self.admin.get('/servers/%s' % self.server).json()[
            'server']['OS-EXT-SRV-ATTR:host']
        return self.nova.lab_hosts[host]

    def nova_attachments(self, server=None):
        return [a['volumeId'] for a in self.compute.get(
            '/servers/%s/os-volume_attachments' % (server or self.server)
        ).json()['volumeAttachments']]

    def cinder_volume(self, volume_id):
        return self.cinder.get('/volumes/%s' % volume_id).json()['volume']

    def data_records(self):
        """The consecutive DATA records the detached data volume holds."""
        attachment = Attachment(self.stack, self.data['id'],
                                self.nova.compute_host)
        try:
            with open(attachment.path, 'rb') as f:
                d = 0
                while True:
                    f.seek(d * BLOCK)
                    if f.read(32).rstrip(b'\0') != b'DATA-%d' % d:
                        return d
                    d += 1
        finally:
            attachment.detach()
            self.stack.wait_status('volume', self.data['id'], 'available')

    # -- the end -----------------------------------------------------------

    def clean(self):
        for server in self.servers:
            self.compute.delete('/servers/%s' % server, raise_exc=False)
        admin_cinder = self.stack.block_storage('admin')
        for volume_id in self.volumes:
            try:
                self.stack.wait_status('volume', volume_id, 'available',
                                       timeout=180)
            except Exception as e:          # error volumes go too
                print('volume %s: %s' % (volume_id, e))
            self.cinder.delete('/volumes/%s?cascade=true' % volume_id,
                               raise_exc=False)
        for volume_id in self.volumes:
            try:
                self.stack.wait_status('volume', volume_id, 'deleted',
                                       timeout=120)
            except Exception as e:
                print('volume %s: %s' % (volume_id, e))
        for image in self.images:
            try:
                self.stack.openstack('image', 'delete', image, json=False)
            except Exception as e:
                print('image %s: %s' % (image, e))
        for type_id in self.types:
            admin_cinder.delete('/types/%s' % type_id, raise_exc=False)


@pytest.fixture(scope='module')
def scene(nova_cloud, tmp_path_factory):
    real.skip_without_boot_tools()
    assert nova_cloud[1].neutron, \
        'no Neutron venv: run tools/install-neutron.sh'
    made = Scene(nova_cloud, tmp_path_factory.mktemp('vflows'))
    try:
        made.start()
        yield made
    finally:
        made.clean()


# -- multiattach -------------------------------------------------------------

def test_multiattach_is_refused_and_the_server_keeps_its_volume(scene):
    """No BlobCR volume of a multiattach type can be made: the backends
    report multiattach False and Cinder's scheduler finds none (the
    volume ends in ``error``, the user's message says no backend was
    found). A BlobCR volume in use by one server, attached to another,
    is refused by Nova's API at once; the first server keeps it.
    """
    stack = scene.stack
    multi = scene.volume_type('multi', 'multiattach=<is> True')
    refused = scene.volume('multi', type_name=multi['id'])
    stack.wait_status('volume', refused['id'], 'error', timeout=120)
    messages = scene.cinder.get('/messages', microversion='3.3').json()[
        'messages']
    said = [m['user_message'] for m in messages
            if m['resource_uuid'] == refused['id']]
    assert any('Could not find any available weighted backend' in m
               for m in said), said
    print('multiattach type: volume %s error, message %r' % (
        refused['id'], said))

    scene.attach_data()
    empty = scene.volume('empty')
    stack.wait_status('volume', empty['id'], 'available', timeout=120)
    stack.openstack('volume', 'set', '--bootable', empty['id'], json=False)
    # It needs no guest: its firmware finds nothing to boot and waits.
    other = real.boot(scene.nova, empty['id'], scene.name('other'))['id']
    scene.servers.append(other)
    answer = scene.compute.post(
        '/servers/%s/os-volume_attachments' % other, raise_exc=False,
        microversion=MULTIATTACH,
        json={'volumeAttachment': {'volumeId': scene.data['id']}})
    assert answer.status_code == 400, (answer.status_code, answer.text)
    assert 'is already attached to instances: %s' % scene.server in \
        answer.text, answer.text
    print('second server: %d %s' % (answer.status_code, answer.text))
    shown = scene.cinder_volume(scene.data['id'])
    assert shown['status'] == 'in-use', shown['status']
    assert [a['server_id'] for a in shown['attachments']] == [scene.server]
    assert scene.nova_attachments(other) == [empty['id']]
    assert scene.data['id'] in scene.nova_attachments()
    mark = len(scene.guest.text())
    scene.wait_data(mark, 1)            # the guest still writes on it
    scene.compute.delete('/servers/%s' % other)
    stack.wait_status('volume', empty['id'], 'available', timeout=180)


# -- a detach whose terminate_connection fails --------------------------------

HOLDER = '''<domain type='qemu'>
  <name>%(name)s</name>
  <memory unit='MiB'>32</memory>
  <vcpu>1</vcpu>
  <os><type arch='x86_64'>hvm</type></os>
  <devices>
    <disk type='block' device='disk'>
      <driver name='qemu' type='raw' cache='none'/>
      <source dev='%(source)s'/>
      <target dev='vda' bus='virtio'/>
      <readonly/>
      <shareable/>
    </disk>
  </devices>
</domain>'''


def _disk_source(conn, server, target):
    tree = ElementTree.fromstring(
        conn.lookupByUUIDString(server).XMLDesc(0))
    for disk in tree.findall('./devices/disk'):
        if disk.find('target').get('dev') == target:
            source = disk.find('source')
            return source.get('dev') or source.get('file')
    raise AssertionError('no disk %s in the domain of %s' % (target, server))


def _action_event(admin, server, request_id, event, timeout=180):
    deadline = time.monotonic() + timeout
    while True:
        answer = admin.get('/servers/%s/os-instance-actions/%s'
                           % (server, request_id), raise_exc=False)
        if answer.status_code == 200:
            action = answer.json()['instanceAction']
            found = [e for e in action.get('events') or ()
                     if e['event'] == event and e.get('finish_time')]
            if found:
                return action, found[0]
        assert time.monotonic() < deadline, (answer.status_code,
                                             answer.text[-2000:])
        time.sleep(1)


def test_a_detach_whose_terminate_connection_fails(scene):
    """Nova's libvirt driver takes the disk out of the guest, then
    Cinder's attachment_delete calls the driver's terminate_connection,
    which fails here (the compute host's agent refuses the detach while
    another domain holds the volume's loop device). Nova records the
    detach as failed and keeps the volume; Cinder keeps the attachment
    and leaves the volume ``detaching`` (nothing rolls it back); the
    device and mirror stay on the host. The way out: the cause gone,
    ``os-roll_detaching`` (the volume's owner may), and Nova's detach
    again: the volume is available and holds every record the guest
    announced on it.
    """
    stack = scene.stack
    if not scene.data_attached():
        mark = scene.attach_data()
    else:
        mark = 0
        scene.wait_data(mark, 1)
    conn = libvirt.open(scene.lab_host().libvirtd.uri)
    holder = None
    try:
        source = _disk_source(conn, scene.server, 'vdb')
        holder = conn.createXML(HOLDER % {
            'name': scene.name('holder'), 'source': source},
            libvirt.VIR_DOMAIN_START_PAUSED)
        answer = scene.compute.delete('/servers/%s/os-volume_attachments/%s'
                                      % (scene.server, scene.data['id']))
        request = answer.headers['x-openstack-request-id']
        action, event = _action_event(scene.admin, scene.server, request,
                                      'compute_detach_volume')
        print('nova: action %s, event %s %s: %s\n%s' % (
            action['action'], event['event'], event['result'],
            event.get('details'), (event.get('traceback') or '')[-600:]))
        assert event['result'] == 'Error', event
        # What Nova and Cinder record: Nova keeps the volume; Cinder's
        # attachment stays, the volume is left 'detaching'.
        assert scene.data['id'] in scene.nova_attachments()
        shown = scene.cinder_volume(scene.data['id'])
        assert shown['status'] == 'detaching', shown['status']
        assert [a['server_id'] for a in shown['attachments']] == \
            [scene.server]
        # cinder-volume says why (cinder-api told Nova only "500").
        with open(os.path.join(stack.logdir, 'cinder-volume.log'),
                  errors='replace') as f:
            said = [line for line in f if 'Terminate volume connection '
                    'failed' in line and 'domain %s is running on image'
                    % scene.name('holder') in line]
        assert said, 'cinder-volume logged no failed terminate_connection'
        print('cinder-volume, %d times: %s' % (len(said), said[0][-400:]))
        # The guest lost the disk (Nova's libvirt detach came first) and
        # goes on writing on its boot disk.
        assert scene.guest.wait(r'BLOBCR-WROTE %d\b'
                                % (scene.guest.wrote() + 2), timeout=60)
        assert _disk_source_or_none(conn, scene.server, 'vdb') is None
        # Nova's detach again, as it is: refused while Cinder says
        # 'detaching'.
        again = scene.compute.delete(
            '/servers/%s/os-volume_attachments/%s'
            % (scene.server, scene.data['id']), raise_exc=False)
        print('detach again while detaching: %d %s'
              % (again.status_code, again.text))
        assert again.status_code == 400, (again.status_code, again.text)
    finally:
        if holder is not None:
            holder.destroy()
        conn.close()
    announced = scene.data_announced(mark)
    scene.cinder.post('/volumes/%s/action' % scene.data['id'],
                      json={'os-roll_detaching': {}})
    stack.wait_status('volume', scene.data['id'], 'in-use', timeout=30)
    scene.detach_data()
    assert scene.data['id'] not in scene.nova_attachments()
    held = scene.data_records()
    assert held >= announced + 1, (announced, held)
    print('detach: DATA records 0..%d announced, %d held after the '
          'failed detach and its retry' % (announced, held))


def _disk_source_or_none(conn, server, target):
    try:
        return _disk_source(conn, server, target)
    except AssertionError:
        return None


# -- server image create ------------------------------------------------------

def _freeze_state(domain):
    """qemu-ga's own word: 'frozen' or 'thawed'."""
    answer = libvirt_qemu.qemuAgentCommand(
        domain, '{"execute": "guest-fsfreeze-status"}', 5, 0)
    return json.loads(answer)['return']


class FreezeWatch(threading.Thread):
    """The guest's freeze state every 0.2 s: [(time.time(), state)]."""

    def __init__(self, domain):
        super().__init__(daemon=True)
        self.domain = domain
        self.readings = []
        self.done = threading.Event()

    def run(self):
        while not self.done.is_set():
            try:
                state = _freeze_state(self.domain)
            except libvirt.libvirtError as e:
                state = 'error: %s' % e
            self.readings.append((time.time(), state))
            self.done.wait(0.2)

    def last(self):
        return self.readings[-1][1] if self.readings else None


def _count(path, text):
    return len(_lines(path, text))


def _lines(path, text):
    with open(path, errors='replace') as f:
        return [line for line in f if text in line]


def _logged_at(line):
    """The time.time() of a log line's local timestamp."""
    return datetime.datetime.strptime(
        ' '.join(line.split()[:2]), '%Y-%m-%d %H:%M:%S.%f').timestamp()


def test_image_of_the_server_with_three_volumes(scene):
    """``openstack server image create`` (createImage) of the running
    server with its boot volume, the data volume and a third one whose
    file system the guest mounted, all of a type whose snapshots hold
    the guest by fsfreeze: Nova freezes the guest's
    file systems through qemu-ga (the boot volume's image properties say
    hw_qemu_guest_agent), calls ``create_snapshot_force`` for each
    volume, and thaws once no snapshot is 'creating'. Each
    snapshot's checkpoint finds the guest frozen: qemu-ga refuses the
    agent's second freeze, and the agent holds the guest as it is and
    does not thaw it, so Nova's freeze lasts until Nova's thaw. Both
    snapshots are available and the image names them; after Nova's
    thaw a snapshot freezes and thaws the guest itself again.
    """
    stack = scene.stack
    if not scene.data_attached():
        scene.attach_data()         # the guest's vdb
    mounted = scene.attach_mounted()    # its vdc
    volumes = {scene.boot['id'], scene.data['id'], mounted['id']}
    lab_host = scene.lab_host()
    agent_log = lab_host.agent.log.name
    held_before = _count(agent_log, 'frozen already')
    conn = libvirt.open(lab_host.libvirtd.uri)
    try:
        domain = conn.lookupByUUIDString(scene.server)
        assert _freeze_state(domain) == 'thawed'
        watch = FreezeWatch(domain)
        watch.start()
        try:
            image_id, snaps, first_done = _image_of(scene, len(volumes))
            deadline = time.monotonic() + 60
            while watch.last() != 'thawed':
                assert time.monotonic() < deadline, watch.readings[-5:]
                time.sleep(0.2)
        finally:
            watch.done.set()
            watch.join(10)
        began = watch.readings[0][0]
        frozen = [t for t, state in watch.readings if state == 'frozen']
        # The agent's checkpoints found the guest frozen (once per hold:
        # checkpoints of the domain at once share one) and left it so.
        holds = [_logged_at(line) for line in
                 _lines(agent_log, 'frozen already')[held_before:]]
        thawed = [t for t, state in watch.readings
                  if frozen and t > frozen[0] and state == 'thawed']
        print('server image: snapshots %s; qemu-ga frozen at %s s, the '
              'agent held it frozen at %s s, thawed at %s s (from the '
              'request), the snapshots seen done at %.1f s; %d readings'
              % ([(s['volume_id'], s['status'], {
                  k: v for k, v in s['metadata'].items()
                  if k in ('blobcr:quiesce', 'blobcr:held_ms')})
                  for s in snaps],
                 ['%.1f' % (t - began) for t in frozen[:1]],
                 ['%.1f' % (t - began) for t in holds],
                 ['%.1f' % (t - began) for t in thawed[:1]],
                 first_done - began, len(watch.readings)))
        assert [s['status'] for s in snaps] == ['available'] * 3, snaps
        assert {s['volume_id'] for s in snaps} == volumes
        # Nova froze the guest before the checkpoints, which found it
        # frozen; nothing thawed it before the last of them (the thaw
        # that came is Nova's, once no snapshot was 'creating').
        assert holds, 'no checkpoint found the guest frozen'
        assert frozen and frozen[0] < holds[0], (frozen[:1], holds)
        assert thawed and thawed[0] > holds[-1], (thawed[:1], holds)
        with open(agent_log, errors='replace') as f:
            print('agent: %s' % [line for line in f
                                 if 'frozen already' in line][-1][-300:])
        image = stack.openstack('image', 'show', image_id)
        mapping = str(image.get('properties'))
        assert all(s['id'] in mapping for s in snaps), mapping
        # Thawed by Nova: a snapshot of the data volume freezes and
        # thaws the guest itself again.
        snap = stack.openstack('--os-volume-api-version', '3.66', 'volume',
                               'snapshot', 'create', '--volume',
                               scene.data['id'], scene.name('after'))
        stack.wait_status('snapshot', snap['id'], 'available', timeout=120)
        assert _count(agent_log, 'frozen already') == \
            held_before + len(holds)
        assert _freeze_state(domain) == 'thawed'
    finally:
        conn.close()
    scene.guest.wait_writes(1)
    # Out again (its file system still mounted: the guest lets it go).
    scene.compute.delete('/servers/%s/os-volume_attachments/%s'
                         % (scene.server, mounted['id']))
    stack.wait_status('volume', mounted['id'], 'available', timeout=180)


def _image_of(scene, count):
    """createImage of the server; (image id, its ``count`` snapshots once
    none is 'creating', when the first was seen done).
    """
    name = scene.name('image')
    answer = scene.compute.post(
        '/servers/%s/action' % scene.server, microversion='2.45',
        json={'createImage': {'name': name}})
    image_id = answer.json()['image_id']
    scene.images.append(image_id)
    first_done = None
    deadline = time.monotonic() + 180
    while True:
        snaps = [s for s in scene.cinder.get('/snapshots/detail').json()[
            'snapshots'] if s['name'] == 'snapshot for %s' % name]
        done = [s for s in snaps if s['status'] != 'creating']
        if done and first_done is None:
            first_done = time.time()
        if len(snaps) == count and len(done) == count:
            return image_id, snaps, first_done
        assert time.monotonic() < deadline, snaps
        time.sleep(0.2)


# -- rebuild ------------------------------------------------------------------

def test_rebuild_of_the_volume_backed_server(scene):
    """Rebuild with another image (2.93): Nova makes a new attachment,
    deletes the old one (the driver's terminate_connection: the last
    checkpoint, the detach), asks Cinder to reimage the volume, whose
    manager calls the driver's copy_image_to_volume (a new version of
    the volume's image, equal to the image and zeros past it), and
    boots the server again from the volume. The guest boots the new
    image (its marker) and finds no record of the old disk; the server
    names the new image, the volume's image metadata too.
    """
    stack = scene.stack
    if scene.data and scene.data_attached():
        scene.detach_data()
    token = uuid.uuid4().hex[:8]
    image = guest_vm.build_image()
    disk = nova_stack.make_boot_disk(
        str(scene.work / 'rebuild.img'), os.path.join(image, 'vmlinuz'),
        [os.path.join(image, 'initramfs.img'),
         guest_vm.make_overlay({'/scenario.sh': scenario(
             'echo "BLOBCR-IMAGE %s"' % token)})],
        size_mib=REBUILD_DISK_MIB)
    made = stack.openstack('image', 'create', '--disk-format', 'raw',
                           '--container-format', 'bare', '--file', disk,
                           '--property', 'hw_qemu_guest_agent=yes',
                           scene.name('rebuild'))
    scene.images.append(made['id'])
    announced = scene.guest.wait_writes(1)
    began = time.monotonic()
    scene.compute.post('/servers/%s/action' % scene.server,
                       microversion=REBUILD,
                       json={'rebuild': {'imageRef': made['id']}})
    flows.wait_server(scene.compute, scene.server, 'ACTIVE',
                      nova=scene.nova)
    took = time.monotonic() - began
    booted = scene.guest.wait(r'BLOBCR-IMAGE %s\b[\s\S]*?BLOBCR-BOOT (\d+) '
                              r'FOUND (\d+)' % token)
    assert booted.groups() == ('1', '0'), booted.groups()
    scene.guest.wait_writes(1)
    # Nova keeps a volume-backed server's image empty (its sign of a
    # server booted from a volume); Cinder records the new image.
    shown = scene.compute.get('/servers/%s' % scene.server,
                              microversion=REBUILD).json()['server']
    assert not shown['image'], shown['image']
    volume = scene.cinder_volume(scene.boot['id'])
    assert volume['status'] == 'in-use'
    assert volume['volume_image_metadata']['image_id'] == made['id']
    assert [a['server_id'] for a in volume['attachments']] == [scene.server]
    print('rebuild in %.1f s: records 0..%d before it; the guest booted '
          'image %s and found %s records' % (took, announced, made['id'],
                                             booted.group(2)))
