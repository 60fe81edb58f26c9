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

"""A writer whose every write says when it was made, to check live
snapshots byte for byte.

Write ``seq`` (1, 2, ...) fills one block of a region with bytes derived
from ``seq`` alone, its first 8 bytes being ``seq`` itself, and is synced
before the next starts. A snapshot taken while it runs must hold exactly
the writes up to some cut: every block holds the newest write of seq <=
cut made to it (or its earlier content), and the cut is at least the
last write synced before the snapshot was asked for.
"""

import hashlib
import os
import random
import struct
import threading

BLOCK = 64 * 1024


def block_data(seq):
    head = struct.pack('<Q', seq)
    seed = hashlib.sha256(head).digest()
    return head + (seed * (BLOCK // len(seed)))[:BLOCK - len(head)]


class SeqWriter(object):
    """Writes blocks of ``[0, blocks * BLOCK)`` of ``path`` in a thread."""

    def __init__(self, path, blocks, seed=0):
        self.path = path
        self.blocks = blocks
        self.rng = random.Random(seed)
        self.log = []               # (seq, block), in order
        self.synced = 0             # highest seq synced
        self.error = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = None

    def start(self):
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        try:
            fd = os.open(self.path, os.O_RDWR)
            try:
                while not self._stop.is_set():
                    self.write_one(fd)
            finally:
                os.close(fd)
        except OSError as e:
            self.error = e

    def write_one(self, fd):
        seq = len(self.log) + 1
        block = self.rng.randrange(self.blocks)
        os.pwrite(fd, block_data(seq), block * BLOCK)
        os.fdatasync(fd)
        with self._lock:
            self.log.append((seq, block))
            self.synced = seq

    def stop(self):
        self._stop.set()
        self._thread.join(60)
        if self.error is not None:
            raise self.error
        return self

    def content_at(self, cut, base):
        """``base`` (bytes of the region before the writer started) with
        the writes of seq <= cut applied.
        """
        image = bytearray(base)
        for seq, block in self.log[:cut]:
            image[block * BLOCK:(block + 1) * BLOCK] = block_data(seq)
        return bytes(image)

    def check_snapshot(self, region, base, synced_before):
        """Assert that ``region`` (the snapshot's first blocks) is the
        writer's state at a cut >= ``synced_before``; return the cut.
        """
        seqs = [struct.unpack_from('<Q', region, b * BLOCK)[0]
                for b in range(self.blocks)]
        known = {seq for seq, _ in self.log}
        cut = max([s for s in seqs if s in known] or [0])
        assert cut >= synced_before, (
            'the snapshot misses writes synced before it was asked for: '
            'cut %d < %d' % (cut, synced_before))
        expected = self.content_at(cut, base)
        if region != expected:
            bad = [b for b in range(self.blocks)
                   if region[b * BLOCK:(b + 1) * BLOCK] !=
                   expected[b * BLOCK:(b + 1) * BLOCK]]
            raise AssertionError('snapshot is no prefix of the writes (cut '
                                 '%d): %d blocks differ, first %s'
                                 % (cut, len(bad), bad[:5]))
        return cut
