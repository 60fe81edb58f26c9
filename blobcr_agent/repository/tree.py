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

"""The version tree: a persistent, path-copying radix tree of chunk digests.

This is the BlobSeer segment tree of the journal paper (Figure 3), adapted
to objects. A version's tree maps chunk index -> chunk digest. Every node
has ``fanout`` slots of 32 bytes:

* a leaf slot holds the SHA-256 digest of one chunk, or zeros for an
  all-zero chunk (never stored);
* an inner slot holds a reference to a child node, or zeros for a subtree
  of all-zero chunks.

A reference is ``pack id (16) | offset (4) | length (4) | crc32 (4) | 0 (4)``:
nodes written by one COMMIT are packed into a few objects, so a COMMIT of
D chunks writes O(D log N) nodes in O(1) objects, and every node read is
checked against the checksum its parent holds. COMMIT copies only the
paths to the changed leaves; everything else is shared with the parent
version, and CLONE shares the root itself.
"""

import struct
import threading
import uuid
import zlib

from blobcr_agent import _native
from blobcr_agent.repository.backends import base
from blobcr_common import exception

SLOT = 32
EMPTY = bytes(SLOT)
_REF = struct.Struct('<16sIII4x')


def depth_for(nchunks, fanout):
    """Levels needed so that fanout**depth covers nchunks (at least 1)."""
    depth, capacity = 1, fanout
    while capacity < nchunks:
        capacity *= fanout
        depth += 1
    return depth


def parent_of(ref, fanout):
    """A node whose first slot is ``ref`` and the others empty: what a
    tree that grows by one level puts above its old root.
    """
    return ref + EMPTY * (fanout - 1)


def _checksum(node):
    # CRC32 catches torn and flipped bytes at a fraction of a hash's cost;
    # nodes are not content addresses, so nothing relies on it being
    # cryptographic.
    return zlib.crc32(node)


def pack_name(ref):
    return ref[:16].hex()


class NodeStore(object):
    """Reads tree nodes through a byte-bounded cache.

    Hits take no lock and reorder nothing (a dict read is atomic), so the
    cache evicts in insertion order; size it to hold the trees of the
    attached images.
    """

    def __init__(self, backend, cache_bytes=64 << 20):
        self.backend = backend
        self._cache = {}
        self._cache_bytes = cache_bytes
        self._cached = 0
        self._lock = threading.Lock()

    def load(self, ref):
        node = self._cache.get(ref)
        if node is not None:
            return node
        pack, offset, length, checksum = _REF.unpack(ref)
        node = self.backend.get(base.NODE, pack.hex(), offset, length)
        if _checksum(node) != checksum:
            raise exception.CorruptObject(
                base.NODE, pack.hex(),
                'node at offset %d fails its checksum' % offset)
        self.remember([(ref, node)])
        return node

    def prefetch(self, refs):
        """Read the uncached nodes among ``refs`` in parallel into the
        cache; damaged ones are left for :meth:`load` to report.
        """
        if self._cache_bytes <= 0:
            return
        wanted = {}
        for ref in refs:
            if ref != EMPTY and ref not in self._cache:
                pack, offset, length, _ = _REF.unpack(ref)
                wanted[(pack.hex(), offset, length)] = ref
        fresh = []
        for request, node in self.backend.read_ranges(base.NODE, wanted):
            ref = wanted[request]
            if not isinstance(node, Exception) and \
                    _checksum(node) == _REF.unpack(ref)[3]:
                fresh.append((ref, node))
        self.remember(fresh)

    def remember(self, nodes):
        """Cache ``(ref, node)`` pairs (fresh ones are likely read next)."""
        if self._cache_bytes <= 0:
            return
        with self._lock:
            for ref, node in nodes:
                if ref not in self._cache:
                    self._cache[ref] = node
                    self._cached += len(node)
            while self._cached > self._cache_bytes:
                old = self._cache.pop(next(iter(self._cache)))
                self._cached -= len(old)

    def clear(self):
        with self._lock:
            self._cache = {}
            self._cached = 0


class PackWriter(object):
    """Packs the nodes of one COMMIT into objects of bounded size.

    A pack is put into the write batch as soon as it is full, so writing
    the leaves overlaps with copying the paths above them, and several
    packs are written in parallel (on RADOS, to different placement
    groups). :meth:`close` puts the last one.
    """

    def __init__(self, store, pack_max_bytes, batch):
        self._store = store
        self._max = pack_max_bytes
        self._batch = batch
        self.packs = []
        self.nodes = 0
        self.bytes = 0
        self._fresh = []
        self._new_pack()

    def _new_pack(self):
        self._pack_id = uuid.uuid4().bytes
        self._parts = []
        self._offset = 0

    def append(self, node):
        if self._offset and self._offset + len(node) > self._max:
            self._put_pack()
        ref = _REF.pack(self._pack_id, self._offset, len(node),
                        _checksum(node))
        self._parts.append(node)
        self._offset += len(node)
        self.nodes += 1
        self.bytes += len(node)
        self._fresh.append((ref, node))
        return ref

    def _put_pack(self):
        if self._parts:
            name = self._pack_id.hex()
            self._batch.put(base.NODE, name, b''.join(self._parts))
            self.packs.append(name)
        self._new_pack()

    def close(self):
        """Put the last pack and cache the new nodes; return pack names."""
        self._put_pack()
        self._store.remember(self._fresh)
        self._fresh = []
        return self.packs


class Tree(object):
    """Operations on the trees of one image geometry."""

    def __init__(self, store, nchunks, fanout):
        if fanout < 2:
            raise exception.InvalidInput('tree fan-out must be at least 2')
        self.store = store
        self.nchunks = nchunks
        self.fanout = fanout
        self.depth = depth_for(nchunks, fanout)
        self.node_size = fanout * SLOT
        self._spans = [fanout ** level for level in range(self.depth)]

    def _load(self, ref):
        node = self.store.load(ref)
        if len(node) != self.node_size:
            raise exception.CorruptObject(
                base.NODE, pack_name(ref),
                'node of %d bytes, expected %d' % (len(node), self.node_size))
        return node

    def lookup(self, root, index):
        """The digest of chunk ``index`` in tree ``root`` (None: zeros)."""
        ref = root
        for level in range(self.depth - 1, -1, -1):
            if ref is None or ref == EMPTY:
                return None
            slot = (index // self._spans[level]) % self.fanout
            ref = self._load(ref)[slot * SLOT:(slot + 1) * SLOT]
        return None if ref == EMPTY else ref

    def update(self, root, changes, writer):
        """Return the root of ``root`` with ``changes`` applied.

        ``changes`` maps chunk index -> digest (None for an all-zero
        chunk). Only the paths to changed leaves are copied, into
        ``writer``; the result is None for an all-zero image. Works level
        by level (old references top-down, new nodes bottom-up), one loop
        per level rather than one call per node: this is the hot path of
        COMMIT.
        """
        for index in changes:
            if not 0 <= index < self.nchunks:
                raise exception.InvalidInput(
                    'chunk index %d outside 0..%d' % (index, self.nchunks - 1))
        items = sorted((i, d or EMPTY) for i, d in changes.items())
        if not items:
            return root
        fanout, spans, load = self.fanout, self._spans, self._load
        # Top-down: the old reference of every touched node, per level;
        # a node at level L covering chunk i has id i // fanout**(L+1).
        old = [None] * self.depth
        old[-1] = {0: root or EMPTY}
        for level in range(self.depth - 1, 0, -1):
            parents, children = old[level], {}
            self.store.prefetch(parents.values())
            parent_id, node = None, None
            for child_id in sorted({i // spans[level] for i, _ in items}):
                if child_id // fanout != parent_id:
                    parent_id = child_id // fanout
                    ref = parents[parent_id]
                    node = load(ref) if ref != EMPTY else None
                s = (child_id % fanout) * SLOT
                children[child_id] = node[s:s + SLOT] if node else EMPTY
            old[level - 1] = children
        self.store.prefetch(old[0].values())
        # Bottom-up: patch each touched node once (in C), emit it, and
        # hand its new reference to the level above.
        for level in range(self.depth):
            olds = {node_id: load(ref) if ref != EMPTY else None
                    for node_id, ref in old[level].items()}
            items = [(node_id, writer.append(node) if node else EMPTY)
                     for node_id, node in _native.patch_nodes(
                         items, fanout, SLOT, olds)]
        new_root = items[0][1]
        return None if new_root == EMPTY else new_root

    def items(self, root, on_node_error=None):
        """Yield ``(index, digest)`` for every stored chunk, in order.

        With ``on_node_error``, an unreadable node calls
        ``on_node_error(ref, first_index, last_index, error)`` and its
        subtree is skipped instead of raising.
        """
        if root is None or root == EMPTY:
            return
        stack = [(root, self.depth - 1, 0)]
        while stack:
            ref, level, start = stack.pop()
            try:
                node = self._load(ref)
            except exception.BlobCRError as e:
                if on_node_error is None:
                    raise
                last = min(start + self._spans[level] * self.fanout,
                           self.nchunks) - 1
                on_node_error(ref, start, last, e)
                continue
            span = self._spans[level]
            children = []
            for slot in range(self.fanout):
                value = node[slot * SLOT:(slot + 1) * SLOT]
                if value == EMPTY:
                    continue
                if level == 0:
                    yield start + slot, value
                else:
                    children.append((value, level - 1, start + slot * span))
            stack.extend(reversed(children))

    def walk(self, root, seen_nodes, on_digest):
        """Visit every node reachable from ``root`` not yet in
        ``seen_nodes`` (adding it), calling ``on_digest`` for each chunk
        digest of the visited leaves. Shared subtrees are walked once.
        """
        if root is None or root == EMPTY or root in seen_nodes:
            return
        seen_nodes.add(root)
        stack = [(root, self.depth - 1)]
        while stack:
            ref, level = stack.pop()
            node = self._load(ref)
            for slot in range(self.fanout):
                value = node[slot * SLOT:(slot + 1) * SLOT]
                if value == EMPTY:
                    continue
                if level == 0:
                    on_digest(value)
                elif value not in seen_nodes:
                    seen_nodes.add(value)
                    stack.append((value, level - 1))
