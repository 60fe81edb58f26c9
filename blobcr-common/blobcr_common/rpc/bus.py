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

With ``authenticated_peers``, the peer side is no oslo.messaging RPC
but the agent's own request/reply over that vhost (the agent's
rpc/peer_bus.py): every message carries AMQP's ``user_id``, which
RabbitMQ checks against the user that published it, and each host's
broker user (``peer_user_format``) may read and declare its own two
queues only and publish only through the default exchange
(:func:`peer_permissions`). A callee thus knows which host called and
acts only for the host the call is about: the destination of a
handoff, the source of hints.
"""

import re

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
    cfg.BoolOpt('authenticated_peers', default=False,
                help='Agents call each other through their own request/'
                     'reply on peer_transport_url, each message carrying '
                     'the RabbitMQ user that published it (AMQP user_id, '
                     'checked by the broker), and serve a handoff only to '
                     'its destination host and hints only from their '
                     'source host. Needs a broker user per host named by '
                     'peer_user_format, with the permissions install.rst '
                     'gives on the peer vhost. Set it on every agent '
                     'together, once all run this release.'),
    cfg.IntOpt('max_host_transports', default=64, min=1,
               help='With host_vhosts, a caller (cinder-volume, the Nova '
                    'listener) keeps a broker transport to each agent '
                    'host\'s virtual host it called (an AMQP '
                    'connection belongs to one vhost; a transport holds '
                    'two once called: one it sends on, one the answers '
                    'come back on); at most this many: past it the least '
                    'recently used one is closed once no call uses it. '
                    'The Nova listener\'s bound is [listener] '
                    'max_agent_hosts.'),
    cfg.IntOpt('host_transport_idle_timeout', default=300, min=0,
               help='With host_vhosts, seconds after which a caller closes '
                    'its transport to an agent host\'s virtual host that '
                    'no call used since (the next call to that host opens '
                    'it again); 0: kept until max_host_transports closes '
                    'it.'),
    cfg.StrOpt('peer_user_format', default='blobcr-%(host)s',
               help='The broker user of the agent of host %(host)s on the '
                    'peer vhost, with authenticated_peers: how a callee '
                    'tells the calling host from the user_id RabbitMQ '
                    'checked.'),
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


# Queues of the authenticated peer side: a host's requests, and the
# answers to its own calls (a prefix of their own: no host name can make
# one host's reply queue another's request queue).
PEER_QUEUE_PREFIX = 'blobcr-peer.'
REPLY_QUEUE_PREFIX = 'blobcr-peer-reply.'
# Host names the peer side accepts: a DNS name's characters, so that the
# permission patterns need no escape beyond dots and dashes.
HOST_NAME = re.compile(r'[A-Za-z0-9][A-Za-z0-9._-]{0,254}')


def peer_queue(host):
    return PEER_QUEUE_PREFIX + host


def reply_queue(host):
    return REPLY_QUEUE_PREFIX + host


def peer_user(user_format, host):
    """The broker user of ``host``'s agent on the peer vhost."""
    return user_format % {'host': host}


def peer_host(user_format, user):
    """The host whose broker user is ``user``; None for a user the
    format does not name (or none at all).
    """
    if not isinstance(user, str):
        return None
    prefix, marker, suffix = user_format.partition('%(host)s')
    if not marker or not user.startswith(prefix) or not user.endswith(suffix):
        return None
    host = user[len(prefix):len(user) - len(suffix)]
    return host if HOST_NAME.fullmatch(host) else None


def peer_permissions(host):
    """RabbitMQ's (configure, write, read) patterns for ``host``'s user on
    the peer vhost: declare and read its own two queues, publish through
    the default exchange only (into any queue by name: the callee checks
    the user_id the broker stamped).
    """
    if not isinstance(host, str) or not HOST_NAME.fullmatch(host):
        raise ValueError('%r is no host name the peer side takes (letters, '
                         'digits, dots, dashes, underscores)' % (host,))
    own = r'^blobcr\-peer(\-reply)?\.%s$' % re.escape(host)
    return own, r'^amq\.default$', own
