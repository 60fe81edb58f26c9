"""``openstack blobcr restart --group G``: blobcr-restart as an
OpenStackClient command, on the CLI's own session (its credentials,
region and interface), with the same plan, steps and progress
(blobcr_nova/restart.py).
"""

from osc_lib.command import command
from osc_lib import exceptions

from blobcr_nova import restart

COLUMNS = ('Name', 'Snapshot', 'Source Volume', 'Volume', 'Server')


class RestartJob(command.Lister):
    """Restart a job (a Cinder volume group of boot volumes) from its
    newest complete group checkpoint: a volume from each member snapshot,
    a server booted from each volume (no network).
    """

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('--group', metavar='<group>', required=True,
                            help='Cinder volume group (ID)')
        parser.add_argument('--flavor', metavar='<flavor>',
                            help='Flavor of the servers (name or ID); '
                                 'required unless --dry-run or --no-boot')
        parser.add_argument('--name-prefix', metavar='<prefix>',
                            help='Names PREFIX-0, PREFIX-1... (default '
                                 'restart-<group name>)')
        parser.add_argument('--no-boot', action='store_true',
                            help='Create the volumes only')
        parser.add_argument('--dry-run', action='store_true',
                            help='Show the plan and change nothing')
        parser.add_argument('--timeout', metavar='<seconds>', type=float,
                            default=600,
                            help='Seconds to wait for each step '
                                 '(default 600)')
        return parser

    def take_action(self, parsed_args):
        if not (parsed_args.dry_run or parsed_args.no_boot or
                parsed_args.flavor):
            raise exceptions.CommandError(
                '--flavor is required (unless --dry-run or --no-boot)')
        manager = self.app.client_manager
        cloud = restart.Cloud(manager.session, region=manager.region_name,
                              interface=manager.interface)
        progress = restart.Progress(self.app.stderr)
        try:
            the_plan = restart.plan(cloud, parsed_args.group,
                                    parsed_args.name_prefix)
            for skipped in the_plan['skipped']:
                progress.info('skipped group snapshot %s: %s'
                              % (skipped['id'], skipped['reason']))
            made = {}
            if not parsed_args.dry_run:
                made = {m['name']: m for m in restart.restart(
                    cloud, the_plan, parsed_args.flavor, progress,
                    parsed_args.timeout, boot=not parsed_args.no_boot)}
        except restart.RestartError as e:
            raise exceptions.CommandError(str(e))
        rows = []
        for member in the_plan['members']:
            got = made.get(member['name'], {})
            rows.append((member['name'], member['snapshot'],
                         member['source_volume'], got.get('volume'),
                         got.get('server')))
        return COLUMNS, rows
