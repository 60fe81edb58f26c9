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

"""The attach path through Nova's own code: what nova 34's libvirt driver
makes of the connection the BlobCR Cinder driver returns.

Nova maps ``driver_volume_type`` to a volume driver class through
``nova.virt.libvirt.driver.VOLUME_DRIVERS`` and nothing else loads. Run
here in a child process (Nova's options live on the global cfg.CONF),
with a real ``nova.virt.libvirt.host.Host`` on libvirt's test driver:
the class the map names, its connect_volume (mount table before and
after), get_config's XML and disconnect_volume. Nova stays as packaged:
the optional 'blobcr' type's class is put in the map in the child's
memory only, as devstack/patches/ would put it in the file.
"""

import json
import os
import pathlib
import re
import subprocess
import sys
import uuid
from xml.etree import ElementTree


from blobcr_agent.repository.backends import local
from blobcr_agent.repository import repository
from blobcr_common import auth
from blobcr_lab.agent_rpc import committed
from blobcr_lab import agents
from blobcr_lab import guest_vm
from blobcr_lab.metadata_front import MetadataFront
from blobcr_lab.metadata_front import vendordata_answer
from blobcr_lab.nova_attach import Attachment
from tests.lab_fixtures import guest_image  # noqa: F401 (fixture)
from tests.lab_fixtures import session_libvirt  # noqa: F401 (fixture)

TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
CHUNK = 64 * 1024
DISK_INFO = {'bus': 'virtio', 'dev': 'vdb', 'type': 'disk'}

NOVA_SCRIPT = r'''
import json
import sys

import nova.conf

spec = json.load(sys.stdin)
CONF = nova.conf.CONF
CONF([], project='nova', default_config_files=[])
CONF.set_override('virt_type', 'qemu', 'libvirt')
from oslo_utils import importutils
from nova.virt.libvirt import driver
from nova.virt.libvirt import host
from nova.virt.libvirt.volume import fs

def mounts():
    with open('/proc/self/mountinfo') as f:
        return f.read()

# The optional 'blobcr' type (blobcr_connection_type = blobcr): in this
# process's memory, never in Nova's installed file.
driver.VOLUME_DRIVERS.setdefault(
    'blobcr', 'blobcr_nova.libvirt_volume.LibvirtBlobCRVolumeDriver')
out = {'mount_based': {}, 'disks': []}
for kind in spec['kinds']:
    cls = importutils.import_class(driver.VOLUME_DRIVERS[kind])
    out['mount_based'][kind] = issubclass(
        cls, fs.LibvirtMountedFileSystemVolumeDriver)
from nova.volume import cinder
connection = host.Host('test:///default')
for info in spec['connections']:
    if 'attachment' in info:
        # As Nova reads Cinder's attachment (nova.volume.cinder), and
        # then names the volume (nova.virt.block_device).
        info = dict(cinder._translate_attachment_ref(
            info['attachment'])['connection_info'], serial=info['serial'])
    name = driver.VOLUME_DRIVERS[info['driver_volume_type']]
    volume_driver = importutils.import_class(name)(connection)
    before = mounts()
    try:
        volume_driver.connect_volume(info, None)
    except Exception as e:
        out['disks'].append({'class': name, 'error': str(e)})
        continue
    config = volume_driver.get_config(info, spec['disk_info'])
    volume_driver.disconnect_volume(info, None)
    out['disks'].append({'class': name, 'xml': config.to_xml(),
                         'mounts_changed': mounts() != before})
print(json.dumps(out))
'''


def nova_disks(connections, kinds=('blobcr', 'gpfs', 'nfs', 'local'),
               disk_info=DISK_INFO):
    proc = subprocess.run(
        [sys.executable, '-c', NOVA_SCRIPT], capture_output=True, text=True,
        timeout=120, input=json.dumps({'connections': connections,
                                       'kinds': list(kinds),
                                       'disk_info': disk_info}))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


DRIVER_CLASSES = {
    'blobcr': 'blobcr_nova.libvirt_volume.LibvirtBlobCRVolumeDriver',
    'gpfs': 'nova.virt.libvirt.volume.gpfs.LibvirtGPFSVolumeDriver'}


def check_disk(disk, cls, kind, source, dev):
    """Nova's disk made by class ``cls``: of ``kind`` (file, block) on
    ``source``, raw, uncached (O_DIRECT, which the FUSE mirror and the
    loop device serve), no mount made.
    """
    assert disk['class'] == cls, disk
    assert disk['mounts_changed'] is False
    element = ElementTree.fromstring(disk['xml'])
    assert (element.tag, element.get('type'), element.get('device')) == \
        ('disk', kind, 'disk')
    assert element.find('source').attrib == source
    assert element.find('driver').attrib == {'name': 'qemu', 'type': 'raw',
                                             'cache': 'none'}
    assert element.find('target').attrib == {'dev': dev, 'bus': 'virtio'}
    return element


def check_file_disk(disk, path, dev='vdb', kind='blobcr'):
    """The file types' disk for ``path``: QEMU opens the file itself."""
    return check_disk(disk, DRIVER_CLASSES[kind], 'file', {'file': path},
                      dev)


def loop_backing_file(device):
    name = os.path.basename(device)
    with open('/sys/block/%s/loop/backing_file' % name) as f:
        return f.read().strip()


def check_block_disk(disk, device, dev='vdb'):
    """Stock Nova's disk for a 'local' connection: the block device."""
    return check_disk(disk,
                      'nova.virt.libvirt.volume.volume.LibvirtVolumeDriver',
                      'block', {'dev': device}, dev)


def test_cinder_connection_is_stock_novas_block_disk(openstack_cloud,
                                                     cinder_hosts):
    """The real chain with the default connection type: a volume of the
    BlobCR backend attached through Cinder's attachments API as Nova
    attaches it (the driver asks the compute host's agent for the
    mirror and a loop device over it), then stock Nova's code on the
    connection info Cinder returned.
    """
    stack, hosts = openstack_cloud, cinder_hosts['local']
    volumes = stack.block_storage('demo')
    made = volumes.post('/volumes', json={'volume': {
        'size': 1, 'name': 'nova-xml-%s' % uuid.uuid4().hex[:6],
        'volume_type': hosts.volume_type}}).json()['volume']
    stack.wait_status('volume', made['id'], 'available', timeout=120)
    attachment = Attachment(stack, made['id'], hosts.compute[0])
    try:
        data = attachment.connection
        # What Cinder handed out: os-brick's and Nova's own 'local' type,
        # a loop device over a file on the compute agent's FUSE mirror.
        # It names the device by the agent's link for the image, never
        # by a loop number (loopdevs.py).
        assert data['driver_volume_type'] == 'local', data
        device = data['device_path']
        assert os.path.basename(device) == data['blobcr_image'], device
        loop = os.path.realpath(device)
        assert re.fullmatch(r'/dev/loop\d+', loop), loop
        mirror = loop_backing_file(loop)
        mount = os.path.realpath(hosts.agents['compute-a'].mount)
        assert mirror.startswith(mount + os.sep) and os.path.isfile(mirror)
        assert mirror.endswith(data['blobcr_image'])
        # The same mirror through the file routes (gpfs, stock; blobcr,
        # the optional patched type), and a file no mirror serves.
        files = [dict(data, driver_volume_type=kind, device_path=path)
                 for kind, path in (('gpfs', mirror), ('blobcr', mirror),
                                    ('blobcr', mirror + '-gone'))]
        out = nova_disks([{'attachment': {'connection_info': dict(info),
                                          'status': 'attached'},
                           'serial': made['id']}
                          for info in [data] + files])
        # None of them is one of Nova's mount-based drivers; nfs is (it
        # would mount its share).
        assert out['mount_based'] == {'blobcr': False, 'gpfs': False,
                                      'nfs': True, 'local': False}
        element = check_block_disk(out['disks'][0], device)
        assert element.find('serial').text == made['id']
        check_file_disk(out['disks'][1], mirror, kind='gpfs')
        check_file_disk(out['disks'][2], mirror)
        assert out['disks'][1]['xml'] == out['disks'][2]['xml']
        assert 'no BlobCR mirror file at %s-gone' % mirror in \
            out['disks'][3]['error'], out['disks'][3]
    finally:
        attachment.detach()
        volumes.delete('/volumes/%s' % made['id'])
        stack.wait_status('volume', made['id'], 'deleted', timeout=120)
    # Detached: the agent released its loop device and its link.
    assert not os.path.lexists(device)
    assert not os.path.exists('/sys/block/%s/loop' % os.path.basename(
        loop)) or loop_backing_file(loop) != mirror


def test_agent_finds_the_domain_nova_defines(tmp_path):
    """A libvirt domain with the disk Nova makes of the agent's mirror
    file is the domain the agent holds still for a checkpoint, and its
    UUID (Nova's instance id) is an instance the guest endpoint serves.
    """
    repo = repository.Repository(local.LocalBackend(str(tmp_path / 'store')),
                                 chunk_size=CHUNK)
    image = repo.create_image('nova-disk', CHUNK * 16).id
    workdir = tmp_path / 'agent'
    workdir.mkdir()
    # Where the agent's mirror file will be (see tests/functional). The
    # domain is defined before the agent starts: the gpfs class, which
    # does not check that the file exists, gives the XML (the same as
    # blobcr's: test_cinder_connection_is_stock_novas_block_disk).
    path = os.path.join(str(workdir), 'mnt', 'images', image)
    out = nova_disks([{'driver_volume_type': 'gpfs', 'serial': image,
                       'data': {'device_path': path, 'access_mode': 'rw',
                                'discard': False}}], kinds=())
    check_file_disk(out['disks'][0], path, kind='gpfs')
    instance = str(uuid.uuid4())
    node = tmp_path / 'libvirt-node.xml'
    node.write_text(
        '<node><domain type="test"><name>instance-00000001</name>'
        '<uuid>%s</uuid><memory>65536</memory><os><type>hvm</type></os>'
        '<devices>%s</devices></domain></node>'
        % (instance, out['disks'][0]['xml']))
    agent = agents.AgentProcess(str(workdir), repo.backend, {
        'agent': {'libvirt_uri': 'test://%s' % node, 'quiesce': 'suspend'},
        'proxy': {'metadata_proxy_shared_secret': 'ns'}})
    agent.start()
    try:
        assert agent.client.call('attach', image=image)['path'] == path
        # Explicit suspend: refused if no running domain used the file.
        assert agent.client.call('checkpoint', image=image,
                                 quiesce='suspend')['quiesce'] == 'suspend'
        import http.client
        conn = http.client.HTTPConnection('127.0.0.1', agent.proxy_port(),
                                          timeout=30)
        conn.request('POST', '/v1/checkpoint', body='{"quiesce": "suspend"}',
                     headers={'X-Instance-ID': instance,
                              'X-Instance-ID-Signature':
                              auth.sign('ns', instance)})
        reply = conn.getresponse()
        body = json.loads(reply.read())
        assert reply.status == 200, body
        conn.close()
    finally:
        agent.stop()
        repo.close()


# In the guest: no credentials file; blobcr-checkpoint finds them in
# vendor_data2.json at the metadata address and sends the checkpoint
# there too. An explicit suspend: refused unless the agent finds the
# domain that uses the image.
SCENARIO = r"""set -e
mount -t ext4 /dev/vda /mnt
echo 'written through the disk nova described' > /mnt/nova.txt
python3 -m blobcr_guest checkpoint --json --wait-stable --quiesce suspend \
    | sed 's/^/CK /'
umount /mnt
"""


class NovaDiskVM(guest_vm.GuestVM):
    """The test guest with Nova's <disk> element in place of its own."""

    def __init__(self, *args, disk_xml, **kwargs):
        super().__init__(*args, **kwargs)
        self.disk_xml = disk_xml

    def xml(self):
        xml, count = re.subn(r"<disk type='file' device='disk'>.*?</disk>",
                             lambda _: self.disk_xml, super().xml(),
                             flags=re.S)
        assert count == 1
        return xml


def test_guest_boots_from_the_disk_nova_describes_and_checkpoints(
        guest_image, session_libvirt, tmp_path):  # noqa: F811
    """A real TCG guest booted with stock Nova's disk XML of a 'local'
    connection, the agent's loop device over its mirror file: it mounts
    it, writes, finds its credentials in vendordata at the metadata
    address and checkpoints itself there (the agent finds the domain by
    the loop device and suspends it).
    """
    secret, instance, project = 'tcg-host-secret', str(uuid.uuid4()), \
        uuid.uuid4().hex
    repo = repository.Repository(local.LocalBackend(str(tmp_path / 'store')))
    raw = str(tmp_path / 'data.raw')
    with open(raw, 'wb') as f:
        f.truncate(64 << 20)
    subprocess.run(['mkfs.ext4', '-q', '-F', raw], check=True, timeout=60)
    header, base = repo.import_file(raw, 'data')
    workdir = tmp_path / 'agent'
    workdir.mkdir()
    agent = agents.AgentProcess(str(workdir), repo.backend, {
        'agent': {'libvirt_uri': session_libvirt.uri, 'quiesce': 'suspend',
                  'host': 'tcg-host'},
        'proxy': {'host_secret': secret}})
    agent.start()
    front = None
    try:
        attached = agent.client.call('attach', image='data',
                                     instance=instance, project=project,
                                     block_device=True)
        path, device = attached['path'], attached['device']
        disk_info = {'bus': 'virtio', 'dev': 'vda', 'type': 'disk'}
        out = nova_disks([{'driver_volume_type': 'local',
                           'serial': header.id,
                           'data': {'device_path': device,
                                    'access_mode': 'rw',
                                    'discard': False}}], kinds=(),
                         disk_info=disk_info)
        check_block_disk(out['disks'][0], device, dev='vda')
        front = MetadataFront(
            {'blobcr': vendordata_answer(instance, project, secret,
                                         'tcg-host')},
            agent.proxy_port())
        (tmp_path / 'vm').mkdir()
        vm = NovaDiskVM(
            'blobcr-nova', path, session_libvirt.uri, base_dir=guest_image,
            files={'/scenario.sh': SCENARIO,
                   '/usr/lib/python3/dist-packages/blobcr_guest':
                   pathlib.Path(TOP, 'blobcr-guest', 'blobcr_guest')},
            metadata_port=front.port, workdir=str(tmp_path / 'vm'),
            disk_xml=out['disks'][0]['xml'])
        with vm:
            # libvirt took Nova's element: the loop device.
            live = ElementTree.fromstring(vm.domain.XMLDesc(0))
            disks = live.findall('./devices/disk')
            assert [(d.get('type'), d.find('source').get('dev'))
                    for d in disks] == [('block', device)]
            status = vm.wait_exit(timeout=400)
            console = vm.console()
        assert status == 0, console[-4000:]
        lines = [line[3:] for line in console.splitlines()
                 if line.startswith('CK ')]
        assert lines, console[-4000:]
        taken = json.loads(lines[-1])
        assert taken['state'] == 'stable'
        assert front.relayed >= 2           # the checkpoint and its poll
        versions = [v.number for v in committed(
            repo.image(header.id).versions)]
        assert versions == [base, taken['version']]
        exported = str(tmp_path / 'v.raw')
        repo.export(header.id, taken['version'], exported)
        subprocess.run(['e2fsck', '-fy', exported], capture_output=True,
                       timeout=120)
        assert subprocess.run(
            ['debugfs', '-R', 'cat /nova.txt', exported], check=True,
            capture_output=True, timeout=60).stdout == \
            b'written through the disk nova described\n'
    finally:
        if front is not None:
            front.close()
        agent.stop()
        repo.close()


def test_stock_nova_opens_the_agents_loop_device(tmp_path, agent_factory):
    """``blobcr_connection_type = local``: stock Nova and os-brick,
    nothing patched. The agent's loop device over the mirror file
    (attach with block_device) is what os-brick's LocalConnector
    returns and what Nova's LibvirtVolumeDriver gives the guest: a block
    disk, uncached.
    """
    from os_brick.initiator import connector
    backend = local.LocalBackend(str(tmp_path / 'store'))
    agent = agent_factory(backend, {'agent': {'quiesce': 'none'},
                                    'repository': {'chunk_size': str(CHUNK)}})
    call = agent.client.call
    image = call('create_image', name='stock', size=16 * CHUNK)['id']
    attached = call('attach', image=image, block_device=True)
    device = attached['device']
    try:
        data = {'device_path': device, 'access_mode': 'rw',
                'discard': False}
        brick = connector.InitiatorConnector.factory('local', None)
        assert brick.connect_volume(data) == {'type': 'local',
                                              'path': device}
        out = nova_disks([{'driver_volume_type': 'local', 'serial': image,
                           'data': data}], kinds=('local',))
        check_block_disk(out['disks'][0], device)
    finally:
        call('detach', image=image)
