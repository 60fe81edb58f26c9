"""Global checkpoints in the repository: tags on member versions, the
completeness rule, refusals, and where a job restart begins, on both
backends.
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
    assert set(found['versions']) == {'rank-0', 'rank-1', 'rank-2'}
    assert found['versions']['rank-0'] == dict(
        found['versions']['rank-0'], image=a, version=va, state='stable')
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
    with pytest.raises(exception.InvalidInput, match='2 members, not 3'):
        groups.admit(repo, 'job-2', 3)
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
