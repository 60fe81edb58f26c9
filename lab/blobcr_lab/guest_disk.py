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

"""A volume's disk as QEMU opens it for a guest with ``cache=none``.

On a block device (Nova's 'local' connection: the agent's loop device)
that is O_DIRECT: a write is on the mirror when it returns, as a
guest's write is when QEMU completes it, and a read comes from the
mirror, not from a page cache of the device. A guest only ever reads and
writes whole sectors; an unaligned request here is read-modify-written
in whole blocks, as QEMU would do it. A file on the FUSE mirror is used
as it is (FUSE sends every write through to the mirror).

Not for concurrent unaligned writes to the same block (neither is QEMU's
read-modify-write).
"""

import mmap
import os
import stat

ALIGN = 4096


def is_block_device(path):
    return stat.S_ISBLK(os.stat(path).st_mode)


class GuestDisk(object):

    def __init__(self, path, readonly=False):
        self.direct = is_block_device(path)
        flags = os.O_RDONLY if readonly else os.O_RDWR
        if self.direct:
            flags |= os.O_DIRECT
        self.fd = os.open(path, flags)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def fsync(self):
        os.fsync(self.fd)

    @staticmethod
    def _span(offset, length):
        start = offset - offset % ALIGN
        end = -(-(offset + length) // ALIGN) * ALIGN
        return start, end

    def pread(self, length, offset):
        if not self.direct:
            return os.pread(self.fd, length, offset)
        start, end = self._span(offset, length)
        buf = mmap.mmap(-1, end - start)       # page-aligned
        try:
            got = os.preadv(self.fd, [buf], start)
            data = bytes(buf[:got])
        finally:
            buf.close()
        return data[offset - start:offset - start + length]

    def pwrite(self, data, offset):
        if not self.direct:
            return os.pwrite(self.fd, data, offset)
        start, end = self._span(offset, len(data))
        buf = mmap.mmap(-1, end - start)
        try:
            if (start, end) != (offset, offset + len(data)):
                os.preadv(self.fd, [buf], start)
            buf[offset - start:offset - start + len(data)] = data
            written = os.pwritev(self.fd, [buf], start)
        finally:
            buf.close()
        if written != end - start:
            raise OSError('short write: %d of %d bytes at %d'
                          % (written, end - start, start))
        return len(data)
