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

"""Nova's libvirt volume driver for ``driver_volume_type = 'blobcr'``.

A BlobCR volume is a raw file on the compute host's agent mirror (a
FUSE mount): Cinder's initialize_connection has already had that agent
attach the image when Nova connects, and terminate_connection detaches
it. Nothing to mount or log in to: the disk is ``<disk type='file'>``
on the connection's ``device_path``, raw, with the cache, QoS, access
mode and discard settings Nova's base driver derives.

Nova maps connection types to drivers in
``nova.virt.libvirt.driver.VOLUME_DRIVERS``, a fixed table:
devstack/patches/nova-blobcr-volume-driver.patch adds this class to it
(tools/apply-connection-patches.sh applies it).
"""

import os

from nova import exception
from nova.virt.libvirt.volume import volume as libvirt_volume


def device_path(connection_info):
    return connection_info['data']['device_path']


class LibvirtBlobCRVolumeDriver(libvirt_volume.LibvirtBaseVolumeDriver):

    def __init__(self, host):
        super().__init__(host, is_block_dev=False)

    def connect_volume(self, connection_info, instance):
        # The agent made the file before Cinder answered; a path that is
        # not there is a mirror gone (agent restarted, unmounted): say so
        # here rather than as a QEMU open error in the domain start.
        path = device_path(connection_info)
        if not os.path.isfile(path):
            raise exception.VolumeNotFound(
                volume_id='%s (no BlobCR mirror file at %s: is blobcr-agent '
                          'running on this host?)'
                % (connection_info.get('serial'), path))

    def get_config(self, connection_info, disk_info):
        conf = super().get_config(connection_info, disk_info)
        conf.source_type = 'file'
        conf.source_path = device_path(connection_info)
        return conf

    def extend_volume(self, connection_info, instance, requested_size):
        # The mirror file has the volume's size once Cinder extended it.
        return os.path.getsize(device_path(connection_info))
