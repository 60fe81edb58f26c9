"""Horizon plugin of BlobCR: the Project > Volumes > Checkpoints panel.

Enable it by copying
``blobcr_dashboard/enabled/_1375_project_blobcr_checkpoints.py`` into
Horizon's ``openstack_dashboard/local/enabled/``; the Django app is
``blobcr_dashboard`` (its templates are under ``project/checkpoints/``).

May import: Horizon, Django, the OpenStack clients and the Cinder
side's chain helpers (blobcr_cinder.osc). Never imports the lab, the
benchmarks or the tests (tests/unit/test_import_contract.py).
"""
