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

"""The chains picture's time axis (no Django: the picture is drawn by a
plain module): over the chains' own span, whatever day it is drawn, with
long gaps cut out as breaks.
"""

from hypothesis import given
from hypothesis import strategies as st

from blobcr_dashboard.checkpoints import picture

LEFT, RIGHT = 180, 1070
DAY = 86400.0


@given(st.lists(st.integers(min_value=1700000000, max_value=1900000000),
                min_size=1, max_size=40))
def test_axis_keeps_order_and_fills_its_width(times):
    axis = picture.Axis(times, LEFT, RIGHT)
    xs = [axis.x_of(t) for t in sorted(set(times))]
    assert xs[0] == LEFT
    assert all(a < b for a, b in zip(xs, xs[1:])), xs
    if len(xs) > 1:
        assert abs(xs[-1] - RIGHT) < 1e-6
    # Breaks sit between their two times and say how long they were.
    for x, seconds in axis.cuts():
        assert LEFT < x < RIGHT and seconds >= picture.BREAK_MIN_S


@given(st.lists(st.integers(min_value=1, max_value=600), min_size=1,
                max_size=8),
       st.lists(st.integers(min_value=1, max_value=60), min_size=1,
                max_size=6),
       st.floats(min_value=2, max_value=90))
def test_minutes_stay_apart_beside_weeks(before, after, weeks_gap_days):
    """Two bursts of checkpoints minutes apart, days or weeks between
    them: every checkpoint is drawn apart from its neighbour.
    """
    t, times = 1.76e9, []
    for step in before:
        t += 60 * step
        times.append(t)
    t += weeks_gap_days * DAY
    for step in after:
        times.append(t)
        t += 60 * step
    axis = picture.Axis(times, LEFT, RIGHT)
    xs = [axis.x_of(t) for t in times]
    assert min(b - a for a, b in zip(xs, xs[1:])) >= picture.MIN_GAP_PX
    # Where a linear axis would squeeze a gap, the days are cut out.
    gaps = [b - a for a, b in zip(times, times[1:])]
    if min(gaps) * (RIGHT - LEFT) / (times[-1] - times[0]) \
            < picture.MIN_GAP_PX:
        assert any(s >= weeks_gap_days * DAY - 1 for _, s in axis.cuts())


def test_picture_does_not_depend_on_the_day_it_is_drawn():
    # The axis ends at the newest checkpoint, never at "now": the same
    # chain draws the same, and two minutes apart stay far apart.
    axis = picture.Axis([1.7e9, 1.7e9 + 60, 1.7e9 + 120], LEFT, RIGHT)
    assert axis.x_of(1.7e9 + 60) - LEFT > 400
    assert axis.cuts() == []
