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

"""The checkpoint chains as a picture: an SVG graph on a time axis.

One lane per volume (a root, then its clones in the table's order). A
checkpoint is a dot on its volume's lane at the time it was taken, its
area proportional to the bytes the version wrote, its colour its state;
versions are joined in parent order, a clone's lane starts with a line
from the checkpoint (or volume) it was made from, and a group checkpoint
is a dashed cut through its members. The time axis spans the chains' own
times, not up to now, and long gaps in it are drawn as breaks (see
``Axis``). Drawn on the server, so the page
needs no script, and every mark carries ``data-*`` attributes naming
what it shows (the browser test reads them).
"""

import datetime
import math
from xml.sax import saxutils

from blobcrclient import chain

LANE = 34           # px between lanes
LEFT = 180          # px for the lanes' names
RIGHT = 30
TOP = 24
WIDTH = 1100
R_MIN, R_MAX = 4.0, 14.0
COLOURS = {'stable': '#3c763d', 'pending': '#c08a1e', 'failed': '#a94442'}
MIN_GAP_PX = 6.0    # the narrowest a gap between two times may be drawn
BREAK_PX = 24.0     # the width of a break in the time axis
BREAK_MIN_S = 300   # a gap shorter than this is never a break


def _time(text):
    try:
        when = datetime.datetime.fromisoformat((text or '').rstrip('Z'))
    except ValueError:
        return None
    return when.replace(tzinfo=None).timestamp()


def _duration(seconds):
    for unit, length in (('d', 86400), ('h', 3600), ('min', 60)):
        if seconds >= length:
            return '%.3g %s' % (seconds / length, unit)
    return '%.3g s' % seconds


class Axis(object):
    """Time to x over the given times' own span, gaps broken as needed.

    Linear where it can be: the longest gaps are cut out, longest first,
    each drawn as a break of ``BREAK_PX``, until the shortest gap left is
    at least ``MIN_GAP_PX`` wide. So checkpoints a minute apart stay
    apart beside others taken weeks later, and a chain's age does not
    squeeze it into one dot.
    """

    def __init__(self, times, left, right):
        self.times = sorted(set(times))
        gaps = [b - a for a, b in zip(self.times, self.times[1:])]
        candidates = sorted((g, k) for k, g in enumerate(gaps)
                            if g >= BREAK_MIN_S)
        width = right - left
        self.breaks = set()         # indices k of gaps times[k]..[k + 1]
        while True:
            kept = [g for k, g in enumerate(gaps) if k not in self.breaks]
            self.break_px = (min(BREAK_PX, width / 2 / len(self.breaks))
                             if self.breaks else 0.0)
            room = width - self.break_px * len(self.breaks)
            if not sum(kept):
                self.break_px = width / len(self.breaks) if self.breaks else 0
                self.scale = 0.0
                break
            self.scale = room / sum(kept)
            if not candidates or min(kept) * self.scale >= MIN_GAP_PX:
                break
            self.breaks.add(candidates.pop()[1])
        self.x = {}
        x = left
        for k, when in enumerate(self.times):
            if k:
                x += (self.break_px if k - 1 in self.breaks
                      else gaps[k - 1] * self.scale)
            self.x[when] = x

    def x_of(self, when):
        """x of ``when``, one of the times given (None: the last)."""
        if not self.times:
            return 0.0
        return self.x[self.times[-1] if when is None else when]

    def cuts(self):
        """(x of the break's middle, seconds cut out) of each break."""
        return [((self.x[self.times[k]] + self.x[self.times[k + 1]]) / 2,
                 self.times[k + 1] - self.times[k])
                for k in sorted(self.breaks)]


def _attrs(**attrs):
    return ''.join(' %s=%s' % (name.rstrip('_').replace('_', '-'),
                               saxutils.quoteattr(str(value)))
                   for name, value in attrs.items() if value is not None)


def _lanes(roots):
    """(volume node, parent mark or None) in drawing order; a clone's
    parent mark is the checkpoint or volume it was made from.
    """
    lanes = []

    def visit(volume, origin):
        lanes.append((volume, origin))
        clones = []

        def collect(node):
            for child in node.children:
                if child.kind == 'volume':
                    clones.append((child, node))
                else:
                    collect(child)
        collect(volume)
        for clone, made_from in clones:
            visit(clone, made_from)
    for root in roots:
        visit(root, None)
    return lanes


def _checkpoints(volume):
    """The checkpoints on a volume's lane with their parent mark."""
    found = []

    def collect(node):
        for child in node.children:
            if child.kind == 'checkpoint':
                found.append((child, node))
                collect(child)
    collect(volume)
    return found


def _radius(node, largest):
    written = chain.number(node.blobcr.get('bytes_written')) or 0
    if largest <= 0:
        return R_MIN
    return R_MIN + (R_MAX - R_MIN) * math.sqrt(written / largest)


def draw(roots, groups=()):
    """The SVG of the chains under ``roots`` (chain.Node volumes) and the
    cuts of ``groups`` (chains.GroupCheckpoint) through them.
    """
    lanes = _lanes(roots)
    if not lanes:
        return ''
    marks = [v for v, _ in lanes]
    for volume, _ in lanes:
        marks.extend(n for n, _ in _checkpoints(volume))
    times = [t for t in (_time(m.created) for m in marks) if t is not None]
    axis = Axis(times, LEFT, WIDTH - RIGHT)
    largest = max([chain.number(m.blobcr.get('bytes_written')) or 0
                   for m in marks] + [0])

    def x_of(node):
        return axis.x_of(_time(node.created))

    height = TOP + LANE * len(lanes) + 30
    where = {}          # node id -> (x, y)
    for index, (volume, _) in enumerate(lanes):
        where[volume.id] = (x_of(volume), TOP + LANE * index + LANE / 2)
        for node, _ in _checkpoints(volume):
            where[node.id] = (x_of(node), where[volume.id][1])

    out = ['<svg xmlns="http://www.w3.org/2000/svg"%s>' % _attrs(
        class_='blobcr-chain-picture', width=WIDTH, height=height,
        viewBox='0 0 %d %d' % (WIDTH, height), role='img',
        aria_label='Checkpoint chains on a time axis')]
    axis_y = height - 22
    out.append('<line%s/>' % _attrs(x1=LEFT, y1=axis_y, x2=WIDTH - RIGHT,
                                    y2=axis_y, stroke='#999'))
    for x, when, anchor in ([(LEFT, axis.times[0], 'start'),
                             (WIDTH - RIGHT, axis.times[-1], 'end')]
                            if len(axis.times) > 1 else
                            [(LEFT, axis.times[0], 'start')]
                            if axis.times else []):
        out.append('<text%s>%s</text>' % (
            _attrs(x=round(x, 1), y=axis_y + 15, font_size=11, fill='#666',
                   text_anchor=anchor),
            saxutils.escape(datetime.datetime.fromtimestamp(when).strftime(
                '%Y-%m-%d %H:%M:%S'))))
    for x, seconds in axis.cuts():
        # A gap in the axis crossed by two slanted strokes, the time cut
        # out written above it.
        strokes = ['<line%s/>' % _attrs(x1=round(x - 5, 1), y1=axis_y,
                                        x2=round(x + 5, 1), y2=axis_y,
                                        stroke='#fff', stroke_width=3)]
        strokes += ['<line%s/>' % _attrs(
            x1=round(x + dx - 3, 1), y1=axis_y + 5, x2=round(x + dx + 3, 1),
            y2=axis_y - 5, stroke='#999') for dx in (-3, 3)]
        out.append('<g%s><title>%s</title>%s<text%s>%s</text></g>' % (
            _attrs(data_kind='break', data_seconds=round(seconds, 1)),
            saxutils.escape('%s without a checkpoint' % _duration(seconds)),
            ''.join(strokes),
            _attrs(x=round(x, 1), y=axis_y - 8, font_size=10, fill='#999',
                   text_anchor='middle'),
            saxutils.escape(_duration(seconds))))
    for volume, origin in lanes:
        x, y = where[volume.id]
        out.append('<text%s>%s</text>' % (
            _attrs(x=LEFT - 8, y=y + 4, font_size=12, text_anchor='end',
                   fill='#333'),
            saxutils.escape(volume.name or volume.id)))
        out.append('<line%s/>' % _attrs(
            data_kind='lane', data_id=volume.id, x1=round(x, 1), y1=y,
            x2=WIDTH - RIGHT, y2=y, stroke='#ccc', stroke_width=2))
        if origin is not None and origin.id in where:
            ox, oy = where[origin.id]
            out.append('<path%s/>' % _attrs(
                data_kind='clone', data_from=origin.id, data_to=volume.id,
                d='M%.1f %.1f C%.1f %.1f %.1f %.1f %.1f %.1f' % (
                    ox, oy, ox, y, x, oy, x, y),
                fill='none', stroke='#337ab7', stroke_width=1.5))
    for volume, _ in lanes:
        for node, parent in _checkpoints(volume):
            px, py = where[parent.id]
            x, y = where[node.id]
            out.append('<line%s/>' % _attrs(
                data_kind='version', data_from=parent.id, data_to=node.id,
                x1=round(px, 1), y1=py, x2=round(x, 1), y2=y, stroke='#666',
                stroke_width=1.5))
    for group in groups:
        points = sorted((where[n.id] for _, n in group.members
                         if n.id in where), key=lambda p: p[1])
        if not points:
            continue
        out.append('<polyline%s><title>%s</title></polyline>' % (
            _attrs(data_kind='cut', data_id=group.id,
                   data_members=len(points),
                   points=' '.join('%.1f,%.1f' % p for p in
                                   [(points[0][0], points[0][1] - 12)]
                                   + points
                                   + [(points[-1][0], points[-1][1] + 12)]),
                   fill='none', stroke='#8e44ad', stroke_width=1.5,
                   stroke_dasharray='5 3'),
            saxutils.escape('group checkpoint %s (%s)'
                            % (group.name, group.status))))
    for volume, _ in lanes:
        for node, _ in _checkpoints(volume):
            x, y = where[node.id]
            state = chain.state_of(node)
            out.append('<circle%s><title>%s</title></circle>' % (
                _attrs(data_kind='checkpoint', data_id=node.id,
                       data_state=state, data_version=node.blobcr.get(
                           'version'), cx=round(x, 1), cy=y,
                       r=round(_radius(node, largest), 1),
                       fill=COLOURS.get(state, '#777'), stroke='#fff'),
                saxutils.escape('v%s %s: %s, %s bytes written, %s' % (
                    node.blobcr.get('version', '?'), node.name or node.id,
                    state, node.blobcr.get('bytes_written', '?'),
                    node.created))))
    out.append('</svg>')
    return '\n'.join(out)
