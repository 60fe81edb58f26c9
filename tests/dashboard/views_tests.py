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

"""The Checkpoints panel's views, with Horizon's own test helpers
(openstack_dashboard.test.helpers): Django's test client renders the
pages; the Cinder calls of openstack_dashboard.api.cinder are mocked as
Horizon's own panel tests mock them (a real Cinder answers in
tests/integration/test_dashboard_browser.py). Run by
tests/unit/test_dashboard_views.py through Django's test runner.
"""

import json
import os
import re
import tempfile
import time
from unittest import mock

from cinderclient.v3 import group_snapshots
from cinderclient.v3 import volume_snapshots
from cinderclient.v3 import volumes
from django.test.utils import override_settings
from django.urls import reverse
from openstack_dashboard import api
from openstack_dashboard.test import helpers

from blobcr_dashboard.checkpoints import chains
from blobcr_dashboard.checkpoints import restarts

INDEX = reverse('horizon:project:checkpoints:index')


def volume(id, status='available', snapshot_id=None, source=None,
           created='2026-11-24T01:00:00', size=1):
    return api.cinder.Volume(volumes.Volume(volumes.VolumeManager(None), {
        'id': id, 'name': id, 'status': status, 'size': size,
        'created_at': created, 'snapshot_id': snapshot_id,
        'source_volid': source, 'volume_type': 'blobcr',
        'attachments': [], 'bootable': 'false', 'metadata': {}}))


def snapshot(id, volume_id, version, parent, status='available',
             host='compute-a', group_snapshot=None, created=None, **meta):
    metadata = {'blobcr:version': str(version),
                'blobcr:parent': str(parent), 'blobcr:quiesce': 'fsfreeze',
                'blobcr:bytes_written': '262144', 'blobcr:ack_ms': '12.5',
                'blobcr:held_ms': '9.0'}
    if host:
        metadata['blobcr:host'] = host
    metadata.update({'blobcr:' + k: v for k, v in meta.items()})
    return api.cinder.VolumeSnapshot(volume_snapshots.Snapshot(
        volume_snapshots.SnapshotManager(None), {
            'id': id, 'name': id, 'status': status, 'size': 1,
            'volume_id': volume_id, 'metadata': metadata,
            'created_at': created or '2026-11-24T01:%02d:00' % version,
            'group_snapshot_id': group_snapshot}))


def group_snapshot(id, group_id, status='available'):
    return api.cinder.GroupSnapshot(group_snapshots.GroupSnapshot(
        group_snapshots.GroupSnapshotManager(None), {
            'id': id, 'name': id, 'group_id': group_id, 'status': status,
            'created_at': '2026-11-24T02:00:00'}))


def _attrs(tag):
    return dict(re.findall(r'([\w-]+)="([^"]*)"', tag))


def table_rows(content, table):
    """The attributes of each row of a DataTable, in order."""
    return [_attrs(tag) for tag in re.findall(r'<tr[^>]*>', content)
            if 'id="%s__row__' % table in tag]


def rows_of(content):
    """(kind, id, state) of each checkpoint row of the chains table, in
    order (a volume's state: '').
    """
    return [(r['data-kind'], r['data-object-id'],
             r['data-state'] if r['data-kind'] == 'checkpoint' else '')
            for r in table_rows(content, 'chains')]


def _denying(*denied):
    """A POLICY_CHECK_FUNCTION refusing the ``denied`` rules."""
    def check(actions, request, target=None):
        return not any(rule in denied for _, rule in actions)
    return check


class IndexTests(helpers.TestCase):

    def _show(self, vols, snaps, groups=()):
        self.mock_volume_list.return_value = vols
        self.mock_volume_snapshot_list.return_value = snaps
        self.mock_group_snapshot_list.return_value = list(groups)
        res = self.client.get(INDEX)
        self.assertTemplateUsed(res, 'project/checkpoints/index.html')
        return res, res.content.decode()

    @helpers.create_mocks({api.cinder: ['volume_list', 'volume_snapshot_list',
                                        'group_snapshot_list']})
    def test_chain_drawn_as_tree_with_states_and_clones(self):
        snaps = [snapshot('s4', 'vol', 4, 3, status='creating'),
                 snapshot('d2', 'busy', 2, 1),
                 snapshot('s2', 'vol', 2, 1),
                 snapshot('s3', 'vol', 3, 2, host=None),     # a guest's
                 snapshot('s5', 'vol', 5, 4, status='error'),
                 snapshot('c2', 'clone', 2, 1)]
        vols = [volume('vol'), volume('clone', snapshot_id='s3'),
                volume('busy', status='in-use', created='2026-11-24T03:00')]
        res, content = self._show(vols, snaps)
        self.assertEqual(rows_of(content), [
            ('volume', 'vol', ''), ('checkpoint', 's2', 'stable'),
            ('checkpoint', 's3', 'stable'), ('checkpoint', 's4', 'pending'),
            ('checkpoint', 's5', 'failed'), ('volume', 'clone', ''),
            ('checkpoint', 'c2', 'stable'), ('volume', 'busy', ''),
            ('checkpoint', 'd2', 'stable')])
        shown = res.context['chains_table'].data
        made_by = {r.node.id: r.made_by for r in shown
                   if r.node.kind == 'checkpoint'}
        self.assertEqual(made_by, {'s2': 'operator', 's3': 'guest',
                                   's4': 'operator', 's5': 'operator',
                                   'c2': 'operator', 'd2': 'operator'})
        # The clone hangs under v3 in the drawing, and links to its volume.
        trees = [r.tree for r in shown]
        self.assertEqual(trees[5], '      └─ volume clone')
        self.assertIn('<span class="blobcr-tree"><a href="%s">' % reverse(
            'horizon:project:volumes:detail', args=['clone']), content)
        self.assertNotIn('&lt;span', content)      # markup, not text
        # Revert only to a volume's newest snapshot, and when it is
        # stable: vol's newest (s5) failed, the clone's is c2.
        self.assertNotIn(reverse('horizon:project:checkpoints:revert',
                                 args=['s2']), content)
        self.assertIn(reverse('horizon:project:checkpoints:revert',
                              args=['c2']), content)
        # Nor while the volume is attached.
        self.assertNotIn(reverse('horizon:project:checkpoints:revert',
                                 args=['d2']), content)
        self.assertIn('256.0\xa0KB', content)      # bytes written
        # The pending checkpoint's row (only) is refreshed by ajax.
        ajax = [r['data-object-id'] for r in table_rows(content, 'chains')
                if 'data-update-url' in r and 'warning' in r['class']]
        self.assertEqual(ajax, ['s4'])
        # No volume from a checkpoint that is not stable.
        self.assertNotIn(reverse('horizon:project:checkpoints:create_volume',
                                 args=['s4']), content)
        self.assertIn(reverse('horizon:project:checkpoints:create_volume',
                              args=['s3']), content)

    @helpers.create_mocks({api.cinder: ['volume_list', 'volume_snapshot_list',
                                        'group_snapshot_list']})
    def test_group_checkpoints_with_completeness(self):
        snaps = [snapshot('a1', 'a', 2, 1, group_snapshot='g1', group='G1'),
                 snapshot('b1', 'b', 2, 1, group_snapshot='g1', group='G1'),
                 snapshot('a2', 'a', 3, 2, group_snapshot='g2', group='G2'),
                 snapshot('b2', 'b', 3, 2, group_snapshot='g2', group='G2',
                          status='creating')]
        groups = [group_snapshot('g1', 'job'),
                  group_snapshot('g2', 'job', status='creating')]
        res, content = self._show([volume('a'), volume('b')], snaps, groups)
        groups = res.context['groups_table'].data
        shown = {g.id: (g.stable, len(g.members), g.incomplete)
                 for g in groups}
        members = {g.id: [(v, n.id) for v, n in g.members] for g in groups}
        self.assertEqual(members['g1'], [('a', 'a1'), ('b', 'b1')])
        self.assertEqual(shown['g1'], (2, 2, None))
        self.assertEqual(shown['g2'][:2], (1, 2))
        self.assertIn('creating', shown['g2'][2])
        complete = {r['data-object-id']: r['data-complete']
                    for r in table_rows(content, 'groups')}
        self.assertEqual(complete, {'g1': 'yes', 'g2': 'no'})
        # Restart offered on the complete one only.
        self.assertEqual(content.count(reverse(
            'horizon:project:checkpoints:restart', args=['job'])), 1)
        # The picture cuts through both members of each group.
        cuts = dict(re.findall(r'data-kind="cut" data-id="(\w+)" '
                               r'data-members="(\d+)"', content))
        self.assertEqual(cuts, {'g1': '2', 'g2': '2'})

    @override_settings(POLICY_CHECK_FUNCTION=_denying(
        'volume:create_snapshot', 'volume:revert_to_snapshot'))
    @helpers.create_mocks({api.cinder: ['volume_list', 'volume_snapshot_list',
                                        'group_snapshot_list']})
    def test_actions_follow_the_volume_policy_rules(self):
        res, content = self._show([volume('vol')],
                                  [snapshot('s2', 'vol', 2, 1)])
        self.assertEqual(rows_of(content), [('volume', 'vol', ''),
                                            ('checkpoint', 's2', 'stable')])
        self.assertNotIn('blobcr-take', content)
        self.assertNotIn('/s2/revert/', content)
        self.assertIn('/s2/delete/', content)
        res = self.client.get(reverse('horizon:project:checkpoints:take',
                                      args=['vol']))
        self.assertEqual(res.status_code, 403)      # NotAuthorized

    @override_settings(API_RESULT_PAGE_SIZE=2)
    @helpers.create_mocks({api.cinder: ['volume_list', 'volume_snapshot_list',
                                        'group_snapshot_list']})
    def test_pages_hold_whole_chains(self):
        vols = [volume('v%d' % k, created='2026-11-24T0%d:00' % k)
                for k in range(5)] + [volume('c0', snapshot_id='s0')]
        snaps = [snapshot('s%d' % k, 'v%d' % k, 2, 1) for k in range(5)]
        seen, url, pages = [], INDEX, 0
        while url:
            res, content = self._next(url, vols, snaps)
            seen.append([r[1] for r in rows_of(content)])
            table = res.context['chains_table']
            url = ('%s?%s' % (INDEX, table.get_pagination_string())
                   if table.has_more_data() else None)
            pages += 1
            self.assertLess(pages, 5)
        # Two chains a page; v0's clone stays with v0.
        self.assertEqual(seen, [['v0', 's0', 'c0', 'v1', 's1'],
                                ['v2', 's2', 'v3', 's3'], ['v4', 's4']])
        # And back: the previous link of the last page.
        res, content = self._next('%s?%s' % (
            INDEX, table.get_prev_pagination_string()), vols, snaps)
        self.assertEqual([r[1] for r in rows_of(content)],
                         ['v2', 's2', 'v3', 's3'])
        self.assertTrue(res.context['chains_table'].has_prev_data())

    def _next(self, url, vols, snaps):
        self.mock_volume_list.return_value = vols
        self.mock_volume_snapshot_list.return_value = snaps
        self.mock_group_snapshot_list.return_value = []
        res = self.client.get(url)
        return res, res.content.decode()

    @helpers.create_mocks({api.cinder: ['volume_list', 'volume_snapshot_list',
                                        'group_snapshot_list']})
    def test_pending_row_is_updated_by_ajax(self):
        vols = [volume('vol')]
        self.mock_volume_list.return_value = vols
        self.mock_volume_snapshot_list.return_value = [
            snapshot('s2', 'vol', 2, 1)]
        url = '%s?action=row_update&table=chains&obj_id=%s' % (INDEX, '%s')
        res = self.client.get(url % 's2', HTTP_X_REQUESTED_WITH=(
            'XMLHttpRequest'))
        row = _attrs(re.search(r'<tr[^>]*>', res.content.decode()).group())
        self.assertEqual((row['data-object-id'], row['data-state']),
                         ('s2', 'stable'))
        self.assertNotIn('warning', row['class'])
        # A row gone from Cinder: 404, and Horizon's script drops it.
        res = self.client.get(url % 'gone', HTTP_X_REQUESTED_WITH=(
            'XMLHttpRequest'))
        self.assertEqual(res.status_code, 404)

    @helpers.create_mocks({api.cinder: ['volume_list', 'volume_snapshot_list',
                                        'group_snapshot_list']})
    def test_picture_sizes_dots_by_bytes_and_links_clones(self):
        snaps = [snapshot('s2', 'vol', 2, 1, bytes_written='1048576'),
                 snapshot('s3', 'vol', 3, 2, bytes_written='4096'),
                 snapshot('c2', 'clone', 2, 1, status='creating')]
        vols = [volume('vol'), volume('clone', snapshot_id='s2')]
        res, content = self._show(vols, snaps)
        dots = {d['data-id']: d for d in map(_attrs, re.findall(
            r'<circle[^>]*>', content))}
        self.assertEqual(set(dots), {'s2', 's3', 'c2'})
        self.assertGreater(float(dots['s2']['r']), float(dots['s3']['r']))
        self.assertEqual(dots['c2']['data-state'], 'pending')
        # Later versions further right, on the same lane.
        self.assertGreater(float(dots['s3']['cx']), float(dots['s2']['cx']))
        self.assertEqual(dots['s3']['cy'], dots['s2']['cy'])
        self.assertNotEqual(dots['c2']['cy'], dots['s2']['cy'])
        clones = [(p['data-from'], p['data-to']) for p in map(
            _attrs, re.findall(r'<path[^>]*data-kind="clone"[^>]*>',
                               content))]
        self.assertEqual(clones, [('s2', 'clone')])

    @helpers.create_mocks({api.cinder: ['volume_list', 'volume_snapshot_list',
                                        'group_snapshot_list']})
    def test_picture_keeps_minutes_apart_beside_weeks(self):
        # Checkpoints a minute apart, then three weeks later two more a
        # minute apart: on a linear axis the minutes would be one dot.
        times = ['2026-10-01T10:00:00', '2026-10-01T10:01:00',
                 '2026-10-22T10:00:00', '2026-10-22T10:01:00']
        snaps = [snapshot('s%d' % k, 'vol', k + 2, k + 1, created=when)
                 for k, when in enumerate(times)]
        res, content = self._show(
            [volume('vol', created='2026-10-01T09:59:00')], snaps)
        xs = [float(d['cx']) for d in sorted(
            map(_attrs, re.findall(r'<circle[^>]*>', content)),
            key=lambda d: d['data-id'])]
        gaps = [b - a for a, b in zip(xs, xs[1:])]
        self.assertTrue(all(g >= 6 for g in gaps), xs)
        # The three weeks are one break, its length written on it.
        breaks = [_attrs(t) for t in re.findall(
            r'<g[^>]*data-kind="break"[^>]*>', content)]
        self.assertEqual([float(b['data-seconds']) for b in breaks],
                         [21 * 86400 - 60])
        self.assertIn('21 d without a checkpoint', content)


class ActionTests(helpers.TestCase):

    @helpers.create_mocks({chains: ['volume_get'],
                           api.cinder: ['volume_snapshot_create',
                                        'volume_type_list',
                                        'volume_type_extra_get']})
    def test_take_checkpoint_of_attached_volume(self):
        self.mock_volume_get.return_value = volume('vol', status='in-use')
        self.mock_volume_type_list.return_value = []
        self.mock_volume_snapshot_create.return_value = snapshot(
            'new', 'vol', 3, 2, status='creating')
        url = reverse('horizon:project:checkpoints:take', args=['vol'])
        res = self.client.get(url)
        self.assertEqual(res.context['form'].initial['name'],
                         'vol-checkpoint')
        self.assertContains(res, 'Quiesce mode')
        res = self.client.post(url, {'name': 'cp-1', 'description': ''})
        self.assertNoFormErrors(res)
        self.assertRedirectsNoFollow(res, INDEX)
        self.mock_volume_snapshot_create.assert_called_once_with(
            helpers.IsHttpRequest(), 'vol', 'cp-1', '', force=True)

    @helpers.create_mocks({chains: ['volume_get'],
                           api.cinder: ['volume_snapshot_create',
                                        'cinderclient',
                                        'volume_type_list',
                                        'volume_type_extra_get']})
    def test_take_checkpoint_with_a_quiesce_mode(self):
        self.mock_volume_get.return_value = volume('vol', status='in-use')
        self.mock_volume_type_list.return_value = []
        url = reverse('horizon:project:checkpoints:take', args=['vol'])
        res = self.client.post(url, {'name': 'cp-2', 'description': '',
                                     'quiesce': 'thaw'})
        self.assertFormErrors(res, 1)
        res = self.client.post(url, {'name': 'cp-2', 'description': 'd',
                                     'quiesce': 'fsfreeze'})
        self.assertNoFormErrors(res)
        self.assertRedirectsNoFollow(res, INDEX)
        self.mock_volume_snapshot_create.assert_not_called()
        create = self.mock_cinderclient.return_value.volume_snapshots.create
        create.assert_called_once_with(
            'vol', force=True, name='cp-2', description='d',
            metadata={'blobcr:quiesce': 'fsfreeze'})

    @helpers.create_mocks({api.cinder: ['volume_snapshot_get',
                                        'volume_create']})
    def test_create_volume_from_checkpoint(self):
        self.mock_volume_snapshot_get.return_value = snapshot('s2', 'vol',
                                                              2, 1)
        self.mock_volume_create.return_value = volume('new')
        url = reverse('horizon:project:checkpoints:create_volume',
                      args=['s2'])
        res = self.client.post(url, {'name': 'small', 'size': 0})
        self.assertFormErrors(res, 1)
        self.mock_volume_create.assert_not_called()
        res = self.client.post(url, {'name': 'new', 'size': 2})
        self.assertNoFormErrors(res)
        self.mock_volume_create.assert_called_once_with(
            helpers.IsHttpRequest(), 2, 'new', '', None, snapshot_id='s2')

    @helpers.create_mocks({api.cinder: ['volume_snapshot_get',
                                        'cinderclient']})
    def test_revert_to_checkpoint(self):
        self.mock_volume_snapshot_get.return_value = snapshot('s2', 'vol',
                                                              2, 1)
        url = reverse('horizon:project:checkpoints:revert', args=['s2'])
        res = self.client.post(url, {})
        self.assertNoFormErrors(res)
        self.mock_cinderclient.assert_called_once_with(
            helpers.IsHttpRequest(), '3.40')
        client = self.mock_cinderclient.return_value
        client.volumes.revert_to_snapshot.assert_called_once_with('vol',
                                                                  's2')

    @helpers.create_mocks({api.cinder: ['volume_snapshot_delete']})
    def test_delete_checkpoint(self):
        url = reverse('horizon:project:checkpoints:delete', args=['s2'])
        res = self.client.post(url, {})
        self.assertNoFormErrors(res)
        self.mock_volume_snapshot_delete.assert_called_once_with(
            helpers.IsHttpRequest(), 's2')

    @helpers.create_mocks({api.cinder: ['volume_snapshot_delete']})
    def test_failed_delete_says_so(self):
        self.mock_volume_snapshot_delete.side_effect = self.exceptions.cinder
        url = reverse('horizon:project:checkpoints:delete', args=['s2'])
        res = self.client.post(url, {})
        self.assertRedirectsNoFollow(res, INDEX)
        self.assertMessageCount(error=1)


class StubCloud(object):
    """blobcr-restart's Cloud for the view test (mock: the group part of
    Cinder; tests/integration/test_restart.py runs it on a real one).
    """

    def __init__(self):
        self.created = []

    def group(self, group_id):
        return {'id': group_id, 'name': 'job'}

    def group_snapshots(self, group_id):
        return [{'id': 'old', 'status': 'available',
                 'created_at': '2026-11-24T01:00:00'},
                {'id': 'new', 'status': 'error',
                 'created_at': '2026-11-24T02:00:00'}]

    def snapshots_of(self, group_snapshot_id):
        return [{'id': '%s-%s' % (group_snapshot_id, v), 'volume_id': v,
                 'size': 1, 'status': 'available',
                 'metadata': {'blobcr:group': group_snapshot_id}}
                for v in ('a', 'b')]

    def create_volume(self, snapshot, name):
        self.created.append((snapshot['id'], name))
        return {'id': 'vol-' + name}

    def get_volume(self, volume_id):
        return {'status': 'available'}

    def set_bootable(self, volume_id):
        pass


class RestartTests(helpers.TestCase):

    def test_restart_group_without_boot(self):
        cloud = StubCloud()
        url = reverse('horizon:project:checkpoints:restart', args=['job'])
        with mock.patch.object(restarts, 'cloud_of', return_value=cloud), \
                mock.patch.object(restarts, 'launch') as launch:
            res = self.client.post(url, {'name_prefix': 'again',
                                         'flavor': ''})
            self.assertNoFormErrors(res)
        # Planned here: the newest complete group checkpoint ('new'
        # failed); run by blobcr-restart in its own process.
        (_, the_plan, prefix, flavor, boot), _ = launch.call_args
        self.assertEqual((the_plan['group_snapshot'], prefix, boot),
                         ('old', 'again', False))
        self.assertEqual(cloud.created, [])

    def test_restarts_keep_their_state_under_horizons_local_path(self):
        with tempfile.TemporaryDirectory() as local, \
                override_settings(LOCAL_PATH=local, BLOBCR_RESTART_DIR=None):
            self.assertEqual(restarts.jobs('p-1'), {})
            self.assertTrue(os.path.isdir(
                os.path.join(local, 'blobcr-restarts', 'p-1')))

    def test_restart_runs_in_a_process_of_its_own(self):
        """A real blobcr-restart process, detached from this one, against
        a Keystone that does not answer (127.0.0.1:9, nothing listens):
        the job is seen running, then failed with the reason.
        """
        request = self.request
        request.user.services_region = None
        with tempfile.TemporaryDirectory() as top, \
                override_settings(BLOBCR_RESTART_DIR=top), \
                mock.patch('openstack_dashboard.api.base.url_for',
                           return_value='http://127.0.0.1:9/v3'):
            job = restarts.launch(request, {
                'group': 'job', 'group_snapshot': 'gs-1',
                'members': [{}, {}]}, 'again', None, False)
            meta = json.load(open(os.path.join(
                top, request.user.project_id, job + '.meta')))
            # Its own session: a worker's signals to its group miss it.
            self.assertEqual(os.getsid(meta['pid']), meta['pid'])
            deadline = time.monotonic() + 60
            while True:
                found = restarts.jobs(request.user.project_id)['gs-1']
                if found.state != 'running' or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            mode = os.stat(os.path.join(top, request.user.project_id)).st_mode
        self.assertEqual(found.state, 'failed', found)
        self.assertIn('127.0.0.1', found.error)
        self.assertEqual(mode & 0o777, 0o700)

    def test_restart_session_follows_horizons_settings(self):
        request = self.request
        for overrides, verify, interface in (
                ({}, True, 'public'),
                ({'OPENSTACK_ENDPOINT_TYPE': 'internalURL',
                  'OPENSTACK_SSL_CACERT': '/etc/ssl/cloud-ca.pem'},
                 '/etc/ssl/cloud-ca.pem', 'internal'),
                ({'OPENSTACK_ENDPOINT_TYPE': 'adminURL',
                  'OPENSTACK_SSL_CACERT': '/etc/ssl/cloud-ca.pem',
                  'OPENSTACK_SSL_NO_VERIFY': True}, False, 'admin')):
            with override_settings(**overrides):
                cloud = restarts.cloud_of(request)
            self.assertEqual((cloud.session.verify, cloud.interface,
                              cloud.volume.interface),
                             (verify, interface, interface))

    def test_restart_needs_a_flavor_to_boot(self):
        url = reverse('horizon:project:checkpoints:restart', args=['job'])
        with mock.patch.object(restarts, 'cloud_of') as cloud_of:
            res = self.client.post(url, {'boot': 'on', 'flavor': ''})
        self.assertFormErrors(res, 1)
        cloud_of.assert_not_called()
