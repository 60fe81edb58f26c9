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
is a dashed cut through its members. Drawn on the server, so the page
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


def _time(text):
    try:
        when = datetime.datetime.fromisoformat((text or '').rstrip('Z'))
    except ValueError:
        return None
    return when.replace(tzinfo=None).timestamp()


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


def draw(roots, groups=(), now=None):
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
    start = min(times) if times else 0.0
    end = max(times + [now or 0.0]) if times else 1.0
    span = max(end - start, 1.0)
    largest = max([chain.number(m.blobcr.get('bytes_written')) or 0
                   for m in marks] + [0])

    def x_of(node):
        when = _time(node.created)
        when = end if when is None else when
        return LEFT + (WIDTH - LEFT - RIGHT) * (when - start) / span

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
    for fraction in (0.0, 0.5, 1.0):
        when = datetime.datetime.fromtimestamp(start + span * fraction)
        x = LEFT + (WIDTH - LEFT - RIGHT) * fraction
        out.append('<text%s>%s</text>' % (
            _attrs(x=round(x, 1), y=axis_y + 15, font_size=11, fill='#666',
                   text_anchor='middle' if 0 < fraction < 1 else
                   ('start' if fraction == 0 else 'end')),
            saxutils.escape(when.strftime('%Y-%m-%d %H:%M:%S'))))
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
