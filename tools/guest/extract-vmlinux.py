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
