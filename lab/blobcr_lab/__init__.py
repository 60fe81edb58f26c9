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

"""The lab: real services started on one machine, for the demos, the
benchmarks and the tests alike.

- :mod:`.rabbitmq` and :mod:`.ceph`: a RabbitMQ broker and a micro Ceph
  cluster on 127.0.0.1 (over tools/rabbitmq.sh and tools/ceph-cluster.sh);
- :mod:`.openstack` and :mod:`.nova`: PostgreSQL, Keystone, Cinder,
  Glance (and Nova) from a template built once;
- :mod:`.agents`, :mod:`.agent_rpc` and :mod:`.cinder_hosts`: blobcr-agent
  and blobcr-mirror processes, their RPC, the agents behind a Cinder
  backend;
- :mod:`.guest_vm`: a small QEMU guest (TCG) under a libvirtd of its own;
- :mod:`.nova_attach`, :mod:`.seq_writer`: a volume attached the way Nova
  does it, and a writer whose every block says what it is;
- :mod:`.demo` (``blobcr-demo``) and :mod:`.cinder_demo`
  (``blobcr-cinder-demo``): the main job end to end.

May import: the product packages (blobcr_agent, blobcr_cinder, ...) and
their dependencies. Never imports blobcr_bench or tests
(tests/unit/test_import_contract.py). The lab is its own distribution
(lab/setup.cfg): cloud hosts do not install it.
"""

import os

# The source tree this lab comes from: the service scripts and the guest
# image builder live in its tools/ (the lab is installed editable from it).
SOURCE = os.environ.get('BLOBCR_SOURCE') or os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def tool(name):
    """The path of tools/NAME in the source tree; a clear error if the
    lab was installed without one.
    """
    path = os.path.join(SOURCE, 'tools', name)
    if not os.path.exists(path):
        raise FileNotFoundError(
            '%s not found: the lab runs from a BlobCR source tree (install '
            'it with pip install -e lab, or set BLOBCR_SOURCE)' % path)
    return path
