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

"""Property test: the repository against an in-memory reference model.

Random sequences of create, COMMIT (from the newest or any stable
version), a copy of a version (COMMIT of no chunk), extend, CLONE, PIN
and unpin, reads of any version, obsolete, abandoned
commits and GC run on the real backend (local store, and the micro Ceph
cluster). The model is a dict of whole-image byte strings per stable
version, and one per pinned version. After every step each stable
version must read back byte for byte, and each pinned one (obsolete or
not) through the fetch path its pin holder uses; after every GC the
chunk objects left in the backend must be exactly the chunks the live
and pinned versions hold (nothing lost, no orphan kept).

BLOBCR_HYPOTHESIS_EXAMPLES sets the number of examples (default 200 on
the local store, 60 on Ceph, whose round trips make an example about
ten times slower: the same semantics, and CI's budget).
"""

import hashlib
import os

from hypothesis import settings
from hypothesis import stateful
from hypothesis import strategies as st

from blobcr_agent.repository.backends import base
from blobcr_agent.repository import gc
from blobcr_agent.repository import repository
from blobcr_common import exception

CHUNK = 512
EXAMPLES = os.environ.get('BLOBCR_HYPOTHESIS_EXAMPLES')
DEFAULT_EXAMPLES = {'local': 200, 'rados': 60}

# Few distinct fill bytes so that chunks repeat (deduplication) often.
chunk_content = st.one_of(
    st.just(None),                                    # all zero
    st.integers(1, 4).map(lambda b: bytes([b])),     # repeated byte
    st.binary(min_size=CHUNK, max_size=CHUNK),        # arbitrary
)


def _fill(pattern, length):
    if pattern is None:
        return bytes(length)
    if len(pattern) == 1:
        return pattern * length
    return pattern[:length]


def read_version(repo, image, number, size):
    """Whole version through the batched fetch path (not repo.read)."""
    header = repo.image(image)
    content = bytearray(size)
    for index, data in repo.fetch(header, number):
        content[index * CHUNK:index * CHUNK + len(data)] = data
    return bytes(content)


def model_machine(backend_factory):

    class RepositoryModel(stateful.RuleBasedStateMachine):
        images = stateful.Bundle('images')

        def __init__(self):
            super().__init__()
            self.repo = repository.Repository(
                backend_factory(), chunk_size=CHUNK, gc_grace=0)
            self.model = {}     # image id -> {version: bytes}
            self.sizes = {}
            self.pinned = {}    # (image id, version) -> bytes
            self.writing = set()    # images with an abandoned commit
            # (image id, version) -> {chunk index: object name}: the
            # objects GC must keep (an extended image's old short last
            # chunk stays the object it was, so content is not enough).
            self.objects = {}

        def teardown(self):
            self.repo.close()

        def _newest(self, image_id):
            versions = self.model[image_id]
            return max(versions) if versions else None

        @stateful.rule(target=images, nchunks=st.integers(1, 20),
                       tail=st.integers(0, CHUNK - 1),
                       fanout=st.integers(2, 5))
        def create(self, nchunks, tail, fanout):
            size = nchunks * CHUNK + tail
            header = self.repo.create_image('img', size, fanout=fanout)
            self.model[header.id] = {}
            self.sizes[header.id] = size
            return header.id

        @stateful.rule(image=images, data=st.data())
        def commit(self, image, data):
            versions = self.model[image]
            parent = None
            if versions and data.draw(st.booleans(), 'explicit parent'):
                parent = data.draw(st.sampled_from(sorted(versions)),
                                   'parent')
            base_number = parent if parent is not None else \
                self._newest(image)
            size = self.sizes[image]
            content = bytearray(versions[base_number] if base_number
                                else bytes(size))
            nchunks = (size + CHUNK - 1) // CHUNK
            changes = data.draw(st.dictionaries(
                st.integers(0, nchunks - 1), chunk_content, max_size=8),
                'changes')
            chunks = {}
            for index, pattern in changes.items():
                length = min(CHUNK, size - index * CHUNK)
                chunks[index] = _fill(pattern, length)
                content[index * CHUNK:index * CHUNK + length] = chunks[index]
            number = self.repo.commit(image, chunks, parent=parent)
            assert number not in versions
            versions[number] = bytes(content)
            objects = dict(self.objects[(image, base_number)]
                           if base_number else {})
            for index, chunk in chunks.items():
                objects[index] = hashlib.sha256(chunk).hexdigest()
                if not any(chunk):
                    del objects[index]
            self.objects[(image, number)] = objects

        @stateful.rule(image=images, data=st.data())
        def commit_copy(self, image, data):
            versions = self.model[image]
            if not versions:
                return
            number = data.draw(st.sampled_from(sorted(versions)))
            new = self.repo.commit_copy(image, number)
            assert new not in versions
            versions[new] = versions[number]
            self.objects[(image, new)] = self.objects[(image, number)]

        @stateful.rule(image=images, more=st.integers(0, 70),
                       tail=st.integers(0, CHUNK - 1))
        def extend(self, image, more, tail):
            # Up to 70 chunks more: with fan-outs of 2-5 the tree often
            # needs more levels.
            size = self.sizes[image] + more * CHUNK + tail
            busy = image in self.writing or any(
                i == image for i, _ in self.pinned)
            try:
                header = self.repo.extend(image, size)
            except exception.InvalidInput:
                assert busy
                return
            assert not busy or size == self.sizes[image]
            assert header.size == size
            grow = size - self.sizes[image]
            self.sizes[image] = size
            versions = self.model[image]
            for number in versions:
                versions[number] += bytes(grow)

        @stateful.rule(target=images, image=images, data=st.data())
        def clone(self, image, data):
            versions = self.model[image]
            if not versions:
                return stateful.multiple()
            number = data.draw(st.sampled_from(sorted(versions)))
            header = self.repo.clone(image, number)
            self.model[header.id] = {1: versions[number]}
            self.objects[(header.id, 1)] = self.objects[(image, number)]
            self.sizes[header.id] = self.sizes[image]
            return header.id

        @stateful.rule(image=images, data=st.data())
        def obsolete(self, image, data):
            versions = self.model[image]
            if not versions:
                return
            number = data.draw(st.sampled_from(sorted(versions)))
            self.repo.obsolete(image, [number])
            del versions[number]

        @stateful.rule(image=images, data=st.data())
        def pin(self, image, data):
            versions = self.model[image]
            if not versions:
                return
            number = data.draw(st.sampled_from(sorted(versions)))
            # A holder that is no path: GC never judges it stale.
            assert self.repo.pin(image, number, 'model') == number
            self.pinned[(image, number)] = versions[number]

        @stateful.rule(data=st.data())
        def unpin(self, data):
            if not self.pinned:
                return
            image, number = data.draw(st.sampled_from(sorted(self.pinned)))
            assert self.repo.unpin(image, number, 'model') == 1
            del self.pinned[(image, number)]

        @stateful.rule(image=images, data=st.data())
        def read_range(self, image, data):
            versions = self.model[image]
            if not versions:
                return
            number = data.draw(st.sampled_from(sorted(versions)))
            size = self.sizes[image]
            offset = data.draw(st.integers(0, size - 1))
            length = data.draw(st.integers(0, size - offset))
            assert self.repo.read(image, number, offset, length) == \
                versions[number][offset:offset + length]

        @stateful.rule(image=images, data=st.data())
        def abandoned_commit(self, image, data):
            # A writer that dies mid-COMMIT: its chunks are written, the
            # version stays pending until GC declares it failed.
            pending = self.repo.begin_commit(image)
            nchunks = (self.sizes[image] + CHUNK - 1) // CHUNK
            for index in data.draw(st.sets(st.integers(0, nchunks - 1),
                                           max_size=4)):
                length = min(CHUNK, self.sizes[image] - index * CHUNK)
                pending.put(index, os.urandom(length))
            pending._batch.wait()
            self.writing.add(image)

        @stateful.rule()
        def collect(self):
            # Nothing writes concurrently here, so the cut-off may lie in
            # the future: RADOS reports mtimes in whole seconds, and GC
            # keeps anything that may be newer than its cut-off.
            gc.collect(self.repo, grace=-2, pending_timeout=0)
            self.writing.clear()
            live = [(image, number) for image, versions in self.model.items()
                    for number in versions] + list(self.pinned)
            expected = {name for key in live
                        for name in self.objects[key].values()}
            stored = set(self.repo.backend.list(base.CHUNK))
            assert stored == expected, (
                'lost: %d, orphans: %d' % (len(expected - stored),
                                           len(stored - expected)))

        @stateful.invariant()
        def pinned_versions_match_model(self):
            for (image, number), content in self.pinned.items():
                assert read_version(self.repo, image, number,
                                    len(content)) == content

        @stateful.invariant()
        def stable_versions_match_model(self):
            for image, versions in self.model.items():
                header = self.repo.image(image)
                stable = {v.number for v in header.versions
                          if v.state == 'stable'}
                assert stable == set(versions)
                for number, content in versions.items():
                    assert read_version(self.repo, image, number,
                                        len(content)) == content
                for v in header.versions:
                    if v.state != 'stable':
                        try:
                            self.repo.read(image, v.number, 0, 1)
                        except exception.VersionNotStable:
                            continue
                        raise AssertionError('%s v%d is %s but readable'
                                             % (image, v.number, v.state))

    return RepositoryModel


def test_repository_matches_model(backend_factory, backend_kind):
    examples = int(EXAMPLES or DEFAULT_EXAMPLES[backend_kind])
    stateful.run_state_machine_as_test(
        model_machine(backend_factory),
        settings=settings(max_examples=examples, stateful_step_count=20,
                          deadline=None, database=None))
