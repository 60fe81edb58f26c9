"""Permissions of the panel and its actions, those of Horizon's Volumes
and Snapshots panels for the same Cinder calls.
"""

from openstack_dashboard import policy

# The catalog types Horizon's Volumes panel accepts for Cinder.
VOLUME_SERVICE = (('openstack.services.block-storage',
                   'openstack.services.block-store',
                   'openstack.services.volume',
                   'openstack.services.volumev3'),)
LIST = (('volume', 'volume:get_all'),)
TAKE = (('volume', 'volume:create_snapshot'),)
CREATE_VOLUME = (('volume', 'volume:create'),)
REVERT = (('volume', 'volume:revert_to_snapshot'),)
DELETE = (('volume', 'volume:delete_snapshot'),)
# A restart creates volumes (and boots servers, which Nova checks).
RESTART = (('volume', 'volume:create'),)

ACTIONS = {'take': TAKE, 'create_volume': CREATE_VOLUME, 'revert': REVERT,
           'delete': DELETE, 'restart': RESTART}


def allowed(request):
    """{action: True/False} for the current user."""
    return {name: policy.check(rules, request)
            for name, rules in ACTIONS.items()}
