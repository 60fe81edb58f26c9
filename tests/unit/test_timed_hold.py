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

"""Two-phase holds (hypervisor/timed_hold.py) through the agent manager,
on libvirt's test:///default driver (a real libvirt with an in-memory
hypervisor; the repository and mirror are stubs: only the domain
matters here).
"""

import threading
import time
import types

import pytest

from blobcr_agent.hypervisor import timed_hold
from blobcr_agent import manager
from blobcr_agent.manager import budget
from blobcr_common import exception
from tests.unit.test_hypervisor import hypervisor  # noqa: F401 (fixture)
from tests.unit.test_hypervisor import PAUSED
from tests.unit.test_hypervisor import RUNNING
from tests.unit.test_hypervisor import StubLoops


class StubRepo(object):
    def image(self, ref):
        return types.SimpleNamespace(id=ref)


class StubMirror(object):
    """Every image's file is the test domain's disk; checkpoint runs
    ``during()`` where the mirror would COMMIT, under the given hold.
    """

    def __init__(self, path):
        self.path = path
        self.during = lambda: None
        self.attached = {}

    def path_of(self, image_id):
        return self.path

    def get(self, image_id):
        return types.SimpleNamespace(id=image_id)

    def checkpoint(self, image_id, hold, made_by='', group=None):
        if hold is None:
            self.during()
        else:
            with hold:
                self.during()
        return {'version': 2, 'downtime_ms': 1.0, 'held_ms': 0.5,
                'phases_ms': {'commit': 1.0}}


@pytest.fixture
def agent(hypervisor, tmp_path):  # noqa: F811
    agent = manager.AgentManager.__new__(manager.AgentManager)
    agent.hypervisor = hypervisor
    agent.repo = StubRepo()
    (tmp_path / 'guest').symlink_to('/guest')
    agent.mirror = StubMirror(str(tmp_path / 'guest' / 'diskimage1'))
    agent.loops = StubLoops()
    agent.default_quiesce = 'none'
    agent.holds = timed_hold.HoldTable()
    agent.guest_budget = budget.GuestBudget()     # no limits
    yield agent
    agent.holds.release('img')


def state(hypervisor):  # noqa: F811
    return hypervisor.connection().lookupByName('test').state()[0]


def test_a_checkpoint_joins_the_hold_and_only_release_resumes(
        agent, hypervisor):  # noqa: F811
    assert agent.hold('img', quiesce='suspend') == {
        'image': 'img', 'quiesce': 'suspend', 'held': True}
    assert state(hypervisor) == PAUSED
    seen = []
    agent.mirror.during = lambda: seen.append(state(hypervisor))
    agent.checkpoint('img', quiesce='suspend')
    # Held during the COMMIT, and still held after it: other members of
    # the group may not have committed yet.
    assert seen == [PAUSED] and state(hypervisor) == PAUSED
    released = agent.release('img')
    assert released['released'] and not released['expired']
    assert released['held_ms'] > 0
    assert state(hypervisor) == RUNNING
    # Once released, a release finds nothing and a checkpoint resumes.
    assert agent.release('img')['released'] is False
    agent.checkpoint('img', quiesce='suspend')
    assert state(hypervisor) == RUNNING


def test_a_hold_nobody_releases_ends_by_itself(agent, hypervisor):  # noqa
    agent.hold('img', quiesce='suspend', timeout=0.5)
    assert state(hypervisor) == PAUSED
    deadline = time.monotonic() + 10
    while state(hypervisor) == PAUSED:
        assert time.monotonic() < deadline, 'still paused'
        time.sleep(0.05)
    # Gone from the table: a new hold may start.
    assert agent.release('img')['released'] is False
    agent.hold('img', quiesce='suspend')
    assert state(hypervisor) == PAUSED


def test_refusals_hold_nothing(agent, hypervisor):  # noqa: F811
    agent.hold('img', quiesce='suspend')
    with pytest.raises(exception.InvalidInput, match='held already'):
        agent.hold('img', quiesce='suspend')
    agent.release('img')
    for timeout in (0, -1, timed_hold.MAX_TIMEOUT + 1, 'x'):
        with pytest.raises(exception.InvalidInput, match='a hold lasts'):
            agent.hold('img', quiesce='suspend', timeout=timeout)
        assert state(hypervisor) == RUNNING
    with pytest.raises(exception.InvalidInput, match='quiesce mode'):
        agent.hold('img', quiesce='pause')
    # No domain uses it: nothing to hold, as for a checkpoint.
    agent.mirror.path = '/no/such/disk'
    assert agent.hold('img')['held'] is False


def test_a_failed_quiesce_leaves_no_hold(agent, hypervisor):  # noqa: F811
    domain = hypervisor.connection().lookupByName('test')
    ok = threading.Event()

    class Refusing(object):
        def __enter__(self):
            raise exception.QuiesceFailed('refused')

        def __exit__(self, *exc):
            ok.set()

    with pytest.raises(exception.QuiesceFailed):
        agent.holds.hold('img', Refusing(), 5)
    assert not ok.is_set()                  # never entered, never exited
    assert agent.holds.release('img') is None
    assert domain.state()[0] == RUNNING
