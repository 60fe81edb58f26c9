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
point for this service's own ones (namespace ``blobcr_nova.listener``).
"""

from oslo_config import cfg

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
]


def register_opts(conf):
    conf.register_group(listener_group)
    conf.register_opts(listener_opts, group=listener_group)


def list_opts():
    """Entry point for oslo-config-generator."""
    return [(listener_group, listener_opts)]
