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

"""Image <-> volume copies of the Cinder driver on real services: Glance
(file store), Keystone, Cinder and real blobcr-agents on the local store
and on the micro Ceph cluster.  The ``openstack`` CLI does what a user
does: upload images, make volumes from them, upload volumes to Glance,
download images.

What runs: copy_image_to_volume has Cinder's image_utils fetch the image
and convert it with qemu-img (not as root) into the backend's exchange
directory, then the agent beside cinder-volume imports that raw file as a
new version of the volume's image (import_file RPC); copy_volume_to_image
has that agent export the newest stable version to the exchange
directory (export RPC) and image_utils upload it (qemu-img again for
other formats).  No dd, no root: the tests check that the data went
through the agent (a version made by ``import``) and that cinder-volume
ran no rootwrap command.
"""

import random
import subprocess

import pytest

from blobcr_common.rpc import api as rpc_api
from blobcr_lab.nova_attach import Attachment
from blobcr_lab.nova_attach import size_of
from blobcr_lab.nova_attach import write_at
from blobcr_lab import openstack as openstack_stack

GiB = 1 << 30
MiB = 1 << 20
# Not a multiple of a chunk nor of a MiB: the image's tail is checked too.
PATTERN_SIZE = 3 * MiB + 5000
PIECE = 16 << 20
# The format of the upload of a volume, by backend: raw (the exported file
# as it is) and qcow2 (converted by qemu-img in cinder-volume; a few MiB
# to send, store and download instead of a GiB).
UPLOAD_FORMAT = {'local': 'raw', 'rados': 'qcow2'}


def pattern(seed, size=PATTERN_SIZE):
    return random.Random(seed).randbytes(size)


def read_file(path, offset=0, length=None):
    with open(path, 'rb') as f:
        f.seek(offset)
        return f.read() if length is None else f.read(length)


def tail_is_zero(path, start):
    with open(path, 'rb') as f:
        f.seek(start)
        while True:
            piece = f.read(PIECE)
            if not piece:
                return True
            if any(piece):
                return False


def same_as(path, head, size):
    """``path`` is ``head`` then zeros, ``size`` bytes in all (compared
    byte for byte, read in pieces).
    """
    if size_of(path) != size:
        return False
    with open(path, 'rb') as f:
        if f.read(len(head)) != head:
            return False
    return tail_is_zero(path, len(head))


def qemu_img(*args):
    subprocess.run(['qemu-img'] + [str(a) for a in args], check=True,
                   capture_output=True, stdin=subprocess.DEVNULL)


@pytest.fixture(scope='module')
def images(openstack_cloud, tmp_path_factory):
    """Glance images, uploaded once with the CLI as the demo user:
    ``raw`` and ``qcow2`` (both the pattern of seed 1, the qcow2 made by
    qemu-img from the raw file) and ``too-big`` (a qcow2 of 2 GiB,
    virtual, holding the pattern: a few MiB to upload) and
    ``mislabelled``, the same file uploaded as raw.
    """
    stack = openstack_cloud
    work = tmp_path_factory.mktemp('images')
    raw = work / 'pattern.raw'
    raw.write_bytes(pattern(1))
    qcow2 = work / 'pattern.qcow2'
    qemu_img('convert', '-f', 'raw', '-O', 'qcow2', raw, qcow2)
    big = work / 'big.qcow2'
    qemu_img('convert', '-f', 'raw', '-O', 'qcow2', raw, big)
    qemu_img('resize', '-f', 'qcow2', big, 2 * GiB)
    made = {}
    for name, path, disk_format in (('raw', raw, 'raw'),
                                    ('qcow2', qcow2, 'qcow2'),
                                    ('too-big', big, 'qcow2'),
                                    ('mislabelled', big, 'raw')):
        image = stack.openstack('image', 'create', '--disk-format',
                                disk_format, '--container-format', 'bare',
                                '--file', path, 'blobcr-test-%s' % name)
        assert image['status'] == 'active', image
        made[name] = image['id']
    yield made
    for image_id in made.values():
        stack.openstack('image', 'delete', image_id, json=False)


@pytest.fixture(params=['local', 'rados'])
def cloud(request, openstack_cloud, cinder_hosts):
    """(stack, the backend's hosts) for one backend."""
    return openstack_cloud, cinder_hosts[request.param]


@pytest.fixture
def agent(rabbitmq_url):
    api = rpc_api.AgentAPI(transport_url=rabbitmq_url, timeout=60)
    yield api
    api.cleanup()


def create_volume(stack, hosts, name, *args, status='available'):
    made = stack.openstack('volume', 'create', '--type', hosts.volume_type,
                           '--size', '1', *args, name)
    return stack.wait_status('volume', made['id'], status, timeout=180)


def delete_volume(stack, volume_id):
    stack.openstack('volume', 'delete', volume_id, json=False)
    stack.wait_status('volume', volume_id, 'deleted', timeout=120)


def versions_of(agent, hosts, volume_id):
    return agent.list_versions(hosts.storage,
                               'volume-%s' % volume_id)['versions']


def no_root_copy(stack):
    """cinder-volume logged no command run through cinder-rootwrap (the
    copies of os-brick and of Cinder's default driver methods run dd as
    root through it) and no dd.  Commands that succeed are logged at
    debug only: the versions checked in the tests say more (an imported
    one, none from an attach).  (Cinder's format inspection runs in its
    privsep daemon, which oslo.privsep logs as "via rootwrap" whatever
    its helper command: the stack's is the venv's privsep-helper.)
    """
    text = stack.log('cinder-volume', 100000)
    return 'cinder-rootwrap' not in text and 'dd if=' not in text


@pytest.mark.parametrize('disk_format', ['raw', 'qcow2'])
def test_volume_from_image(cloud, images, agent, disk_format):
    stack, hosts = cloud
    vol = create_volume(stack, hosts, 'from-%s' % disk_format,
                        '--image', images[disk_format])
    assert vol['bootable'] == 'true'
    # The data came in through the agent: one version made by import.
    made_by = [v['made_by'] for v in versions_of(agent, hosts, vol['id'])
               if v['state'] == 'stable']
    assert made_by.count('import') == 1, made_by

    att = Attachment(stack, vol['id'], hosts.compute[0])
    try:
        assert same_as(att.path, pattern(1), GiB)
    finally:
        att.detach()
    stack.wait_status('volume', vol['id'], 'available')
    delete_volume(stack, vol['id'])
    assert no_root_copy(stack)


def test_volume_to_image_and_back(cloud, images, agent, tmp_path):
    stack, hosts = cloud
    vol = create_volume(stack, hosts, 'to-image', '--image', images['raw'])
    written = pattern(2, 2 * MiB)
    offset = 5 * MiB + 512
    att = Attachment(stack, vol['id'], hosts.compute[0])
    try:
        write_at(att.path, offset, written)
    finally:
        att.detach()
    stack.wait_status('volume', vol['id'], 'available')
    expected = pattern(1) + bytes(offset - PATTERN_SIZE) + written
    before = versions_of(agent, hosts, vol['id'])

    disk_format = UPLOAD_FORMAT[hosts.kind]
    uploaded = stack.openstack('image', 'create', '--volume', vol['id'],
                               '--disk-format', disk_format,
                               'upload-%s' % hosts.volume_type)
    image_id = uploaded.get('image_id') or uploaded['id']
    try:
        # The volume is 'uploading' until Cinder has sent the image.
        stack.wait_status('volume', vol['id'], 'available', timeout=300)
        shown = stack.openstack('image', 'show', image_id)
        assert shown['status'] == 'active', shown
        assert shown['disk_format'] == disk_format, shown
        if disk_format == 'raw':
            assert shown['size'] == GiB, shown
        else:
            assert shown['size'] < 64 * MiB, shown
        # Exported by the agent, never attached (Cinder's own upload
        # attaches the volume and dd's it; a detach would checkpoint).
        assert versions_of(agent, hosts, vol['id']) == before
        out = tmp_path / 'download'
        stack.openstack('image', 'save', '--file', out, image_id,
                        json=False, timeout=300)
        if disk_format != 'raw':
            qemu_img('convert', '-f', disk_format, '-O', 'raw', out,
                     tmp_path / 'download.raw')
            out.unlink()
            out = tmp_path / 'download.raw'
        assert same_as(str(out), expected, GiB)
        out.unlink()

        # And back: a volume from the uploaded image has the same bytes.
        copy = create_volume(stack, hosts, 'from-upload', '--image',
                             image_id)
        att = Attachment(stack, copy['id'], hosts.compute[1])
        try:
            assert same_as(att.path, expected, GiB)
        finally:
            att.detach()
        stack.wait_status('volume', copy['id'], 'available')
        delete_volume(stack, copy['id'])
    finally:
        stack.openstack('image', 'delete', image_id, json=False)
    delete_volume(stack, vol['id'])
    assert no_root_copy(stack)


def test_image_bigger_than_volume(cloud, images, agent):
    stack, hosts = cloud
    # Glance recorded the qcow2's virtual size (2 GiB): cinder-api
    # refuses the 1 GiB volume at once, with the reason, and makes none.
    name = 'too-small-%s' % hosts.volume_type
    with pytest.raises(openstack_stack.StackError) as failed:
        create_volume(stack, hosts, name, '--image', images['too-big'])
    assert ("Image virtual size is 2GB and doesn't fit in a volume of "
            "size 1GB") in str(failed.value), failed.value
    assert stack.openstack('volume', 'list', '--name', name) == []


def test_image_bigger_than_volume_past_the_api(cloud, images, agent):
    """The same 2 GiB qcow2 uploaded as raw: Glance's record (a raw image
    of a few MiB) passes the API; cinder-volume inspects the download and
    refuses it before the driver imports any of it (before it makes the
    volume's BlobCR image, in cinder 29).
    """
    stack, hosts = cloud
    name = 'mislabelled-%s' % hosts.volume_type
    with pytest.raises(openstack_stack.StackError) as failed:
        create_volume(stack, hosts, name, '--image', images['mislabelled'])
    assert ' is error ' in str(failed.value), failed.value
    volumes = stack.openstack('volume', 'list', '--name', name)
    assert len(volumes) == 1
    volume_id = volumes[0]['ID']
    log = stack.log('cinder-volume', 2000)
    assert ("Image virtual size is 2GB and doesn't fit in a volume of "
            "size 1GB") in log, log
    # Nothing half-written: no BlobCR image of the volume has an
    # imported version (none exists, if refused before create_volume).
    images_of_volume = [i for i in agent.list_images(hosts.storage)
                        if i['name'] == 'volume-%s' % volume_id]
    assert not [v for i in images_of_volume for v in i['versions']
                if v['made_by'] == 'import'], images_of_volume
    delete_volume(stack, volume_id)
    assert no_root_copy(stack)


def test_attached_volume_uploads_its_live_checkpoint(openstack_cloud,
                                                     cinder_hosts, agent,
                                                     tmp_path):
    """``openstack image create --volume V --force`` of a volume in use:
    the driver takes a live checkpoint on the compute host and uploads
    that version (Cinder's own default would attach the volume a second
    time, which a BlobCR volume refuses). The image holds what the
    "guest" had written; the volume stays in use, and keeps its later
    writes after the detach.
    """
    stack, hosts = openstack_cloud, cinder_hosts['local']
    vol = create_volume(stack, hosts, 'upload-in-use')
    first, later = pattern(3, MiB), pattern(4, MiB)
    offset = 7 * MiB + 4096
    att = Attachment(stack, vol['id'], hosts.compute[0])
    image_id = None
    try:
        write_at(att.path, offset, first)
        # Stable versions only: an attached image has its next version
        # reserved ahead (pending) already.
        before = {v['version'] for v in versions_of(agent, hosts, vol['id'])
                  if v['state'] == 'stable'}
        uploaded = stack.openstack('image', 'create', '--volume', vol['id'],
                                   '--force', '--disk-format', 'qcow2',
                                   'upload-in-use')
        image_id = uploaded.get('image_id') or uploaded['id']
        stack.wait_status('volume', vol['id'], 'in-use', timeout=300)
        shown = stack.openstack('image', 'show', image_id)
        assert shown['status'] == 'active', shown
        taken = [v for v in versions_of(agent, hosts, vol['id'])
                 if v['state'] == 'stable' and v['version'] not in before]
        assert [v['made_by'] for v in taken] == ['cinder'], taken
        write_at(att.path, offset, later)
        out = tmp_path / 'download.qcow2'
        stack.openstack('image', 'save', '--file', out, image_id,
                        json=False, timeout=300)
        qemu_img('convert', '-f', 'qcow2', '-O', 'raw', out,
                 tmp_path / 'download.raw')
        assert same_as(str(tmp_path / 'download.raw'),
                       bytes(offset) + first, GiB)
    finally:
        att.detach()
        if image_id:
            stack.openstack('image', 'delete', image_id, json=False)
    stack.wait_status('volume', vol['id'], 'available')
    again = Attachment(stack, vol['id'], hosts.compute[1])
    try:
        assert read_file(again.path, offset, MiB) == later
    finally:
        again.detach()
    stack.wait_status('volume', vol['id'], 'available')
    delete_volume(stack, vol['id'])
