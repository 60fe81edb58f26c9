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

"""blobcr-restart: restart a job from its newest complete group checkpoint.

A job is a Cinder volume group whose members are the boot volumes of its
servers.  A group checkpoint is a Cinder group snapshot of it (the BlobCR
driver takes one BlobCR group checkpoint across the members and records
its id in each snapshot's ``blobcr:group`` metadata).  The restart:

1. finds the group's newest *complete* group snapshot: status
   ``available``, every member snapshot ``available``, and every member
   that carries ``blobcr:group`` metadata naming the same BlobCR group;
2. creates one volume from each of its snapshots (Cinder API) and waits
   until they are available (and marks them bootable);
3. boots one server from each new volume through novaclient (boot from
   volume, ``--nic none`` i.e. microversion 2.37, no image), and waits
   until they are ACTIVE.

Progress: on a terminal, one line per step with a bar and a rate; else
one JSON line per event on stderr.  ``--dry-run`` prints the plan and
changes nothing.  Credentials: the usual ``OS_*`` variables (a password,
or a token: ``OS_TOKEN`` and ``OS_PROJECT_ID``; ``OS_CACERT``,
``OS_INSECURE``), through keystoneauth.
"""

import argparse
import json
import os
import sys
import time

from keystoneauth1 import exceptions as ks_exceptions

BLOCK_STORAGE_MICROVERSION = '3.14'     # group snapshots; snapshot's group
COMPUTE_MICROVERSION = '2.37'           # networks 'none'
GROUP_META = 'blobcr:group'


class RestartError(Exception):
    pass


# -- progress ---------------------------------------------------------------

class Progress(object):
    """One step at a time: a bar with a rate on a TTY, JSON lines else."""

    def __init__(self, stream=None, tty=None):
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.began = time.monotonic()
        self.step = None

    def _json(self, **event):
        event['t'] = round(time.monotonic() - self.began, 2)
        self.stream.write(json.dumps(event, sort_keys=True) + '\n')
        self.stream.flush()

    def info(self, message, **fields):
        if self.tty:
            self.stream.write(message + '\n')
            self.stream.flush()
        else:
            self._json(event='info', message=message, **fields)

    def start(self, step, total):
        self.step = {'name': step, 'total': total, 'done': 0,
                     'began': time.monotonic()}
        self._show()

    def advance(self, item=None, **fields):
        self.step['done'] += 1
        self._show(item, **fields)

    def _show(self, item=None, **fields):
        step = self.step
        elapsed = time.monotonic() - step['began']
        rate = step['done'] / elapsed if elapsed > 0 and step['done'] else 0
        if not self.tty:
            self._json(event='progress', step=step['name'],
                       done=step['done'], total=step['total'], item=item,
                       **fields)
            return
        width = 24
        full = width * step['done'] // max(step['total'], 1)
        line = '\r%-18s [%s%s] %d/%d  %.2f/s  %.1f s' % (
            step['name'], '#' * full, '.' * (width - full), step['done'],
            step['total'], rate, elapsed)
        self.stream.write(line)
        if step['done'] >= step['total']:
            self.stream.write('\n')
        self.stream.flush()


# -- cloud --------------------------------------------------------------------

def session_from_env(env=None):
    """A keystoneauth1 session from the OS_* variables: a token
    (``OS_TOKEN`` with ``OS_PROJECT_ID``, as the Horizon panel passes
    its user's) or a password, verified with ``OS_CACERT`` unless
    ``OS_INSECURE``.
    """
    from keystoneauth1.identity import v3
    from keystoneauth1 import session
    env = os.environ if env is None else env
    by_token = bool(env.get('OS_TOKEN'))
    needed = ('OS_AUTH_URL', 'OS_TOKEN', 'OS_PROJECT_ID') if by_token \
        else ('OS_AUTH_URL', 'OS_USERNAME', 'OS_PASSWORD')
    missing = [name for name in needed if not env.get(name)]
    if missing:
        raise RestartError('set %s (the openstack CLI\'s credentials)'
                           % ', '.join(missing))
    if by_token:
        auth = v3.Token(auth_url=env['OS_AUTH_URL'], token=env['OS_TOKEN'],
                        project_id=env['OS_PROJECT_ID'])
    else:
        auth = v3.Password(
            auth_url=env['OS_AUTH_URL'], username=env['OS_USERNAME'],
            password=env['OS_PASSWORD'],
            project_name=env.get('OS_PROJECT_NAME'),
            project_id=env.get('OS_PROJECT_ID'),
            user_domain_name=env.get('OS_USER_DOMAIN_NAME', 'Default'),
            project_domain_name=env.get('OS_PROJECT_DOMAIN_NAME',
                                        'Default'))
    insecure = env.get('OS_INSECURE', '').lower() in ('1', 'true', 'yes')
    verify = False if insecure else (env.get('OS_CACERT') or True)
    return session.Session(auth=auth, verify=verify)


class Cloud(object):
    """Cinder through keystoneauth (REST), Nova through novaclient."""

    def __init__(self, session, region=None, interface='public'):
        from keystoneauth1 import adapter
        self.session = session
        self.region = region
        self.interface = interface
        self.volume = adapter.Adapter(
            session, service_type='block-storage', interface=interface,
            region_name=region,
            default_microversion=BLOCK_STORAGE_MICROVERSION)
        self._nova = None

    @property
    def nova(self):
        if self._nova is None:
            from novaclient import client
            self._nova = client.Client(
                COMPUTE_MICROVERSION, session=self.session,
                region_name=self.region, endpoint_type=self.interface)
        return self._nova

    def group(self, group_id):
        got = self.volume.get('/groups/%s' % group_id, raise_exc=False)
        if got.status_code == 404:
            raise RestartError('no volume group %s' % group_id)
        got.raise_for_status()
        return got.json()['group']

    def group_snapshots(self, group_id):
        return self.volume.get('/group_snapshots/detail?group_id=%s'
                               % group_id).json()['group_snapshots']

    def snapshots_of(self, group_snapshot_id):
        snaps = self.volume.get('/snapshots/detail').json()['snapshots']
        return [s for s in snaps
                if s.get('group_snapshot_id') == group_snapshot_id]

    def create_volume(self, snapshot, name):
        return self.volume.post('/volumes', json={'volume': {
            'name': name, 'size': snapshot['size'],
            'snapshot_id': snapshot['id'],
            'metadata': {'blobcr:restart_of': snapshot['volume_id'],
                         'blobcr:restart_snapshot': snapshot['id']}}}
        ).json()['volume']

    def get_volume(self, volume_id):
        return self.volume.get('/volumes/%s' % volume_id).json()['volume']

    def set_bootable(self, volume_id):
        self.volume.post('/volumes/%s/action' % volume_id,
                         json={'os-set_bootable': {'bootable': True}})

    def boot(self, name, volume_id, flavor):
        bdm = [{'uuid': volume_id, 'source_type': 'volume',
                'destination_type': 'volume', 'boot_index': 0,
                'delete_on_termination': False}]
        return self.nova.servers.create(name, image=None, flavor=flavor,
                                        block_device_mapping_v2=bdm,
                                        nics='none')

    def server_statuses(self):
        """{server id: 'ACTIVE' | 'ERROR' | 'BUILD'} of the project's servers.

        From the short list filtered by status: showing a server, or the
        detailed list, makes nova-api ask Neutron for the security
        groups, and a cloud without Neutron answers 500
        (EndpointNotFound); the short list does not.
        """
        statuses = {s.id: 'BUILD'
                    for s in self.nova.servers.list(detailed=False)}
        for status in ('ACTIVE', 'ERROR'):
            for s in self.nova.servers.list(detailed=False,
                                            search_opts={'status': status}):
                statuses[s.id] = status
        return statuses

    def flavor_id(self, name_or_id):
        from novaclient import exceptions
        try:
            return self.nova.flavors.get(name_or_id).id
        except exceptions.NotFound:
            return self.nova.flavors.find(name=name_or_id).id


# -- the plan -----------------------------------------------------------------

def complete(group_snapshot, snapshots):
    """Why ``group_snapshot`` is not a complete checkpoint, or None."""
    if group_snapshot['status'] != 'available':
        return 'status %s' % group_snapshot['status']
    if not snapshots:
        return 'no member snapshot'
    bad = [s['id'] for s in snapshots if s['status'] != 'available']
    if bad:
        return 'member snapshots not available: %s' % ', '.join(bad)
    groups = {(s.get('metadata') or {}).get(GROUP_META) for s in snapshots}
    groups.discard(None)
    if len(groups) > 1:
        return 'members of different BlobCR groups: %s' % ', '.join(
            sorted(groups))
    return None


def plan(cloud, group_id, prefix=None, group_snapshot=None):
    """The newest complete group checkpoint of ``group_id`` (or
    ``group_snapshot`` of it, if complete) and what to create:
    ``{'group', 'group_snapshot', 'skipped', 'members': [...]}``.
    """
    group = cloud.group(group_id)
    candidates = sorted(cloud.group_snapshots(group_id),
                        key=lambda g: g['created_at'], reverse=True)
    if group_snapshot is not None:
        candidates = [g for g in candidates if g['id'] == group_snapshot]
        if not candidates:
            raise RestartError('group %s has no group snapshot %s'
                               % (group_id, group_snapshot))
    skipped = []
    for candidate in candidates:
        snapshots = sorted(cloud.snapshots_of(candidate['id']),
                           key=lambda s: s['volume_id'])
        reason = complete(candidate, snapshots)
        if reason:
            skipped.append({'id': candidate['id'], 'reason': reason})
            continue
        prefix = prefix or 'restart-%s' % (group.get('name') or group_id)
        members = [{'snapshot': s['id'], 'source_volume': s['volume_id'],
                    'size': s['size'],
                    'blobcr_group': (s.get('metadata') or {}).get(
                        GROUP_META),
                    'name': '%s-%d' % (prefix, index)}
                   for index, s in enumerate(snapshots)]
        return {'group': group_id, 'group_snapshot': candidate['id'],
                'created_at': candidate['created_at'], 'skipped': skipped,
                'members': members, '_snapshots': snapshots}
    raise RestartError('group %s has no complete group checkpoint (%s)' % (
        group_id, '; '.join('%s: %s' % (s['id'], s['reason'])
                            for s in skipped) or 'none taken'))


def _wait(keys, statuses, done_status, progress, timeout, what):
    """Poll ``statuses()`` ({key: status}) until each key has
    ``done_status``; fail on an error status or a key gone.
    """
    pending = list(keys)
    deadline = time.monotonic() + timeout
    while pending:
        now = statuses()
        for key in list(pending):
            status = now.get(key, 'gone')
            if status == done_status:
                pending.remove(key)
                progress.advance(key, status=status)
            elif status == 'gone' or status.lower().startswith('error'):
                raise RestartError('%s %s is %s' % (what, key, status))
        if pending and time.monotonic() > deadline:
            raise RestartError('%s not %s after %s s: %s' % (
                what, done_status, timeout, ', '.join(pending)))
        if pending:
            time.sleep(0.5)


def restart(cloud, the_plan, flavor, progress, timeout=600, boot=True):
    """Create the volumes, then boot the servers (unless not ``boot``);
    returns ``[{'volume', 'server', 'name'}]``.
    """
    members = the_plan['members']
    progress.start('volumes created', len(members))
    made = []
    for member, snapshot in zip(members, the_plan['_snapshots']):
        volume = cloud.create_volume(snapshot, member['name'])
        made.append({'name': member['name'], 'volume': volume['id']})
        progress.advance(volume['id'])
    progress.start('volumes available', len(made))
    _wait([m['volume'] for m in made],
          lambda: {m['volume']: cloud.get_volume(m['volume'])['status']
                   for m in made}, 'available', progress, timeout, 'volume')
    for m in made:
        cloud.set_bootable(m['volume'])
    if not boot:
        return made
    flavor_id = cloud.flavor_id(flavor)
    progress.start('servers booted', len(made))
    for m in made:
        m['server'] = cloud.boot(m['name'], m['volume'], flavor_id).id
        progress.advance(m['server'])
    progress.start('servers active', len(made))
    _wait([m['server'] for m in made], cloud.server_statuses, 'ACTIVE',
          progress, timeout, 'server')
    return made


def public_plan(the_plan, flavor):
    return dict({k: v for k, v in the_plan.items() if not k.startswith('_')},
                flavor=flavor)


FLAVOR_NEEDED = '--flavor is required (unless --dry-run or --no-boot)'


def add_arguments(parser, group_positional=False):
    """A restart's options: blobcr-restart's and ``openstack blobcr group
    restart``'s (blobcrclient/osc/restart.py; the group is its
    positional argument there, as OSC names the object acted on).
    """
    if group_positional:
        parser.add_argument('group', metavar='<group>',
                            help='the Cinder volume group id')
    else:
        parser.add_argument('--group', metavar='<group>', required=True,
                            help='the Cinder volume group id')
    parser.add_argument('--flavor', metavar='<flavor>',
                        help='Nova flavor (name or id) of the servers; '
                        'required unless --dry-run or --no-boot')
    parser.add_argument('--name-prefix', metavar='<prefix>',
                        help='names: PREFIX-0, PREFIX-1... (default '
                        'restart-<group name>)')
    parser.add_argument('--group-snapshot', metavar='<group-snapshot>',
                        help='restart from this group snapshot (it must '
                        'be complete) instead of the newest complete one')
    parser.add_argument('--no-boot', action='store_true',
                        help='create the volumes only (to boot elsewhere)')
    parser.add_argument('--dry-run', action='store_true',
                        help='show the plan and change nothing')
    parser.add_argument('--timeout', metavar='<seconds>', type=float,
                        default=600,
                        help='seconds to wait for each step (default 600)')
    return parser


def flavor_missing(args):
    return not (args.dry_run or args.no_boot or args.flavor)


def run(cloud, args, progress):
    """Plan, then (unless ``args.dry_run``) restart: ``(plan, made)``,
    ``made`` None for a dry run. RestartError says why not.
    """
    the_plan = plan(cloud, args.group, args.name_prefix,
                    getattr(args, 'group_snapshot', None))
    for skipped in the_plan['skipped']:
        progress.info('skipped group snapshot %s: %s'
                      % (skipped['id'], skipped['reason']),
                      group_snapshot=skipped['id'])
    progress.info('group %s: restarting from group snapshot %s (%s), '
                  '%d members' % (args.group, the_plan['group_snapshot'],
                                  the_plan['created_at'],
                                  len(the_plan['members'])),
                  group_snapshot=the_plan['group_snapshot'])
    if args.dry_run:
        return the_plan, None
    return the_plan, restart(cloud, the_plan, args.flavor, progress,
                             args.timeout, boot=not args.no_boot)


def parse_args(argv):
    parser = add_arguments(argparse.ArgumentParser(
        prog='blobcr-restart', description='Restart a job (a Cinder volume '
        'group of boot volumes) from its newest complete group checkpoint: '
        'one volume from each member snapshot, one server booted from each '
        'volume (no network).'))
    parser.add_argument('--os-region-name',
                        default=os.environ.get('OS_REGION_NAME'))
    parser.add_argument('--os-interface',
                        default=os.environ.get('OS_INTERFACE', 'public'))
    args = parser.parse_args(argv)
    if flavor_missing(args):
        parser.error(FLAVOR_NEEDED)
    return args


def main(argv=None, stdout=None, stderr=None, cloud=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    stdout = stdout or sys.stdout
    progress = Progress(stderr)
    try:
        if cloud is None:
            cloud = Cloud(session_from_env(), region=args.os_region_name,
                          interface=args.os_interface)
        the_plan, made = run(cloud, args, progress)
        if made is None:
            json.dump(public_plan(the_plan, args.flavor), stdout, indent=2,
                      sort_keys=True)
            stdout.write('\n')
            return 0
    except RestartError as exc:
        progress.info('blobcr-restart: %s' % exc, error=str(exc))
        return 1
    except ks_exceptions.ClientException as exc:
        # Keystone or Cinder unreachable, or refusing: say it, no trace.
        progress.info('blobcr-restart: %s: %s' % (type(exc).__name__, exc),
                      error='%s: %s' % (type(exc).__name__, exc))
        return 1
    json.dump({'group': args.group,
               'group_snapshot': the_plan['group_snapshot'],
               'members': made}, stdout, indent=2, sort_keys=True)
    stdout.write('\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
