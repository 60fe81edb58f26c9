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

"""GC and restart profiles: which objects the life-cycle test's GC frees
(issue 19, finding 9).

tests/integration/test_agent_rpc.py::test_life_cycle once saw its last
GC delete 5 chunk objects where it expected 4 (the chunks only version 1
used). The fifth was no chunk of data: it was the restart profile of
version 1, which the detach stores as an object of the CHUNK kind, named
by the hash of the compressed first-read order. The image and its clone
are both read whole after their attach; when the two mirrors record the
same order, both profiles are one object, kept by the clone's stable
version 1. The FUSE loop serves concurrent requests (the kernel's
readahead sends several), so under load the recorded orders can differ:
then version 1's profile is an object of its own, and once version 1 is
obsolete and unpinned (the image detached) GC rightly frees it (or keeps
it for one more run, as written after the cut-off: on rados, whose
mtimes are whole seconds rounded up). No live object goes: every live
version reads back whole, and the clone's profile (live) still loads.

Here the orders are chosen, not raced: the same order frees the 4 data
chunks alone, different orders free them and version 1's profile.
"""

import os

import pytest

from blobcr_agent.mirror import service as service_mod
from blobcr_agent.repository.backends import base as backend_base
from blobcr_agent.repository.backends import local
from blobcr_agent.repository import chunks
from blobcr_agent.repository import gc
from blobcr_agent.repository import repository

CHUNK = 64 * 1024
NCHUNKS = 32
W2, W3 = [0, 3, 5, 30], [1, 5]          # as test_life_cycle


@pytest.fixture
def repo(tmp_path):
    repo = repository.Repository(local.LocalBackend(str(tmp_path / 'store')),
                                 chunk_size=CHUNK)
    yield repo
    repo.close()


def _name(data):
    return chunks.object_name(chunks.digest(data))


def _chunk_objects(repo):
    return set(repo.backend.list(backend_base.CHUNK))


def _read_in(attached, order):
    for index in order:
        attached.read(index * CHUNK, CHUNK)


def _life_cycle(repo, tmp_path, clone_order):
    """test_life_cycle's steps up to its last GC, with the clone read
    in ``clone_order`` (the image in index order). Returns what the last
    GC freed and what it was expected to free.
    """
    base = os.urandom(NCHUNKS * CHUNK)
    image = repo.create_image('disk', len(base)).id
    repo.commit(image, {i: base[i * CHUNK:(i + 1) * CHUNK]
                        for i in range(NCHUNKS)})
    mirror = service_mod.MirrorService(repo, str(tmp_path / 'mnt'),
                                       str(tmp_path / 'cache'))
    mirror.attach(image)
    disk = mirror.get(image)
    _read_in(disk, range(NCHUNKS))
    for writes in (W2, W3):
        for index in writes:
            disk.write(index * CHUNK, os.urandom(CHUNK))
        disk.checkpoint()
        assert disk.wait_persisted(60)
    clone = repo.clone(image, 2, 'disk-v2').id
    mirror.attach(clone)
    _read_in(mirror.get(clone), clone_order)
    repo.obsolete(image, [1, 2])
    assert gc.collect(repo, grace=0).chunks_deleted == 0    # pinned
    mirror.detach(clone)
    mirror.detach(image)
    header = repo.image(image)
    profile_v1 = header.version(1).profile
    profile_clone = repo.image(clone).version(1).profile
    assert profile_v1 and profile_clone          # both saved at detach
    live = {repo.read(image, 3, 0, len(base)),
            repo.read(clone, 1, 0, len(base))}
    before = _chunk_objects(repo)
    report = gc.collect(repo, grace=0)
    freed = before - _chunk_objects(repo)
    assert report.chunks_deleted == len(freed)
    # Nothing live went: the versions read back, the clone's profile loads.
    assert {repo.read(image, 3, 0, len(base)),
            repo.read(clone, 1, 0, len(base))} == live
    assert repo.load_profile(repo.image(clone), 1) == list(clone_order)
    only_v1 = {_name(base[i * CHUNK:(i + 1) * CHUNK]) for i in W2}
    return freed, only_v1, profile_v1, profile_clone


def test_same_read_order_frees_the_chunks_only_version_1_used(repo,
                                                              tmp_path):
    freed, only_v1, p1, pc = _life_cycle(repo, tmp_path, range(NCHUNKS))
    assert p1 == pc                     # one object, kept by the clone
    assert freed == only_v1 and len(freed) == len(W2)


def test_another_read_order_frees_version_1s_profile_too(repo, tmp_path):
    order = list(range(NCHUNKS))
    order[2], order[3] = order[3], order[2]     # two requests raced
    freed, only_v1, p1, pc = _life_cycle(repo, tmp_path, order)
    assert p1 != pc
    assert freed == only_v1 | {p1}      # the fifth: version 1's profile
