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

"""Settings for running Horizon with the BlobCR panel in tests."""


def enable_panel(horizon_config, installed_apps, enabled_modules):
    """Horizon's plugin loading over ``enabled_modules`` (the modules of
    enabled files, blobcr_dashboard.enabled among them), after Horizon's
    settings did it without ours; returns INSTALLED_APPS.
    """
    from openstack_dashboard.utils import settings as settings_utils
    apps = list(installed_apps)
    # Set again from the enabled files (left there, they count as the
    # deprecated settings of the same names).
    horizon_config.pop('dashboards', None)
    horizon_config.pop('default_dashboard', None)
    settings_utils.update_dashboards(enabled_modules, horizon_config, apps)
    # update_dashboards adds every enabled file's apps again, and Django
    # refuses an app listed twice.
    return list(dict.fromkeys(apps))
