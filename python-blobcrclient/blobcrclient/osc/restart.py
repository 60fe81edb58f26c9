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

"""``openstack blobcr group restart G``: blobcr-restart as an
OpenStackClient command, on the CLI's own session (its credentials,
region and interface), with the same plan, steps and progress
(blobcrclient/restart.py). ``openstack blobcr restart --group G`` is
its earlier, deprecated name.
"""

import logging

from osc_lib.command import command
from osc_lib import exceptions

from blobcrclient import restart

LOG = logging.getLogger(__name__)

COLUMNS = ('Name', 'Snapshot', 'Source Volume', 'Volume', 'Server')


class RestartGroup(command.Lister):
    """Restart a job (a Cinder volume group of boot volumes) from its
    newest complete group checkpoint: a volume from each member snapshot,
    a server booted from each volume (no network).
    """

    def get_parser(self, prog_name):
        return restart.add_arguments(super().get_parser(prog_name),
                                     group_positional=True)

    def take_action(self, parsed_args):
        if restart.flavor_missing(parsed_args):
            raise exceptions.CommandError(restart.FLAVOR_NEEDED)
        manager = self.app.client_manager
        cloud = restart.Cloud(manager.session, region=manager.region_name,
                              interface=manager.interface)
        try:
            the_plan, made = restart.run(cloud, parsed_args,
                                         restart.Progress(self.app.stderr))
        except restart.RestartError as e:
            raise exceptions.CommandError(str(e))
        made = {m['name']: m for m in made or ()}
        rows = []
        for member in the_plan['members']:
            got = made.get(member['name'], {})
            rows.append((member['name'], member['snapshot'],
                         member['source_volume'], got.get('volume'),
                         got.get('server')))
        return COLUMNS, rows


class RestartJob(RestartGroup):
    """Deprecated: use ``openstack blobcr group restart <group>``."""

    deprecated = True

    def get_parser(self, prog_name):
        return restart.add_arguments(command.Lister.get_parser(self,
                                                               prog_name))

    def take_action(self, parsed_args):
        LOG.warning('"openstack blobcr restart --group G" is deprecated: '
                    'use "openstack blobcr group restart G"')
        return super().take_action(parsed_args)
