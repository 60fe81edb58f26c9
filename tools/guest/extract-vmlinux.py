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

"""Write the uncompressed ELF kernel found inside an xz bzImage.

usage: extract-vmlinux.py BZIMAGE OUT

QEMU boots such an ELF directly through its PVH entry point (Debian's
kernel has CONFIG_PVH), skipping both SeaBIOS's real-mode loader and the
kernel's own xz decompression, which under TCG take about 5 s together.
"""

import lzma
import sys


def main():
    src, dst = sys.argv[1], sys.argv[2]
    with open(src, 'rb') as f:
        data = f.read()
    start = 0
    while True:
        off = data.find(b'\xfd7zXZ\x00', start)
        if off < 0:
            raise SystemExit('%s: no xz-compressed ELF kernel inside' % src)
        try:
            out = lzma.LZMADecompressor(lzma.FORMAT_XZ).decompress(
                data[off:])
        except lzma.LZMAError:
            out = b''
        if out[:4] == b'\x7fELF':
            break
        start = off + 1
    with open(dst, 'wb') as f:
        f.write(out)


if __name__ == '__main__':
    main()
