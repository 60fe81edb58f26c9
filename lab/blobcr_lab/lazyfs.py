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

"""A file system that loses what was not synced when the power is cut.

In the spirit of LazyFS (the FUSE layer Jepsen uses): a passthrough of a
backing directory, except that file data and size changes stay in this
process's memory, per file, until an fsync of that file writes them to
the backing file and syncs it. Cutting the power (SIGUSR1) drops what is
still in memory, or with ``--keep P`` writes each unsynced page (and
each pending size change) with probability P, in random order, as a
disk's write-back might have before the cut; then every later write is
refused and the file system unmounts. The backing directory is then
what the host finds after the reboot. A clean stop (SIGTERM, SIGINT)
syncs everything first.

Simplifications, said plainly: directory operations (create, mkdir,
rename, unlink) reach the backing directory at once, as if every
directory were synced right away; a power cut can still drop the data a
renamed file was written with (the classic lost rename-over). Pages are
4 KiB: a cut can tear a larger write at page boundaries.

    python -m blobcr_lab.lazyfs BACKING MOUNTPOINT [--keep P] [--seed S]
"""

import argparse
import errno
import os
import random
import signal
import stat
import sys

import pyfuse3
import trio

PAGE = 4096


class Pending(object):
    """A file's unsynced data: pages over the backing file, and its
    logical size. Backing bytes at or past ``floor`` (the smallest size
    since the last sync) read as zeros: a truncation dropped them.
    """

    def __init__(self, size):
        self.pages = {}
        self.size = self.floor = size

    def _page(self, fd, index):
        page = self.pages.get(index)
        if page is None:
            start = index * PAGE
            n = max(0, min(PAGE, self.floor - start))
            page = bytearray(os.pread(fd, n, start) if n else b'')
            page.extend(bytes(PAGE - len(page)))
            self.pages[index] = page
        return page

    def write(self, fd, offset, data):
        pos = 0
        while pos < len(data):
            index, at = divmod(offset + pos, PAGE)
            n = min(PAGE - at, len(data) - pos)
            self._page(fd, index)[at:at + n] = data[pos:pos + n]
            pos += n
        self.size = max(self.size, offset + len(data))

    def truncate(self, size):
        for index in [i for i in self.pages if i * PAGE >= size]:
            del self.pages[index]
        if size % PAGE and size // PAGE in self.pages:
            page = self.pages[size // PAGE]
            page[size % PAGE:] = bytes(PAGE - size % PAGE)
        self.size = size
        self.floor = min(self.floor, size)

    def read(self, fd, offset, length):
        out = bytearray()
        end = min(offset + length, self.size)
        pos = offset
        while pos < end:
            index, at = divmod(pos, PAGE)
            n = min(PAGE - at, end - pos)
            page = self.pages.get(index)
            if page is not None:
                out += page[at:at + n]
            else:
                start = pos
                m = max(0, min(n, self.floor - start))
                out += os.pread(fd, m, start) if m else b''
                out += bytes(n - m)
            pos += n
        return bytes(out)

    def apply(self, fd, keep=None):
        """Write to the backing file: all (keep None), or each page and
        the size change with probability keep (a Random, p) in random
        order.
        """
        rng, p = keep if keep is not None else (None, 1.0)
        ops = [('size', None)] + [('page', i) for i in self.pages]
        if rng is not None:
            rng.shuffle(ops)
        for kind, index in ops:
            if rng is not None and rng.random() >= p:
                continue
            if kind == 'size':
                os.ftruncate(fd, self.size)
            elif index * PAGE < self.size or rng is not None:
                page = self.pages[index][:max(0, min(
                    PAGE, self.size - index * PAGE))]
                os.pwrite(fd, page, index * PAGE)


class LazyFS(pyfuse3.Operations):

    def __init__(self, backing, keep=0.0, seed=None):
        super().__init__()
        self.root = os.path.abspath(backing)
        self.paths = {pyfuse3.ROOT_INODE: self.root}
        self.pending = {}
        self.fds = {}
        self.keep = keep
        self.rng = random.Random(seed)
        self.cut = False

    # -- helpers ---------------------------------------------------------

    def _path(self, inode):
        try:
            return self.paths[inode]
        except KeyError:
            raise pyfuse3.FUSEError(errno.ENOENT)

    def _fd(self, inode):
        fd = self.fds.get(inode)
        if fd is None:
            fd = self.fds[inode] = os.open(self._path(inode), os.O_RDWR)
        return fd

    def _attr(self, path, inode=None):
        try:
            st = os.lstat(path)
        except OSError as e:
            raise pyfuse3.FUSEError(e.errno)
        ino = pyfuse3.ROOT_INODE if path == self.root else st.st_ino
        a = pyfuse3.EntryAttributes()
        a.st_ino = ino
        a.st_mode = st.st_mode
        a.st_nlink = st.st_nlink
        a.st_uid, a.st_gid = st.st_uid, st.st_gid
        a.st_size = st.st_size
        pending = self.pending.get(ino)
        if pending is not None:
            a.st_size = pending.size
        a.st_blksize = PAGE
        a.st_blocks = (a.st_size + 511) // 512
        a.st_atime_ns = st.st_atime_ns
        a.st_mtime_ns = st.st_mtime_ns
        a.st_ctime_ns = st.st_ctime_ns
        a.attr_timeout = a.entry_timeout = 0
        self.paths[ino] = path
        return a

    def _pending(self, inode):
        p = self.pending.get(inode)
        if p is None:
            p = self.pending[inode] = Pending(
                os.fstat(self._fd(inode)).st_size)
        return p

    def _alive(self):
        if self.cut:
            raise pyfuse3.FUSEError(errno.EIO)    # the power is off

    def _forget_inode(self, inode):
        self.pending.pop(inode, None)
        fd = self.fds.pop(inode, None)
        if fd is not None:
            os.close(fd)

    def sync_all(self):
        for inode in list(self.pending):
            self._sync(inode)

    def _sync(self, inode):
        pending = self.pending.pop(inode, None)
        if pending is not None:
            fd = self._fd(inode)
            pending.apply(fd)
            os.fsync(fd)

    def power_cut(self):
        """Drop (or keep at random) what was never synced; refuse all."""
        self.cut = True
        for inode, pending in list(self.pending.items()):
            if self.keep > 0:
                pending.apply(self._fd(inode), (self.rng, self.keep))
        self.pending.clear()

    # -- operations ------------------------------------------------------

    async def lookup(self, parent, name, ctx=None):
        return self._attr(os.path.join(self._path(parent), os.fsdecode(name)))

    async def getattr(self, inode, ctx=None):
        return self._attr(self._path(inode))

    async def setattr(self, inode, attr, fields, fh, ctx):
        path = self._path(inode)
        if fields.update_size:
            self._alive()
            self._pending(inode).truncate(attr.st_size)
        if fields.update_mode:
            os.chmod(path, stat.S_IMODE(attr.st_mode))
        if fields.update_atime or fields.update_mtime:
            st = os.lstat(path)
            os.utime(path, ns=(
                attr.st_atime_ns if fields.update_atime else st.st_atime_ns,
                attr.st_mtime_ns if fields.update_mtime else st.st_mtime_ns))
        return self._attr(path)

    async def opendir(self, inode, ctx):
        return inode

    async def readdir(self, fh, start_id, token):
        path = self._path(fh)
        names = sorted(os.listdir(path))
        for i, name in enumerate(names[start_id:], start_id):
            try:
                attr = self._attr(os.path.join(path, name))
            except pyfuse3.FUSEError:
                continue
            if not pyfuse3.readdir_reply(token, os.fsencode(name), attr,
                                         i + 1):
                break

    async def releasedir(self, fh):
        pass

    async def fsyncdir(self, fh, datasync):
        pass        # directory operations are durable at once

    async def mkdir(self, parent, name, mode, ctx):
        self._alive()
        path = os.path.join(self._path(parent), os.fsdecode(name))
        os.mkdir(path, mode)
        return self._attr(path)

    async def rmdir(self, parent, name, ctx):
        self._alive()
        os.rmdir(os.path.join(self._path(parent), os.fsdecode(name)))

    async def create(self, parent, name, mode, flags, ctx):
        self._alive()
        path = os.path.join(self._path(parent), os.fsdecode(name))
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, mode))
        attr = self._attr(path)
        if flags & os.O_TRUNC:
            self._pending(attr.st_ino).truncate(0)
            attr.st_size = 0
        return pyfuse3.FileInfo(fh=attr.st_ino), attr

    async def open(self, inode, flags, ctx):
        self._path(inode)
        if flags & os.O_TRUNC:
            self._alive()
            self._pending(inode).truncate(0)
        return pyfuse3.FileInfo(fh=inode)

    async def read(self, fh, offset, size):
        pending = self.pending.get(fh)
        if pending is None:
            return os.pread(self._fd(fh), size, offset)
        return pending.read(self._fd(fh), offset, size)

    async def write(self, fh, offset, buf):
        self._alive()
        self._pending(fh).write(self._fd(fh), offset, buf)
        return len(buf)

    async def fsync(self, fh, datasync):
        self._alive()
        self._sync(fh)

    async def flush(self, fh):
        pass

    async def release(self, fh):
        pass

    async def unlink(self, parent, name, ctx):
        self._alive()
        path = os.path.join(self._path(parent), os.fsdecode(name))
        st = os.lstat(path)
        os.unlink(path)
        if st.st_nlink <= 1:
            self._forget_inode(st.st_ino)
            self.paths.pop(st.st_ino, None)

    async def rename(self, parent_old, name_old, parent_new, name_new,
                     flags, ctx):
        self._alive()
        old = os.path.join(self._path(parent_old), os.fsdecode(name_old))
        new = os.path.join(self._path(parent_new), os.fsdecode(name_new))
        try:
            replaced = os.lstat(new).st_ino
        except FileNotFoundError:
            replaced = None
        moved = os.lstat(old).st_ino
        os.rename(old, new)
        if replaced is not None and replaced != moved:
            self._forget_inode(replaced)
            self.paths.pop(replaced, None)
        self.paths[moved] = new
        if os.path.isdir(new):
            # Paths below a renamed directory move with it.
            for inode, path in list(self.paths.items()):
                if path.startswith(old + os.sep):
                    self.paths[inode] = new + path[len(old):]

    async def forget(self, inode_list):
        pass

    async def statfs(self, ctx):
        s = pyfuse3.StatvfsData()
        st = os.statvfs(self.root)
        for attr in ('f_bsize', 'f_frsize', 'f_blocks', 'f_bfree',
                     'f_bavail', 'f_files', 'f_ffree', 'f_favail'):
            setattr(s, attr, getattr(st, attr))
        s.f_namemax = st.f_namemax
        return s


async def _serve(fs):
    with trio.open_signal_receiver(signal.SIGUSR1, signal.SIGTERM,
                                   signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(pyfuse3.main)
            async for signum in signals:
                if signum == signal.SIGUSR1:
                    fs.power_cut()
                else:
                    fs.sync_all()
                break
            nursery.cancel_scope.cancel()


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog='python -m blobcr_lab.lazyfs',
        description='Mount BACKING at MOUNTPOINT, keeping unsynced data in '
                    'memory: SIGUSR1 cuts the power (drops it), SIGTERM '
                    'syncs it and unmounts.')
    parser.add_argument('backing')
    parser.add_argument('mountpoint')
    parser.add_argument('--keep', type=float, default=0.0,
                        help='at a cut, the probability that each unsynced '
                             'page or size change reached the disk anyway')
    parser.add_argument('--seed', type=int, default=None,
                        help='seed of those choices (printed)')
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(2**31)
    fs = LazyFS(args.backing, args.keep, seed)
    options = set(pyfuse3.default_options)
    options.discard('default_permissions')
    options.add('fsname=lazyfs')
    pyfuse3.init(fs, args.mountpoint, options)
    print('lazyfs: %s at %s, keep %.2f, seed %d' % (
        args.backing, args.mountpoint, args.keep, seed), flush=True)
    try:
        trio.run(_serve, fs)
    finally:
        pyfuse3.close(unmount=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
