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

"""Property test: sub-chunk deltas against a reference model.

One writer (as a mirror's persister does) writes 4 KiB pages of a small
image and checkpoints its dirty chunks through ``Commit.put`` tracked
by a ``deltas.Tracker``, on the real backend (local store and the
micro Ceph cluster). Hypothesis interleaves: page writes (zero pages
too, so that chunks turn all-zero), checkpoints, checkpoints that fail
half-way (the tracker forgets), another writer's commit under the
tracked writer's feet (its next delta over a chunk that writer changed
must be refused at finish, and its retry with whole chunks must
succeed), extends (the short last chunk grows), obsoleting old versions
and GC. After every step each stable version reads back byte for byte
through both read paths; after every GC the chunk objects left are
exactly the live versions' objects, the bases of the live deltas
among them down their chains (read from the objects themselves, not
from GC's links) and their links. Deltas are stored alone with links
or in packs (chunkpacks.py), switched during a walk, and packs left
sparse are compacted: a live pack stays whole with the bases its index
lists.

BLOBCR_HYPOTHESIS_EXAMPLES sets the number of examples (default 150 on
the local store, 40 on Ceph). Hypothesis prints the failing sequence;
``@reproduce_failure`` replays it.
"""

import os
import random

from hypothesis import settings
from hypothesis import stateful
from hypothesis import strategies as st
import pytest

from blobcr_agent.repository.backends import base
from blobcr_agent.repository import chunkpacks
from blobcr_agent.repository import chunks
from blobcr_agent.repository import deltas
from blobcr_agent.repository import gc
from blobcr_agent.repository import repository
from blobcr_common import exception

PAGE = deltas.PAGE
CHUNK = 16 * PAGE
EXAMPLES = os.environ.get('BLOBCR_HYPOTHESIS_EXAMPLES')
DEFAULT_EXAMPLES = {'local': 150, 'rados': 40}
COMPACT_BELOW = chunkpacks.COMPACT_BELOW

# Arbitrary pages come from a drawn seed: drawing 4 KiB of bytes each
# would overrun Hypothesis's per-example buffer after two pages.
page_content = st.one_of(
    st.just(None),                                    # a zero page
    st.integers(1, 3).map(lambda b: bytes([b])),     # few values: dedup
    st.integers(0, 2 ** 32).map(
        lambda seed: random.Random(seed).randbytes(PAGE)))


def _page(pattern):
    if pattern is None:
        return bytes(PAGE)
    return pattern * PAGE if len(pattern) == 1 else pattern


def deltas_machine(backend_factory):

    class DeltasModel(stateful.RuleBasedStateMachine):

        def __init__(self):
            super().__init__()
            self.repo = repository.Repository(
                backend_factory(), chunk_size=CHUNK, fanout=3, gc_grace=0)
            self.size = 3 * CHUNK + PAGE + 100     # a short last chunk
            self.image = self.repo.create_image('img', self.size).id
            self.view = bytearray(self.size)       # the writer's disk
            self.dirty = set()
            self.versions = {}                     # number -> bytes
            self.tracker = deltas.Tracker(1 << 20)
            self.deltas_written = 0
            self.packed = 0                        # of those, in packs
            self.compacted = 0                     # entries moved
            # Packs are moved on once they lose one entry: a 4-chunk
            # image never reaches the default's fraction.
            chunkpacks.COMPACT_BELOW = 1.0
            self.deepest = 0
            # Chunks another writer committed since the tracker learnt
            # them: a delta over them must be refused.
            self.stale = set()

        def teardown(self):
            chunkpacks.COMPACT_BELOW = COMPACT_BELOW
            self.repo.close()

        @stateful.rule(pack_bytes=st.sampled_from([0, 9000, 1 << 20]),
                       compact_below=st.sampled_from([COMPACT_BELOW, 1.0]))
        def switch_packing(self, pack_bytes, compact_below):
            """Deltas alone with links (0), in packs of about two, or
            in one pack per version; moved on from packs that lost one
            entry, or at the default's fraction. Versions of every
            format then share the chains.
            """
            self.repo.delta_pack_max_bytes = pack_bytes
            chunkpacks.COMPACT_BELOW = compact_below

        def _chunk(self, index):
            return bytes(self.view[index * CHUNK:(index + 1) * CHUNK])

        def _newest(self):
            return self.versions[max(self.versions)] if self.versions \
                else bytes(self.size)

        @stateful.rule(writes=st.lists(st.tuples(
            st.integers(0, 3 * CHUNK // PAGE + 1), page_content),
            min_size=1, max_size=6))
        def write_pages(self, writes):
            for offset, pattern in writes:
                start = offset * PAGE
                if start >= self.size:
                    continue
                data = _page(pattern)[:self.size - start]
                self.view[start:start + len(data)] = data
                self.dirty.add(start // CHUNK)

        @stateful.rule(writes=st.lists(st.tuples(
            st.integers(0, 3 * CHUNK // PAGE + 1), page_content),
            min_size=1, max_size=3))
        def write_pages_and_checkpoint(self, writes):
            # The common case twice as often as the rules that make the
            # tracker forget (failed versions, another writer).
            self.write_pages(writes)
            self.checkpoint()

        def _put_dirty(self, pending, limit=None):
            pending.track(self.tracker)
            for index in sorted(self.dirty)[:limit]:
                pending.put(index, self._chunk(index))
                tracked = self.tracker.staged(index)
                if tracked is not None and tracked.base is not None:
                    self.deltas_written += 1
                    self.packed += chunkpacks.is_ref(tracked.name)
                    self.deepest = max(self.deepest, tracked.depth)

        def _expected(self):
            content = bytearray(self._newest())
            for index in self.dirty:
                content[index * CHUNK:(index + 1) * CHUNK] = \
                    self._chunk(index)
            return bytes(content)

        @stateful.rule()
        def checkpoint(self):
            expected = self._expected()
            pending = self.repo.begin_commit(self.image)
            self._put_dirty(pending)
            try:
                number = pending.finish()
            except exception.CommitAborted:
                # Only after another writer's commit: retried whole.
                pending.abort('its deltas were made from another base')
                self.tracker.forget()
                assert self.stale, 'a delta refused with no reason'
                self.stale.clear()
                pending = self.repo.begin_commit(self.image)
                self._put_dirty(pending)
                number = pending.finish()
            self.compacted += pending.compacted
            self.tracker.stable()
            self.stale -= self.dirty
            self.versions[number] = expected
            self.dirty.clear()

        @stateful.rule(limit=st.integers(0, 3))
        def checkpoint_fails(self, limit):
            pending = self.repo.begin_commit(self.image)
            self._put_dirty(pending, limit)
            pending.abort('failed on purpose')
            self.tracker.forget()
            self.stale.clear()

        @stateful.rule(index=st.integers(0, 3), pattern=page_content)
        def another_writer_commits(self, index, pattern):
            """A version written by someone else: what the tracked writer
            remembers of ``index`` is no longer the base's.
            """
            length = min(CHUNK, self.size - index * CHUNK)
            data = (_page(pattern) * (CHUNK // PAGE))[:length]
            number = self.repo.commit(self.image, {index: data})
            content = bytearray(self._newest())
            content[index * CHUNK:index * CHUNK + length] = data
            self.versions[number] = bytes(content)
            self.stale.add(index)

        @stateful.rule(pages=st.integers(1, 6))
        def extend(self, pages):
            self.repo.extend(self.image, self.size + pages * PAGE)
            self.size += pages * PAGE
            self.view += bytes(pages * PAGE)
            self.versions = {n: c + bytes(pages * PAGE)
                             for n, c in self.versions.items()}

        @stateful.rule(data=st.data())
        def obsolete_and_collect(self, data):
            old = sorted(self.versions)[:-1]
            if old:
                gone = data.draw(st.lists(st.sampled_from(old), unique=True,
                                          max_size=len(old)), 'obsolete')
                self.repo.obsolete(self.image, gone)
                for number in gone:
                    del self.versions[number]
            gc.collect(self.repo, grace=-2, pending_timeout=0)
            self._no_orphan_and_nothing_lost()

        def _no_orphan_and_nothing_lost(self):
            header = self.repo.image(self.image)
            t = header.tree(self.repo.nodes)
            live = set()
            for number in self.versions:
                root = header.stable_version(number).root_ref
                live.update(d for _, d in t.items(root))
            expected, seen = set(), set()
            todo = list(live)
            while todo:         # down each delta's chain of bases
                value = todo.pop()
                if value in seen:
                    continue
                seen.add(value)
                if chunkpacks.is_ref(value):
                    # A live pack stays whole, with every entry's base.
                    pack = chunkpacks.pack_of(value)
                    expected.add(pack)
                    todo.extend(chunkpacks.read_bases(self.repo.backend,
                                                      pack))
                    continue
                expected.add(value.hex())
                blob = self.repo.backend.get(base.CHUNK, value.hex())
                if chunks.is_delta(blob):
                    over = deltas.base_of(blob)
                    expected.add(deltas.link_name(value, over))
                    todo.append(over)
            stored = set(self.repo.backend.list(base.CHUNK))
            assert stored == expected, (
                'lost: %s, orphans: %s' % (sorted(expected - stored),
                                           sorted(stored - expected)))

        @stateful.invariant()
        def versions_match_model(self):
            header = self.repo.image(self.image)
            for number, content in self.versions.items():
                got = bytearray(self.size)
                for index, data in self.repo.fetch(header, number):
                    got[index * CHUNK:index * CHUNK + len(data)] = data
                assert bytes(got) == content, 'fetch of v%d' % number
                assert self.repo.read(self.image, number, 0,
                                      self.size) == content, \
                    'read of v%d' % number

    return DeltasModel


def test_deltas_match_model(backend_factory, backend_kind):
    examples = int(EXAMPLES or DEFAULT_EXAMPLES[backend_kind])
    machine = deltas_machine(backend_factory)
    written, depths, packed, compacted = [], [], [], []
    teardown = machine.teardown

    def count(self):
        written.append(self.deltas_written)
        depths.append(self.deepest)
        packed.append(self.packed)
        compacted.append(self.compacted)
        teardown(self)
    machine.teardown = count
    # Ceph gets few examples (each costs seconds): drawn the same way
    # each run, so that they are sure to reach deep chains (two CI runs
    # of 40 drawn anew did not); the local store's 150 explore anew.

    def walk(derandomize):
        stateful.run_state_machine_as_test(
            machine,
            settings=settings(max_examples=examples, stateful_step_count=25,
                              deadline=None, database=None,
                              derandomize=derandomize))
    walk(backend_kind == 'rados')
    if max(depths) < deltas.MAX_DEPTH and backend_kind != 'rados':
        # Drawn anew, the walk does not always reach the deepest chain
        # (a CI run stopped at 2 of 3): the fixed draw, which does, runs
        # too, so that the property has been checked there every time.
        print('deepest chain drawn anew: %d; the fixed draw follows'
              % max(depths))
        walk(True)
    # The property is only worth something if deltas were written, and
    # chains reached their deepest. (Examples are drawn anew each run:
    # one of CI's 40 on Ceph wrote deltas in 5, so the guard asks for a
    # tenth, not a sixth.)
    print('deltas written per example:', written)
    print('deepest chain per example:', depths)
    print('packed deltas per example:', packed)
    print('entries compacted per example:', compacted)
    assert sum(1 for n in written if n) >= max(1, examples // 10), written
    # Both formats are only checked where drawn. (Compaction is drawn in
    # some walks, not all: test_compaction_... below makes it happen.)
    assert sum(packed) and sum(packed) < sum(written), (packed, written)
    assert max(depths) == deltas.MAX_DEPTH, depths


def _commit_chunk0(repo, image, tracker, content):
    """A version whose chunk 0 is ``content``, tracked; its number."""
    pending = repo.begin_commit(image)
    pending.track(tracker)
    pending.put(0, bytes(content))
    number = pending.finish()
    tracker.stable()
    return number


@pytest.mark.parametrize('formats', ['packed', 'alone', 'mixed'])
def test_a_chain_outlives_the_versions_of_its_bases(backend_factory,
                                                    formats):
    """The longest chain a writer makes, every version under its newest
    deleted, GC: the newest still reads, through every base. Its deltas
    are in packs, alone with links, or both along the chain (GC then
    follows a link to a pack reference and a pack's index to a delta
    alone).
    """
    mib = 1 << 20
    packing = {'packed': [mib] * 6, 'alone': [0] * 6,
               'mixed': [0, 0, mib, 0, mib, 0]}[formats]
    repo = repository.Repository(backend_factory(), chunk_size=CHUNK,
                                 fanout=3, gc_grace=0)
    try:
        image = repo.create_image('img', CHUNK).id
        tracker = deltas.Tracker(1 << 20)
        content = bytearray(random.Random(7).randbytes(CHUNK))
        numbers, depths, contents, refs = [], [], [], []
        # Whole, then one new page per version: from the third on, each
        # differs from the anchor in more than twice what it changed, so
        # it goes one deeper, until the chain is full.
        for step in range(deltas.MAX_DEPTH + 3):
            if step:
                content[step * PAGE] ^= 0xff
            repo.delta_pack_max_bytes = packing[step]
            pending = repo.begin_commit(image)
            pending.track(tracker)
            pending.put(0, bytes(content))
            numbers.append(pending.finish())
            tracker.stable()
            depths.append(tracker.get(0).depth)
            refs.append(chunkpacks.is_ref(tracker.get(0).name))
            contents.append(bytes(content))
        assert depths == [0, 1, 1] + list(range(2, deltas.MAX_DEPTH + 1)) + \
            [1], depths
        assert refs == [bool(p and d) for p, d in zip(packing, depths)]
        deepest = depths.index(deltas.MAX_DEPTH)
        repo.obsolete(image, [n for k, n in enumerate(numbers)
                              if k != deepest])
        report = gc.collect(repo, grace=-2, pending_timeout=0)
        # The chain: the deepest and the versions it goes down through.
        assert report.live_delta_packs == \
            sum(refs[deepest - deltas.MAX_DEPTH + 1:deepest + 1]), report
        assert repo.read(image, numbers[deepest], 0, CHUNK) == \
            contents[deepest]
    finally:
        repo.close()


@pytest.mark.parametrize('stale', [False, True])
def test_compaction_moves_what_is_left_of_a_sparse_pack(backend_factory,
                                                        stale):
    """Eight deltas in one pack, seven rewritten: the next version moves
    the eighth into its own pack, and once the older versions go, GC
    deletes the old pack. With the eighth chunk changed by another
    writer meanwhile, the move is left out and nothing is lost.
    """
    repo = repository.Repository(backend_factory(), chunk_size=CHUNK,
                                 fanout=3, gc_grace=0)
    try:
        image = repo.create_image('img', 8 * CHUNK).id
        tracker = deltas.Tracker(1 << 20)
        content = bytearray(random.Random(3).randbytes(8 * CHUNK))

        def commit(indices):
            pending = repo.begin_commit(image)
            pending.track(tracker)
            for i in indices:
                pending.put(i, bytes(content[i * CHUNK:(i + 1) * CHUNK]))
            number = pending.finish()
            tracker.stable()
            return number, pending.compacted

        def touch(indices, page):
            for i in indices:
                content[i * CHUNK + page * PAGE] ^= 0xff

        commit(range(8))                            # whole
        touch(range(8), 1)
        v2, _ = commit(range(8))                    # 8 deltas, one pack
        old = chunkpacks.pack_of(tracker.get(7).name)
        touch(range(7), 2)
        commit(range(7))                            # 1 of 8 left there
        if stale:
            content[7 * CHUNK:8 * CHUNK] = bytes([7]) * CHUNK
            repo.commit(image, {7: bytes(content[7 * CHUNK:8 * CHUNK])})
        touch(range(7), 3)
        v4, moved = commit(range(7))
        header = repo.image(image)
        t, root = repo.version_tree(header, v4)
        leaf = t.lookup(root, 7)
        if stale:
            assert moved == 0 and not chunkpacks.is_ref(leaf)
        else:
            assert moved == 1 and chunkpacks.pack_of(leaf) != old
            assert chunkpacks.pack_of(leaf) == \
                chunkpacks.pack_of(t.lookup(root, 0))
        repo.obsolete(image, list(range(1, v4)))
        report = gc.collect(repo, grace=-2, pending_timeout=0)
        assert old not in set(repo.backend.list(base.CHUNK)), report
        assert repo.read(image, v4, 0, 8 * CHUNK) == bytes(content)
    finally:
        repo.close()
