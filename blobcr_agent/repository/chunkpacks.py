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

"""Delta packs: the deltas one COMMIT stores, packed into a few objects.

Why: under scattered 4 KiB writes nearly every chunk of a version is a
delta of a page or two, and a delta stored alone costs two objects (it
and its link, deltas.py). On RADOS the persist is then bound by objects
per second, not bytes. A pack holds many deltas in one object, as a
tree-node pack holds many nodes (tree.py).

A packed delta is named in the version tree by a *pack reference*, not
by a content digest::

    MAGIC (8) | pack id (12) | offset (4) | length (4) | crc32 (4)

A leaf slot is either a SHA-256 digest (an object of its own) or such a
reference; :func:`is_ref` tells them apart by the magic prefix. A chunk
whose digest starts with the magic (one in 2**64) is stored packed too
(:meth:`PackWriter.must_pack`), so a digest in a tree never looks like
a reference. A delta's base (deltas.py) may be either.

The object (``pk-<pack id>``, a chunk object) holds the entries (each
the bytes a delta object alone would hold), then the index, then a
trailer::

    entries | index: count x (offset u32, length u32, base 32) |
    count u32 | index offset u32 | b'BCPK'

The index lists each entry's base: garbage collection keeps the bases
of every entry of a live pack (the links of packed deltas), reading the
index alone. Every read of an entry is checked against the crc32 its
reference holds, and a rebuilt delta against its content digest.

Compaction: a pack stays while any of its entries is live. A writer
moves what is still live of a sparse pack into its own pack when it
next commits over it (commits.py), so old packs empty and go.
"""

import re
import struct
import threading
import uuid
import zlib

from blobcr_agent import crashpoint
from blobcr_agent.repository.backends import base
from blobcr_common import exception

MAGIC = b'\x00BCRpk\x01\x00'
_REF = struct.Struct('>8s12sIII')
_ENTRY = struct.Struct('>II32s')
_TRAILER = struct.Struct('>II4s')
_TRAILER_MAGIC = b'BCPK'
PREFIX = 'pk-'
NAME = re.compile(r'^pk-[0-9a-f]{24}$')
NO_BASE = bytes(32)
DEFAULT_MAX_BYTES = 4 << 20
# A pack whose entries the writer's newest version still references are
# fewer than this fraction of those it had is moved on (compaction).
COMPACT_BELOW = 0.25
# Read with the trailer, so that most indices come in one read.
_TAIL_READ = 64 * 1024


def is_ref(value):
    return value[:8] == MAGIC


def parse_ref(value):
    """``(object name, offset, length, crc32)`` of a pack reference."""
    _, pack_id, offset, length, crc = _REF.unpack(value)
    return PREFIX + pack_id.hex(), offset, length, crc


def pack_of(value):
    return PREFIX + value[8:20].hex()


def describe(value):
    """A short name of a leaf value for messages."""
    if is_ref(value):
        name, offset, _, _ = parse_ref(value)
        return '%s@%d' % (name, offset)
    return value.hex()[:16]


def checked(value, data):
    """``data`` read at a reference, or CorruptObject."""
    name, offset, length, crc = parse_ref(value)
    if len(data) != length or zlib.crc32(data) != crc:
        raise exception.CorruptObject(
            base.CHUNK, name, 'entry at offset %d fails its checksum'
            % offset)
    return data


def load(backend, value):
    """The bytes of the entry at reference ``value``."""
    name, offset, length, _ = parse_ref(value)
    return checked(value, backend.get(base.CHUNK, name, offset, length))


def load_many(backend, values):
    """Yield ``(reference, entry bytes or exception)`` for pack
    references, many reads in flight.
    """
    wanted = {}
    for value in values:
        name, offset, length, _ = parse_ref(value)
        wanted[(name, offset, length)] = value
    for request, data in backend.read_ranges(base.CHUNK, wanted):
        value = wanted[request]
        if not isinstance(data, Exception):
            try:
                data = checked(value, data)
            except exception.CorruptObject as e:
                data = e
        yield value, data


def read_bases(backend, name):
    """The bases of every entry of pack ``name`` (its index)."""
    size, _ = backend.stat(base.CHUNK, name)
    if size < _TRAILER.size:
        raise exception.CorruptObject(base.CHUNK, name, 'no pack trailer')
    start = max(size - _TAIL_READ, 0)
    tail = backend.get(base.CHUNK, name, start, size - start)
    count, index_at, magic = _TRAILER.unpack(tail[-_TRAILER.size:])
    index_len = count * _ENTRY.size
    if magic != _TRAILER_MAGIC or \
            index_at + index_len + _TRAILER.size != size:
        raise exception.CorruptObject(base.CHUNK, name, 'bad pack trailer')
    if index_at < start:
        tail = backend.get(base.CHUNK, name, index_at,
                           size - index_at)
        start = index_at
    index = tail[index_at - start:index_at - start + index_len]
    bases = set()
    for i in range(count):
        _, _, over = _ENTRY.unpack_from(index, i * _ENTRY.size)
        if over != NO_BASE:
            bases.add(over)
    return bases


class PackWriter(object):
    """Packs the deltas of one COMMIT into objects of bounded size, put
    into the commit's write batch as each fills (:meth:`close` puts the
    last). Thread-safe: a persist may put from several threads.
    """

    def __init__(self, batch, max_bytes):
        self._batch = batch
        self._max = max_bytes
        self._lock = threading.Lock()
        self.packs = 0
        self.entries = 0
        self._new()

    def _new(self):
        self._id = uuid.uuid4().bytes[:12]
        self._parts = []
        self._index = []
        self._offset = 0

    @staticmethod
    def must_pack(chunk_digest):
        """A digest that would read as a reference."""
        return is_ref(chunk_digest)

    def append(self, blob, over=None):
        """Add an entry (``over``: the base it needs kept, or None);
        return its reference. The reference reads back only once the
        pack is put and the batch durable.
        """
        with self._lock:
            if self._offset and self._offset + len(blob) > self._max:
                self._put()
            ref = _REF.pack(MAGIC, self._id, self._offset, len(blob),
                            zlib.crc32(blob))
            self._parts.append(blob)
            self._index.append(_ENTRY.pack(self._offset, len(blob),
                                           over or NO_BASE))
            self._offset += len(blob)
            self.entries += 1
            return ref

    def _put(self):
        if not self._parts:
            return
        index = b''.join(self._index)
        trailer = _TRAILER.pack(len(self._index), self._offset,
                                _TRAILER_MAGIC)
        self._batch.put(base.CHUNK, PREFIX + self._id.hex(),
                        b''.join(self._parts) + index + trailer)
        self.packs += 1
        crashpoint.reached('pack')
        self._new()

    def close(self):
        """Put the last pack (its puts then await the batch's wait)."""
        with self._lock:
            self._put()
