"""Horizon plugin of BlobCR: the Project > Volumes > Checkpoints panel.

Enable it by copying
``blobcr_dashboard/enabled/_1375_project_blobcr_checkpoints.py`` into
Horizon's ``openstack_dashboard/local/enabled/``; the Django app is
``blobcr_dashboard`` (its templates are under ``project/checkpoints/``).
"""
