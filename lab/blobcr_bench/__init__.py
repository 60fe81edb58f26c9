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
