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

"""Permissions of the panel and its actions, those of Horizon's Volumes
and Snapshots panels for the same Cinder calls.
"""

# The catalog types Horizon's Volumes panel accepts for Cinder.
VOLUME_SERVICE = (('openstack.services.block-storage',
                   'openstack.services.block-store',
                   'openstack.services.volume',
                   'openstack.services.volumev3'),)
LIST = (('volume', 'volume:get_all'),)
TAKE = (('volume', 'volume:create_snapshot'),)
CREATE_VOLUME = (('volume', 'volume:create'),)
REVERT = (('volume', 'volume:revert_to_snapshot'),)
DELETE = (('volume', 'volume:delete_snapshot'),)
# A restart creates volumes (and boots servers, which Nova checks).
RESTART = (('volume', 'volume:create'),)
