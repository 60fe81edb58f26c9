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

"""Chunk objects: naming, encoding, and the compression decision.

A chunk object is named by the SHA-256 of its raw content, so identical
chunks are stored once across versions and images, a retried write is
harmless, and a tenant cannot make its chunk stand for another's. The
object holds one codec byte followed by the payload. A chunk that
differs from a whole chunk in a few pages is stored as a delta over it
(deltas.py, codec DELTA), under a name of its own.

Compression follows the rule of the Goiri et al. checkpoint paper: compress
only when ``t_compress + t_upload(compressed) < t_upload(raw)``. With
compression speed C, upload speed U (bytes per second) and compressed/raw
ratio r this is ``1/C + r/U < 1/U``, i.e. ``U < C * (1 - r)``. C and r are
moving averages over recently compressed chunks; U is measured by the
caller. A slice of every 16th chunk is compressed even when the rule says
no, so that a change in the data (say, a guest filling its disk with text)
is noticed.
"""

import hashlib
import threading
import time

import zstandard

from blobcr_agent.repository.backends import base
from blobcr_agent.repository import chunkpacks
from blobcr_agent.repository import deltas
from blobcr_common import exception

RAW = 0
ZSTD = 1
DELTA = 2
PROBE_EVERY = 16
PROBE_BYTES = 32 * 1024
_SMOOTHING = 0.2


def digest(data):
    return hashlib.sha256(data).digest()


def object_name(chunk_digest):
    return chunk_digest.hex()


class CompressionPolicy(object):
    """Decides per chunk whether compressing it pays, from recent history."""

    def __init__(self, mode='auto', level=1):
        if mode not in ('auto', 'never', 'always'):
            raise exception.InvalidInput('unknown compression mode %r' % mode)
        self.mode = mode
        self.level = level
        self.compress_bps = None
        self.ratio = None
        self._seen = 0
        self._lock = threading.Lock()
        self._local = threading.local()

    def _compressor(self):
        # ZstdCompressor objects must not be shared between threads.
        c = getattr(self._local, 'compressor', None)
        if c is None:
            c = self._local.compressor = zstandard.ZstdCompressor(
                level=self.level)
        return c

    def pays(self, upload_bps):
        """The seed paper's rule, with the current estimates; without an
        upload speed yet there is nothing to justify the CPU.
        """
        if self.compress_bps is None or not upload_bps:
            return False
        return upload_bps < self.compress_bps * (1.0 - self.ratio)

    def encode(self, data, upload_bps=None):
        """Return the object bytes for a chunk: codec byte + payload."""
        if self.mode == 'never':
            return bytes((RAW,)) + data
        if self.mode == 'auto':
            with self._lock:
                self._seen += 1
                probe = (self._seen % PROBE_EVERY == 1 or
                         self.compress_bps is None)
            if probe:
                # Learn from a slice: an eighth of the cost of a chunk.
                self._compress(data[:PROBE_BYTES])
            if not self.pays(upload_bps):
                return bytes((RAW,)) + data
        packed = self._compress(data)
        if len(packed) >= len(data):
            return bytes((RAW,)) + data
        return bytes((ZSTD,)) + packed

    def _compress(self, data):
        start = time.perf_counter()
        packed = self._compressor().compress(data)
        elapsed = max(time.perf_counter() - start, 1e-7)
        self._learn(len(data) / elapsed, len(packed) / max(len(data), 1))
        return packed

    def _learn(self, bps, ratio):
        with self._lock:
            if self.compress_bps is None:
                self.compress_bps, self.ratio = bps, ratio
            else:
                self.compress_bps += _SMOOTHING * (bps - self.compress_bps)
                self.ratio += _SMOOTHING * (ratio - self.ratio)


def is_delta(blob):
    return bool(blob) and blob[0] == DELTA


def encode_delta(policy, over, data, pages, upload_bps=None):
    """``(name, object bytes)`` of ``data`` stored as ``pages`` over the
    chunk object ``over`` (a digest); the pages are compressed as a
    chunk would be.
    """
    bitmap = deltas.make_bitmap(pages, len(data))
    raw = deltas.gather(data, pages)
    content = digest(data)
    name = deltas.delta_name(over, content, len(data), bitmap, raw)
    return name, deltas.pack(DELTA, over, content, len(data), bitmap,
                             policy.encode(raw, upload_bps))


def _payload(name, blob, limit):
    """The raw bytes of a codec byte + payload: a chunk's, or the
    pages of a delta.
    """
    if not blob:
        raise exception.CorruptObject(base.CHUNK, name, 'empty payload')
    codec, payload = blob[0], blob[1:]
    if codec == RAW:
        return bytes(payload)
    if codec == ZSTD:
        try:
            return zstandard.ZstdDecompressor().decompress(
                payload, max_output_size=limit)
        except zstandard.ZstdError as e:
            raise exception.CorruptObject(base.CHUNK, name,
                                          'cannot decompress: %s' % e)
    raise exception.CorruptObject(base.CHUNK, name,
                                  'unknown codec %d' % codec)


def value_name(value):
    """The object name of a leaf value, or None for a pack reference
    (chunkpacks.py), whose entry has no name of its own to check.
    """
    return None if chunkpacks.is_ref(value) else object_name(value)


def decode(name, blob, chunk_len, load_base=None, _depth=0):
    """Return the raw content of a chunk object, checking its name
    (None: an entry of a pack, checked by its reference's crc32 when
    read, and by its content digest if a delta).

    A delta needs ``load_base(value)``: the object bytes of its base
    (its digest, or a pack reference; whole, or a delta in turn, at
    most deltas.MAX_DEPTH deep).
    """
    label = name or 'a packed entry'
    if not blob:
        raise exception.CorruptObject(base.CHUNK, label, 'empty object')
    if blob[0] == DELTA:
        data = _decode_delta(name, blob, chunk_len, load_base, _depth)
    else:
        data = _payload(label, blob, chunk_len)
        if not 0 < len(data) <= chunk_len:
            raise exception.CorruptObject(
                base.CHUNK, label,
                '%d bytes, expected %d' % (len(data), chunk_len))
        if name is not None and object_name(digest(data)) != name:
            raise exception.CorruptObject(base.CHUNK, name,
                                          'content does not match its hash')
    if len(data) < chunk_len:
        # The short last chunk of an image that was extended since: the
        # space added after it reads as zeros.
        data += bytes(chunk_len - len(data))
    return data


def _decode_delta(name, blob, chunk_len, load_base, depth):
    label = name or 'a packed delta'
    try:
        over, content, length, bitmap, payload = deltas.unpack(blob)
    except ValueError as e:
        raise exception.CorruptObject(base.CHUNK, label, str(e))
    if length > chunk_len:
        raise exception.CorruptObject(
            base.CHUNK, label, '%d bytes, expected %d' % (length, chunk_len))
    pages = deltas.bitmap_pages(bitmap, length)
    raw = _payload(label, payload, len(pages) * deltas.PAGE)
    if name is not None and deltas.delta_name(
            over, content, length, bitmap, raw).hex() != name:
        raise exception.CorruptObject(base.CHUNK, name,
                                      'delta does not match its hash')
    if load_base is None:
        raise exception.CorruptObject(base.CHUNK, label,
                                      'a delta read without its base')
    if depth >= deltas.MAX_DEPTH:
        raise exception.CorruptObject(
            base.CHUNK, label, 'more than %d deltas deep' % deltas.MAX_DEPTH)
    over_data = decode(value_name(over), load_base(over), chunk_len,
                       load_base, depth + 1)
    try:
        data = deltas.apply(over_data, length, pages, raw)
    except ValueError as e:
        raise exception.CorruptObject(base.CHUNK, label, str(e))
    if digest(data) != content:
        raise exception.CorruptObject(
            base.CHUNK, label,
            'rebuilt over %s, it does not match its content hash'
            % chunkpacks.describe(over))
    return data
