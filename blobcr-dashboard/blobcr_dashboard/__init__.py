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

"""Horizon plugin of BlobCR: the Project > Volumes > Checkpoints panel.

Enable it by copying
``blobcr_dashboard/enabled/_1375_project_blobcr_checkpoints.py`` into
Horizon's ``openstack_dashboard/local/enabled/``; the Django app is
``blobcr_dashboard`` (its templates are under ``project/checkpoints/``).

A distribution of its own (blobcr-dashboard/setup.cfg): a Horizon host
installs it with python-blobcrclient, and neither the agent (its C core,
libfuse3, libvirt) nor the Cinder and Nova sides.

May import: Horizon, Django, the OpenStack clients and python-blobcrclient
(the chain and the restart). Never imports the lab, the
benchmarks or the tests (tests/unit/test_import_contract.py).
"""
