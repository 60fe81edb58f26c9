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

"""BlobCR's Cinder side: the volume driver (volumes are images, snapshots
are versions), its options and blobcr-cinder-sync (the OSC commands are
the client's, python-blobcrclient).

May import: Cinder, oslo.*, the OpenStack clients and blobcr_common
(the agent's RPC client and errors). Never imports the agent
(blobcr_agent: cinder-volume's environment needs no C compiler, FUSE or
libvirt), the lab, the benchmarks or the tests
(tests/unit/test_import_contract.py).
"""
