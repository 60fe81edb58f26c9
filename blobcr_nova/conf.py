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
options, in the same file; where it asks Nova's API which host runs an
instance, ``[nova]`` (keystoneauth's options); :func:`list_opts` is the
generator's entry point for this service's own ones (``tox -e
genconfig``).
"""

from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

from blobcr_common import auth
from blobcr_nova import authority
from blobcr_nova import listener_opts

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
               help='The secret the instance tokens are signed with (a '
                    'token names the instance, the host Nova runs it on '
                    'and when it expires). It must be the [proxy] '
                    'host_secret of every blobcr-agent whose instances '
                    'this service answers for. To rotate it, set the new '
                    'secret at every agent first (the old one in their '
                    '[proxy] previous_host_secrets), then here. '
                    'Required.'),
    cfg.IntOpt('token_lifetime', default=auth.DEFAULT_LIFETIME, min=60,
               max=604800,
               help='Seconds a token is good for. The guest reads a new '
                    'one from vendordata when its own is refused; Nova\'s '
                    'metadata API keeps an answer for [api] '
                    'metadata_cache_expiration seconds (15 by default), '
                    'which must be much less than this.'),
    cfg.ListOpt('allowed_roles', default=['service'],
                help='A request is answered only if its Keystone token '
                     'carries one of these roles and is of one of '
                     'allowed_users.'),
    cfg.ListOpt('allowed_users', default=['nova'],
                help='Who may fetch tokens: Nova\'s [vendordata_dynamic_'
                     'auth] user, by its id or by its name in '
                     'allowed_user_domain. Nova sends the instance with '
                     'its own service token, never the user\'s, so the '
                     'instance\'s project cannot be checked against the '
                     'caller: only the caller\'s identity can. A role '
                     'alone let any service account of the cloud (every '
                     'one has "service") fetch any instance\'s token. At '
                     'least one.'),
    cfg.StrOpt('allowed_user_domain', default='Default',
               help='The domain (name or id) whose users the names in '
                    'allowed_users are: a user of the same name in '
                    'another domain, which that domain\'s admin may '
                    'create, is refused.'),
    cfg.IntOpt('max_body', default=262144, min=1024, max=16777216,
               help='Largest request accepted, in bytes (Nova sends the '
                    'instance\'s user data and metadata along).'),
]


nova_group = cfg.OptGroup(
    authority.NOVA_GROUP, title='Nova\'s API',
    help='The Keystone credentials blobcr-vendordata asks Nova which host '
         'runs an instance with (keystoneauth\'s options; '
         'OS-EXT-SRV-ATTR:host of GET /servers/{id}, which Nova shows an '
         'admin only, such as Nova\'s own service user), and where '
         'Nova\'s API is. Required: a token is made for that host.')


def _nova_opts():
    # Nova waits [api] vendordata_dynamic_read_timeout (5 s) for the
    # whole answer: Nova's API must answer well within it.
    return listener_opts._copies(ks_loading.get_session_conf_options(),
                                 timeout=3) + \
        listener_opts._adapter_opts('compute')


def register_opts(conf):
    conf.register_group(vendordata_group)
    conf.register_opts(vendordata_opts, group=vendordata_group)
    conf.register_group(nova_group)
    conf.register_opts(_nova_opts(), group=nova_group)
    ks_loading.register_auth_conf_options(conf, nova_group.name)


def list_opts():
    """Entry point for oslo-config-generator."""
    return [(vendordata_group, vendordata_opts),
            (nova_group, _nova_opts() +
             ks_loading.get_auth_common_conf_options() +
             ks_loading.get_auth_plugin_conf_options('password'))]
