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

"""The blobcr-agents behind the session's BlobCR Cinder backends.

For each backend (the local store, and a namespace on the micro Ceph
cluster) three real agents share the store: ``storage``, the agent
beside cinder-volume (``blobcr_agent_host``), and two compute hosts that
volumes are attached to. They serve RPC on the session's RabbitMQ and
live for the session, like the OpenStack stack that needs them up when
cinder-volume starts.

A third backend, ``small``, is for the fault tests
(tests/integration/test_cinder_faults.py): a local store on a tmpfs of
SMALL_STORE bytes (mounted here, unmounted at the end; a plain directory
when mounting is not allowed, and ``Hosts.mount`` is None), with a
storage agent and two compute agents (the second is where a lost host's
volumes go), which collect garbage once it is 10 s old (SMALL_GC). Those
tests fill it up and kill and restart its agents (``Hosts.agents``), no
other test uses it.

``cinder_hosts``  ``{'local': Hosts, 'rados': Hosts, 'small': Hosts}``.
``BACKEND_SECTIONS``  what tests/openstack_fixtures.py puts in cinder.conf.

The session fixture that starts them is in tests/lab_fixtures.py.
"""

import dataclasses
import typing

KINDS = ('local', 'rados', 'small')
ROLES = ('storage', 'compute-a', 'compute-b')
SMALL_ROLES = ('storage', 'compute-a', 'compute-b')
SMALL_STORE = 256 << 20
# [repository] of the small store's agents: garbage is collected once it
# is 10 s old (gc_grace guards only against clock skew; pending versions
# protect their own objects), so that the space test waits seconds.
SMALL_GC = {'gc_grace': '10', 'gc_interval': '120'}


@dataclasses.dataclass
class Hosts(object):
    kind: str
    storage: str
    compute: typing.List[str]
    export_dir: str
    backend: object
    # role -> agents.AgentProcess (kill() then start() restarts one)
    agents: dict = dataclasses.field(default_factory=dict)
    mount: typing.Optional[str] = None      # the small store's tmpfs

    @property
    def section(self):
        return 'blobcr-%s' % self.kind

    # The stack names each volume type after its section.
    volume_type = section
    backend_name = section


def backend_section(hosts):
    section = {'volume_driver': 'blobcr_cinder.driver.BlobCRDriver',
               'volume_backend_name': hosts.section,
               'blobcr_agent_host': hosts.storage,
               'blobcr_rpc_timeout': '30',
               'blobcr_exchange_dir': hosts.export_dir}
    if hosts.kind == 'small':
        # Thin: the scheduler admits (total x ratio) - provisioned, and
        # a 1 GiB volume on a 0.25 GiB store needs a ratio above 4.
        section['max_over_subscription_ratio'] = '400'
        # Its fault tests kill agents for good and wait for the
        # refusals: 15 s each rather than the defaults' 35 s.
        section['blobcr_alive_probe_timeout'] = '5'
        section['blobcr_retry_probe_timeout'] = '10'
    return section
