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

"""Global checkpoints in the repository: tags on member versions, the
completeness rule, refusals that do not reveal the member count, what a
member's guest may see of its group, and where a job restart begins, on
both backends.
"""

import threading

import pytest

from blobcr_agent.repository import groups
from blobcr_common import exception


def _member(repo, name, group, members, state='stable', project=None):
    header = repo.create_image(name, 4 * 4096)
    if state == 'stable':
        number = repo.commit(header.id, {0: b'x' * 4096})
    else:
        number = repo.begin_commit(header.id).version
    groups.tag(repo, header.id, number, group, members, project=project)
    return header.id, number


def test_complete_only_when_every_member_is_stable(repo):
    a, va = _member(repo, 'rank-0', 'job-1', 3)
    assert groups.state(repo, 'job-1')['complete'] is False      # 1 of 3
    _member(repo, 'rank-1', 'job-1', 3)
    c, vc = _member(repo, 'rank-2', 'job-1', 3, state='pending')
    found = groups.state(repo, 'job-1')
    # Operators: every member, keyed by image id, with its name.
    assert sorted(v['name'] for v in found['versions'].values()) == [
        'rank-0', 'rank-1', 'rank-2']
    assert found['versions'][a] == dict(
        found['versions'][a], image=a, name='rank-0', version=va,
        state='stable')
    assert c in found['versions']
    assert found['complete'] is False                   # one pending
    repo.mark_failed(c, vc, 'the host died')
    assert groups.state(repo, 'job-1')['complete'] is False
    # The rank checkpoints again: its newest version counts.
    number = repo.commit(c, {1: b'y' * 4096})
    groups.tag(repo, c, number, 'job-1', 3)
    assert groups.state(repo, 'job-1')['complete'] is True
    assert groups.state(repo, 'no-such-group') == {
        'group': 'no-such-group', 'project': None, 'members': 0,
        'creator': None, 'versions': {}, 'complete': False}


def test_member_count_and_ids_are_checked(repo):
    _member(repo, 'rank-0', 'job-2', 2)
    with pytest.raises(exception.InvalidInput) as refused:
        groups.admit(repo, 'job-2', 3)
    # Said without the group's count: a guest of another tenant could
    # learn it from here.
    assert str(refused.value) == ('members: 3 does not match the member '
                                  'count of group job-2')
    groups.admit(repo, 'job-2', 2)
    groups.admit(repo, 'new-group', 7)
    for group, members in (('', 1), ('a/b', 1), ('x' * 65, 1), ('ok', 0),
                           ('ok', '2'), ('ok', True), (None, 1)):
        with pytest.raises(exception.InvalidInput):
            groups.check(group, members)


def test_restart_begins_at_the_newest_complete_group(repo):
    for rank in range(2):
        _member(repo, 'r%d' % rank, 'job-7.ckpt-1', 2)
    assert groups.newest_complete(repo, 'job-7.') == 'job-7.ckpt-1'
    for rank in range(2):
        _member(repo, 'r%d-b' % rank, 'job-7.ckpt-2', 2)
    assert groups.newest_complete(repo, 'job-7.') == 'job-7.ckpt-2'
    # A newer group that is not complete (one rank still persisting)
    # is not where a restart begins.
    _member(repo, 'r0-c', 'job-7.ckpt-3', 2)
    _member(repo, 'r1-c', 'job-7.ckpt-3', 2, state='pending')
    assert groups.newest_complete(repo, 'job-7.') == 'job-7.ckpt-2'
    assert groups.newest_complete(repo, 'other-job.') is None


def test_images_of_the_same_name_are_distinct_members(repo):
    a, _ = _member(repo, 'disk', 'job-3', 2)
    b, _ = _member(repo, 'disk', 'job-3', 2)
    found = groups.state(repo, 'job-3')
    assert set(found['versions']) == {a, b}
    assert found['complete'] is True


def test_a_guest_sees_counts_of_its_own_groups_only(repo):
    a, _ = _member(repo, 'tenant-1-vm', 'job-4', 3)
    b, _ = _member(repo, 'tenant-2-vm', 'job-4', 3, state='pending')
    outsider = repo.create_image('outsider', 4 * 4096).id
    found = groups.state(repo, 'job-4')
    view = groups.guest_view(found, a)
    assert view == {'group': 'job-4', 'members': 3, 'stable': 1,
                    'complete': False}
    assert groups.guest_view(found, b) == view
    # Nothing of the other members, by id or by name.
    assert b not in repr(view) and 'tenant-2-vm' not in repr(view)
    assert groups.guest_view(found, outsider) is None
    assert groups.guest_view(groups.state(repo, 'nothing'), a) is None


def test_group_ids_are_scoped_by_project(repo):
    a, _ = _member(repo, 'p1-rank-0', 'job-5', 2, project='p1')
    b, _ = _member(repo, 'p2-rank-0', 'job-5', 1, project='p2')
    # Same id, other project: another group, with its own count.
    groups.admit(repo, 'job-5', 1, project='p2')
    with pytest.raises(exception.InvalidInput):
        groups.admit(repo, 'job-5', 1, project='p1')
    p1 = groups.state(repo, 'job-5', project='p1')
    p2 = groups.state(repo, 'job-5', project='p2')
    assert set(p1['versions']) == {a} and p1['complete'] is False
    assert set(p2['versions']) == {b} and p2['complete'] is True
    # A guest of p2 asking for p1's group sees nothing of it.
    assert groups.guest_view(p2, a) is None
    assert groups.guest_view(p1, b) is None
    # The caller without a project has a scope of its own.
    assert groups.state(repo, 'job-5')['versions'] == {}
    assert groups.newest_complete(repo, 'job-', project='p2') == 'job-5'
    assert groups.newest_complete(repo, 'job-', project='p1') is None
    assert groups.newest_complete(repo, 'job-') is None
    with pytest.raises(exception.InvalidInput):
        groups.state(repo, 'job-5', project='a/b')


def test_a_poll_reads_the_index_and_members_only(repo):
    a, _ = _member(repo, 'rank-0', 'job-6', 2)
    b, _ = _member(repo, 'rank-1', 'job-6', 2)
    others = [repo.create_image('bystander-%d' % k, 4096).id
              for k in range(5)]
    read = []
    real = repo.backend.read_header

    def counting(name):
        read.append(name)
        return real(name)
    repo.backend.read_header = counting
    try:
        assert groups.state(repo, 'job-6')['complete'] is True
    finally:
        repo.backend.read_header = real
    assert sorted(read) == sorted([groups.record_name('job-6'), a, b])
    assert not set(read) & set(others)


def test_group_records_are_not_images(repo):
    _member(repo, 'rank-0', 'job-8', 1)
    assert [h.name for h in repo.images()] == ['rank-0']
    with pytest.raises(exception.ImageNotFound):
        repo.image(groups.record_name('job-8'))


def test_a_member_in_the_index_without_its_tag_is_missing(repo):
    # A crash between the index and the tag: incomplete, never complete.
    a, va = _member(repo, 'rank-0', 'job-9', 2)
    b = repo.create_image('rank-1', 4 * 4096).id
    repo.commit(b, {0: b'z' * 4096})

    def join(index):
        index.images.append(b)
    repo.update_record(groups.record_name('job-9'),
                       groups.GroupIndex.decoder('job-9', None), join, 'x')
    found = groups.state(repo, 'job-9')
    assert set(found['versions']) == {a}
    assert found['complete'] is False


def test_admit_reads_a_known_count_once(repo, monkeypatch):
    """A count read from the index (or recorded by a join, or declared
    by a coordinator) is admitted again without a read (it never
    changes once set); another count is read again and refused,
    committing nothing.
    """
    _member(repo, 'rank-0', 'job-k', 2, project='p1')
    reads = []
    real = repo.backend.read_header

    def counted(name):
        reads.append(name)
        return real(name)
    monkeypatch.setattr(repo.backend, 'read_header', counted)
    known = {}
    assert groups.admit(repo, 'job-k', 2, 'p1', known=known).members == 2
    assert known == {('job-k', 'p1'): 2} and len(reads) == 1
    assert groups.admit(repo, 'job-k', 2, 'p1', known=known) is None
    assert len(reads) == 1
    with pytest.raises(exception.InvalidInput):
        groups.admit(repo, 'job-k', 3, 'p1', known=known)
    assert len(reads) == 2
    # A group not made yet: nothing to remember.
    assert groups.admit(repo, 'job-new', 2, 'p1', known=known) is None
    assert ('job-new', 'p1') not in known
    # A coordinator declares the count of a group it is about to make
    # (the Cinder driver's phase zero): its members need no read.
    assert groups.admit(repo, 'job-new', 2, 'p1', known=known,
                        declare=True) is None
    assert known[('job-new', 'p1')] == 2
    reads.clear()
    assert groups.admit(repo, 'job-new', 2, 'p1', known=known) is None
    assert reads == []


def _join_at_once(repo, counts, group):
    """One image per entry of ``counts``, each joined by its own thread
    with that member count, all released together; ``{image id: None
    or the error}``.
    """
    images = [repo.create_image('rank-%d' % k, 4096).id
              for k in range(len(counts))]
    barrier = threading.Barrier(len(counts))
    outcome = {}

    def one(image_id, members):
        barrier.wait(30)
        try:
            groups.join(repo, [image_id], group, members)
            outcome[image_id] = None
        except exception.BlobCRError as e:
            outcome[image_id] = e
    threads = [threading.Thread(target=one, args=(i, c))
               for i, c in zip(images, counts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return images, outcome


def test_members_joining_at_once_never_conflict(repo):
    """The index's members are keys added without compare-and-set: 12
    members joining together write once each, none retries, and the
    record itself is made once.
    """
    before = repo.cas_writes, repo.cas_conflicts, repo.key_writes
    images, outcome = _join_at_once(repo, [12] * 12, 'job-c')
    assert outcome == dict.fromkeys(images)
    assert (repo.cas_writes - before[0], repo.cas_conflicts - before[1],
            repo.key_writes - before[2]) == (1, 0, 12)
    index = groups._read_index(repo, 'job-c', None)
    assert index.members == 12 and sorted(index.images) == sorted(images)


def test_two_member_counts_at_once_admit_one(repo):
    """Members racing with two counts: the count of whoever made the
    index wins; every member with the other count is refused and not
    listed.
    """
    counts = [6, 7] * 6
    images, outcome = _join_at_once(repo, counts, 'job-r')
    index = groups._read_index(repo, 'job-r', None)
    assert index.members in (6, 7)
    winners = {i for i, c in zip(images, counts) if c == index.members}
    assert sorted(index.images) == sorted(winners)
    for image_id, error in outcome.items():
        if image_id in winners:
            assert error is None
        else:
            assert isinstance(error, exception.InvalidInput)


def test_an_index_written_before_keeps_its_members(repo):
    """An index whose record lists its images (written by an older
    agent) is read with the members that joined since.
    """
    a, _ = _member(repo, 'rank-0', 'job-o', 2)
    old = groups._read_index(repo, 'job-o', None)
    old.images = [a]
    name = groups.record_name('job-o')
    data, token = repo.backend.read_header(name)
    repo.backend.write_header(name, old.to_bytes(), token)
    b, _ = _member(repo, 'rank-1', 'job-o', 2)
    assert groups._read_index(repo, 'job-o', None).images == [a, b]
    assert groups.state(repo, 'job-o')['complete'] is True
