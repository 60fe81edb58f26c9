"""Options of a BlobCR backend section in cinder.conf."""

from oslo_config import cfg

QUIESCE_MODES = ('none', 'fsfreeze', 'suspend')

blobcr_opts = [
    cfg.StrOpt('blobcr_agent_host',
               help='Host name ([agent] host) of the blobcr-agent that '
                    'serves the operations on detached volumes (create, '
                    'delete, extend, snapshot, revert, image copies, '
                    'capacity). Unset: the host of this cinder-volume '
                    'service, which normally runs an agent beside it.'),
    cfg.StrOpt('blobcr_default_quiesce', choices=QUIESCE_MODES,
               help='How an attached volume\'s guest is held still while a '
                    'snapshot is taken, unless its volume type says '
                    '(extra spec blobcr:quiesce). Unset: the agent\'s '
                    '[agent] quiesce, which falls back to none when no '
                    'domain uses the volume.'),
    cfg.IntOpt('blobcr_rpc_timeout', default=60, min=1,
               help='Seconds to wait for an agent\'s answer before the '
                    'operation fails as "agent does not answer".'),
    cfg.IntOpt('blobcr_snapshot_timeout', default=1800, min=1,
               help='Seconds a snapshot may take to be persisted (its '
                    'version to turn stable) before it goes to error.'),
    cfg.StrOpt('blobcr_exchange_dir', default='/var/lib/blobcr/exports',
               help='Directory shared with the agent of blobcr_agent_host '
                    '(its [agent] export_dir) through which Glance images '
                    'are copied to and from volumes.'),
]


def list_opts():
    """For oslo-config-generator (entry point oslo.config.opts)."""
    return [('backend_defaults', blobcr_opts)]
