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

"""os-brick's connector for the ``BLOBCR`` protocol.

What Cinder (its generic copies, backups) and Nova's os-brick helpers
use to reach a BlobCR volume on a host: the connection's
``device_path``, the raw file on that host's agent mirror, used as it
is. os-brick maps protocols to connectors in a fixed table
(``os_brick.initiator.connector``):
devstack/patches/os-brick-blobcr-connector.patch adds this class to it
(tools/apply-connection-patches.sh applies it).
"""

import os

from os_brick import exception
from os_brick.initiator.connectors import local


class BlobCRConnector(local.LocalConnector):

    @staticmethod
    def _path(connection_properties):
        path = connection_properties.get('device_path')
        if not path:
            raise ValueError('BlobCR connection properties have no '
                             'device_path')
        return path

    def connect_volume(self, connection_properties):
        path = self._path(connection_properties)
        if not os.path.isfile(path):
            raise exception.VolumeDeviceNotFound(device=path)
        return {'type': 'file', 'path': path}

    def get_volume_paths(self, connection_properties):
        return [self._path(connection_properties)]

    def extend_volume(self, connection_properties):
        return os.path.getsize(self._path(connection_properties))
