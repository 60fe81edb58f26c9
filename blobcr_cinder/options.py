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

"""Options of a BlobCR backend section in cinder.conf."""

from oslo_config import cfg

from blobcr_common import rpc

QUIESCE_MODES = tuple(mode for mode, _ in rpc.QUIESCE_CHOICES)

blobcr_opts = [
    cfg.StrOpt('blobcr_agent_host',
               help='Host name ([agent] host) of the blobcr-agent that '
                    'serves the operations on detached volumes (create, '
                    'delete, extend, snapshot, revert, image copies, '
                    'capacity). Unset: the host of this cinder-volume '
                    'service, which normally runs an agent beside it.'),
    cfg.StrOpt('blobcr_default_quiesce', choices=rpc.QUIESCE_CHOICES,
               help='How an attached volume\'s guest is held still while a '
                    'snapshot is taken, unless its volume type says '
                    '(extra spec blobcr:quiesce). Unset: the agent\'s '
                    '[agent] quiesce, which falls back to none when no '
                    'domain uses the volume.'),
    cfg.StrOpt('blobcr_connection_type', default='local',
               choices=[('local', 'stock Nova and os-brick, nothing '
                         'patched: the agent sets up a loop device over '
                         'the mirror file (direct I/O) and Nova opens it as '
                         'a block device'),
                        ('blobcr', 'BlobCR\'s own file type, kept for '
                         'clouds that used it: Nova and os-brick must be '
                         'edited by tools/apply-connection-patches.sh, '
                         'which their next upgrade undoes'),
                        ('gpfs', 'unpatched Nova and os-brick open the '
                         'mirror file itself through their GPFS drivers '
                         '(a file disk: libvirt refuses to live-migrate '
                         'it)')],
               help='driver_volume_type of the connections this backend '
                    'hands out. Every connection is the compute host\'s '
                    'agent mirror of the volume: its raw file, or with '
                    '"local" a loop device over it; the type picks the '
                    'Nova and os-brick code that opens it.'),
    cfg.IntOpt('blobcr_rpc_timeout', default=60, min=1,
               help='Seconds to wait for an agent\'s answer before the '
                    'operation fails as "agent does not answer".'),
    cfg.StrOpt('blobcr_transport_url', secret=True,
               help='The message bus of the BlobCR agents (oslo.messaging '
                    'transport URL, e.g. a RabbitMQ virtual host of '
                    'BlobCR\'s own with a user of its own). Unset: '
                    'cinder-volume\'s own transport_url, which puts the '
                    'agents on Cinder\'s bus and gives every compute '
                    'host Cinder\'s broker credentials.'),
    cfg.IntOpt('blobcr_agent_start_timeout', default=600, min=0,
               help='Seconds cinder-volume waits at its start for the '
                    'storage agent (blobcr_agent_host) to answer, asking '
                    'again every few seconds, before the backend is left '
                    'uninitialized. A cinder-volume started before its '
                    'agent (services started in any order at a boot) '
                    'thus initializes once the agent answers.'),
    cfg.IntOpt('blobcr_alive_probe_timeout', default=10, min=1,
               help='Seconds a detach first waits for the host\'s agent '
                    'to answer a status probe: a live agent answers in '
                    'milliseconds, and a dead one must not eat Cinder\'s '
                    'RPC timeout before the answer is known.'),
    cfg.IntOpt('blobcr_retry_probe_timeout', default=25, min=1,
               help='Seconds more a detach gives an agent that missed the '
                    'first probe and whose host is not known down (it may '
                    'be restarting) before the detach fails, nothing '
                    'lost. The two probes together must fit in Cinder\'s '
                    'rpc_response_timeout (60 s by default).'),
    cfg.IntOpt('blobcr_snapshot_timeout', default=1800, min=1,
               help='Seconds a snapshot may take to be persisted (its '
                    'version to turn stable) before it goes to error.'),
    cfg.StrOpt('blobcr_exchange_dir', default='/var/lib/blobcr/exports',
               help='Directory shared with the agent of blobcr_agent_host '
                    '(its [agent] export_dir) through which Glance images '
                    'are copied to and from volumes.'),
]

SYNC_GROUP = 'blobcr_sync'

sync_opts = [
    cfg.ListOpt('backends', default=[],
                help='The BlobCR cinder-volume services (host@backend, as '
                     '"openstack volume service list" names them) whose '
                     'guest checkpoints become Cinder snapshots.'),
    cfg.IntOpt('interval', default=10, min=1,
               help='Seconds between two rounds.'),
    cfg.IntOpt('max_per_round', default=50, min=1,
               help='Registrations a round makes at most, taken in turn '
                    'from each project, and within a project from each '
                    'volume, oldest version first; the next round starts '
                    'with the project after the last one served. A guest '
                    'checkpointing faster than rounds register cannot '
                    'delay another project\'s checkpoints by more than '
                    'a round; its own wait (the agent obsoletes its '
                    'unregistered checkpoints past [agent] '
                    'guest_checkpoints_kept meanwhile).'),
    cfg.FloatOpt('pause', default=0.1, min=0,
                 help='Seconds between two registrations, so that a '
                      'round\'s POSTs do not crowd cinder-api and '
                      'cinder-volume.'),
    cfg.BoolOpt('assign_admin_role', default=False,
                help='Cinder registers a managed snapshot in the project '
                     'of the token that asks, and only an admin may ask, '
                     'so this service\'s user needs the admin role on '
                     'every project whose volumes it serves. Off (the '
                     'default): the operator grants it (for example '
                     'once, inherited by every project of a domain: '
                     '"openstack role add --user USER --domain DOMAIN '
                     '--inherited admin"); a project where it has none '
                     'is an error in the log and in the round\'s '
                     'counts. On: the service grants itself the role on '
                     'such a project.'),
]


def list_opts():
    """For oslo-config-generator (entry point oslo.config.opts)."""
    return [('backend_defaults', blobcr_opts)]


def list_sync_opts():
    """blobcr-cinder-sync's options, with its keystoneauth ones."""
    from keystoneauth1 import loading as ks_loading
    return [(SYNC_GROUP, sync_opts +
             ks_loading.get_session_conf_options() +
             ks_loading.get_adapter_conf_options(include_deprecated=False) +
             ks_loading.get_auth_common_conf_options() +
             ks_loading.get_auth_plugin_conf_options('password'))]
