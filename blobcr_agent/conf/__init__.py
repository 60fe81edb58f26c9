"""oslo.config options of the BlobCR agent.

Every option is registered here, once, on the global ``cfg.CONF`` (RPC
needs that) and listed by :func:`list_opts` for the sample-config
generator (``tox -e genconfig``).
"""

from oslo_config import cfg

from blobcr_agent.conf import agent
from blobcr_agent.conf import repository

CONF = cfg.CONF

_MODULES = [repository, agent]

for _module in _MODULES:
    _module.register_opts(CONF)


def override_store(conf, backend=None, store=None, ceph_conf=None):
    """Apply the --backend/--store/--ceph-conf flags of the commands."""
    for opt, group, value in (('backend', 'repository', backend),
                              ('path', 'local_store', store),
                              ('conffile', 'rados', ceph_conf)):
        if value:
            conf.set_override(opt, value, group)


def list_opts():
    """Entry point for oslo-config-generator."""
    result = []
    for module in _MODULES:
        result.extend(module.list_opts())
    return result
