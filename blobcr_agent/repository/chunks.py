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
object holds one codec byte followed by the payload.

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

from blobcr_agent import exception
from blobcr_agent.repository.backends import base

RAW = 0
ZSTD = 1
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


def decode(name, blob, chunk_len):
    """Return the raw content of a chunk object, checking its digest."""
    if not blob:
        raise exception.CorruptObject(base.CHUNK, name, 'empty object')
    codec, payload = blob[0], blob[1:]
    if codec == RAW:
        data = payload
    elif codec == ZSTD:
        try:
            data = zstandard.ZstdDecompressor().decompress(
                payload, max_output_size=chunk_len)
        except zstandard.ZstdError as e:
            raise exception.CorruptObject(base.CHUNK, name,
                                          'cannot decompress: %s' % e)
    else:
        raise exception.CorruptObject(base.CHUNK, name,
                                      'unknown codec %d' % codec)
    if not 0 < len(data) <= chunk_len:
        raise exception.CorruptObject(
            base.CHUNK, name, '%d bytes, expected %d' % (len(data), chunk_len))
    if object_name(digest(data)) != name:
        raise exception.CorruptObject(base.CHUNK, name,
                                      'content does not match its hash')
    if len(data) < chunk_len:
        # The short last chunk of an image that was extended since: the
        # space added after it reads as zeros.
        data += bytes(chunk_len - len(data))
    return data
