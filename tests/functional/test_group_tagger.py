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

"""Group indexes recorded after the guests' acks (manager/tagger.py),
on both stores: the versions carry their tags from their registration
(as a checkpoint's do); members of one group waiting together share
one write of the group's index keys, and nothing else is written;
a group is never complete while a member's index entry waits; one that
cannot be recorded leaves the group incomplete and says why.
"""

import threading

from blobcr_agent.manager import tagger as tagger_mod
from blobcr_agent.repository import groups

CHUNK = 64 * 1024


def _versions(repo, count, group, members, project=None):
    """``count`` stable versions tagged in the header write that
    registers them, as a checkpoint tags its own.
    """
    out = []
    for k in range(count):
        image = repo.create_image('rank-%d' % k, 4 * CHUNK,
                                  chunk_size=CHUNK).id
        pending = repo.begin_commit(
            image, group=groups.member_tag(group, members, project))
        pending.put(0, bytes([k + 1]) * CHUNK)
        out.append((image, pending.finish()))
    return out


def test_waiting_members_share_one_index_update(repo):
    members = _versions(repo, 4, 'job', 4, 'p1')
    tagger = tagger_mod.GroupTagger(repo)
    # Hold the worker on the first tag, so that the others queue behind.
    gate, taken = threading.Event(), threading.Event()
    real = tagger._record

    def held(batch):
        taken.set()
        gate.wait(30)
        return real(batch)
    tagger._record = held
    try:
        for k, (image, number) in enumerate(members):
            tagger.submit(image, number, 'job', 4, 'p1', 'test')
            if not k:
                assert taken.wait(30)
        count, waiting = tagger.pending('job', 'p1')
        assert count == 4 and waiting == dict(members)
        assert not groups.state(repo, 'job', 'p1')['complete']
        before = repo.cas_writes, repo.key_writes
        gate.set()
        assert tagger.wait(30)
        # The first alone (it makes the index: one create), then the
        # three that waited in one batch: two key writes, and no header
        # write (the tags came with the versions' registrations).
        assert (repo.cas_writes - before[0],
                repo.key_writes - before[1]) == (1, 2)
        found = groups.state(repo, 'job', 'p1')
        assert set(found['versions']) == {i for i, _ in members}
        assert found['complete']
        assert tagger.pending('job', 'p1') == (0, {})
        assert tagger.status()['tagged'] == 4
    finally:
        gate.set()
        tagger.stop(30)


def test_a_tag_that_cannot_be_recorded_leaves_the_group_incomplete(repo):
    (a, va), (b, vb) = _versions(repo, 2, 'job', 2)
    tagger = tagger_mod.GroupTagger(repo)
    try:
        tagger.submit(a, va, 'job', 2, None, 'test')
        assert tagger.wait(30)
        # Another count for the same group: refused, recorded as such.
        tagger.submit(b, vb, 'job', 3, None, 'test')
        assert tagger.wait(30)
        errors = tagger.status()['errors']
        assert len(errors) == 1 and 'members' in errors[0]['error']
        found = groups.state(repo, 'job')
        assert set(found['versions']) == {a} and not found['complete']
    finally:
        tagger.stop(30)
