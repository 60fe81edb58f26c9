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

"""The Cinder driver's failure paths as Cinder's own driver tests write
them (RBD, StorPool, LINSTOR): unittest cases, a driver built on a mock
Configuration, Cinder's fake volume, snapshot and attachment objects,
``mock.patch.object`` on the agents' RPC API (an autospec of AgentAPI),
on Cinder's records and on Nova's client (cinder.compute.nova
.novaclient, which compute_hosts asks os-services through).

Run by test_driver_failures.py in a child process (importing cinder's
test fakes loads and monkey-patches eventlet); not collected by pytest
itself. The real services are tests/integration/test_cinder_*.py's;
these drive the paths they cannot reach, in milliseconds, beside
test_cinder_driver_paths.py and test_cinder_driver_records.py.
"""

import copy
import functools
import unittest
from unittest import mock

from cinder import context
from cinder import exception
from cinder import objects
from cinder.tests.unit import fake_constants as fake
from cinder.tests.unit import fake_snapshot
from cinder.tests.unit import fake_volume
from cinder.volume import configuration as conf
from keystoneauth1 import exceptions as ks_exceptions
from novaclient import exceptions as nova_exceptions
import oslo_messaging as messaging
from oslo_utils import uuidutils

from blobcr_cinder import compute_hosts
from blobcr_cinder import driver
from blobcr_cinder import groups
from blobcr_common import exception as agent_exception
from blobcr_common.rpc import api as agent_api

objects.register_all()

TIMEOUT = messaging.MessagingTimeout('Timed out waiting for a reply')
DIRTY = {'attached': {'img-1': {'dirty': 1, 'epoch': 1}}}
CLEAN = {'attached': {'img-1': {'dirty': 0, 'epoch': 1}}}
UP = {'state': 'up', 'forced_down': False}
DOWN = {'state': 'down', 'forced_down': False}
FORCED = {'state': 'up', 'forced_down': True}
OTHER_INSTANCE = 'c6d0a1f6-6d4e-4a43-9d1b-2f5b0e1f8c31'
MEMBER_IDS = {1: (fake.VOLUME_ID, fake.SNAPSHOT_ID),
              2: (fake.VOLUME2_ID, fake.SNAPSHOT2_ID),
              3: (fake.VOLUME3_ID, fake.SNAPSHOT3_ID)}


class DriverTestCase(unittest.TestCase):

    def setUp(self):
        super().setUp()
        self.ctxt = context.get_admin_context()
        self.cfg = mock.Mock(spec=conf.Configuration)
        self.cfg.safe_get.return_value = None
        self.cfg.blobcr_agent_host = 'storage'
        self.cfg.blobcr_alive_probe_timeout = 3
        self.cfg.blobcr_retry_probe_timeout = 20
        self.cfg.blobcr_rpc_timeout = 60
        self.cfg.blobcr_snapshot_timeout = 600
        self.cfg.blobcr_default_quiesce = 'none'
        self.cfg.blobcr_connection_type = 'blobcr'
        self.driver = driver.BlobCRDriver(configuration=self.cfg,
                                          host='cinder-host@blobcr')
        self.api = mock.create_autospec(agent_api.AgentAPI, instance=True)
        self.driver.api = self.api
        self.answers = {}
        for name in dir(agent_api.AgentAPI):
            if not name.startswith('_') and callable(
                    getattr(agent_api.AgentAPI, name)):
                getattr(self.api, name).side_effect = functools.partial(
                    lambda method, *args, **kwargs: self._reply(method, args),
                    name)
        self.db = []
        self._patch(objects.VolumeAttachmentList, 'get_all_by_volume_id',
                    side_effect=lambda ctxt, volume_id: list(self.db))
        self.snapshots = []
        self._patch(objects.SnapshotList, 'get_all_for_volume',
                    side_effect=lambda ctxt, volume_id: self.snapshots)
        self._patch(driver.socket, 'gethostname', return_value='cinder-host')
        self.nova = mock.Mock()
        self.nova.services.list.return_value = []
        self.novaclient = self._patch(compute_hosts.nova, 'novaclient',
                                      autospec=True, return_value=self.nova)

    def _patch(self, target, name, **kwargs):
        patcher = mock.patch.object(target, name, **kwargs)
        self.addCleanup(patcher.stop)
        return patcher.start()

    def _reply(self, method, args):
        """What ``method``'s agent answers: per host, else '*'."""
        by_host = self.answers.get(method, {})
        got = by_host.get(args[0] if args else None, by_host.get('*'))
        if isinstance(got, BaseException):
            raise got
        return copy.deepcopy(got)

    def answer(self, method, by_host):
        """The agent of each host answers ``method`` with this (raised
        if an exception).
        """
        self.answers[method] = by_host

    def calls(self):
        """(method, host) of each agent call, in order."""
        return [(name, args[0] if args else None)
                for name, args, kwargs in self.api.mock_calls]

    def attachment(self, host, status='attached', instance=fake.INSTANCE_ID,
                   epoch=1):
        info = None if epoch is None else {
            'driver_volume_type': 'blobcr',
            'data': {'blobcr_image': 'img-1', 'blobcr_epoch': epoch}}
        return objects.VolumeAttachment(
            self.ctxt, id=uuidutils.generate_uuid(), volume_id=fake.VOLUME_ID,
            attached_host=host, attach_status=status,
            instance_uuid=instance, connection_info=info)

    def volume(self, *attachments, vid=fake.VOLUME_ID, image='img-1'):
        """A volume whose attachments are ``attachments``, in the
        database too.
        """
        vol = fake_volume.fake_volume_obj(
            self.ctxt, id=vid, provider_id=image, size=1,
            project_id=fake.PROJECT_ID)
        vol.volume_type = None
        vol.volume_attachment = objects.VolumeAttachmentList(
            objects=list(attachments))
        self.db.extend(attachments)
        return vol

    def services(self, *states):
        self.nova.services.list.return_value = [
            mock.Mock(host='host-a', binary='nova-compute', **s)
            for s in states]


class TerminateConnectionTestCase(DriverTestCase):
    """A refusal or a timeout mid-way through a detach."""

    def setUp(self):
        super().setUp()
        self.vol = self.volume(self.attachment('host-a'))
        self.answer('status', {'host-a': DIRTY})
        self.answer('checkpoint', {'host-a': {'image': 'img-1',
                                              'version': 4}})

    def test_detach_timing_out_after_the_checkpoint_fails_and_prunes(self):
        self.answer('detach', {'host-a': TIMEOUT})
        with self.assertRaisesRegex(exception.VolumeBackendAPIException,
                                    'host-a does not answer \\(detach\\)'):
            self.driver.terminate_connection(self.vol, {'host': 'host-a'})
        self.api.checkpoint.assert_called_once_with(
            'host-a', 'img-1', quiesce='none', label=driver.MADE_BY)
        self.api.detach.assert_called_once_with(
            'host-a', 'img-1', force=False, background=True)
        # Still attached: nothing pruned, nothing taken over.
        self.api.list_versions.assert_not_called()
        self.api.obsolete.assert_not_called()
        self.api.take_over.assert_not_called()

    def test_detach_refused_by_an_unrebuilt_remote_error(self):
        """An agent error oslo.messaging cannot rebuild (libvirt's)."""
        self.answer('detach', {'host-a': messaging.RemoteError(
            'libvirtError', 'Domain not found')})
        with self.assertRaisesRegex(exception.VolumeBackendAPIException,
                                    'BlobCR detach on host-a failed'):
            self.driver.terminate_connection(self.vol, {'host': 'host-a'},
                                             force=True)
        self.assertEqual([('status', 'host-a'), ('checkpoint', 'host-a'),
                          ('detach', 'host-a')], self.calls())
        self.assertIs(True, self.api.detach.call_args.kwargs['force'])

    def test_an_agent_not_saying_dirty_gets_a_final_checkpoint(self):
        self.answer('status', {'host-a': {'attached': {'img-1': {}}}})
        self.answer('list_versions', {'storage': {'head': None}})
        self.driver.terminate_connection(self.vol, {'host': 'host-a'})
        self.assertEqual([('status', 'host-a'), ('checkpoint', 'host-a'),
                          ('detach', 'host-a'), ('list_versions', 'storage')],
                         self.calls())


class ProbeTestCase(DriverTestCase):
    """host-a's agent misses both probes: what Nova's os-services say
    decides.
    """

    def setUp(self):
        super().setUp()
        self.answer('status', {'host-a': TIMEOUT})
        self.answer('list_versions', {'storage': {'epoch': 1, 'head': 3,
                                                  'versions': []}})
        self.answer('take_over', {'storage': {'version': 3, 'epoch': 2}})

    def _detach(self, vol, host='host-a'):
        return self.driver.terminate_connection(vol, {'host': host})

    def _refused(self, vol):
        with self.assertRaisesRegex(exception.VolumeBackendAPIException,
                                    'stays attached there'):
            self._detach(vol)
        self.api.take_over.assert_not_called()
        self.api.detach.assert_not_called()
        self.assertEqual([3, 20], [c.kwargs['timeout'] for c in
                                   self.api.status.call_args_list])

    def test_nova_unreachable_in_every_way_is_no_evidence(self):
        for error in (ks_exceptions.EndpointNotFound('no compute endpoint'),
                      ks_exceptions.ConnectTimeout('nova-api timed out'),
                      nova_exceptions.Forbidden(403, 'admin only'),
                      nova_exceptions.ClientException(503, 'unavailable')):
            with self.subTest(error=type(error).__name__):
                self.api.reset_mock()
                self.answers['status'] = {'host-a': TIMEOUT}
                self.nova.services.list.side_effect = error
                self._refused(self.volume(self.attachment('host-a')))

    def test_nova_asked_with_the_privileged_user_at_2_11(self):
        self.services(UP)
        self._refused(self.volume(self.attachment('host-a')))
        self.novaclient.assert_called_once_with(
            mock.ANY, privileged_user=True, api_version='2.11')
        self.nova.services.list.assert_called_once_with(
            host='host-a', binary='nova-compute')

    def test_one_down_service_of_several_is_down(self):
        self.services(UP, DOWN)
        self._detach(self.volume(self.attachment('host-a')))
        self.api.take_over.assert_called_once_with(
            'storage', 'img-1', mock.ANY)
        self.assertIn('Nova reports nova-compute on host-a down',
                      self.api.take_over.call_args.args[2])

    def test_a_stale_epoch_is_read_from_the_hosts_own_attachment(self):
        """Two attachments: host-b's records the new epoch, host-a's the
        old one; host-a was fenced, Nova is not asked.
        """
        self.answer('list_versions', {'storage': {'epoch': 2, 'head': 3,
                                                  'versions': []}})
        vol = self.volume(self.attachment('host-a', epoch=1),
                          self.attachment('host-b', 'attaching', epoch=2))
        self.assertIsNone(self._detach(vol))
        self.nova.services.list.assert_not_called()
        self.api.take_over.assert_not_called()
        self.api.detach.assert_not_called()

    def _migration(self, source_says, source_instance=fake.INSTANCE_ID):
        """A live migration from host-a to host-b, both records
        'attached' (Nova completes the destination's attachment in
        pre_live_migration); host-b down and silent; host-a's agent
        answers ``source_says``. host-b's detach: the take-over's
        reason, or None if there was none.
        """
        self.answer('status', {'host-b': TIMEOUT, 'host-a': source_says})
        self.services(FORCED)
        vol = self.volume(self.attachment('host-a',
                                          instance=source_instance),
                          self.attachment('host-b'))
        self.assertIsNone(self._detach(vol, 'host-b'))
        self.api.detach.assert_not_called()
        if not self.api.take_over.called:
            return None
        self.api.take_over.assert_called_once_with('storage', 'img-1',
                                                   mock.ANY)
        return self.api.take_over.call_args.args[2]

    def test_a_live_migrations_dead_destination_fences_not_the_source(self):
        """Rolled back before the handoff: host-a's agent itself says it
        holds the image: detached without a take-over (which, image-wide,
        would fence the guest running on host-a).
        """
        self.assertIsNone(self._migration(
            {'attached': {'img-1': {'incoming': None}}}))
        self.nova.services.list.assert_called_once_with(
            host='host-b', binary='nova-compute')
        self.assertIn(('status', 'host-a'), self.calls())

    def test_a_destination_that_took_the_handoff_is_fenced(self):
        """host-b took the handoff (host-a detached) and died: host-a's
        record alone, still 'attached', spares nothing: host-b is taken
        over, or it could write again if it came back.
        """
        self.assertIn('host-b', self._migration({'attached': {}}))

    def test_a_host_still_receiving_the_handoff_spares_nothing(self):
        """host-a is receiving the image from host-b (the handoff not
        done: the guest ran on host-b, now dead): host-b is taken over.
        """
        self.assertIsNotNone(self._migration({'attached': {'img-1': {
            'incoming': {'source': 'host-b', 'done': False}}}}))

    def test_a_host_that_took_the_handoff_holds_the_image(self):
        """host-a took the handoff (done: its guest runs and writes)
        and host-b's record was left 'attached': no take-over, which
        would fence host-a's guest. The status as the agent gives it
        (Incoming.status()).
        """
        self.assertIsNone(self._migration({'attached': {'img-1': {
            'incoming': {'source': 'host-b', 'done': True, 'version': 4,
                         'early_reads': 0, 'waited_ms': 1.0,
                         'source_phases': {}, 'source_chunks': 3}}}}))

    def test_a_silent_holder_fails_the_detach_taking_nothing_over(self):
        """host-a, which may hold the guest, does not answer: the
        detach fails saying why and what to do, and nothing is fenced.
        """
        self.answer('status', {'host-b': TIMEOUT, 'host-a': TIMEOUT})
        self.services(FORCED)
        vol = self.volume(self.attachment('host-a'),
                          self.attachment('host-b'))
        with self.assertRaisesRegex(exception.VolumeBackendAPIException,
                                    'host-a.*does not answer.*not taken '
                                    'over'):
            self._detach(vol, 'host-b')
        self.api.take_over.assert_not_called()
        self.api.detach.assert_not_called()

    def test_a_record_of_another_instance_spares_nothing(self):
        """A stale or forged 'attached' record of another instance on
        host-a: its agent is not even asked, and host-b is fenced.
        """
        self.assertIsNotNone(self._migration(
            {'attached': {'img-1': {}}}, source_instance=OTHER_INSTANCE))
        self.assertNotIn(('status', 'host-a'), self.calls())

    def test_a_dead_host_attached_alone_is_taken_over(self):
        """The same, host-a's attachment gone: host-b is given up."""
        self.answer('status', {'host-b': TIMEOUT})
        self.services(FORCED)
        vol = self.volume(self.attachment('host-b', 'attaching'))
        self.assertIsNone(self._detach(vol, 'host-b'))
        self.api.take_over.assert_called_once_with(
            'storage', 'img-1', mock.ANY)
        self.assertTrue(self.api.take_over.call_args.args[2].startswith(
            'detach from host-b: Nova reports nova-compute on host-b forced '
            'down'))


class MigratingInstanceTestCase(DriverTestCase):

    def test_a_failed_attachment_of_another_instance_blocks_it(self):
        vol = self.volume(self.attachment('host-a'),
                          self.attachment(None, 'reserved'),
                          self.attachment('host-c', 'error_attaching',
                                          instance=OTHER_INSTANCE))
        with self.assertRaisesRegex(exception.VolumeBackendAPIException,
                                    'attached on host-a'):
            self.driver.initialize_connection(vol, {'host': 'host-b'})
        self.api.attach.assert_not_called()

    def test_its_own_instance_connects_from_the_source(self):
        self.answer('attach', {'host-b': {'image': 'img-1',
                                          'path': '/m/img-1', 'epoch': 1}})
        vol = self.volume(self.attachment('host-a'),
                          self.attachment(None, 'reserved'))
        info = self.driver.initialize_connection(vol, {'host': 'host-b'})
        self.api.attach.assert_called_once_with(
            'host-b', 'img-1', instance=fake.INSTANCE_ID,
            project=fake.PROJECT_ID, migrate_from='host-a',
            block_device=False, durability=None)
        self.assertEqual(1, info['data']['blobcr_epoch'])


class ForgetSupersededTestCase(DriverTestCase):

    def test_a_refused_revert_prunes_nothing(self):
        self.answer('revert', {'storage': agent_exception.Busy(
            'image img-1 is attached on host-a')})
        snap = fake_snapshot.fake_snapshot_obj(
            self.ctxt, provider_id='img-1@2')
        with self.assertRaisesRegex(exception.VolumeIsBusy,
                                    'img-1 is attached on host-a'):
            self.driver.revert_to_snapshot(self.ctxt, self.volume(), snap)
        self.assertEqual([('revert', 'storage')], self.calls())

    def test_a_revert_prunes_the_drivers_old_versions(self):
        self.answer('list_versions', {'storage': {'head': 5, 'versions': [
            {'version': v, 'state': 'stable', 'made_by': by, 'clones': []}
            for v, by in ((2, None), (3, 'cinder'), (4, 'revert'),
                          (5, 'revert'))]}})
        self.snapshots = [fake_snapshot.fake_snapshot_obj(
            self.ctxt, provider_id='img-1@3', status='available')]
        snap = fake_snapshot.fake_snapshot_obj(
            self.ctxt, provider_id='img-1@3')
        self.driver.revert_to_snapshot(self.ctxt, self.volume(), snap)
        self.api.revert.assert_called_once_with('storage', 'img-1', 3)
        # Not 2 (a guest's), 3 (a snapshot's), 5 (the head).
        self.api.obsolete.assert_called_once_with('storage', 'img-1', [4])


class GroupSnapshotTestCase(DriverTestCase):
    """A consistent group snapshot of img-1 (attached on host-a) and
    img-2 (on host-b) whose phase fails on one host.
    """

    def setUp(self):
        super().setUp()
        self._patch(groups.volume_utils, 'is_group_a_cg_snapshot_type',
                    return_value=True)
        self.group_snapshot = objects.GroupSnapshot(
            self.ctxt, id=fake.GROUP_SNAPSHOT_ID)
        self.members = [self.member(1, 'host-a'), self.member(2, 'host-b')]
        self.answer('can_batch_members', {None: True})
        self.answer('hold_members', {
            'host-a': [{'image': 'img-1', 'held': True}],
            'host-b': [{'image': 'img-2', 'held': True}]})
        self.answer('checkpoint_members', {
            'host-a': [{'image': 'img-1', 'version': 5}],
            'host-b': [{'image': 'img-2', 'version': 6}]})
        self.answer('checkpoint', {
            'host-a': {'image': 'img-1', 'version': 5},
            'host-b': {'image': 'img-2', 'version': 6}})
        self.answer('wait_stable', {'*': 'stable'})

    def member(self, n, host):
        attachments = [self.attachment(host)] if host else []
        vid, sid = MEMBER_IDS[n]
        vol = self.volume(*attachments, vid=vid, image='img-%d' % n)
        snap = fake_snapshot.fake_snapshot_obj(self.ctxt, id=sid)
        snap.volume = vol
        return snap

    def _fails(self, error, says):
        with self.assertRaisesRegex(error, says):
            self.driver.create_group_snapshot(
                self.ctxt, self.group_snapshot, self.members)

    def released(self):
        return sorted(c.args for c in self.api.release.call_args_list)

    def forgotten(self):
        return sorted(c.args for c in self.api.delete_snapshot.call_args_list)

    def test_a_checkpoint_failing_on_one_host_forgets_the_other(self):
        self.answers['checkpoint_members']['host-b'] = \
            agent_exception.CommitAborted('COMMIT failed: backend full')
        self._fails(exception.VolumeBackendAPIException,
                    'checkpoint_members on host-b failed: COMMIT failed')
        # Both holds released (host-b's whose members failed too), the
        # version host-a took deleted once stable; host-b kept none.
        self.assertEqual([('host-a', 'img-1'), ('host-b', 'img-2')],
                         self.released())
        self.api.wait_stable.assert_called_once_with(
            'host-a', 'img-1', 5, timeout=60)
        self.assertEqual([('storage', 'img-1', 5)], self.forgotten())

    def test_a_hold_timing_out_releases_every_member_takes_nothing(self):
        self.answers['hold_members']['host-b'] = TIMEOUT
        self._fails(exception.VolumeBackendAPIException,
                    'host-b does not answer \\(hold_members\\)')
        self.assertEqual([('host-a', 'img-1'), ('host-b', 'img-2')],
                         self.released())
        self.api.checkpoint_members.assert_not_called()
        self.api.delete_snapshot.assert_not_called()

    def test_an_agents_builtin_error_still_releases_every_hold(self):
        """oslo.messaging rebuilds an agent's OSError as an OSError, not
        a Cinder error: host-a's guest is released all the same.
        """
        self.answers['hold_members']['host-b'] = OSError(5, 'I/O error')
        self._fails(OSError, 'I/O error')
        self.assertEqual([('host-a', 'img-1'), ('host-b', 'img-2')],
                         self.released())
        self.api.checkpoint_members.assert_not_called()

    def test_a_member_failing_to_persist_forgets_every_version(self):
        self.answer('wait_stable', {'host-a': 'stable', 'host-b': 'failed'})
        self.answer('list_versions', {'storage': {'versions': [
            {'version': 5, 'parent': 4, 'stored_bytes': 0, 'chunks': 0,
             'created': 0, 'group': None, 'made_by': 'cinder'},
            {'version': 6, 'error': 'backend full'}]}})
        self._fails(exception.VolumeBackendAPIException,
                    'version 6 of image img-2 failed: backend full')
        self.assertEqual([('storage', 'img-1', 5), ('storage', 'img-2', 6)],
                         self.forgotten())
        # Released by their agents after each COMMIT: not again.
        self.api.release.assert_not_called()

    def test_below_1_14_a_hold_refused_mid_way_releases_both(self):
        self.answer('can_batch_members', {None: False})
        self.answer('hold', {'host-a': None, 'host-b': agent_exception.Busy(
            'domain instance-2 is migrating')})
        self._fails(exception.VolumeIsBusy, 'img-2 \\(domain instance-2')
        self.assertEqual([('host-a', 'img-1'), ('host-b', 'img-2')],
                         self.released())
        self.api.checkpoint.assert_not_called()
        self.api.hold_members.assert_not_called()

    def test_below_1_14_a_checkpoint_failing_forgets_the_other(self):
        self.answer('can_batch_members', {None: False})
        self.answer('hold', {'*': None})
        self.answers['checkpoint']['host-b'] = TIMEOUT
        self._fails(exception.VolumeBackendAPIException,
                    'host-b does not answer \\(checkpoint\\)')
        self.assertEqual([('host-a', 'img-1'), ('host-b', 'img-2')],
                         self.released())
        self.assertEqual([('storage', 'img-1', 5)], self.forgotten())
        self.assertEqual(
            {'group': 'cinder-%s' % fake.GROUP_SNAPSHOT_ID, 'members': 2},
            {k: self.api.checkpoint.call_args.kwargs[k]
             for k in ('group', 'members')})

    def test_a_detached_members_copy_failing_forgets_the_checkpoint(self):
        self.members[1] = self.member(3, None)
        self.answer('snapshot', {'storage': agent_exception.ImageNotFound(
            'img-3')})
        self._fails(exception.VolumeBackendAPIException,
                    'snapshot on storage: .*img-3')
        self.assertEqual([('storage', 'img-1', 5)], self.forgotten())
        # One attached member: nothing was held.
        self.api.hold_members.assert_not_called()
        self.api.release.assert_not_called()
