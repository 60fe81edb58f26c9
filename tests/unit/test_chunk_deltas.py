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

"""Sub-chunk deltas: the object format, what decoding refuses, link
names and the tracker (the repository-level property test is
tests/functional/test_deltas_model.py).
"""

import random

from hypothesis import given
from hypothesis import strategies as st
import pytest

from blobcr_agent.repository import chunks
from blobcr_agent.repository import deltas
from blobcr_common import exception

PAGE = deltas.PAGE


def _anchor(length, seed=1):
    data = random.Random(seed).randbytes(length)
    return data, chunks.digest(data), bytes((chunks.RAW,)) + data


def _delta(anchor_data, anchor_digest, changes, policy=None):
    data = bytearray(anchor_data)
    for offset, value in changes:
        data[offset] = value
    data = bytes(data)
    pages = deltas.changed_pages(deltas.page_hashes(anchor_data),
                                 deltas.page_hashes(data))
    name, blob = chunks.encode_delta(
        policy or chunks.CompressionPolicy('never'), anchor_digest, data,
        pages)
    return data, pages, name.hex(), blob


@given(length=st.integers(1, 9 * PAGE + 77),
       edits=st.lists(st.tuples(st.integers(0, 10 ** 6), st.integers(0, 255)),
                      max_size=12),
       mode=st.sampled_from(['never', 'always']))
def test_a_delta_decodes_to_the_new_content(length, edits, mode):
    anchor, digest, anchor_blob = _anchor(length)
    changes = [(offset % length, value) for offset, value in edits]
    data, pages, name, blob = _delta(anchor, digest, changes,
                                     chunks.CompressionPolicy(mode))
    assert pages == sorted({o // PAGE for o, v in changes
                            if data[o] != anchor[o]})
    assert chunks.is_delta(blob)
    assert name != chunks.object_name(chunks.digest(data))
    loads = []
    out = chunks.decode(name, blob, length,
                        lambda n: loads.append(n) or anchor_blob)
    assert out == data and loads == [digest]
    # An image extended since: the chunk reads on as zeros.
    assert chunks.decode(name, blob, length + 10,
                         lambda n: anchor_blob) == data + bytes(10)


def test_the_delta_stores_only_the_changed_pages():
    anchor, digest, _ = _anchor(64 * PAGE)
    data, pages, name, blob = _delta(anchor, digest,
                                     [(5, 1), (40 * PAGE + 9, 2)])
    assert pages == [0, 40]
    assert 2 * PAGE < len(blob) < 2 * PAGE + 100


@pytest.mark.parametrize('damage, why', [
    ('page', 'does not match its hash'),
    ('anchor', 'content does not match its hash'),
    ('truncated', 'shorter than a delta header'),
    ('no-bitmap', 'truncated delta header'),
    ('no-loader', 'without its base'),
])
def test_decoding_refuses_what_does_not_add_up(damage, why):
    anchor, digest, anchor_blob = _anchor(8 * PAGE)
    data, _, name, blob = _delta(anchor, digest, [(PAGE + 3, 7)])
    load = lambda n: anchor_blob                            # noqa: E731
    if damage == 'page':
        blob = blob[:-1] + bytes([blob[-1] ^ 1])
    elif damage == 'anchor':
        other = bytearray(anchor)
        other[7 * PAGE] ^= 1            # a page the delta does not hold
        load = lambda n: bytes((chunks.RAW,)) + bytes(other)  # noqa: E731
    elif damage == 'truncated':
        blob = blob[:40]
    elif damage == 'no-bitmap':
        blob = blob[:69]
    elif damage == 'no-loader':
        load = None
    with pytest.raises(exception.CorruptObject, match=why):
        chunks.decode(name, blob, 8 * PAGE, load)


def test_chains_decode_up_to_the_deepest_a_writer_makes():
    data, digest, blob = _anchor(4 * PAGE)
    objects = {digest: blob}
    policy = chunks.CompressionPolicy('never')
    for depth in range(1, deltas.MAX_DEPTH + 2):
        new = bytearray(data)
        new[depth * 100] ^= 0xff
        new = bytes(new)
        pages = deltas.changed_pages(deltas.page_hashes(data),
                                     deltas.page_hashes(new))
        d, blob = chunks.encode_delta(policy, digest, new, pages)
        name = chunks.object_name(d)
        objects[d] = blob
        if depth <= deltas.MAX_DEPTH:
            assert chunks.decode(name, blob, len(new),
                                 objects.__getitem__) == new
        else:
            with pytest.raises(exception.CorruptObject, match='deep'):
                chunks.decode(name, blob, len(new), objects.__getitem__)
        data, digest = new, d


def test_a_delta_cannot_pass_for_another_name():
    anchor, digest, anchor_blob = _anchor(4 * PAGE)
    _, _, name, blob = _delta(anchor, digest, [(0, 1)])
    _, _, other, _ = _delta(anchor, digest, [(0, 2)])
    with pytest.raises(exception.CorruptObject):
        chunks.decode(other, blob, 4 * PAGE, lambda n: anchor_blob)


def test_link_names_hold_both_names_and_fit_object_names():
    delta, anchor = bytes(range(32)), bytes(range(100, 132))
    name = deltas.link_name(delta, anchor)
    assert len(name) <= 128
    assert deltas.parse_link(name) == (delta.hex(), anchor.hex())
    assert deltas.parse_link(delta.hex()) is None


def test_the_tracker_adopts_only_stable_versions_and_stays_bounded():
    t = deltas.Tracker(3 * deltas.Tracker.ENTRY_BYTES)
    entry = deltas.whole(b'n', b'h')
    t.stage(1, entry)
    assert t.get(1) is None               # not stable yet
    t.stable()
    assert t.get(1) == entry
    t.stage(1, None)                      # now zeros
    t.stable()
    assert t.get(1) is None
    for index in range(5):
        t.stage(index, entry)
    t.stable()
    assert len(t) == 3 and t.get(0) is None and t.get(4) == entry
    t.stage(9, entry)
    t.forget()
    t.stable()
    assert len(t) == 0
