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

"""blobcr-cinder-sync: a guest's checkpoints become Cinder snapshots.

A guest checkpoints through the agent's endpoint, not through Cinder, so
Cinder does not know those versions. This service asks each BlobCR
backend which of its versions are manageable (the driver's
``get_manageable_snapshots``: stable, unlabelled checkpoints of its
volumes that are not snapshots yet) and registers each through Cinder's
manage API, in the project of the volume, so that the volume's owner
sees it in ``openstack volume snapshot list``.

Cinder creates a managed snapshot in the project of the token that asks,
so the service authenticates (``[blobcr_sync]`` keystoneauth options) as
a user with the admin role in its own project and, for each volume,
scopes a token to the volume's project. The operator grants that user
the admin role there (inherited from the domain, typically); a project
where it has none is counted and logged with the grant that fixes it.
Only with ``assign_admin_role`` (off by default) does the service grant
itself the role.

A volume is skipped in a round while it is changing (not available or
in-use, or with a snapshot being made or deleted): its driver may be
making a version that it will register itself.

Rounds are paced and fair across tenants (issue 54, finding 3): at
most ``max_per_round`` registrations, ``pause`` seconds apart, taken in
turn from each project (and within one, from each volume, oldest
version first), starting each round after the project served last; a
project whose registration fails (its snapshot quota reached, no role)
gets no more POSTs that round. One guest's hundreds of checkpoints wait
their turns; another project's are registered in the next round.
"""

import collections
import sys
import time

from keystoneauth1 import adapter
from keystoneauth1 import exceptions as ks_exceptions
from keystoneauth1 import loading as ks_loading
from oslo_config import cfg
from oslo_log import log as logging

from blobcr_cinder import options

LOG = logging.getLogger(__name__)
GROUP = options.SYNC_GROUP
# manageable_snapshots (3.8); managed snapshots' metadata shown.
MICROVERSION = '3.8'
STEADY = ('available', 'in-use')
CHANGING = ('creating', 'deleting', 'restoring', 'unmanaging')


def register_opts(conf):
    conf.register_opts(options.sync_opts, group=GROUP)
    ks_loading.register_auth_conf_options(conf, GROUP)
    ks_loading.register_session_conf_options(conf, GROUP)
    ks_loading.register_adapter_conf_options(conf, GROUP)


class NoRole(Exception):
    """The service's user has no role on a volume's project."""

    def __init__(self, user, project):
        super().__init__(
            'user %s has no role on project %s, so its checkpoints cannot '
            'be registered there: grant it the admin role ("openstack role '
            'add --user %s --project %s admin", or once for every project '
            'of a domain with "--domain DOMAIN --inherited"), or set '
            '[%s] assign_admin_role = True' % (user, project, user, project,
                                               GROUP))
        self.project = project


class Synchronizer(object):
    """One round (:meth:`run_once`) registers what is manageable."""

    def __init__(self, conf):
        self.conf = conf
        self.opts = conf[GROUP]
        self.session = ks_loading.load_session_from_conf_options(
            conf, GROUP,
            auth=ks_loading.load_auth_from_conf_options(conf, GROUP))
        self.cinder = self._cinder(self.session)
        self._projects = {}
        self.no_role = set()        # projects of the last round
        self._last_served = None    # where the next round starts after
        self.pending = 0            # left for later rounds, last round

    def _cinder(self, session):
        return adapter.Adapter(
            session, service_type='block-storage',
            interface=self.opts.valid_interfaces or 'public',
            region_name=self.opts.region_name,
            default_microversion=MICROVERSION)

    # -- per project ---------------------------------------------------

    def _project_cinder(self, project):
        """Cinder as the service user scoped to ``project``."""
        if project not in self._projects:
            auth = ks_loading.load_auth_from_conf_options(
                self.conf, GROUP, project_id=project, project_name=None,
                project_domain_id=None, project_domain_name=None)
            session = ks_loading.load_session_from_conf_options(
                self.conf, GROUP, auth=auth)
            try:
                session.get_token()
            except ks_exceptions.Unauthorized:
                if not self.opts.assign_admin_role:
                    raise NoRole(self.session.get_user_id(), project)
                self._grant_admin(project)
                session.get_token()
            self._projects[project] = self._cinder(session)
        return self._projects[project]

    def _grant_admin(self, project):
        identity = adapter.Adapter(self.session, service_type='identity',
                                   interface='public', version=(3, 0),
                                   region_name=self.opts.region_name)
        user = self.session.get_user_id()
        roles = identity.get('/roles?name=admin').json()['roles']
        if not roles:
            raise RuntimeError('Keystone has no admin role')
        LOG.info('granting user %s the admin role on project %s (needed to '
                 'register snapshots there)', user, project)
        identity.put('/projects/%s/users/%s/roles/%s'
                     % (project, user, roles[0]['id']))

    # -- a round ---------------------------------------------------------

    def manageable(self, host):
        """The manageable, safe entries of a backend, by volume id."""
        entries = self.cinder.get(
            '/manageable_snapshots/detail?host=%s' % host).json()
        by_volume = collections.defaultdict(list)
        for entry in entries['manageable-snapshots']:
            if entry['safe_to_manage']:
                volume = (entry.get('source_reference') or {}).get(
                    'volume_id')
                if volume:
                    by_volume[volume].append(entry)
        return by_volume

    def _steady(self, volume):
        if volume['status'] not in STEADY:
            return False
        snaps = self.cinder.get('/snapshots?all_tenants=1&volume_id=%s'
                                % volume['id']).json()['snapshots']
        return not any(s['status'] in CHANGING for s in snaps)

    def run_once(self):
        """Register safe manageable versions, in turns across projects
        and volumes, up to ``max_per_round``: returns the counts
        registered, deferred (volume changing) and failed. ``pending``
        is then what is left for later rounds.
        """
        counts = collections.Counter()
        self.no_role = set()
        # project -> [(volume, its entries oldest first)], in turns.
        queues = collections.OrderedDict()
        for host in self.opts.backends:
            for volume_id, entries in self.manageable(host).items():
                volume = self.cinder.get('/volumes/%s' % volume_id).json()[
                    'volume']
                if not self._steady(volume):
                    LOG.info('volume %s is %s or has snapshots changing: '
                             'next round', volume_id, volume['status'])
                    counts['deferred'] += len(entries)
                    continue
                project = volume['os-vol-tenant-attr:tenant_id']
                queues.setdefault(project, []).append(
                    (volume, collections.deque(sorted(
                        entries,
                        key=lambda e: int(e['extra_info']['version'])))))
        budget = self.opts.max_per_round
        order = self._turns(sorted(queues))
        failed = set()
        while budget > 0 and order:
            for project in list(order):
                if budget <= 0:
                    break
                volumes = queues[project]
                volume, entries = volumes.pop(0)
                entry = entries.popleft()
                if entries:
                    volumes.append((volume, entries))   # its next turn
                if not volumes:
                    order.remove(project)
                if counts['registered'] + counts['failed'] and \
                        self.opts.pause:
                    time.sleep(self.opts.pause)
                budget -= 1
                self._last_served = project
                if self._register(project, volume, entry):
                    counts['registered'] += 1
                    continue
                counts['failed'] += 1
                # No more POSTs for it this round (quota, role, Cinder
                # refusing): the others' turns go on.
                failed.add(project)
                if project in order:
                    order.remove(project)
        self.pending = sum(len(entries) for project in queues
                           if project not in failed
                           for _, entries in queues[project])
        return counts['registered'], counts['deferred'], counts['failed']

    def _turns(self, projects):
        """The projects in the order they get turns this round: after
        the one served last, so that no project always goes first.
        """
        if self._last_served is None:
            return list(projects)
        after = [p for p in projects if p > self._last_served]
        return after + [p for p in projects if p <= self._last_served]

    def _register(self, project, volume, entry):
        info = entry['extra_info']
        name = '%s-checkpoint-%s' % (volume['name'] or volume['id'],
                                     info['version'])
        # The version's facts as properties, as the driver records them
        # on the snapshots it takes (blobcr:image, blobcr:version, ...).
        facts = dict(info, image=entry['source_reference'].get('source-id'))
        body = {'snapshot': {
            'volume_id': volume['id'], 'ref': entry['reference'],
            'name': name,
            'metadata': {'blobcr:%s' % key: str(facts[key])
                         for key in ('image', 'version', 'parent',
                                     'created', 'group', 'made_by')
                         if facts.get(key) not in (None, '', 'None')},
            'description': 'BlobCR checkpoint (version %s, created %s%s), '
                           'registered by blobcr-cinder-sync'
                           % (info['version'], info['created'],
                              ', group %s' % info['group']
                              if info.get('group') else '')}}
        if project in self.no_role:
            return False                # said once this round
        try:
            made = self._project_cinder(project).post(
                '/manageable_snapshots', json=body).json()['snapshot']
        except NoRole as e:
            self.no_role.add(project)
            LOG.error('%s', e)
            return False
        except ks_exceptions.HttpError as e:
            LOG.error('could not register %s of volume %s: %s',
                      entry['reference'], volume['id'], e)
            return False
        LOG.info('version %s of volume %s is snapshot %s (project %s)',
                 info['version'], volume['id'], made['id'], project)
        return True


def main(argv=None):
    conf = cfg.ConfigOpts()
    logging.register_options(conf)
    register_opts(conf)
    conf.register_cli_opts([
        cfg.BoolOpt('once', default=False,
                    help='One round, then exit (status 1 if something '
                         'could not be registered).')])
    conf(argv if argv is not None else sys.argv[1:],
         project='blobcr', prog='blobcr-cinder-sync')
    logging.setup(conf, 'blobcr-cinder-sync')
    if not conf[GROUP].backends:
        sys.exit('blobcr-cinder-sync: [%s] backends is empty: name the '
                 'BlobCR cinder-volume hosts (host@backend)' % GROUP)
    sync = Synchronizer(conf)
    while True:
        started = time.monotonic()
        try:
            counts = sync.run_once()
        except (ks_exceptions.ClientException, RuntimeError) as e:
            LOG.error('sync round failed: %s', e)
            counts, sync.pending = (0, 0, 1), 0
        LOG.info('sync round: %d registered, %d deferred, %d failed, '
                 '%d waiting for later rounds, %.1f s', *counts,
                 sync.pending, time.monotonic() - started)
        if sync.no_role:
            LOG.error('sync round: no role on %d project(s): %s (see the '
                      'errors above for the grant)', len(sync.no_role),
                      ', '.join(sorted(sync.no_role)))
        if conf.once:
            return 1 if counts[2] else 0
        time.sleep(conf[GROUP].interval)


if __name__ == '__main__':
    sys.exit(main())
