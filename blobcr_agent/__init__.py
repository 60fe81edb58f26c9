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

"""BlobCR agent: the per-host service that owns all checkpoint data.

- ``repository/``: versions, chunks, headers and their compare-and-set,
  on a backend (the local store or Ceph RADOS);
- ``mirror/`` and the native core (``_native``, built from native/): the
  FUSE mirror that takes snapshots live and persists them;
- ``manager``: the agent's operations, which ``rpc/``, the admin socket
  (``control``) and the guest endpoint (``proxy/``) call;
- ``hypervisor/``: libvirt (quiesce, domains); ``conf/``: oslo.config
  options; ``cmd/``: the console scripts.

May import: the standard library, oslo.*, pyfuse3/trio, libvirt,
rados and zstandard. Never imports Cinder,
Nova, Horizon, blobcr_cinder, blobcr_nova, blobcr_dashboard, the lab,
the benchmarks or the tests (tests/unit/test_import_contract.py).
"""
