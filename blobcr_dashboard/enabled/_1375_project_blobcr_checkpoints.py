# The Checkpoints panel of BlobCR, in Project > Volumes (after Horizon's
# group snapshots, _1370). Copy into openstack_dashboard/local/enabled/.
PANEL = 'checkpoints'
PANEL_DASHBOARD = 'project'
PANEL_GROUP = 'volumes'
ADD_PANEL = 'blobcr_dashboard.checkpoints.panel.Checkpoints'
ADD_INSTALLED_APPS = ['blobcr_dashboard']
