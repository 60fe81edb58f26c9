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

"""What the Cinder driver reads from Cinder's records, and its failure
paths (issue 56, item 1): _migrating_instance (which attachments make a
live migration, and initialize_connection on it), _forget_superseded
(which versions a detach prunes, and when it prunes none) and a group
snapshot whose phase fails (admission refused; a version left that the
next detach prunes).

The stand-ins are test_cinder_driver_paths.py's (its docstring says
what they are and why): no real Cinder, Nova or agent, which the
integration tests cover. In one child process, for eventlet's sake.
"""

import pytest

from tests.unit.test_cinder_driver_paths import calls_of
from tests.unit.test_cinder_driver_paths import DETACHED_CLEAN
from tests.unit.test_cinder_driver_paths import failed
from tests.unit.test_cinder_driver_paths import only_call
from tests.unit.test_cinder_driver_paths import run_child

SCENARIOS = r'''
# -- _migrating_instance ------------------------------------------------------

MIGRATIONS = {
    'migrating': [ON_A, attachment(None, status='reserved')],
    'attaching': [ON_A, attachment('host-b', status='attaching')],
    'here': [attachment('cinder-host'), attachment(None, 'reserved')],
    'other_pending': [ON_A, attachment(None, 'reserved', 'i-2')],
    'no_pending': [ON_A],
    'both_pending': [ON_A, attachment(None, 'reserved'),
                     attachment(None, 'reserved', 'i-2')],
    'two_on_source': [ON_A, attachment('host-a', instance='i-2'),
                      attachment(None, 'reserved')],
    'cinder_own': [attachment('host-a', instance=None),
                   attachment(None, 'reserved', None)],
}


@case()
def migrations(d):
    out = {}
    for name, db in MIGRATIONS.items():
        source = 'storage' if name == 'here' else 'host-a'
        with mock.patch.object(objects.VolumeAttachmentList,
                               'get_all_by_volume_id', return_value=db):
            out[name] = d._migrating_instance(volume(), source)
    return out


ATTACHED = {('attach', 'host-b'): {'image': 'img-1', 'path': '/m/img-1',
                                   'epoch': 1}}


@case(ATTACHED, db=MIGRATIONS['migrating'])
def connect_migrating(d):
    return d.initialize_connection(volume(*MIGRATIONS['migrating']),
                                   {'host': 'host-b'})


@case(ATTACHED, db=MIGRATIONS['other_pending'])
def connect_elsewhere(d):
    return d.initialize_connection(volume(*MIGRATIONS['other_pending']),
                                   {'host': 'host-b'})


# -- _forget_superseded -------------------------------------------------------

MIX = [(4, 'stable', 'revert', []), (5, 'pending', 'cinder', []),
       (6, 'stable', 'kept', []), (7, 'stable', 'unmanaged:s9', []),
       (8, 'stable', 'cinder', ['img-7']), (9, 'stable', 'cinder', []),
       (10, 'stable', 'cinder', [])]
SNAPSHOTS = [{'status': 'available', 'provider_id': 'img-1@9'},
             {'status': 'error', 'provider_id': None}]


@case({('list_versions', 'storage'): listed(10, 1, *MIX)},
      snapshots=SNAPSHOTS)
def forget_selects(d):
    return d._forget_superseded(volume())


@case({('list_versions', 'storage'): dict(listed(10, 1, *MIX), head=None)})
def forget_without_head(d):
    return d._forget_superseded(volume())


@case({('list_versions', 'storage'): listed(10, 1, *MIX)},
      snapshots=SNAPSHOTS + [{'status': 'creating', 'provider_id': None}])
def forget_while_creating(d):
    return d._forget_superseded(volume())


@case({('list_versions', 'storage'): listed(10, 1, *MIX),
       ('obsolete', 'storage'): agent_exception.BlobCRError('read-only')})
def forget_refused(d):
    return d._forget_superseded(volume())


# -- a group snapshot's phase failing ----------------------------------------

def group_members():
    return [types.SimpleNamespace(id='s%d' % n, metadata={}, volume=volume(
        attachment(host), vid='v%d' % n, image='img-%d' % n))
        for n, host in ((1, 'host-a'), (2, 'host-b'))]


GROUP = {('can_batch_members', None): True,
         ('hold_members', 'host-a'): [{'image': 'img-1', 'held': True}],
         ('hold_members', 'host-b'): [{'image': 'img-2', 'held': True}]}


@case({**GROUP, ('admit_group', 'host-b'):
       agent_exception.Conflict('group index full')})
def group_admit_refused(d):
    return d.create_group_snapshot(None, types.SimpleNamespace(id='g1'),
                                   group_members())


@case({
    **GROUP,
    ('checkpoint_members', 'host-a'): [{'image': 'img-1', 'version': 5}],
    ('checkpoint_members', 'host-b'):
        agent_exception.CommitAborted('COMMIT failed'),
    ('wait_stable', 'host-a'): TIMEOUT, ('status', 'host-a'): CLEAN,
    ('list_versions', 'storage'): listed(6, 1, (5, 'stable', 'cinder', []),
                                         (6, 'stable', 'cinder', []))},
      snapshots=[{'status': 'error', 'provider_id': None}])
def group_left_version(d):
    """Phase 2 fails on host-b; host-a's version cannot be forgotten
    then (no answer): the volume's next detach obsoletes it.
    """
    members = group_members()
    try:
        d.create_group_snapshot(None, types.SimpleNamespace(id='g1'),
                                members)
        group = 'available'
    except Exception as e:
        group = type(e).__name__
    d.terminate_connection(members[0].volume, {'host': 'host-a'})
    return group
'''


@pytest.fixture(scope='module')
def runs():
    return run_child(SCENARIOS)


# -- _migrating_instance ------------------------------------------------------

def test_only_one_instance_pending_elsewhere_is_a_migration(runs):
    assert runs['migrations']['returned'] == {
        'migrating': 'i-1', 'attaching': 'i-1', 'here': 'i-1',
        'other_pending': None, 'no_pending': None, 'both_pending': None,
        'two_on_source': None, 'cinder_own': None}


def test_a_migration_connects_the_destination_from_the_source(runs):
    result = runs['connect_migrating']
    assert result['outcome'] == 'returned'
    assert only_call(result, 'attach') == (['host-b', 'img-1'], {
        'instance': 'i-1', 'project': 'p1', 'migrate_from': 'host-a',
        'block_device': False, 'durability': None})
    assert result['returned']['data']['blobcr_host'] == 'host-b'


def test_another_instance_cannot_connect_it_elsewhere(runs):
    assert failed(runs['connect_elsewhere'], 'attached on host-a') == []


# -- _forget_superseded -------------------------------------------------------

def test_only_the_drivers_own_stable_unshared_unrecorded_are_pruned(runs):
    result = runs['forget_selects']
    assert result['outcome'] == 'returned'
    # Not 2 (a guest's), 5 (pending), 7 (unmanaged), 8 (cloned), 9 (a
    # snapshot's), 10 (the head, though not the highest).
    assert calls_of(result) == [('list_versions', 'storage'),
                                ('obsolete', 'storage')]
    assert only_call(result, 'obsolete')[0] == [
        'storage', 'img-1', [3, 4, 6]]


def test_an_agent_naming_no_head_gets_nothing_pruned(runs):
    assert calls_of(runs['forget_without_head']) == [
        ('list_versions', 'storage')]


def test_nothing_is_pruned_while_a_snapshot_is_being_made(runs):
    result = runs['forget_while_creating']
    assert (result['outcome'], result['calls']) == ('returned', [])


def test_a_refused_prune_is_only_logged(runs):
    result = runs['forget_refused']
    assert result['outcome'] == 'returned'
    assert calls_of(result)[-1] == ('obsolete', 'storage')


# -- a group snapshot's phase failing ----------------------------------------

def test_a_refused_admission_holds_and_takes_nothing(runs):
    calls = failed(runs['group_admit_refused'], 'group index full')
    assert sorted(calls) == [('admit_group', 'host-a'),
                             ('admit_group', 'host-b')]


def test_a_failed_groups_version_is_pruned_at_the_next_detach(runs):
    result = runs['group_left_version']
    assert result['returned'] == 'VolumeBackendAPIException'
    calls = calls_of(result)
    detach = calls.index(('status', 'host-a'))
    group, after = calls[:detach], calls[detach:]
    # Both held members released; host-a's version, taken, gets no
    # answer to its wait and so no delete.
    assert {c for c in group if c[0] == 'release'} == {
        ('release', 'host-a'), ('release', 'host-b')}
    assert ('wait_stable', 'host-a') in group
    assert not [c for c in group if c[0] == 'delete_snapshot']
    assert after == DETACHED_CLEAN + [('obsolete', 'storage')]
    assert only_call(result, 'obsolete')[0] == ['storage', 'img-1', [3, 5]]
