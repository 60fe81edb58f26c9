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

"""The C core against plain-Python reference implementations."""

from hypothesis import given
from hypothesis import strategies as st
import pytest

from blobcr_agent import _native


@given(st.binary(max_size=3000), st.integers(1, 700))
def test_zero_map_matches_python(data, chunk_size):
    expected = bytes(int(not any(data[i:i + chunk_size]))
                     for i in range(0, len(data), chunk_size))
    assert _native.zero_map(data, chunk_size) == expected


@given(st.integers(0, 5000), st.data())
def test_is_zero_finds_any_nonzero_byte(size, data):
    buf = bytearray(size)
    assert _native.is_zero(buf)
    if size:
        buf[data.draw(st.integers(0, size - 1))] = data.draw(
            st.integers(1, 255))
        assert not _native.is_zero(buf)


def test_zero_map_rejects_bad_chunk_size():
    with pytest.raises(ValueError):
        _native.zero_map(b'abc', 0)


def test_patch_nodes_copies_and_patches_one_node_per_id():
    old = bytes(range(8)) * 2                      # fanout 4, slot 4
    items = [(1, b'AAAA'), (3, b'BBBB'), (9, b'\0' * 4)]
    result = _native.patch_nodes(items, 4, 4, {0: old, 2: None})
    assert result == [(0, old[:4] + b'AAAA' + old[8:12] + b'BBBB'),
                      (2, None)]                   # all zero: no node
    with pytest.raises(ValueError):
        _native.patch_nodes([(0, b'short')], 4, 4, {0: None})
    with pytest.raises(ValueError):
        _native.patch_nodes([(0, b'AAAA')], 4, 4, {0: b'wrong size'})
