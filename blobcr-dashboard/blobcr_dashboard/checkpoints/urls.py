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
