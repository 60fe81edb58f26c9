"""Django settings of the panel's view tests: Horizon's own test settings
(openstack_dashboard.test.settings) with the BlobCR panel enabled, as
Horizon's plugin loader enables it from its enabled file.
"""

from openstack_dashboard import enabled as horizon_enabled
from openstack_dashboard.test.settings import *  # noqa: F401,F403,H303
from openstack_dashboard.test.settings import HORIZON_CONFIG
from openstack_dashboard.test.settings import INSTALLED_APPS
from openstack_dashboard.utils import settings as settings_utils

from blobcr_dashboard import enabled as blobcr_enabled

INSTALLED_APPS = list(INSTALLED_APPS)
# Set again below from the enabled files (left there, they count as the
# deprecated settings of the same names).
HORIZON_CONFIG.pop('dashboards', None)
HORIZON_CONFIG.pop('default_dashboard', None)
settings_utils.update_dashboards([horizon_enabled, blobcr_enabled],
                                 HORIZON_CONFIG, INSTALLED_APPS)
# update_dashboards adds every enabled file's apps again, and Django
# refuses an app listed twice.
INSTALLED_APPS = list(dict.fromkeys(INSTALLED_APPS))
