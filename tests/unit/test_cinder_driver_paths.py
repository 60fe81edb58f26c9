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

"""The Cinder driver's detach and its failure paths, in milliseconds
(issue 56, item 1): terminate_connection, _probe, _give_up_host and
_attached_epoch, driven through agent timeouts, refusals mid-way, Nova's
os-services answers (up, down, forced down, no compute service,
unreachable), a stale epoch and two attachments; the ``blobcr:durability``
extra spec a volume type gives the agent's attach (initialize_connection,
a live migration's destination) and refused when unknown (create,
retype, connect).
test_cinder_driver_records.py runs _migrating_instance,
_forget_superseded and a group snapshot's failing phase on the same
stand-ins (HARNESS, run_child).

The stand-ins, as in Cinder's own driver tests (RBD, StorPool, LINSTOR):
the agents' RPC API is an autospec of AgentAPI whose calls are recorded
and answered per (method, host), an exception by raising it; Cinder's
records (VolumeAttachmentList.get_all_by_volume_id,
SnapshotList.get_all_for_volume) and Nova's client
(cinder.compute.nova.novaclient) are mocks; volumes and attachments are
namespaces. There is no real Cinder, Nova or agent here: the
integration tests cover those (tests/integration/test_cinder_driver.py,
test_cinder_host_loss.py, test_live_migration.py). What is checked is
what the driver did: the agent calls it made, in order, what it asked
Nova, what it returned or raised.

In one child process: importing cinder loads eventlet, which the test
process is better without, and takes seconds.
"""

import json
import subprocess
import sys

import pytest

HARNESS = r'''
import copy, json, types, warnings
from unittest import mock
warnings.simplefilter('ignore')
from cinder import objects
from keystoneauth1 import exceptions as ks_exceptions
import oslo_messaging as messaging

from blobcr_cinder import compute_hosts, driver, groups
from blobcr_common import exception as agent_exception
from blobcr_common.rpc import api as agent_api

objects.register_all()
groups.volume_utils.is_group_a_cg_snapshot_type = lambda group: True
driver.BlobCRDriver.storage_host = property(lambda self: 'storage')

TIMEOUT = messaging.MessagingTimeout('Timed out waiting for a reply')
DIRTY = {'attached': {'img-1': {'dirty': 1, 'epoch': 1}}}
CLEAN = {'attached': {'img-1': {'dirty': 0, 'epoch': 1}}}


class Seq(list):
    """Successive answers to one method on one host."""


def listed(head=3, epoch=1, *extra):
    """list_versions: 2 a guest's checkpoint, 3 the detach's, + extra."""
    versions = [(2, 'stable', None, []), (3, 'stable', 'cinder', [])]
    return {'epoch': epoch, 'head': head, 'versions': [
        {'version': n, 'state': s, 'made_by': by, 'clones': c}
        for n, s, by, c in versions + list(extra)]}


def agents(answers):
    api = mock.create_autospec(agent_api.AgentAPI, instance=True)

    def answer(method):
        def side_effect(*args, **kwargs):
            host = args[0] if args else None
            got = answers.get((method, host), answers.get((method, '*')))
            if isinstance(got, Seq):
                got = got.pop(0)
            if isinstance(got, BaseException):
                raise got
            return copy.deepcopy(got)
        return side_effect
    for name in dir(agent_api.AgentAPI):
        if not name.startswith('_') and callable(
                getattr(agent_api.AgentAPI, name)):
            getattr(api, name).side_effect = answer(name)
    return api


def attachment(host, status='attached', instance='i-1', epoch=None,
               info=None):
    if epoch is not None:
        info = {'driver_volume_type': 'blobcr',
                'data': {'blobcr_image': 'img-1', 'blobcr_epoch': epoch}}
    return types.SimpleNamespace(attached_host=host, attach_status=status,
                                 instance_uuid=instance,
                                 connection_info=info)


def volume(*attachments, vid='v1', image='img-1'):
    return types.SimpleNamespace(id=vid, provider_id=image, project_id='p1',
                                 volume_type=None, size=1,
                                 volume_attachment=list(attachments))


ON_A = attachment('host-a', epoch=1)
CASES = {}


def case(answers=None, services=(), db=(ON_A,), snapshots=()):
    """A case: ``func(driver)`` with these answers and records."""
    def register(func):
        CASES[func.__name__] = (func, answers or {}, services, db,
                                snapshots)
        return func
    return register


def run(func, answers, services, db, snapshots):
    d = driver.BlobCRDriver.__new__(driver.BlobCRDriver)
    d.api = agents(answers)
    d.configuration = types.SimpleNamespace(
        blobcr_alive_probe_timeout=3, blobcr_retry_probe_timeout=20,
        blobcr_rpc_timeout=60, blobcr_snapshot_timeout=600,
        blobcr_default_quiesce='none', blobcr_connection_type='blobcr')
    client = mock.Mock()
    if isinstance(services, BaseException):
        client.services.list.side_effect = services
    else:
        client.services.list.return_value = [
            types.SimpleNamespace(**s) for s in services]
    with mock.patch.object(objects.VolumeAttachmentList,
                           'get_all_by_volume_id',
                           return_value=list(db)) as by_volume, \
            mock.patch.object(objects.SnapshotList, 'get_all_for_volume',
                              return_value=[types.SimpleNamespace(**s)
                                            for s in snapshots]), \
            mock.patch.object(compute_hosts.nova, 'novaclient',
                              autospec=True,
                              return_value=client) as novaclient, \
            mock.patch.object(driver.socket, 'gethostname',
                              return_value='cinder-host'):
        try:
            out = {'outcome': 'returned', 'returned': func(d)}
        except Exception as e:
            out = {'outcome': type(e).__name__, 'message': str(e)}
    out['calls'] = [[c[0], list(c[1]), c[2]] for c in d.api.mock_calls]
    out['nova'] = [dict(c.kwargs, **s.kwargs) for c, s in zip(
        novaclient.call_args_list, client.services.list.call_args_list)]
    out['records_of'] = sorted({c.args[1] for c in
                                by_volume.call_args_list})
    return json.loads(json.dumps(out, default=str))
'''

DETACH = r'''
# -- terminate_connection ---------------------------------------------------

TO_A = {'host': 'host-a'}


def detaching(name, answers, services=(), connector=TO_A,
              attached=(ON_A,), force=False):
    """A case: volume v1 (``attached``) detached from ``connector``."""
    def func(d):
        return d.terminate_connection(volume(*attached), connector,
                                      force=force)
    CASES[name] = (func, answers, services, (ON_A,), ())


A_CLEAN = {('status', 'host-a'): CLEAN}
PRUNED = {('list_versions', 'storage'): listed()}
detaching('detach_dirty', {
    ('status', 'host-a'): DIRTY,
    ('list_versions', 'storage'): listed(7, 1, (7, 'stable', 'cinder', []))})
detaching('detach_clean_forced', {**A_CLEAN, **PRUNED}, force=True)
detaching('detach_not_there',
          {('status', 'host-a'): {'attached': {'img-9': {'dirty': 1}}}})
detaching('detach_checkpoint_refused', {
    ('status', 'host-a'): DIRTY, ('checkpoint', 'host-a'):
    agent_exception.CommitAborted('COMMIT failed: backend full')})
detaching('detach_checkpoint_silent', {('status', 'host-a'): DIRTY,
                                       ('checkpoint', 'host-a'): TIMEOUT})
detaching('detach_refused_busy', {
    **A_CLEAN, ('detach', 'host-a'): agent_exception.Busy('domain d1')})
detaching('detach_without_connector', {('status', '*'): CLEAN, **PRUNED},
          connector=None, attached=[attachment('host-b')])
detaching('detach_here', {('status', '*'): CLEAN, **PRUNED},
          connector={'host': 'cinder-host'})
detaching('detach_nowhere', {}, connector={}, attached=())
detaching('detach_two_hosts', {('status', '*'): CLEAN}, connector=None,
          attached=[ON_A, attachment('host-b', instance='i-2')])
detaching('detach_forget_silent',
          {**A_CLEAN, ('list_versions', 'storage'): TIMEOUT})


# -- _probe and _give_up_host ------------------------------------------------

DOWN = [{'host': 'host-a', 'state': 'down', 'forced_down': False}]
UP = [{'host': 'host-a', 'state': 'up', 'forced_down': False}]
FORCED = [{'host': 'host-a', 'state': 'up', 'forced_down': True}]
UNREACHABLE = ks_exceptions.ConnectFailure('Unable to establish connection')


def silent(more=(), epoch=1):
    """host-a's agent does not answer; the storage agent does."""
    return {('status', 'host-a'): TIMEOUT,
            ('list_versions', 'storage'): listed(3, epoch),
            ('take_over', 'storage'): {'version': 3, 'epoch': epoch + 1},
            **dict(more)}


detaching('probe_stale_epoch', silent(epoch=2), UP)
detaching('probe_nova_down', silent(), DOWN)
detaching('probe_nova_forced_down', silent(), FORCED)
detaching('probe_nova_up_agent_back',
          silent({('status', 'host-a'): Seq([TIMEOUT, CLEAN])}), UP)
detaching('probe_nova_up_agent_silent', silent(), UP)
detaching('probe_nova_up_forced_detach', silent(), UP, force=True)
detaching('probe_nova_unreachable', silent(), UNREACHABLE)
detaching('probe_nova_no_service', silent(), [])
detaching('probe_storage_agent_silent',
          silent({('list_versions', 'storage'): TIMEOUT}), DOWN)
detaching('give_up_storage_agent_silent',
          silent({('take_over', 'storage'): TIMEOUT}), DOWN)
detaching('give_up_refused', silent({('take_over', 'storage'): (
    agent_exception.Conflict('image img-1 is being deleted'))}), FORCED)


# -- _attached_epoch ----------------------------------------------------------

@case(db=[attachment('host-b', instance='i-2', epoch=5),
          attachment('host-a', status='reserved', info=None),
          attachment('host-a', info=json.dumps(
              {'data': {'blobcr_epoch': 2}})),
          attachment('cinder-host', instance=None, epoch=4),
          attachment('host-d', info={'data': None}),
          attachment('host-e', info={'data': {'blobcr_image': 'img-1'}})])
def epochs(d):
    return {host: d._attached_epoch(volume(), host) for host in (
        'host-a', 'host-b', 'storage', 'host-d', 'host-e', 'host-x')}
'''


TYPES = r'''
# -- a volume type's blobcr:durability ---------------------------------------

TO_B = {'host': 'host-b'}
MIRRORED = {('attach', 'host-b'): {'image': 'img-1', 'path': '/m/img-1',
                                   'device': '/dev/loop7', 'epoch': 1}}
# host-b's attachment of the instance attached on host-a: Nova's live
# migration, before it is connected.
PENDING_B = attachment('host-b', status='attaching', info=None)


def typed(vol, extra_specs):
    vol.volume_type = types.SimpleNamespace(extra_specs=extra_specs)
    return vol


def connecting(name, extra_specs, attached=(), kind='blobcr'):
    """A case: volume v1 (its type's ``extra_specs``) connected on
    host-b; ``attached`` its attachments, in the database too.
    """
    def func(d):
        d.configuration.blobcr_connection_type = kind
        return d.initialize_connection(
            typed(volume(*attached), extra_specs), TO_B)
    CASES[name] = (func, MIRRORED, (), attached, ())


connecting('connect_cluster', {'blobcr:durability': 'cluster'})
connecting('connect_host_local', {'blobcr:durability': 'host',
                                  'blobcr:quiesce': 'fsfreeze'},
           kind='local')
connecting('connect_untyped', {'blobcr:quiesce': 'suspend',
                               'volume_backend_name': 'blobcr'})
connecting('connect_unknown', {'blobcr:durability': 'rack'})
connecting('connect_migrating', {'blobcr:durability': 'host'},
           attached=(ON_A, PENDING_B))


@case(answers={('create_image', 'storage'): {'id': 'img-2'}})
def create_unknown(d):
    return d.create_volume(typed(volume(), {'blobcr:durability': 'Host'}))


@case(answers={('create_image', 'storage'): {'id': 'img-2'}})
def create_host(d):
    return d.create_volume(typed(volume(), {'blobcr:durability': 'host'}))


def retyping(name, extra_specs):
    def func(d):
        return d.retype(None, volume(ON_A), {
            'name': 't2', 'extra_specs': extra_specs}, {}, None)
    CASES[name] = (func, {}, (), (ON_A,), ())


retyping('retype_unknown', {'blobcr:durability': 'rack'})
retyping('retype_attached', {'blobcr:durability': 'cluster'})
'''


def run_child(cases):
    """{case: outcome} of every case HARNESS + ``cases`` registers, run
    in one child process (each import of cinder takes seconds).
    """
    code = HARNESS + cases + (
        "print(json.dumps({name: run(*spec) "
        "for name, spec in CASES.items()}))\n")
    child = subprocess.run([sys.executable, '-c', code],
                           capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, child.stderr
    return json.loads(child.stdout.strip().splitlines()[-1])


def calls_of(result):
    """(method, host) of each agent call, in order."""
    return [(method, args[0] if args else None)
            for method, args, kwargs in result['calls']]


def failed(result, says, exception='VolumeBackendAPIException'):
    """Assert the case raised ``exception`` saying ``says``; its calls."""
    assert result['outcome'] == exception, result
    assert says in result['message'], result['message']
    return calls_of(result)


def only_call(result, method):
    """(args, kwargs) of the only call of ``method``."""
    found = [(args, kwargs) for m, args, kwargs in result['calls']
             if m == method]
    assert len(found) == 1, result['calls']
    return found[0]


@pytest.fixture(scope='module')
def runs():
    return run_child(DETACH)


DETACHED_CLEAN = [('status', 'host-a'), ('detach', 'host-a'),
                  ('list_versions', 'storage')]
SILENT = [('status', 'host-a'), ('list_versions', 'storage')]


# -- terminate_connection ---------------------------------------------------

def test_a_dirty_mirror_is_checkpointed_detached_then_pruned(runs):
    result = runs['detach_dirty']
    assert result['outcome'] == 'returned' and result['returned'] is None
    assert calls_of(result) == [
        ('status', 'host-a'), ('checkpoint', 'host-a'), ('detach', 'host-a'),
        ('list_versions', 'storage'), ('obsolete', 'storage')]
    assert result['nova'] == []
    assert only_call(result, 'status') == (['host-a'], {'timeout': 3})
    assert only_call(result, 'checkpoint') == (
        ['host-a', 'img-1'], {'quiesce': 'none', 'label': 'cinder'})
    assert only_call(result, 'detach') == (
        ['host-a', 'img-1'], {'force': False, 'background': True})
    assert only_call(result, 'obsolete') == (['storage', 'img-1', [3]], {})


def test_a_clean_mirror_is_detached_without_a_checkpoint(runs):
    result = runs['detach_clean_forced']
    assert result['outcome'] == 'returned'
    assert calls_of(result) == DETACHED_CLEAN
    assert only_call(result, 'detach')[1]['force'] is True


def test_an_image_not_attached_there_is_left_alone(runs):
    result = runs['detach_not_there']
    assert result['outcome'] == 'returned'
    assert calls_of(result) == [('status', 'host-a')]


@pytest.mark.parametrize('name,says', [
    ('detach_checkpoint_refused', 'checkpoint on host-a failed: COMMIT'),
    ('detach_checkpoint_silent', 'host-a does not answer (checkpoint)')])
def test_a_failed_last_checkpoint_keeps_the_volume_attached(runs, name,
                                                            says):
    assert failed(runs[name], says) == [('status', 'host-a'),
                                        ('checkpoint', 'host-a')]


def test_a_detach_refused_busy_is_volume_is_busy_and_prunes_nothing(runs):
    assert failed(runs['detach_refused_busy'], 'img-1 (domain d1)',
                  'VolumeIsBusy') == [('status', 'host-a'),
                                      ('detach', 'host-a')]


def test_without_a_connector_the_attached_host_is_asked(runs):
    assert calls_of(runs['detach_without_connector']) == [
        ('status', 'host-b'), ('detach', 'host-b'),
        ('list_versions', 'storage')]


def test_this_machine_is_served_by_the_storage_agent(runs):
    assert calls_of(runs['detach_here'])[:2] == [
        ('status', 'storage'), ('detach', 'storage')]


def test_no_host_to_detach_from_calls_nothing(runs):
    result = runs['detach_nowhere']
    assert (result['outcome'], result['calls']) == ('returned', [])


def test_attached_on_two_hosts_without_a_connector_is_refused(runs):
    assert failed(runs['detach_two_hosts'],
                  "several hosts (['host-a', 'host-b'])") == []


def test_pruning_that_gets_no_answer_does_not_fail_the_detach(runs):
    result = runs['detach_forget_silent']
    assert result['outcome'] == 'returned'
    assert calls_of(result) == DETACHED_CLEAN


# -- _probe and _give_up_host ------------------------------------------------

def test_a_stale_attachment_epoch_is_fenced_without_asking_nova(runs):
    result = runs['probe_stale_epoch']
    assert result['outcome'] == 'returned'
    assert calls_of(result) == SILENT
    assert result['nova'] == []
    assert result['records_of'] == ['v1']


@pytest.mark.parametrize('name,why', [
    ('probe_nova_down', 'nova-compute on host-a down'),
    ('probe_nova_forced_down', 'nova-compute on host-a forced down')])
def test_a_host_nova_holds_down_is_given_up(runs, name, why):
    result = runs[name]
    assert result['outcome'] == 'returned'
    assert calls_of(result) == SILENT + [('take_over', 'storage')]
    args, kwargs = only_call(result, 'take_over')
    assert args[:2] == ['storage', 'img-1'] and kwargs == {}
    assert args[2].startswith('detach from host-a: Nova reports ' + why)
    assert result['nova'] == [{'privileged_user': True,
                               'api_version': '2.11', 'host': 'host-a',
                               'binary': 'nova-compute'}]


def test_a_host_nova_holds_up_gets_a_second_longer_probe(runs):
    result = runs['probe_nova_up_agent_back']
    assert result['outcome'] == 'returned'
    assert calls_of(result) == SILENT + DETACHED_CLEAN
    assert [kwargs for m, args, kwargs in result['calls']
            if m == 'status'] == [{'timeout': 3}, {'timeout': 20}]


@pytest.mark.parametrize('name', [
    'probe_nova_up_agent_silent', 'probe_nova_up_forced_detach',
    'probe_nova_unreachable', 'probe_nova_no_service'])
def test_no_evidence_of_a_lost_host_fails_the_detach_losing_nothing(
        runs, name):
    """Up, no compute service there, Nova unreachable, a force detach:
    nothing is taken over, nothing detached.
    """
    result = runs[name]
    assert failed(result, 'stays attached there') == SILENT + [
        ('status', 'host-a')]
    assert 'take-over img-1' in result['message']
    assert [n['host'] for n in result['nova']] == ['host-a']


def test_a_silent_storage_agent_fails_the_probe_as_a_cinder_error(runs):
    result = runs['probe_storage_agent_silent']
    assert failed(result, 'storage does not answer (list_versions)') == SILENT
    assert result['nova'] == []


@pytest.mark.parametrize('name,says', [
    ('give_up_storage_agent_silent', 'does not answer (take_over)'),
    ('give_up_refused', 'take_over on storage failed: image img-1 is')])
def test_a_take_over_that_fails_fails_the_detach(runs, name, says):
    assert failed(runs[name], says) == SILENT + [('take_over', 'storage')]


# -- _attached_epoch ----------------------------------------------------------

def test_the_epoch_is_the_attachment_on_that_host(runs):
    result = runs['epochs']
    # host-a: a pending attachment without connection info is passed
    # over; its connected one's info is JSON text. host-b: a dict.
    assert result['returned']['host-a'] == 2
    assert result['returned']['host-b'] == 5
    # Cinder's own attachment names this machine: the storage agent's.
    assert result['returned']['storage'] == 4
    assert result['records_of'] == ['v1']


def test_no_recorded_epoch_is_epoch_0(runs):
    returned = runs['epochs']['returned']
    assert [returned[h] for h in ('host-d', 'host-e', 'host-x')] == [0] * 3


# -- a volume type's blobcr:durability ---------------------------------------

@pytest.fixture(scope='module')
def typed_runs():
    return run_child(TYPES)


@pytest.mark.parametrize('name,kind,durability', [
    ('connect_cluster', 'blobcr', 'cluster'),
    ('connect_host_local', 'local', 'host'),
    ('connect_untyped', 'blobcr', None)])
def test_the_attach_asks_for_the_types_durability(typed_runs, name, kind,
                                                  durability):
    result = typed_runs[name]
    assert result['outcome'] == 'returned', result
    assert result['returned']['driver_volume_type'] == kind
    assert only_call(result, 'attach') == (['host-b', 'img-1'], {
        'instance': None, 'project': None, 'migrate_from': None,
        'block_device': kind == 'local', 'durability': durability})


def test_a_live_migrations_destination_gets_the_same_durability(typed_runs):
    result = typed_runs['connect_migrating']
    assert result['outcome'] == 'returned', result
    assert only_call(result, 'attach') == (['host-b', 'img-1'], {
        'instance': 'i-1', 'project': 'p1', 'migrate_from': 'host-a',
        'block_device': False, 'durability': 'host'})


@pytest.mark.parametrize('name', [
    'connect_unknown', 'create_unknown', 'retype_unknown'])
def test_an_unknown_durability_is_refused_before_any_agent_call(
        typed_runs, name):
    result = typed_runs[name]
    assert failed(result, 'blobcr:durability=', 'InvalidVolumeType') == []
    assert 'must be one of cluster, host' in result['message']


def test_a_known_durability_is_created(typed_runs):
    result = typed_runs['create_host']
    assert result['outcome'] == 'returned', result
    assert result['returned'] == {'provider_id': 'img-2'}
    assert calls_of(result) == [('create_image', 'storage')]


def test_a_retype_of_an_attached_volumes_durability_is_accepted(typed_runs):
    """It takes effect at its next attach: the agent is not asked."""
    result = typed_runs['retype_attached']
    assert result['outcome'] == 'returned', result
    assert result['returned'] == [True, None]
    assert result['calls'] == []
