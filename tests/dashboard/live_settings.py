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

"""Django settings of the browser test's Horizon server: Horizon's own
settings (with tests/dashboard/live/local/local_settings.py), and the
BlobCR panel enabled from its enabled file as Horizon's plugin loader
does for a file in openstack_dashboard/local/enabled/.
"""

from openstack_dashboard import enabled as horizon_enabled
from openstack_dashboard.local import enabled as local_enabled
from openstack_dashboard.settings import *  # noqa: F401,F403,H303
from openstack_dashboard.settings import HORIZON_CONFIG
from openstack_dashboard.settings import INSTALLED_APPS

from blobcr_dashboard import enabled as blobcr_enabled
from tests.dashboard import enable_panel

INSTALLED_APPS = enable_panel(HORIZON_CONFIG, INSTALLED_APPS,
                              [horizon_enabled, local_enabled,
                               blobcr_enabled])
