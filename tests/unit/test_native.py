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
