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

"""Sub-chunk deltas: a chunk that differs in a few 4 KiB pages from a
chunk stored before (its *base*) is stored as those pages.

Why: a checkpoint of scattered small writes would otherwise store each
touched chunk whole (64 times the data for one 4 KiB write into a
256 KiB chunk).

Each chunk's chain starts at a whole chunk (its *anchor*). A new
content is stored (:func:`choose`):

* over the anchor (depth 1) when the pages that differ from it are at
  most ``max_fraction`` of the chunk and not much more than those that
  differ from the previous content: a chunk rewritten at the same pages
  checkpoint after checkpoint stays one small delta deep;
* else over the previous content (one deeper), while the chain is
  shorter than ``MAX_DEPTH``: writes that move about cost what they
  changed;
* else over the anchor if few enough pages differ from it;
* else whole: it is the next anchor.

A read needs at most ``MAX_DEPTH + 1`` objects, fetched in rounds.

The object of a delta is named by the SHA-256 of its base's name, the
content's digest, the page bitmap and the pages (:func:`delta_name`):
never the name of a whole chunk (no object is replaced by one of the
other encoding) and never part of a cycle (a name would have to hash
itself). Decoding checks that name, then the digest of the content it
rebuilds.

GC keeps a base alive through a *link* object named after the delta
and its base (:func:`link_name`), written in the same commit as the
delta: a listing of the chunk objects shows every link without reading
any delta.

Which pages changed is found from page hashes (SHA-256, 16 bytes per
page) that the writer that stored the chunks remembers
(:class:`Tracker`), so nothing is read back to write a delta.
"""

import base64
import collections
import hashlib
import re
import struct
import threading

from blobcr_agent.repository import chunkpacks

PAGE = 4096
HASH_BYTES = 16
MAX_DEPTH = 3
# codec byte, anchor name, content digest, content length
_HEAD = struct.Struct('>B32s32sI')
_LINK = re.compile(r'^([0-9a-f]{64})\.([A-Za-z0-9_-]{43})$')


def page_count(length):
    return (length + PAGE - 1) // PAGE


def page_hashes(data):
    """16 bytes of SHA-256 per 4 KiB page of ``data``, concatenated."""
    view = memoryview(data)
    return b''.join(hashlib.sha256(view[p:p + PAGE]).digest()[:HASH_BYTES]
                    for p in range(0, len(data), PAGE))


def changed_pages(old_hashes, new_hashes):
    """Page numbers whose hashes differ; None when the lengths differ."""
    if len(old_hashes) != len(new_hashes):
        return None
    return [p for p in range(len(new_hashes) // HASH_BYTES)
            if old_hashes[p * HASH_BYTES:(p + 1) * HASH_BYTES] !=
            new_hashes[p * HASH_BYTES:(p + 1) * HASH_BYTES]]


def make_bitmap(pages, length):
    bits = bytearray((page_count(length) + 7) // 8)
    for p in pages:
        bits[p // 8] |= 1 << (p % 8)
    return bytes(bits)


def bitmap_pages(bitmap, length):
    return [p for p in range(page_count(length))
            if bitmap[p // 8] & (1 << (p % 8))]


def gather(data, pages):
    """The bytes of ``pages`` of ``data``, in order."""
    view = memoryview(data)
    return b''.join(view[p * PAGE:(p + 1) * PAGE] for p in pages)


def delta_name(anchor, content_digest, length, bitmap, raw):
    h = hashlib.sha256(_HEAD.pack(0, anchor, content_digest, length))
    h.update(bitmap)
    h.update(raw)
    return h.digest()


def pack(codec, anchor, content_digest, length, bitmap, payload):
    return _HEAD.pack(codec, anchor, content_digest, length) + bitmap + \
        payload


def unpack(blob):
    """``(anchor, content_digest, length, bitmap, payload)``; ValueError
    if the blob is too short to be a delta.
    """
    if len(blob) < _HEAD.size:
        raise ValueError('%d bytes: shorter than a delta header' % len(blob))
    _, anchor, content_digest, length = _HEAD.unpack_from(blob)
    end = _HEAD.size + (page_count(length) + 7) // 8
    if not length or len(blob) < end:
        raise ValueError('truncated delta header')
    return anchor, content_digest, length, blob[_HEAD.size:end], blob[end:]


def base_of(blob):
    return bytes(blob[1:33])


def apply(anchor_data, length, pages, raw):
    """The content: ``anchor_data`` (cut or padded to ``length``) with
    ``pages`` replaced by ``raw``; ValueError if ``raw`` does not fit.
    """
    out = bytearray(anchor_data[:length])
    out += bytes(length - len(out))
    pos = 0
    for p in pages:
        n = min(PAGE, length - p * PAGE)
        out[p * PAGE:p * PAGE + n] = raw[pos:pos + n]
        pos += n
    if pos != len(raw):
        raise ValueError('%d page bytes, expected %d' % (len(raw), pos))
    return bytes(out)


def link_name(delta, base):
    """The link object of a delta (both names as digests)."""
    return '%s.%s' % (delta.hex(),
                      base64.urlsafe_b64encode(base).rstrip(b'=').decode())


def parse_link(name):
    """``(delta hex, base hex)`` of a link object's name, or None."""
    m = _LINK.match(name)
    if m is None:
        return None
    anchor = base64.urlsafe_b64decode(m.group(2) + '=')
    return m.group(1), anchor.hex()


Tracked = collections.namedtuple(
    'Tracked', 'name base depth hashes anchor anchor_hashes')
Tracked.__doc__ = """What a writer knows of one chunk it stored: ``name``
(its object), ``base`` (the object it is a delta over, None if whole),
``depth`` (0: whole, else deltas to its anchor), ``hashes`` (its
content's page hashes), ``anchor`` (the whole chunk its chain starts
at) and ``anchor_hashes``."""


def whole(name, hashes):
    return Tracked(name, None, 0, hashes, name, hashes)


def choose(prior, hashes, max_fraction):
    """``(base, pages, tracked_base)`` for a content with page
    ``hashes`` replacing ``prior`` (a Tracked, or None): the base
    object's digest and the pages to store over it, or None to store
    the content whole. See the module's docstring.
    """
    if prior is None or max_fraction <= 0:
        return None
    limit = max_fraction * len(hashes) // HASH_BYTES
    since_prior = changed_pages(prior.hashes, hashes)
    if not since_prior:
        return None         # other length, or equal: rewritten whole
    since_anchor = since_prior if not prior.depth else \
        changed_pages(prior.anchor_hashes, hashes)
    over_anchor = since_anchor is not None and len(since_anchor) <= limit
    if over_anchor and len(since_anchor) <= 2 * len(since_prior):
        return prior.anchor, since_anchor, 1
    if prior.depth < MAX_DEPTH and len(since_prior) <= limit:
        return prior.name, since_prior, prior.depth + 1
    if over_anchor:
        return prior.anchor, since_anchor, 1    # the chain is full
    return None


class Tracker(object):
    """The chunks one writer (a mirror's persister) stored, per index:
    the :class:`Tracked` of the chunk in its newest stable version.

    ``stage`` notes what a version being persisted stores; ``stable``
    adopts it once that version is stable; ``forget`` drops everything
    (a failed version, a rebase): the next version stores whole chunks.
    At most ``max_entries`` indices are remembered (least recently
    stored first out); a chunk not remembered is stored whole.
    """

    # two hash sets of a 256 KiB chunk, with overhead
    ENTRY_BYTES = 2 * 64 * HASH_BYTES + 300

    def __init__(self, max_bytes):
        self.max_entries = max(max_bytes // self.ENTRY_BYTES, 0)
        self._known = collections.OrderedDict()
        self._staged = {}
        # pack -> the entries this writer's stable versions put there
        self._pack_entries = {}
        self._lock = threading.Lock()
        self.deltas_stored = 0      # in stable versions

    def get(self, index):
        with self._lock:
            return self._known.get(index)

    def stage(self, index, tracked):
        with self._lock:
            self._staged[index] = tracked

    def staged(self, index):
        """What the version being persisted stored at ``index``."""
        with self._lock:
            return self._staged.get(index)

    def stable(self):
        with self._lock:
            for index, tracked in self._staged.items():
                self._known.pop(index, None)
                if tracked is not None:
                    self._known[index] = tracked
                    self.deltas_stored += tracked.base is not None
                    if chunkpacks.is_ref(tracked.name):
                        pack = chunkpacks.pack_of(tracked.name)
                        self._pack_entries[pack] = \
                            self._pack_entries.get(pack, 0) + 1
            self._staged.clear()
            while len(self._known) > self.max_entries:
                self._known.popitem(last=False)
            live = self._live_per_pack()
            for pack in [p for p in self._pack_entries if p not in live]:
                del self._pack_entries[pack]

    def _live_per_pack(self):
        live = collections.Counter()
        for tracked in self._known.values():
            if chunkpacks.is_ref(tracked.name):
                live[chunkpacks.pack_of(tracked.name)] += 1
        return live

    def sparse(self, below):
        """``[(index, Tracked)]`` of the entries the newest version
        holds in packs of this writer's where fewer than ``below`` of
        the entries it put there are still held (chunkpacks.py).
        """
        with self._lock:
            live = self._live_per_pack()
            thin = {p for p, n in live.items()
                    if n < below * self._pack_entries.get(p, 0)}
            return [(i, t) for i, t in self._known.items()
                    if chunkpacks.is_ref(t.name) and
                    chunkpacks.pack_of(t.name) in thin]

    def forget(self):
        with self._lock:
            self._known.clear()
            self._staged.clear()
            self._pack_entries.clear()

    def __len__(self):
        return len(self._known)
