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

"""The version tree of a repository, as text or as data.

Images are drawn with their versions in order; a version that is not the
child of the one before it names its parent, and every clone is drawn
under the version it was cloned from. Pinned versions name their pin
holders; entries GC pruned are counted.
"""

import dataclasses
import time

from blobcr_agent.repository import image as image_mod


def human(n):
    for unit in ('B', 'KiB', 'MiB', 'GiB', 'TiB'):
        if abs(n) < 1024 or unit == 'TiB':
            return ('%d %s' if unit == 'B' else '%.1f %s') % (n, unit)
        n /= 1024.0


def summary(header):
    head = header.head()
    return {'id': header.id, 'name': header.name, 'size': header.size,
            'chunk_size': header.chunk_size, 'origin': header.origin,
            'versions': len(header.versions),
            'newest_stable': head.number if head else None,
            'pruned': header.pruned}


def descends(header, ancestor, headers):
    """True if ``header`` is a clone (of a clone...) of ``ancestor``."""
    by_id = {h.id: h for h in headers}
    seen = set()
    while header.origin and header.id not in seen:
        seen.add(header.id)
        if header.origin['image'] == ancestor.id:
            return True
        header = by_id.get(header.origin['image'])
        if header is None:
            return False
    return False


def as_dicts(headers):
    return [dataclasses.asdict(h) for h in headers]


def render(headers):
    ids = {h.id for h in headers}
    clones = {}
    for h in headers:
        if h.origin and h.origin['image'] in ids:
            key = (h.origin['image'], h.origin['version'])
            clones.setdefault(key, []).append(h)
    lines = []
    for h in headers:
        if not (h.origin and h.origin['image'] in ids):
            _render_image(h, clones, '', '', lines)
    return ''.join(line + '\n' for line in lines)


def _render_image(h, clones, head, indent, lines):
    origin = ''
    if h.origin:
        origin = ', clone of %s@%d' % (h.origin['image'][:8],
                                       h.origin['version'])
    pruned = ''
    if h.pruned:
        pruned = ', %d obsolete or failed versions pruned' % h.pruned
    lines.append('%simage %s "%s" (%s, chunk %s%s%s)' % (
        head, h.id, h.name, human(h.size), human(h.chunk_size), origin,
        pruned))
    previous = None
    for i, v in enumerate(h.versions):
        last = i == len(h.versions) - 1
        branch, stem = ('└── ', '    ') if last else ('├── ', '│   ')
        parent = ''
        if v.parent is not None and v.parent != previous:
            parent = ', from v%d' % v.parent
        when = time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(v.created))
        detail = '%d chunks, %s written' % (v.chunks, human(v.stored_bytes))
        if v.state == image_mod.FAILED and v.error:
            detail = v.error
        if v.pins:
            detail += ', pinned by %s' % ', '.join(
                '%s:%s' % (p.get('host'), p.get('holder')) for p in v.pins)
        lines.append('%s%sv%d %-8s %s  %s%s' % (
            indent, branch, v.number, v.state, when, detail, parent))
        for child in clones.get((h.id, v.number), []):
            _render_image(child, clones, indent + stem + '└─> ',
                          indent + stem + '    ', lines)
        previous = v.number
