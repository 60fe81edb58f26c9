"""Django settings of the panel's view tests: Horizon's own test settings
(openstack_dashboard.test.settings) with the BlobCR panel enabled, as
Horizon's plugin loader enables it from its enabled file.
"""

from openstack_dashboard import enabled as horizon_enabled
from openstack_dashboard.test.settings import *  # noqa: F401,F403,H303
from openstack_dashboard.test.settings import HORIZON_CONFIG
from openstack_dashboard.test.settings import INSTALLED_APPS

from blobcr_dashboard import enabled as blobcr_enabled
from tests.dashboard import enable_panel

INSTALLED_APPS = enable_panel(HORIZON_CONFIG, INSTALLED_APPS,
                              [horizon_enabled, blobcr_enabled])
