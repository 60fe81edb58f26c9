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

"""The write-ahead log's format and its segment rule
(repository/writelog.py), against a model of a guest, its flushes, its
checkpoints and its host's loss.

The model is the mirror's protocol without storage: blocks hold write
numbers (later writes have larger ones), a flush cuts the blocks written
since the last cut into an entry of the segment of the newest COMMIT
(flushlog.py), segments fill up and agents restart (then a rolled
segment follows, with the same base), versions turn stable or fail in
order, trims drop what ``covered`` says a stable version holds. At any
point the host may be lost: the newest stable version with the
``needed`` segments replayed in order must hold, per block, the write
flushed last or a later one.
"""

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import pytest

from blobcr_agent.mirror import flushlog
from blobcr_agent.repository import writelog
from blobcr_common import exception

BLOCKS = 6
UNKNOWN = object()


def test_entries_round_trip_and_damage_is_refused():
    writes = [(0, b'a' * 4096), (8192, b'b' * 12288), (1 << 40, b'')]
    blob = writelog.encode(1, writes) + writelog.encode(2, writes[:1])
    assert writelog.decode(blob) == [(1, writes), (2, writes[:1])]
    for cut in (1, len(blob) - 1):
        with pytest.raises(exception.CorruptObject):
            writelog.decode(blob[:cut])
    bad = bytearray(blob)
    bad[40] ^= 1
    with pytest.raises(exception.CorruptObject):
        writelog.decode(bytes(bad))


@given(st.lists(st.tuples(st.integers(0, 1 << 30),
                          st.integers(1, 3 * flushlog.MAX_ENTRY)),
                max_size=6),
       st.integers(4096, 1 << 20))
def test_batches_cover_each_extent_once_within_the_limit(extents, limit):
    groups = list(flushlog.batches(extents, limit))
    assert all(0 < sum(n for _, n in g) <= limit for g in groups)
    flat = [piece for g in groups for piece in g]
    # The pieces, in order, are the extents cut at group boundaries.
    rebuilt, k = [], 0
    for off, length in extents:
        covered = 0
        while covered < length:
            piece_off, n = flat[k]
            assert piece_off == off + covered
            covered += n
            k += 1
        rebuilt.append((off, covered))
    assert rebuilt == extents and k == len(flat)


class Model(object):
    """A guest on a mirror with a write log, as flushlog.py runs it."""

    def __init__(self):
        self.clock = 0
        self.now = [0] * BLOCKS          # write number each block holds
        self.floor = [0] * BLOCKS        # ... as of the last flush
        self.owed = set()                # the core's log map
        self.segments = {}               # segment -> base
        self.entries = {}                # segment -> [{block: write}]
        self.segment, self.segment_base = None, UNKNOWN
        self.full = False
        self.next_segment = 1
        self.base = None                 # newest COMMIT
        self.versions = []               # [(number, content)] in flight
        self.stable = {}                 # number -> content
        self.number = 0

    def write(self, block):
        self.clock += 1
        self.now[block] = self.clock
        self.owed.add(block)

    def flush(self):
        cut, self.owed = self.owed, set()
        if cut:
            by_commit = self.segment_base is not UNKNOWN and \
                self.base != self.segment_base
            if self.segment is None or by_commit or self.full:
                self.segment, self.segment_base = \
                    self.next_segment, self.base
                self.next_segment += 1
                self.segments[self.segment] = self.base if by_commit \
                    else {'base': self.base, 'rolled': True}
                self.entries[self.segment] = []
                self.full = False
            self.entries[self.segment].append(
                {b: self.now[b] for b in cut})
        self.floor = list(self.now)

    def fill(self):
        """The current segment is full (writelog.MAX_SEGMENT)."""
        self.full = True

    def restart(self):
        """The agent restarts: its log map survives, its segment not."""
        self.segment, self.segment_base = None, UNKNOWN

    def commit(self):
        self.number += 1
        self.versions.append((self.number, list(self.now)))
        self.base = self.number

    def persist(self, ok):
        if not self.versions:
            return
        number, content = self.versions.pop(0)
        if not ok:
            # Its followers fail with it; the core's chunks are dirty
            # again and the next version carries them.
            self.versions = []
            return
        self.stable[number] = content
        self.trim(number)

    def trim(self, number):
        current = self.segment
        for s in writelog.covered(self.segments, number):
            if s != current:
                del self.segments[s]

    def lose_host(self):
        newest = max(self.stable) if self.stable else None
        content = list(self.stable[newest]) if newest else [0] * BLOCKS
        for s in writelog.needed(self.segments, newest):
            for entry in self.entries[s]:
                for b, w in entry.items():
                    content[b] = w
        return content


steps = st.lists(st.one_of(
    st.tuples(st.just('write'), st.integers(0, BLOCKS - 1)),
    st.tuples(st.just('flush'), st.none()),
    st.tuples(st.just('commit'), st.none()),
    st.tuples(st.just('persist'), st.booleans()),
    st.tuples(st.just('fill'), st.none()),
    st.tuples(st.just('restart'), st.none())), max_size=60)


@settings(max_examples=1500)
@given(steps)
def test_a_lost_host_loses_no_flushed_write(walk):
    m = Model()
    for kind, arg in walk:
        getattr(m, kind)(*(() if arg is None else (arg,)))
        after_loss = m.lose_host()
        for b in range(BLOCKS):
            # The write flushed last, or a later one; never older.
            assert m.floor[b] <= after_loss[b] <= m.now[b], (kind, b)
    # A trim right after the last stable version leaves only what it
    # may lack, and the segment being appended to.
    if m.stable:
        newest = max(m.stable)
        m.trim(newest)
        assert set(m.segments) <= set(
            writelog.needed(m.segments, newest)) | {m.segment}


def test_the_rule_on_examples():
    # Segment 1 after no version, 2 after version 3, 3 after version 5.
    segments = {1: None, 2: 3, 3: 5}
    # A rolled segment covers nothing before it.
    assert writelog.needed({1: 3, 2: {'base': 3, 'rolled': True}}, 7) == \
        [1, 2]
    assert writelog.needed(segments, None) == [1, 2, 3]
    assert writelog.needed(segments, 2) == [1, 2, 3]
    assert writelog.needed(segments, 3) == [2, 3]
    assert writelog.needed(segments, 4) == [2, 3]
    assert writelog.needed(segments, 5) == [3]
    assert writelog.needed(segments, 9) == [3]       # the last stays
    assert writelog.covered(segments, 5) == [1, 2]
