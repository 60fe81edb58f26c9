from django.urls import re_path

from blobcr_dashboard.checkpoints import views

urlpatterns = [
    re_path(r'^$', views.IndexView.as_view(), name='index'),
    re_path(r'^volume/(?P<volume_id>[^/]+)/take/$',
            views.TakeCheckpointView.as_view(), name='take'),
    re_path(r'^(?P<snapshot_id>[^/]+)/create_volume/$',
            views.CreateVolumeView.as_view(), name='create_volume'),
    re_path(r'^(?P<snapshot_id>[^/]+)/revert/$',
            views.RevertView.as_view(), name='revert'),
    re_path(r'^(?P<snapshot_id>[^/]+)/delete/$',
            views.DeleteView.as_view(), name='delete'),
    re_path(r'^group/(?P<group_id>[^/]+)/restart/$',
            views.RestartGroupView.as_view(), name='restart'),
]
