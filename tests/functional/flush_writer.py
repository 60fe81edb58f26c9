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

"""A guest-like writer for the host-loss tests: O_DIRECT 4 KiB writes at
random blocks of PATH, an fsync after every EVERY of them, until killed.

Its journal (JOURNAL, one line each, flushed to the page cache before
the act it names) lets the test rebuild what the guest was promised:
``W n block`` before write n (its content is ``content(n)``), ``F n``
once an fsync covering writes 1..n returned, ``E n errno`` if it failed.
Usage: python -m tests.functional.flush_writer PATH BLOCKS EVERY JOURNAL
"""

import hashlib
import mmap
import os
import random
import sys

BLOCK = 4096


def content(n):
    return hashlib.shake_256(b'write %d' % n).digest(BLOCK)


def main():
    path, blocks, every, journal = sys.argv[1], int(sys.argv[2]), \
        int(sys.argv[3]), sys.argv[4]
    rng = random.Random(os.getpid())
    buf = mmap.mmap(-1, BLOCK)          # page-aligned for O_DIRECT
    fd = os.open(path, os.O_RDWR | os.O_DIRECT)
    with open(journal, 'w', buffering=1) as log:
        print('ready', flush=True)
        n = 0
        while True:
            n += 1
            block = rng.randrange(blocks)
            log.write('W %d %d\n' % (n, block))
            buf.seek(0)
            buf.write(content(n))
            os.pwrite(fd, buf, block * BLOCK)
            if n % every == 0:
                try:
                    os.fsync(fd)
                except OSError as e:
                    log.write('E %d %d\n' % (n, e.errno))
                    continue
                log.write('F %d\n' % n)


if __name__ == '__main__':
    main()
