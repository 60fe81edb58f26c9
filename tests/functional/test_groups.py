"""Global checkpoints in the repository: tags on member versions, the
completeness rule, refusals that do not reveal the member count, what a
member's guest may see of its group, and where a job restart begins, on
both backends.
"""

import pytest

from blobcr_agent import exception
from blobcr_agent.repository import groups


def _member(repo, name, group, members, state='stable'):
    header = repo.create_image(name, 4 * 4096)
    if state == 'stable':
        number = repo.commit(header.id, {0: b'x' * 4096})
    else:
        number = repo.begin_commit(header.id).version
    groups.tag(repo, header.id, number, group, members)
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
        'group': 'no-such-group', 'members': 0, 'versions': {},
        'complete': False}


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
