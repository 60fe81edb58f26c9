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

"""The benchmarks: ``blobcr-bench`` (:mod:`.cli`) and what it runs.

- :mod:`.checkpoint`, :mod:`.restart`, :mod:`.persist`, :mod:`.repo`,
  :mod:`.mirror_io`, :mod:`.proxy`, :mod:`.fio`: BlobCR's own paths
  against baselines measured in the same run (:mod:`.common`);
- :mod:`.peers` (:mod:`.peers_qemu`, :mod:`.peers_rbd`,
  :mod:`.peers_common`): the same job on QEMU's and Ceph RBD's own
  snapshots, each set up the way its experts do;
- :mod:`.cinder` and :mod:`.cinder_stack`: ``openstack volume snapshot
  create`` on BlobCR against Cinder's RBD driver, on a lab stack;
- :mod:`.metadata`: the guest's CHECKPOINT path through the metadata
  front.

May import: the lab (blobcr_lab) and the product. Never imports tests
(tests/unit/test_import_contract.py). Installed with the lab
(lab/setup.cfg), apart from the product.
"""
