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

"""oslo.config options of ``blobcr-vendordata``, the Nova vendordata
service (see doc/source/nova.rst).

Its Keystone checks are keystonemiddleware's ``[keystone_authtoken]``
options, in the same file; :func:`list_opts` is the generator's entry
point for this service's own ones (``tox -e genconfig``).
"""

from oslo_config import cfg

vendordata_group = cfg.OptGroup(
    'vendordata', title='Nova vendordata service',
    help='The DynamicJSON target Nova asks, for each instance, for the '
         'credentials of the BlobCR guest checkpoint endpoint.')

vendordata_opts = [
    cfg.HostAddressOpt('listen', default='127.0.0.1',
                       help='Address blobcr-vendordata serves on (Nova\'s '
                            'metadata API must reach it).'),
    cfg.PortOpt('port', default=8790,
                help='TCP port blobcr-vendordata serves on.'),
    cfg.StrOpt('endpoint_url', default='http://169.254.169.254',
               help='The URL of the guest checkpoint endpoint handed to '
                    'every instance (the "endpoint" of its credentials). '
                    'The default is the metadata address: the network of '
                    'each compute host forwards the guest\'s requests for '
                    '/v1/ to that host\'s blobcr-agent (see '
                    'doc/source/nova.rst).'),
    cfg.StrOpt('token_secret', secret=True,
               help='The secret the instance tokens are made with: '
                    'HMAC-SHA256(token_secret, instance id). It must be '
                    'the [proxy] host_secret of every blobcr-agent whose '
                    'instances this service answers for. Required.'),
    cfg.ListOpt('allowed_roles', default=['service'],
                help='A request is answered only if its Keystone token '
                     'carries one of these roles (Nova\'s '
                     '[vendordata_dynamic_auth] user has "service"): '
                     'any other user of the cloud would otherwise get '
                     'the token of any instance.'),
    cfg.IntOpt('max_body', default=262144, min=1024, max=16777216,
               help='Largest request accepted, in bytes (Nova sends the '
                    'instance\'s user data and metadata along).'),
]


def register_opts(conf):
    conf.register_group(vendordata_group)
    conf.register_opts(vendordata_opts, group=vendordata_group)


def list_opts():
    """Entry point for oslo-config-generator."""
    return [(vendordata_group, vendordata_opts)]
