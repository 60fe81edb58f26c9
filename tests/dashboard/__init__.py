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
