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

"""A guest-like writer for host-loss tests and benchmarks: 4 KiB writes
at random blocks, a flush after every EVERY of them, until killed.

* ``file PATH``: O_DIRECT pwrites and fsync on a file or block device
  (a BlobCR mirror file, the loop device over it);
* ``rbd CONF POOL IMAGE CACHE``: librbd writes and flushes on an RBD
  image, its cache ``false`` (Nova's cache=none) or ``writeback``.

Its journal (JOURNAL, one line each, flushed to the page cache before
the act it names) lets the caller rebuild what the guest was promised
(:func:`promised`, :func:`check`): ``W n block`` before write n (its
content is ``content(n)``), ``F n`` once a flush covering writes 1..n
returned, ``E n errno`` if it failed.

Usage: python -m blobcr_lab.flush_writer BLOCKS EVERY JOURNAL file PATH
       python -m blobcr_lab.flush_writer BLOCKS EVERY JOURNAL rbd CONF
           POOL IMAGE CACHE
"""

import hashlib
import mmap
import os
import random
import sys

BLOCK = 4096


def content(n):
    return hashlib.shake_256(b'write %d' % n).digest(BLOCK)


class _File(object):

    def __init__(self, path):
        self.buf = mmap.mmap(-1, BLOCK)      # page-aligned for O_DIRECT
        self.fd = os.open(path, os.O_RDWR | os.O_DIRECT)

    def write(self, data, offset):
        self.buf.seek(0)
        self.buf.write(data)
        os.pwrite(self.fd, self.buf, offset)

    def flush(self):
        os.fsync(self.fd)


class _Rbd(object):

    def __init__(self, conffile, pool, name, cache):
        import rados
        import rbd
        self.cluster = rados.Rados(conffile=conffile, conf={
            'rbd_cache': 'false' if cache == 'false' else 'true',
            'rbd_cache_policy': 'writeback' if cache != 'false'
            else 'writethrough'})
        self.cluster.connect()
        self.ioctx = self.cluster.open_ioctx(pool)
        self.image = rbd.Image(self.ioctx, name)

    def write(self, data, offset):
        self.image.write(data, offset)

    def flush(self):
        self.image.flush()


def run(target, blocks, every, journal):
    rng = random.Random(os.getpid())
    with open(journal, 'w', buffering=1) as log:
        print('ready', flush=True)
        n = 0
        while True:
            n += 1
            block = rng.randrange(blocks)
            log.write('W %d %d\n' % (n, block))
            target.write(content(n), block * BLOCK)
            if n % every == 0:
                try:
                    target.flush()
                except OSError as e:
                    log.write('E %d %d\n' % (n, e.errno))
                    continue
                log.write('F %d\n' % n)


def promised(journal, blocks):
    """From a journal: per block, the write the last successful flush
    covered (0: none) and every write after it; the last write a flush
    covered, and the flushes that failed.
    """
    writes, flushed_through, failed = [], 0, []
    with open(journal) as f:
        for line in f:
            parts = line.split()
            if parts[:1] == ['W'] and len(parts) == 3:
                writes.append((int(parts[1]), int(parts[2])))
            elif parts[:1] == ['F'] and len(parts) == 2:
                flushed_through = int(parts[1])
            elif parts[:1] == ['E'] and len(parts) == 3:
                failed.append((int(parts[1]), int(parts[2])))
    floor = [0] * blocks
    later = [set() for _ in range(blocks)]
    for n, block in writes:
        if n <= flushed_through:
            floor[block] = n
        else:
            later[block].add(n)
    return floor, later, flushed_through, failed


def check(volume, base, floor, later):
    """What ``volume`` (its bytes, read after a loss) kept of what was
    promised: ``{'flushed_blocks', 'lost_blocks', 'bad'}``: blocks a
    flush covered, those of them holding an older write (lost), and the
    blocks holding neither their last flushed write nor a later one
    nor, never flushed, their base (``bad``: block numbers).
    """
    flushed = lost = 0
    bad = []
    for b, n in enumerate(floor):
        block = volume[b * BLOCK:(b + 1) * BLOCK]
        allowed = {content(m) for m in later[b]}
        allowed.add(content(n) if n else base[b * BLOCK:(b + 1) * BLOCK])
        flushed += n > 0
        if block not in allowed:
            bad.append(b)
            lost += n > 0
    return {'flushed_blocks': flushed, 'lost_blocks': lost, 'bad': bad}


def main():
    blocks, every, journal = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    kind, args = sys.argv[4], sys.argv[5:]
    target = _File(*args) if kind == 'file' else _Rbd(*args)
    run(target, blocks, every, journal)


if __name__ == '__main__':
    main()
