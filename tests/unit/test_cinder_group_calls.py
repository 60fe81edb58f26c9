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

"""Which agent calls a consistent group snapshot sends (blobcr_cinder/
groups.py): at agent API 1.14 one call per host and phase, and no
release phase; below it (the version cap of a rolling upgrade) a call
per member and phase, as older agents serve; and on a failure, what is
undone.

The agents are stand-ins that record the calls and answer as agents
do: what is checked is the driver's side of the protocol. The real
agents' answers are tests/functional/test_member_batches.py (the agent
side) and test_cinder_driver.py's group snapshot through a real Cinder.
In a child process: importing cinder loads eventlet, which the test
process is better without.
"""

import json
import subprocess
import sys

import pytest

SCENARIO = '''
import json, sys, threading, time, types, warnings
warnings.simplefilter('ignore')
from blobcr_cinder import driver, groups
from blobcr_common import exception as agent_exception

groups.volume_utils.is_group_a_cg_snapshot_type = lambda group: True


class Agents(object):
    """Every agent's calls, recorded: (method, host, images)."""

    def __init__(self):
        self.calls, self.lock, self.versions = [], threading.Lock(), {}
        self.held_flags = {}

    def _record(self, method, host, images):
        with self.lock:
            self.calls.append((method, host, sorted(images)))

    def _version(self, image):
        with self.lock:
            self.versions[image] = self.versions.get(image, 1) + 1
            return self.versions[image]

    def can_batch_members(self, hosts):
        self.batch_hosts = hosts
        return batch

    def admit_group(self, host, group, members, project=None):
        self._record('admit_group', host, [])

    def hold(self, host, image, quiesce=None, timeout=60):
        self._record('hold', host, [image])
        if host == fail_host and fail_phase == 'hold':
            raise agent_exception.BlobCRError('no hold on ' + host)
        return {'image': image, 'held': True}

    def release(self, host, image):
        self._record('release', host, [image])

    def hold_members(self, host, members, timeout=60):
        self._record('hold_members', host, [m['image'] for m in members])
        if host == fail_host and fail_phase == 'hold':
            raise agent_exception.BlobCRError('no hold on ' + host)
        return [{'image': m['image'], 'held': True} for m in members]

    def _one(self, host, image):
        return {'image': image, 'version': self._version(image),
                'served_ms': 0.0, 'downtime_ms': 1.0, 'held_ms': 0.5,
                'received_at': time.time()}

    def checkpoint(self, host, image, quiesce=None, group=None, members=None,
                   project=None, rpc_timeout=None, label=None):
        self._record('checkpoint', host, [image])
        return self._one(host, image)

    def checkpoint_members(self, host, members, group, count,
                           rpc_timeout=None, label=None):
        images = [m['image'] for m in members]
        self._record('checkpoint_members', host, images)
        self.held_flags.update({m['image']: m['held'] for m in members})
        if host == fail_host and fail_phase == 'checkpoint':
            raise agent_exception.BlobCRError('COMMIT failed on ' + host)
        return [self._one(host, image) for image in images]

    def snapshot(self, host, image):
        self._record('snapshot', host, [image])
        return {'image': image, 'version': self._version(image)}

    def wait_stable(self, host, image, version, timeout=600):
        return 'stable'

    def list_versions(self, host, image):
        return {'versions': [{'version': n, 'parent': None, 'chunks': 1,
                              'stored_bytes': 1, 'created': 0,
                              'group': None, 'made_by': 'cinder'}
                             for n in range(2, self.versions[image] + 1)]}

    def delete_snapshot(self, host, image, version):
        self._record('delete_snapshot', host, [image])


results = {}
for batch, fail_host, fail_phase in json.loads(sys.argv[1]):
    agents = Agents()
    d = driver.BlobCRDriver.__new__(driver.BlobCRDriver)
    d.api = agents
    d.configuration = types.SimpleNamespace(
        blobcr_rpc_timeout=60, blobcr_snapshot_timeout=600,
        blobcr_default_quiesce='none')
    d._storage_host = 'storage'
    type(d).storage_host = property(lambda self: 'storage')
    d._attached_host = lambda volume: volume.host
    # Members: two on host-a, one on host-b, one detached (a copy).
    snapshots = [types.SimpleNamespace(
        id='s%d' % k, metadata={}, volume=types.SimpleNamespace(
            id='v%d' % k, provider_id='img-%d' % k, host=host,
            project_id='p1', volume_type=None))
        for k, host in enumerate(['host-a', 'host-a', 'host-b', None])]
    outcome, metadata = 'available', {}
    try:
        status, updates = d.create_group_snapshot(
            None, types.SimpleNamespace(id='gs1'), snapshots)
        metadata = {u['id']: sorted(u['metadata']) for u in updates}
    except Exception as e:
        outcome = type(e).__name__
    results[json.dumps([batch, fail_host, fail_phase])] = {
        'calls': agents.calls, 'outcome': outcome, 'metadata': metadata,
        'held': agents.held_flags,
        'batch_hosts': getattr(agents, 'batch_hosts', None)}
print(json.dumps(results))
'''


# Every scenario the tests ask for, run in one child process (each
# import of cinder takes seconds): (batch, failing host, failing phase).
SCENARIOS = [(True, None, None), (False, None, None),
             (True, 'host-b', 'hold'), (False, 'host-b', 'hold'),
             (True, 'host-a', 'checkpoint'), (True, 'host-b', 'checkpoint')]


@pytest.fixture(scope='module')
def scenarios():
    out = subprocess.run([sys.executable, '-c', SCENARIO,
                          json.dumps(SCENARIOS)],
                         check=True, capture_output=True, text=True,
                         timeout=300).stdout
    return json.loads(out.strip().splitlines()[-1])


def _run(scenarios, batch, fail_host=None, fail_phase=None, more=False):
    result = scenarios[json.dumps([batch, fail_host, fail_phase])]
    calls = [tuple(c[:2]) + (tuple(c[2]),) for c in result['calls']]
    if more:
        return calls, result
    return calls, result['outcome']


def _phases(calls):
    """The calls without the order inside a phase (sent at once)."""
    methods, phases = [], []
    for method, host, images in calls:
        if not methods or methods[-1] != method:
            methods.append(method)
            phases.append(set())
        phases[-1].add((host, images))
    return list(zip(methods, phases))


A, B = ('img-0', 'img-1'), ('img-2',)


def test_at_1_14_a_call_per_host_and_phase_and_no_release(scenarios):
    calls, result = _run(scenarios, batch=True, more=True)
    assert result['outcome'] == 'available'
    # Batching is decided by the group's own hosts' agents.
    assert result['batch_hosts'] == ['host-a', 'host-b']
    # Phase 2 tells each agent which members phase 1 held.
    assert result['held'] == {'img-0': True, 'img-1': True, 'img-2': True}
    # Each member's round trip, split where the agent said when it
    # received the call (the copy's call says nothing of it).
    travel = {'blobcr:request_ms', 'blobcr:answer_ms', 'blobcr:served_ms'}
    assert {k: travel <= set(keys) for k, keys in
            result['metadata'].items()} == {
        's0': True, 's1': True, 's2': True, 's3': False}
    admit, hold, rest = _phases(calls[:2]), calls[2:4], calls[4:]
    assert admit == [('admit_group', {('host-a', ()), ('host-b', ())})]
    assert sorted(hold) == [('hold_members', 'host-a', A),
                            ('hold_members', 'host-b', B)]
    # Phase 2 beside the detached member's copy; nothing after it.
    assert sorted(rest) == [('checkpoint_members', 'host-a', A),
                            ('checkpoint_members', 'host-b', B),
                            ('snapshot', 'storage', ('img-3',))]


def test_below_1_14_a_call_per_member_and_a_release_phase(scenarios):
    calls, outcome = _run(scenarios, batch=False)
    assert outcome == 'available'
    phases = _phases(calls)
    assert phases[0] == ('admit_group', {('host-a', ()), ('host-b', ())})
    holds = {('host-a', ('img-0',)), ('host-a', ('img-1',)),
             ('host-b', ('img-2',))}
    assert phases[1] == ('hold', holds)
    # Checkpoints and the copy go out together, then every release.
    taken = [c for c in calls if c[0] in ('checkpoint', 'snapshot')]
    assert sorted(taken) == sorted(
        [('checkpoint',) + h for h in holds] +
        [('snapshot', 'storage', ('img-3',))])
    assert phases[-1] == ('release', holds)


@pytest.mark.parametrize('batch', [True, False])
def test_a_host_that_fails_phase_1_gets_nothing_checkpointed(scenarios,
                                                             batch):
    """A hold refused (or its answer lost) on one host: every member is
    released, including that host's (its agent may hold them), and no
    member COMMITs.
    """
    calls, outcome = _run(scenarios, batch=batch, fail_host='host-b',
                          fail_phase='hold')
    assert outcome == 'VolumeBackendAPIException'
    assert not [c for c in calls
                if c[0] in ('checkpoint', 'checkpoint_members')]
    released = {c[2] for c in calls if c[0] == 'release'}
    assert released == {('img-0',), ('img-1',), ('img-2',)}


@pytest.mark.parametrize('fail_host', ['host-a', 'host-b'])
def test_a_host_that_fails_phase_2_fails_the_group_and_undoes_the_rest(
        scenarios, fail_host):
    calls, outcome = _run(scenarios, batch=True, fail_host=fail_host,
                          fail_phase='checkpoint')
    assert outcome == 'VolumeBackendAPIException'
    after = calls[calls.index(max(
        (c for c in calls if c[0] in ('checkpoint_members', 'snapshot')),
        key=calls.index)) + 1:]
    # The failing host undid its own members (the agent's all or
    # nothing); the driver releases every member it held and forgets
    # the versions the other host and the copy made.
    released = {c[2] for c in after if c[0] == 'release'}
    assert released == {('img-0',), ('img-1',), ('img-2',)}
    forgotten = {c[2] for c in after if c[0] == 'delete_snapshot'}
    other = B if fail_host == 'host-a' else A
    assert forgotten == {(i,) for i in other} | {('img-3',)}
