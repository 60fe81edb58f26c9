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

"""oslo.config options of ``blobcr-nova-listener``, the listener of
Nova's versioned notifications (see doc/source/nova.rst,
"Notifications").

The broker settings are oslo.messaging's own options in the same file:
``[DEFAULT] transport_url`` (the agents' RPC, and the notifications
unless ``[oslo_messaging_notifications] transport_url`` names another
broker, as in nova.conf). :func:`list_opts` is the generator's entry
point for this service's own ones (namespace ``blobcr_nova.listener``),
with keystoneauth's in ``[nova]`` and ``[cinder]``: the credentials and
endpoints of the APIs the listener asks before it acts
(blobcr_nova/authority.py).
"""

import copy

from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

from blobcr_nova import authority

listener_group = cfg.OptGroup(
    'listener', title='Nova notification listener',
    help='Listens to Nova\'s versioned notifications and asks the '
         'blobcr-agents of the hosts involved to release, keep or move '
         'the mirrors of the instances\' images.')

listener_opts = [
    cfg.ListOpt('topics', default=['versioned_notifications'],
                help='Notification topics to listen on: Nova\'s '
                     '[notifications] versioned_notifications_topics '
                     '(Nova\'s [notifications] notification_format must '
                     'be "versioned" or "both").'),
    cfg.StrOpt('exchange', default='nova',
               help='The exchange Nova publishes its notifications on '
                    '(its [DEFAULT] control_exchange).'),
    cfg.StrOpt('pool', default='blobcr-nova-listener',
               help='Listener pool: listeners of one pool share the '
                    'notifications (each is handled by one of them), '
                    'as several blobcr-nova-listener processes should; '
                    'another pool gets its own copy, so that the '
                    'listener does not take notifications away from '
                    'other consumers of the topic. Empty: no pool (the '
                    'listener competes with every other plain consumer '
                    'of the topic).'),
    cfg.IntOpt('agent_timeout', default=30, min=1,
               help='Seconds an agent call (status, attach, detach, '
                    'starting a checkpoint) waits for the agent\'s '
                    'answer. An agent that does not answer is logged as '
                    'an error and the event is not handled on that host; '
                    'the listener goes on with the next notification.'),
    cfg.IntOpt('persist_timeout', default=600, min=1,
               help='Seconds to wait for a checkpoint taken by the '
                    'listener to be persisted (stable) before the mirror '
                    'is detached or moved.'),
    cfg.StrOpt('release_label', default='nova-release',
               help='Label (Version.made_by) of the version the listener '
                    'commits before it detaches what an instance left '
                    'on a host (delete, shelve offload, volume detach): '
                    'the instance\'s last writes, not a checkpoint of '
                    'the guest\'s.'),
    cfg.StrOpt('migrate_label', default='migrate',
               help='Label of the versions the source host commits for a '
                    'live migration, resize or cold migration, the '
                    'version the destination host attaches.'),
    cfg.IntOpt('migration_ttl', default=86400, min=60,
               help='Seconds a migration seen starting (live_migration_pre, '
                    'resize_prep) is remembered while its end is not '
                    'seen.'),
    cfg.IntOpt('max_migrations', default=1024, min=1,
               help='Most migrations remembered at once (started, their '
                    'end not seen yet): past it the one that started '
                    'first is forgotten, with a warning (its end then '
                    'moves nothing).'),
    cfg.IntOpt('max_agent_hosts', default=256, min=1,
               help='With [blobcr_bus] host_vhosts, the listener keeps a '
                    'broker connection to each agent host\'s virtual host '
                    'it called; at most this many (the least recently '
                    'used one is closed once no call uses it).'),
]

nova_group = cfg.OptGroup(
    authority.NOVA_GROUP, title='Nova\'s API',
    help='The Keystone credentials the listener asks Nova and Cinder with '
         '(keystoneauth\'s options; an admin, such as Nova\'s own service '
         'user: it reads any server, its migrations and volumes) and '
         'where Nova\'s API is. Required: the listener acts on a '
         'notification only once Nova (and Cinder, for volumes) confirms '
         'it (doc/source/nova.rst, "Notifications").')

cinder_group = cfg.OptGroup(
    authority.CINDER_GROUP, title='Cinder\'s API',
    help='Where Cinder\'s API is; the listener asks it with the [nova] '
         'credentials.')


def _copies(opts, **defaults):
    """Copies of keystoneauth's ``opts`` with other defaults (by dest)."""
    opts = copy.deepcopy(opts)
    for opt in opts:
        if opt.dest in defaults:
            opt.default = defaults[opt.dest]
    return opts


def _adapter_opts(service_type):
    return _copies(ks_loading.get_adapter_conf_options(
        include_deprecated=False), service_type=service_type,
        valid_interfaces=['internal', 'public'])


def _session_opts():
    # Each GET of the listener waits this long at most.
    return _copies(ks_loading.get_session_conf_options(), timeout=30)


def register_opts(conf):
    conf.register_group(listener_group)
    conf.register_opts(listener_opts, group=listener_group)
    conf.register_group(nova_group)
    conf.register_opts(_session_opts() + _adapter_opts('compute'),
                       group=nova_group)
    ks_loading.register_auth_conf_options(conf, nova_group.name)
    conf.register_group(cinder_group)
    conf.register_opts(_adapter_opts('block-storage'), group=cinder_group)


def list_opts():
    """Entry point for oslo-config-generator."""
    return [(listener_group, listener_opts),
            (nova_group, _session_opts() + _adapter_opts('compute') +
             ks_loading.get_auth_common_conf_options() +
             ks_loading.get_auth_plugin_conf_options('password')),
            (cinder_group, _adapter_opts('block-storage'))]
