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

"""Where on the broker each agent is reached: the control side and the
peer side of the RPC API.

The **control side** (topic ``blobcr-agent``) is every call the driver,
the storage host, the Nova listener, the sync and vendordata services
make. The **peer side** (topic ``blobcr-agent-peer``) is what agents
ask each other: a live migration's handoff and its preparation, and
restart hints.

With ``[blobcr_bus] host_vhosts``, each agent's control queues live in
a RabbitMQ virtual host of that agent's own (``host_vhost_format``):
callers reach host H with their own credentials on H's vhost, and a
compute host's broker user has permissions on its own vhost only. A
vhost is RabbitMQ's unit of isolation: a user without permissions there
cannot even open a connection to it. Permissions inside one vhost
cannot do that job, since an RPC server must answer calls through the
default exchange, and a user allowed to publish there can publish into
any queue of that vhost by name. Agents meet on the peer side, on
``peer_transport_url`` (a vhost they share): a compromised host can
reach its peers' handoff and hints there, and nothing else.
"""

from oslo_config import cfg
import oslo_messaging as messaging

GROUP = 'blobcr_bus'

opts = [
    cfg.BoolOpt('host_vhosts', default=False,
                help='Each agent serves its control RPC (every call but '
                     'the agents\' own handoff and hints) in a broker '
                     'virtual host of its own, named by host_vhost_format. '
                     'On an agent, [DEFAULT] transport_url names that '
                     'vhost with the host\'s own broker user; a caller '
                     '(cinder-volume, the Nova listener, the sync and '
                     'vendordata services) reaches host H on the vhost of '
                     'H with its own credentials. Set it on the agents and '
                     'on every caller together.'),
    cfg.StrOpt('host_vhost_format', default='blobcr-%(host)s',
               help='The virtual host of the agent of host %(host)s when '
                    'host_vhosts is set.'),
    cfg.StrOpt('peer_transport_url', secret=True,
               help='The bus on which agents call each other (live '
                    'migration handoff, restart hints), with this host\'s '
                    'broker user; unset: [DEFAULT] transport_url. With '
                    'host_vhosts, a vhost all agents share, so that no '
                    'agent needs another agent\'s control vhost.'),
]


def register(conf):
    conf.register_opts(opts, group=GROUP)
    return conf[GROUP]


def list_opts():
    return [(GROUP, opts)]


def host_vhost_format(conf):
    """The vhost format of the agents' control side, None without
    host_vhosts.
    """
    settings = register(conf)
    return settings.host_vhost_format if settings.host_vhosts else None


def host_url(conf, url, vhost_format, host):
    """``url`` (None: [DEFAULT] transport_url) on the virtual host of
    ``host``'s agent.
    """
    parsed = messaging.TransportURL.parse(conf, url)
    parsed.virtual_host = vhost_format % {'host': host}
    return str(parsed)


def peer_url(conf, url=None):
    """The transport URL agents call each other on."""
    return register(conf).peer_transport_url or url
