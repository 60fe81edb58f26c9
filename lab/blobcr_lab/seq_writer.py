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
import mmap
import os
import random
import struct
import threading
import time

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


class VerifyingWriter(SeqWriter):
    """A SeqWriter that also reads back, after each write, a block it
    wrote before and checks it, and times every write and read: what a
    guest's disk does, and how long it ever waited. With ``direct``
    (a block device, as a guest's loop device is opened), O_DIRECT.
    I/O errors are counted, not fatal: a test says how many there were.
    """

    def __init__(self, path, blocks, seed=0, direct=False):
        super().__init__(path, blocks, seed)
        self.direct = direct
        self.io_errors = []         # (when, OSError)
        self.mismatches = []        # (block, expected seq, read seq)
        self.longest = 0.0          # the longest single write or read
        self.waits = []             # (start, seconds) of those over 0.5 s
        self._latest = {}           # block -> newest seq written there
        self._buf = mmap.mmap(-1, BLOCK)     # page-aligned, for O_DIRECT

    def _run(self):
        flags = os.O_RDWR | (os.O_DIRECT if self.direct else 0)
        fd = os.open(self.path, flags)
        try:
            while not self._stop.is_set():
                try:
                    self.write_one(fd)
                    self._check_one(fd)
                except OSError as e:
                    self.io_errors.append((time.monotonic(), e))
                    time.sleep(0.05)
        finally:
            os.close(fd)

    def _timed(self, op, *args):
        start = time.monotonic()
        try:
            return op(*args)
        finally:
            took = time.monotonic() - start
            self.longest = max(self.longest, took)
            if took > 0.5:
                self.waits.append((start, took))

    def write_one(self, fd):
        seq = len(self.log) + 1
        block = self.rng.randrange(self.blocks)
        self._buf[:] = block_data(seq)
        self._timed(os.pwrite, fd, self._buf, block * BLOCK)
        self._timed(os.fdatasync, fd)
        with self._lock:
            self.log.append((seq, block))
            self.synced = seq
            self._latest[block] = seq

    def _check_one(self, fd):
        block = self.rng.choice(list(self._latest))
        got = self._timed(os.preadv, fd, [self._buf], block * BLOCK)
        seq = struct.unpack_from('<Q', self._buf)[0]
        if got != BLOCK or self._buf[:] != block_data(self._latest[block]):
            self.mismatches.append((block, self._latest[block], seq))

    def stop(self):
        self._stop.set()
        self._thread.join(120)
        return self

    def written(self):
        with self._lock:
            return len(self.log)
