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

"""BlobCR's Nova side: the vendordata provider, the notification
listener, and the libvirt volume driver and os-brick connector of the
'blobcr' connection type (blobcr-restart and its OSC command are the
client's, python-blobcrclient).

May import: oslo.*, keystonemiddleware and blobcr_common (the agent's
RPC client, errors and instance tokens); it talks to Nova over its API
and notifications. Never imports the agent (blobcr_agent), the lab, the
benchmarks or the tests (tests/unit/test_import_contract.py).
"""
