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

"""A broker laid out for ``[blobcr_bus] host_vhosts`` and
``authenticated_peers`` (rpc/bus.py), as
install.rst tells an operator to: a virtual host per agent, one the
agents share for their peer calls, a broker user per host with
permissions on those two only, and a control user (cinder-volume's,
the Nova listener's) with permissions on every agent's vhost.

Every name carries a prefix of its own, so that tests on the session's
broker never meet each other's vhosts and users.
"""

import secrets
import urllib.parse

from blobcr_common.rpc import api as rpc_api
from blobcr_common.rpc import bus

ALL = ('.*', '.*', '.*')


def caller(transport_url, vhost_format, peer_transport_url=None,
           timeout=30):
    """An AgentAPI on ``transport_url`` that reaches each agent on the
    vhost ``vhost_format`` names for its host.
    """
    from oslo_config import cfg
    bus.register(cfg.CONF)
    overrides = (('host_vhosts', True), ('host_vhost_format', vhost_format),
                 ('peer_transport_url', peer_transport_url))
    # The client reads them once, as it is made; the other tests of the
    # session keep the defaults.
    for option, value in overrides:
        cfg.CONF.set_override(option, value, group=bus.GROUP)
    try:
        return rpc_api.AgentAPI(transport_url=transport_url, timeout=timeout)
    finally:
        for option, _ in overrides:
            cfg.CONF.clear_override(option, group=bus.GROUP)


class SplitBus(object):
    """Vhosts and users on ``broker`` (a RabbitMQBroker we started)."""

    def __init__(self, broker, prefix):
        self.broker = broker
        self.prefix = prefix
        base = urllib.parse.urlsplit(broker.url)
        self._address = '%s:%d' % (base.hostname, base.port)
        self.peer_vhost = '%s-peer' % prefix
        self.vhost_format = '%s-%%(host)s' % prefix
        self.peer_user_format = '%s-%%(host)s' % prefix
        self._vhosts = []
        self._users = []
        self._add_vhost(self.peer_vhost)
        self._control_user = '%s-control' % prefix
        # Its vhost is replaced per host by the callers (bus.host_url).
        self.control_url = self._add_user(self._control_user, [])('/')

    def _add_vhost(self, vhost):
        self.broker.ctl('add_vhost', vhost)
        self._vhosts.append(vhost)

    def _add_user(self, user, vhosts, peer_permissions=None):
        password = secrets.token_hex(12)
        self.broker.ctl('add_user', user, password)
        self._users.append((user, password))
        for vhost in vhosts:
            self.broker.ctl('set_permissions', '-p', vhost, user, *ALL)
        if peer_permissions is not None:
            self.broker.ctl('set_permissions', '-p', self.peer_vhost, user,
                            *peer_permissions)
        return lambda vhost: 'rabbit://%s:%s@%s/%s' % (
            user, password, self._address, urllib.parse.quote(vhost, ''))

    def host_vhost(self, host):
        return self.vhost_format % {'host': host}

    def add_host(self, host, agent=True):
        """The agent settings of ``host`` (``{section: {option:
        value}}``): its own user on its own vhost (none without
        ``agent``: a host that only calls peers), and on the peers' one
        with the permissions of the authenticated peer side.
        """
        vhosts = []
        if agent:
            vhosts.append(self.host_vhost(host))
            self._add_vhost(vhosts[0])
            self.broker.ctl('set_permissions', '-p', vhosts[0],
                            self._control_user, *ALL)
        url = self._add_user(bus.peer_user(self.peer_user_format, host),
                             vhosts, bus.peer_permissions(host))
        settings = {'DEFAULT': {'transport_url': url(self.peer_vhost)},
                    'agent': {'host': host},
                    bus.GROUP: {'host_vhosts': 'true',
                                'host_vhost_format': self.vhost_format,
                                'peer_transport_url': url(self.peer_vhost),
                                'authenticated_peers': 'true',
                                'peer_user_format': self.peer_user_format}}
        if agent:
            settings['DEFAULT']['transport_url'] = url(vhosts[0])
        return settings

    def caller(self, transport_url, peer_transport_url=None, timeout=30):
        return caller(transport_url, self.vhost_format, peer_transport_url,
                      timeout)

    def cleanup(self):
        for vhost in self._vhosts:
            self.broker.ctl('delete_vhost', vhost)
        for user, _ in self._users:
            self.broker.ctl('delete_user', user)
