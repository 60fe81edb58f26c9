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

"""python-blobcrclient: the BlobCR commands of the openstack CLI
(``openstack blobcr ...``), ``blobcr-restart``, and the checkpoint chain
and restart library the Horizon panel uses. Talks to Cinder and Nova
through their APIs only: it imports none of the agent, the Cinder driver
or the Nova side (tests/unit/test_import_contract.py).
"""
