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

"""Django settings of the panel's view tests: Horizon's own test settings
(openstack_dashboard.test.settings) with the BlobCR panel enabled, as
Horizon's plugin loader enables it from its enabled file.
"""

import tempfile

from openstack_dashboard import enabled as horizon_enabled
from openstack_dashboard.test.settings import *  # noqa: F401,F403,H303
from openstack_dashboard.test.settings import HORIZON_CONFIG
from openstack_dashboard.test.settings import INSTALLED_APPS

from blobcr_dashboard import enabled as blobcr_enabled
from tests.dashboard import enable_panel

INSTALLED_APPS = enable_panel(HORIZON_CONFIG, INSTALLED_APPS,
                              [horizon_enabled, blobcr_enabled])
# Horizon's own settings always have one (its secret key store); its
# test settings do not. The panel keeps group restarts' state there.
LOCAL_PATH = tempfile.mkdtemp(prefix='blobcr-dashboard-tests-')
