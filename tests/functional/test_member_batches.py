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

"""A host's members of a group checkpoint in one call per phase
(manager/member_batches.py, agent API 1.14): all held, then each
COMMITted and released, all or nothing on the host.

A real AgentManager over a local repository (its mirror not mounted:
the guests' writes go straight into each AttachedImage), and real
libvirt on its test:///default driver: one domain per member, defined
with the member's mirror file as its disk, paused and resumed for real
(no guest runs in them: that is the end-to-end test's QEMU guest).
"""

import threading
import time
import uuid

from hypothesis import given
from hypothesis import HealthCheck
from hypothesis import settings
from hypothesis import strategies as st
import pytest

from blobcr_agent.hypervisor import domains
from blobcr_agent import manager as manager_mod
from blobcr_agent.repository.backends import local
from blobcr_agent.repository import repository
from blobcr_common import exception

libvirt = pytest.importorskip('libvirt')
RUNNING, PAUSED = libvirt.VIR_DOMAIN_RUNNING, libvirt.VIR_DOMAIN_PAUSED

CHUNK = 64 * 1024
CHUNKS = 4
MEMBERS = 4
DOMAIN = ('<domain type="test"><name>%s</name><memory>65536</memory>'
          '<os><type>hvm</type></os><devices><disk type="file" '
          'device="disk"><source file="%s"/><target dev="vda"/></disk>'
          '</devices></domain>')


def tagged(host, image, group, timeout=60):
    """The states of ``image``'s live versions tagged with ``group``, once
    every member undone by a failed call is forgotten (its threads end)
    and nothing of the image is in flight.
    """
    deadline = time.monotonic() + timeout
    while any(t.name == 'blobcr-forget-member' and t.is_alive()
              for t in threading.enumerate()):
        assert time.monotonic() < deadline, 'a member is never forgotten'
        time.sleep(0.05)
    if image in host.agent.mirror.attached:
        assert host.agent.mirror.get(image).wait_persisted(timeout=timeout)
    return sorted(s for s, _, g in host.versions(image).values()
                  if g == group and s != 'obsolete')


class Host(object):
    """An agent manager with MEMBERS attached images, each the disk of
    a running test domain.
    """

    def __init__(self, workdir):
        self.repo = repository.Repository(
            local.LocalBackend(str(workdir / 'store')), chunk_size=CHUNK)
        self.hypervisor = domains.Hypervisor('test:///default')
        self.agent = manager_mod.AgentManager(
            self.repo, str(workdir / 'state'), str(workdir / 'mnt'),
            'host-a', quiesce='none', hypervisor=self.hypervisor)
        # How long a forgotten member's version is waited for.
        self.agent.settle_timeout = 10
        self.images, self.domains = [], {}
        conn = self.hypervisor.connection()
        for k in range(MEMBERS):
            header = self.repo.create_image('m%d' % k, CHUNKS * CHUNK)
            self.repo.commit(header.id, {i: b'o' * CHUNK
                                         for i in range(CHUNKS)})
            self.agent.mirror.attach(header.id)
            name = 'member-%s' % uuid.uuid4().hex[:8]
            domain = conn.defineXML(DOMAIN % (
                name, self.agent.mirror.path_of(header.id)))
            domain.create()
            self.images.append(header.id)
            self.domains[header.id] = domain

    def write(self, image, byte):
        self.agent.mirror.get(image).write(CHUNK, byte * CHUNK)

    def state(self, image):
        return self.domains[image].state()[0]

    def versions(self, image):
        """{number: (state, made_by, group id)} of the image's versions."""
        return {v['version']: (v['state'], v['made_by'],
                               (v['group'] or {}).get('id'))
                for v in self.agent.list_versions(image)['versions']}

    def close(self):
        for image, domain in self.domains.items():
            self.agent.holds.release(image)
            if domain.isActive():
                domain.destroy()
            domain.undefine()
        self.repo.close()


@pytest.fixture
def host(tmp_path):
    made = Host(tmp_path)
    yield made
    made.close()


def members(images, quiesce='suspend', held=False):
    return [{'image': i, 'quiesce': quiesce, 'project': 'p1', 'held': held}
            for i in images]


def test_held_together_then_each_released_once_committed(host):
    for k, image in enumerate(host.images):
        host.write(image, b'%d' % k)
    held = host.agent.hold_members(members(host.images), timeout=60)
    assert [h['held'] for h in held] == [True] * MEMBERS
    assert {host.state(i) for i in host.images} == {PAUSED}
    # At each member's COMMIT, every other member is held or done:
    # the versions are consistent with each other.
    seen, commit = [], host.agent.mirror.checkpoint

    def watched(image, hold, **kwargs):
        seen.append((image, {i: host.state(i) for i in host.images}))
        return commit(image, hold, **kwargs)
    host.agent.mirror.checkpoint = watched
    results = host.agent.checkpoint_members(
        members(host.images, held=True), 'g1', MEMBERS, label='cinder')
    assert sorted(image for image, _ in seen) == sorted(host.images)
    for image, states in seen:
        assert states[image] == PAUSED
    assert all(state in (PAUSED, RUNNING) for _, s in seen
               for state in s.values())
    # Each answer is its member's, in the order asked.
    assert [r['image'] for r in results] == host.images
    assert {host.state(i) for i in host.images} == {RUNNING}
    for image, result in zip(host.images, results):
        # Held from phase one until its own COMMIT was done.
        assert result['guest_held_ms'] >= result['held_ms'] > 0
        assert result['quiesce'] == 'suspend'
        # Labelled and tagged by the update that makes it stable.
        assert host.agent.wait_stable(image, result['version'], 30) == \
            'stable'
        assert host.versions(image)[result['version']] == \
            ('stable', 'cinder', 'g1')
    group = host.agent.group_state('g1', project='p1')
    assert group['complete'] and group['members'] == MEMBERS


def test_a_failing_member_undoes_the_others_holds(host):
    """A member not attached here: the call raises, and the guests
    it held already are not left paused.
    """
    missing = 'not-attached-%s' % uuid.uuid4().hex[:6]
    asked = members(host.images[:2]) + members([missing])
    with pytest.raises(exception.BlobCRError):
        host.agent.hold_members(asked, timeout=60)
    assert {host.state(i) for i in host.images} == {RUNNING}


def test_a_failing_member_undoes_the_others_versions(host):
    for image in host.images:
        host.write(image, b'x')
    host.agent.hold_members(members(host.images), timeout=60)
    # A member's guest stopped between the phases: its checkpoint
    # cannot suspend it, and fails; the others' succeed first or meanwhile.
    gone = host.images[-1]
    host.agent.release(gone)
    host.domains[gone].destroy()
    try:
        with pytest.raises(exception.InvalidInput, match='no running'):
            host.agent.checkpoint_members(members(host.images), 'g2',
                                          MEMBERS, label='cinder')
    finally:
        host.domains[gone].create()
    assert {host.state(i) for i in host.images} == {RUNNING}
    for image in host.images[:-1]:
        # The version this call made is forgotten (its content stays the
        # image's), none is kept as the group's.
        assert tagged(host, image, 'g2') == []
        assert host.agent.mirror.get(image).read(CHUNK, CHUNK) == \
            b'x' * CHUNK


def test_a_hold_that_expired_fails_its_member_and_keeps_nothing(host):
    """Phase one's hold ended (its timeout) before phase two: that
    guest ran on, so its version would not be consistent with the
    others'; the call fails and no member keeps a version.
    """
    for image in host.images:
        host.write(image, b'e')
    host.agent.hold_members(members(host.images[:1]), timeout=0.2)
    host.agent.hold_members(members(host.images[1:]), timeout=60)
    deadline = time.monotonic() + 10
    while host.state(host.images[0]) == PAUSED:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    with pytest.raises(exception.QuiesceFailed, match='ended before'):
        host.agent.checkpoint_members(members(host.images, held=True),
                                      'g4', MEMBERS)
    assert {host.state(i) for i in host.images} == {RUNNING}
    for image in host.images:
        assert tagged(host, image, 'g4') == []


def test_bad_member_lists_are_refused_before_anything_is_held(host):
    too_many = [{'image': host.images[0]}] * 65
    for bad in (None, 3, {'image': host.images[0]}, [], too_many,
                [{'quiesce': 'suspend'}], ['disk'],
                members([host.images[0]] * 2),
                members(['not-attached'])):
        with pytest.raises((exception.InvalidInput,
                            exception.ImageNotFound)):
            host.agent.hold_members(bad)
        with pytest.raises((exception.InvalidInput,
                            exception.ImageNotFound)):
            host.agent.checkpoint_members(bad, 'g3', 2)
    # A group smaller than the members named, or no group at all.
    for group, count in (('g3', 1), ('', 2), ('g3', 0), ('g3', '2')):
        with pytest.raises(exception.InvalidInput):
            host.agent.checkpoint_members(members(host.images[:2]), group,
                                          count)
    assert {host.state(i) for i in host.images} == {RUNNING}
    assert all(host.agent.holds.release(i) is None for i in host.images)


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chosen=st.lists(st.integers(0, MEMBERS - 1), min_size=1,
                       max_size=MEMBERS, unique=True),
       failing=st.one_of(st.none(), st.integers(0, MEMBERS - 1)),
       modes=st.lists(st.sampled_from(['suspend', 'none']),
                      min_size=MEMBERS, max_size=MEMBERS))
def test_all_or_nothing_against_a_model(host, chosen, failing, modes):
    """Random members, quiesce modes, and at most one member whose
    checkpoint fails (its guest stopped between the phases): either
    every chosen member has a new version of the group, or none keeps
    one; either way no guest is left paused and no hold is left.
    """
    images = [host.images[k] for k in chosen]
    asked = [{'image': host.images[k], 'quiesce': modes[k],
              'project': 'p1', 'held': modes[k] == 'suspend'}
             for k in chosen]
    for image in images:
        host.write(image, b'w')
    host.agent.hold_members(asked, timeout=60)
    assert {host.state(i) for i, a in zip(images, asked)
            if a['quiesce'] == 'suspend'} <= {PAUSED}
    # The failing member's guest stops between the phases, and it asks
    # to be suspended: its checkpoint fails.
    fails = failing is not None and failing in chosen
    if fails:
        gone = host.images[failing]
        host.agent.release(gone)
        host.domains[gone].destroy()
        asked[chosen.index(failing)].update(quiesce='suspend', held=False)
    group = 'g-%s' % uuid.uuid4().hex[:6]
    try:
        host.agent.checkpoint_members(asked, group, len(asked))
        raised = False
    except exception.InvalidInput:
        raised = True
    finally:
        if fails:
            host.domains[gone].create()
    assert raised == fails
    assert {host.state(i) for i in images} == {RUNNING}
    assert all(host.agent.holds.release(i) is None for i in images)
    for image in images:
        assert tagged(host, image, group) == ([] if fails else ['stable'])
