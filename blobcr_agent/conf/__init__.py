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

"""oslo.config options of the BlobCR agent.

Every option is registered here, once, on the global ``cfg.CONF`` (RPC
needs that) and listed by :func:`list_opts` for the sample-config
generator (``tox -e genconfig``).
"""

import warnings

from oslo_config import cfg

with warnings.catch_warnings():
    # oslo.privsep imports eventlet where it is installed (to see whether
    # it monkey-patched), and eventlet warns that it is deprecated as it
    # loads: nothing of BlobCR uses eventlet.
    warnings.simplefilter('ignore')
    from oslo_privsep import priv_context

from blobcr_agent.conf import agent
from blobcr_agent.conf import repository

CONF = cfg.CONF

_MODULES = [repository, agent]
# oslo.privsep's options of the agent's privileged daemon
# (blobcr_agent/privileged), registered by its context.
PRIVILEGED_SECTION = 'blobcr_agent_privileged'

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
    result.append((PRIVILEGED_SECTION, priv_context.OPTS))
    return result
