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

"""The history checker of the overlapping walk (tests/history.py): it
accepts a read that fits an instant of its window and refuses the
losses the walk looks for (a write acknowledged before the request
missing, a write asked after the answer present, writes out of order).
"""

from hypothesis import given
from hypothesis import strategies as st

from tests import history

SIZE = 64


def _register(times):
    """Writes of one distinct byte each at offsets 0, 1, ... with the
    given (invoked, completed) times.
    """
    r = history.Register(bytes(SIZE))
    for i, (inv, comp) in enumerate(times):
        r.writes.append([i, bytes([i + 1]), inv, comp])
    return r


def _state(r, k):
    return r._apply(bytearray(r.base), r.writes[:k])


def test_a_read_inside_its_window_fits():
    r = _register([(1, 2), (3, 4), (5, 6)])
    assert r.fits(_state(r, 1), 2.5, 3.5) == 1
    assert r.fits(_state(r, 2), 2.5, 4.5) == 2
    assert r.fits(_state(r, 1), 2.5, 4.5) == 1


def test_a_write_acknowledged_before_the_request_must_be_there():
    r = _register([(1, 2), (3, 4)])
    assert r.fits(_state(r, 1), 4.5, 5) is None


def test_a_write_asked_after_the_answer_must_not_be_there():
    r = _register([(1, 2), (3, 4)])
    assert r.fits(_state(r, 2), 2.1, 2.9) is None


def test_writes_in_flight_count_in_order():
    r = _register([(1, 5), (5.5, 6)])
    skipped_first = bytearray(_state(r, 2))
    skipped_first[0] = 0
    assert r.fits(skipped_first, 0.5, 7) is None
    assert r.fits(_state(r, 0), 0.5, 7) == 0


def test_an_unanswered_write_may_or_may_not_be_there():
    r = _register([(1, 2), (3, None)])
    assert r.fits(_state(r, 1), 4, 5) == 1
    assert r.fits(_state(r, 2), 4, 5) == 2


@given(st.lists(st.tuples(st.floats(0, 10), st.floats(0, 2)), max_size=12),
       st.floats(0, 12), st.floats(0, 3), st.integers(0, 12))
def test_fits_agrees_with_the_definition(spans, inv, length, k):
    # Sequential writes: each starts after the previous one ended.
    times, t = [], 0.0
    for gap, duration in spans:
        times.append((t + gap, t + gap + duration))
        t += gap + duration
    r = _register(times)
    comp = inv + length
    k = min(k, len(times))
    lo = sum(1 for _, c in times if c < inv)
    hi = max(lo, sum(1 for i, _ in times if i < comp))
    found = r.fits(_state(r, k), inv, comp)
    # Each write sets its own byte: states differ, so only k itself fits.
    assert found == (k if lo <= k <= hi else None)
