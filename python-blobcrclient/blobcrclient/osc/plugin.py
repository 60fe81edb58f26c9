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

"""OpenStackClient plugin: ``openstack blobcr checkpoint ...``.

The chain of a volume comes from Cinder's API alone (its snapshots, the
metadata the BlobCR driver records on them, and the volumes made from
them), so any user who can list their volumes can draw it.
"""

from osc_lib import exceptions
from osc_lib import utils

API_NAME = 'blobcr'
API_VERSION_OPTION = 'os_blobcr_api_version'
API_VERSIONS = {'1': 'blobcrclient.osc.plugin'}
DEFAULT_API_VERSION = '1'


def make_client(instance):
    """The block-storage client of the session (openstacksdk)."""
    version = instance._api_version.get(API_NAME, DEFAULT_API_VERSION)
    if version not in API_VERSIONS:
        raise exceptions.UnsupportedVersion(
            'BlobCR API version %s is not supported (supported: %s)'
            % (version, ', '.join(sorted(API_VERSIONS))))
    return instance.sdk_connection.block_storage


def build_option_parser(parser):
    parser.add_argument(
        '--os-blobcr-api-version', metavar='<blobcr-api-version>',
        default=utils.env('OS_BLOBCR_API_VERSION',
                          default=DEFAULT_API_VERSION),
        help='BlobCR API version, default=%s (Env: OS_BLOBCR_API_VERSION)'
        % DEFAULT_API_VERSION)
    return parser
