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

"""GC and image headers: clones that race with its listing, and headers
that stay small however many versions an image goes through.
"""

import json
import os
import sys

import pytest

from blobcr_agent.repository import gc
from blobcr_agent.repository import image as image_mod
from blobcr_common import exception

CHUNK = 4096


class Stalled(Exception):
    pass


def _stalled_clone(repo, monkeypatch, image, number):
    """A CLONE that registered on its source version, then stalled before
    writing its header. Returns a function that writes the header.
    """
    create = repo.create_image
    captured = {}

    def stall(*args, **kwargs):
        captured.update(args=args, kwargs=kwargs)
        raise Stalled()
    monkeypatch.setattr(repo, 'create_image', stall)
    with pytest.raises(Stalled):
        repo.clone(image, number)
    monkeypatch.setattr(repo, 'create_image', create)
    return lambda: create(*captured['args'], **captured['kwargs']).id


def test_clone_created_after_the_gc_listing_keeps_its_data(repo,
                                                           monkeypatch):
    header = repo.create_image('source', 8 * CHUNK)
    data = {i: os.urandom(CHUNK) for i in range(8)}
    one = repo.commit(header.id, data)
    finish_clone = _stalled_clone(repo, monkeypatch, header.id, one)
    repo.obsolete(header.id, [one])

    # The clone's header is written right after GC listed the headers
    # it marks from, before it decides what the source version needs.
    images = repo.images
    clone = []

    def listing(include_deleted=False):
        found = images(include_deleted)
        if sys._getframe(1).f_code.co_name == 'collect' and not clone:
            clone.append(finish_clone())
        return found
    monkeypatch.setattr(repo, 'images', listing)
    gc.collect(repo, grace=-2)
    monkeypatch.setattr(repo, 'images', images)

    expected = b''.join(data[i] for i in range(8))
    assert repo.read(clone[0], 1, 0, len(expected)) == expected
    gc.collect(repo, grace=-2)      # lists the clone: its header keeps it
    assert repo.read(clone[0], 1, 0, len(expected)) == expected
    # The source version is not needed any more: its entry goes.
    assert [v.number for v in repo.image(header.id).versions] == []


def test_clone_that_never_came_frees_its_source_after_the_timeout(
        repo, monkeypatch):
    header = repo.create_image('source', 2 * CHUNK)
    one = repo.commit(header.id, {0: os.urandom(CHUNK)})
    _stalled_clone(repo, monkeypatch, header.id, one)
    repo.obsolete(header.id, [one])
    gc.collect(repo, grace=-2)
    assert len(list(repo.backend.list('chunk'))) == 1   # clone may come
    gc.collect(repo, grace=-2, pending_timeout=0)
    assert list(repo.backend.list('chunk')) == []


def test_a_collected_clone_leaves_no_record_on_its_source(repo):
    """The run that removes a deleted clone's header removes the clone's
    record from its source version first. A record naming no header
    reads, for pending_timeout, as a clone being created: the source
    version, obsoleted later, was kept and walked, and once a run had
    freed its objects while the record stayed, every later run failed
    on them (found by the model walk, tests/integration/
    test_cinder_model.py, seeds 300-303).
    """
    header = repo.create_image('source', 8 * CHUNK)
    one = repo.commit(header.id, {i: os.urandom(CHUNK) for i in range(8)})
    later = {0: os.urandom(CHUNK)}
    two = repo.commit(header.id, later)
    clone = repo.clone(header.id, one).id
    repo.delete_image(clone)
    gc.collect(repo, grace=-2)
    with pytest.raises(exception.ImageNotFound):
        repo.image(clone)
    assert repo.image(header.id).version(one).clones == []
    repo.obsolete(header.id, [one])
    report = gc.collect(repo, grace=-2)
    assert report.chunks_deleted == 1       # chunk 0 of version one
    assert repo.read(header.id, two, 0, CHUNK) == later[0]
    assert [v.number for v in repo.image(header.id).versions] == [two]


def _header_bytes(repo, image):
    return len(repo.backend.read_header(image)[0])


def test_headers_stay_small_under_frequent_checkpoints(repo):
    """A checkpoint every few seconds, the newest three kept, GC now and
    then: the header holds a bounded number of entries, numbering goes
    on, and the history says how many entries were pruned.
    """
    image = repo.create_image('busy', 4 * CHUNK).id
    contents = {}
    sizes = []
    number = None
    for round_ in range(15):
        for k in range(10):
            data = os.urandom(CHUNK)
            number = repo.commit(image, {k % 4: data})
            contents[number] = (k % 4, data)
        stable = [v.number for v in repo.image(image).versions
                  if v.state == image_mod.STABLE]
        repo.obsolete(image, stable[:-3])
        gc.collect(repo, grace=-2)
        sizes.append(_header_bytes(repo, image))
    header = repo.image(image)
    assert [v.number for v in header.versions] == [148, 149, 150]
    assert header.pruned == 147 and header.newest_number() == 150
    assert max(sizes) < 2048, sizes
    for v in header.versions:
        index, data = contents[v.number]
        assert repo.read(image, v.number, index * CHUNK, CHUNK) == data
    with pytest.raises(exception.VersionNotFound, match='gc removed'):
        header.version(5)
    with pytest.raises(exception.VersionNotFound, match='no version 151$'):
        header.version(151)

    # Every version obsolete and pruned: numbering still goes on.
    repo.obsolete(image, [148, 149, 150])
    gc.collect(repo, grace=-2)
    header = repo.image(image)
    assert header.versions == [] and header.pruned == 150
    assert list(repo.backend.list('chunk')) == []
    assert repo.commit(image, {0: os.urandom(CHUNK)}) == 151


def test_failed_entries_go_after_the_pending_timeout(repo):
    image = repo.create_image('img', 2 * CHUNK).id
    one = repo.commit(image, {0: os.urandom(CHUNK)})
    pending = repo.begin_commit(image)
    pending.abort('test')
    gc.collect(repo, grace=-2)
    assert [v.state for v in repo.image(image).versions] == \
        ['stable', 'failed']
    gc.collect(repo, grace=-2, pending_timeout=0)
    assert [v.number for v in repo.image(image).versions] == [one]


def test_pending_version_keeps_the_parent_entry(repo):
    image = repo.create_image('img', 2 * CHUNK).id
    data = os.urandom(CHUNK)
    one = repo.commit(image, {0: data})
    pending = repo.begin_commit(image)
    repo.obsolete(image, [one])
    gc.collect(repo, grace=-2)
    # Its tree is built on version 1's, which must stay whole.
    assert [v.number for v in repo.image(image).versions] == [one, 2]
    pending.put(1, os.urandom(CHUNK))
    two = pending.finish()
    assert repo.read(image, two, 0, CHUNK) == data


def test_old_headers_stay_readable(repo):
    """A header without the fields pins and pruning added (an earlier
    release wrote it) reads, and one that does not use them is written
    without them.
    """
    image = repo.create_image('img', 2 * CHUNK).id
    repo.commit(image, {0: os.urandom(CHUNK)})
    raw = json.loads(repo.backend.read_header(image)[0])
    assert 'pruned' not in raw and 'last_version' not in raw
    assert 'pins' not in raw['versions'][0]
    assert repo.commit(image, {1: os.urandom(CHUNK)}) == 2


@pytest.mark.parametrize('then', ['gc', 'commit'])
def test_version_whose_mark_failed_was_refused_is_marked_later(
        repo, monkeypatch, then):
    """A COMMIT that failed on a full store, whose mark_failed was refused
    too (the header write): the version is marked failed by the next GC
    or COMMIT of the same process, not an hour later.
    """
    image = repo.create_image('img', 2 * CHUNK).id
    pending = repo.begin_commit(image)
    mark_failed = repo.mark_failed

    def refused(*args):
        raise exception.BackendFull('the meta pool is full')
    monkeypatch.setattr(repo, 'mark_failed', refused)
    pending.abort('a tree node write was refused')
    monkeypatch.setattr(repo, 'mark_failed', mark_failed)
    assert repo.image(image).version(pending.version).state == 'pending'
    if then == 'gc':
        assert gc.collect(repo, grace=-2).versions_failed == 1
    else:
        repo.commit(image, {0: os.urandom(CHUNK)})
    v = repo.image(image).version(pending.version)
    assert (v.state, v.error) == ('failed', 'a tree node write was refused')
