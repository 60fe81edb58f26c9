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

"""The FUSE file system of the mirror (pyfuse3).

Layout of the mount::

    images/<image id>            each attached image, a raw file the
                                 hypervisor opens read-write (O_DIRECT ok)
    versions/<image id>/<n>      every stable version of every image, a
                                 read-only raw file (inspect or download
                                 any checkpoint without attaching it)

Reads and writes of attached images are one call into the native core,
made inline when it cannot block. Calls that may wait (a fetch from the
repository, a write that waits for the persister) run in a worker thread
so the event loop keeps serving other requests.

The read-only extended attribute ``user.blobcr.state`` of an attached
image holds its mirror state as JSON.

No handler lets an exception escape: pyfuse3 ends its loop on one, and
that would unmount the file system for every reader (see
``_errors_to_errno``).
"""

import errno
import functools
import inspect
import json
import logging
import os
import stat

import pyfuse3
import trio

from blobcr_agent.mirror import image as image_mod
from blobcr_common import exception

LOG = logging.getLogger(__name__)

ROOT = pyfuse3.ROOT_INODE
IMAGES = ROOT + 1
VERSIONS = ROOT + 2
STATE_XATTR = b'user.blobcr.state'
_VIEW_CACHE_CHUNKS = 16

# The errno a reader gets for each error of the repository (first match
# in this order); any other BlobCRError is EIO.
_ERRNOS = (
    (exception.ImageNotFound, errno.ENOENT),
    (exception.VersionNotFound, errno.ENOENT),
    (exception.VersionNotStable, errno.ENOENT),
    (exception.BackendFull, errno.ENOSPC),
    (exception.InvalidInput, errno.EINVAL),
    (exception.Busy, errno.EBUSY),
)


def errno_of(error):
    """The errno a FUSE request that failed with ``error`` answers."""
    if isinstance(error, pyfuse3.FUSEError):
        return error.errno
    if isinstance(error, OSError):
        return error.errno or errno.EIO
    for kind, code in _ERRNOS:
        if isinstance(error, kind):
            return code
    return errno.EIO


def _answer_with_errno(handler):
    """Wrap a request handler so that every error becomes an errno for
    the caller. Expected errors (the repository's, the system's) are
    logged in one line; anything else is a bug: logged with its
    traceback, answered EIO.
    """
    @functools.wraps(handler)
    async def wrapped(*args, **kwargs):
        try:
            return await handler(*args, **kwargs)
        except pyfuse3.FUSEError:
            raise
        except (exception.BlobCRError, OSError) as e:
            code = errno_of(e)
            LOG.warning('%s failed (%s): %s', handler.__name__,
                        errno.errorcode.get(code, code), e)
            raise pyfuse3.FUSEError(code) from e
        except Exception as e:
            LOG.exception('%s failed unexpectedly: answering EIO',
                          handler.__name__)
            raise pyfuse3.FUSEError(errno.EIO) from e
    return wrapped


def _errors_to_errno(cls):
    """Class decorator: wrap every pyfuse3 request handler ``cls``
    defines with ``_answer_with_errno``.
    """
    for name, value in list(vars(cls).items()):
        if hasattr(pyfuse3.Operations, name) and \
                inspect.iscoroutinefunction(value):
            setattr(cls, name, _answer_with_errno(value))
    return cls


@_errors_to_errno
class MirrorFS(pyfuse3.Operations):
    """Inodes: fixed ones for the directories; one per attached image, per
    image directory under versions/ and per version file, handed out on
    first lookup and kept for the life of the mount.
    """

    supports_dot_lookup = False
    enable_writeback_cache = False

    def __init__(self, service, versions_only=False):
        super().__init__()
        self.service = service          # attached images and repository
        # versions_only: mounted on versions/ itself, images/ being served
        # by the native loop (see service.py).
        self.versions_only = versions_only
        self._vroot = ROOT if versions_only else VERSIONS
        self._by_key = {}               # ('image', id) ... -> inode
        self._by_inode = {}             # inode -> key
        self._next = VERSIONS + 1
        self._view_cache = {}

    # -- inode bookkeeping ---------------------------------------------------

    def _inode(self, key):
        inode = self._by_key.get(key)
        if inode is None:
            inode = self._by_key[key] = self._next
            self._by_inode[inode] = key
            self._next += 1
        return inode

    def _key(self, inode):
        try:
            return self._by_inode[inode]
        except KeyError:
            raise pyfuse3.FUSEError(errno.ENOENT)

    def _attr(self, inode, mode, size, timeout=1.0):
        a = pyfuse3.EntryAttributes()
        a.st_ino = inode
        a.st_mode = mode
        a.st_nlink = 2 if stat.S_ISDIR(mode) else 1
        a.st_size = size
        a.st_blksize = 4096
        a.st_blocks = (size + 511) // 512
        a.st_uid = a.st_gid = 0
        now = self.service.started_ns
        a.st_atime_ns = a.st_mtime_ns = a.st_ctime_ns = now
        a.attr_timeout = a.entry_timeout = timeout
        a.generation = 0
        return a

    def _image(self, image_id):
        image = self.service.attached.get(image_id)
        if image is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return image

    async def getattr(self, inode, ctx=None):
        # Everything is root's (default_permissions): other users may
        # look a name up in the root and images/ (a path, as QEMU
        # opens), never list them; versions/, whose listing reads every
        # header of the store, is root's alone, as its files are.
        if inode == self._vroot:
            return self._attr(inode, stat.S_IFDIR | 0o700, 0, timeout=0)
        if inode in (ROOT, IMAGES):
            return self._attr(inode, stat.S_IFDIR | 0o711, 0, timeout=0)
        key = self._key(inode)
        if key[0] == 'image':
            image = self._image(key[1])
            return self._attr(inode, stat.S_IFREG | 0o600, image.size)
        if key[0] == 'vdir':
            return self._attr(inode, stat.S_IFDIR | 0o500, 0, timeout=0)
        header = await self._header(key[1])
        return self._attr(inode, stat.S_IFREG | 0o400, header.size)

    async def _header(self, image_id):
        try:
            return await trio.to_thread.run_sync(
                self.service.repo.image, image_id)
        except (exception.ImageNotFound, exception.AmbiguousImage,
                exception.InvalidInput):
            # A name that is no image; any other error is the backend's.
            raise pyfuse3.FUSEError(errno.ENOENT)

    async def lookup(self, parent, name, ctx=None):
        name = os.fsdecode(name)
        if self.versions_only:
            pass
        elif parent == ROOT and name in ('images', 'versions'):
            return await self.getattr(IMAGES if name == 'images'
                                      else VERSIONS)
        elif parent == IMAGES and name in self.service.attached:
            return await self.getattr(self._inode(('image', name)))
        if parent == self._vroot:
            await self._header(name)
            return await self.getattr(self._inode(('vdir', name)))
        if parent in self._by_inode and self._by_inode[parent][0] == 'vdir':
            image_id = self._by_inode[parent][1]
            header = await self._header(image_id)
            if name.isdigit() and any(
                    v.number == int(name) and v.state == 'stable'
                    for v in header.versions):
                return await self.getattr(
                    self._inode(('version', image_id, int(name))))
        raise pyfuse3.FUSEError(errno.ENOENT)

    async def opendir(self, inode, ctx):
        if inode in (ROOT, IMAGES, VERSIONS) or \
                self._by_inode.get(inode, ('',))[0] == 'vdir':
            return inode
        raise pyfuse3.FUSEError(errno.ENOTDIR)

    async def readdir(self, fh, start_id, token):
        if fh == self._vroot:
            headers = await trio.to_thread.run_sync(self.service.repo.images)
            entries = [(h.id, self._inode(('vdir', h.id))) for h in headers]
        elif fh == ROOT:
            entries = [('images', IMAGES), ('versions', VERSIONS)]
        elif fh == IMAGES:
            entries = [(i, self._inode(('image', i)))
                       for i in sorted(self.service.attached)]
        elif fh == VERSIONS:
            headers = await trio.to_thread.run_sync(self.service.repo.images)
            entries = [(h.id, self._inode(('vdir', h.id))) for h in headers]
        else:
            image_id = self._by_inode[fh][1]
            header = await self._header(image_id)
            entries = [(str(v.number),
                        self._inode(('version', image_id, v.number)))
                       for v in header.versions if v.state == 'stable']
        for k, (name, inode) in enumerate(entries[start_id:], start_id):
            attr = await self.getattr(inode)
            if not pyfuse3.readdir_reply(token, os.fsencode(name), attr,
                                         k + 1):
                break

    async def open(self, inode, flags, ctx):
        key = self._key(inode)
        writing = flags & (os.O_WRONLY | os.O_RDWR)
        if key[0] == 'version' and writing:
            raise pyfuse3.FUSEError(errno.EROFS)
        if key[0] == 'image':
            self._image(key[1])
        elif key[0] != 'version':
            raise pyfuse3.FUSEError(errno.EISDIR)
        info = pyfuse3.FileInfo(fh=inode)
        info.keep_cache = key[0] == 'version'
        return info

    async def read(self, fh, offset, size):
        key = self._key(fh)
        if key[0] == 'version':
            return await trio.to_thread.run_sync(
                self._read_version, key[1], key[2], offset, size)
        image = self._image(key[1])
        early = await self._pass_gate(image, offset, size, False)
        if early is not None:
            return early
        result = image.core.read(offset, size)
        if isinstance(result, list):
            # Absent chunks: fetch them off the event loop.
            return await trio.to_thread.run_sync(image.read, offset, size)
        return result

    @staticmethod
    async def _pass_gate(image, offset, size, writing):
        """An incoming image's gate (handoff.py), as the native loop's
        pass_gate: None, or the bytes of an early read.
        """
        incoming = image.incoming
        if incoming is None or incoming.done.is_set():
            return None
        size = max(0, min(size, image.size - offset))
        return await trio.to_thread.run_sync(incoming.gate, offset, size,
                                             writing)

    def _read_version(self, image_id, number, offset, size):
        repo = self.service.repo
        header = repo.image(image_id)
        size = max(0, min(size, header.size - offset))
        out = bytearray()
        cs = header.chunk_size
        for index in range(offset // cs, (offset + size + cs - 1) // cs):
            key = (image_id, number, index)
            data = self._view_cache.get(key)
            if data is None:
                data = repo.read_chunk(header, number, index)
                if len(self._view_cache) >= _VIEW_CACHE_CHUNKS:
                    self._view_cache.pop(next(iter(self._view_cache)))
                self._view_cache[key] = data
            lo = max(offset - index * cs, 0)
            out += data[lo:min(offset + size - index * cs, len(data))]
        return bytes(out)

    async def write(self, fh, offset, buf):
        key = self._key(fh)
        if key[0] != 'image':
            raise pyfuse3.FUSEError(errno.EROFS)
        image = self._image(key[1])
        if offset + len(buf) > image.size:
            raise pyfuse3.FUSEError(errno.ENOSPC)
        await self._pass_gate(image, offset, len(buf), True)
        try:
            result = image.core.write(offset, buf, True)
        except image_mod.BusyError:
            result = None
        if isinstance(result, int):
            return result
        return await trio.to_thread.run_sync(image.write, offset, buf)

    async def setattr(self, inode, attr, fields, fh, ctx):
        if fields.update_size:
            raise pyfuse3.FUSEError(errno.EPERM)   # images have fixed size
        return await self.getattr(inode)

    async def flush(self, fh):
        pass

    async def fsync(self, fh, datasync):
        # A guest's flush: what it wrote before survives a power loss.
        key = self._key(fh)
        if key[0] == 'image':
            image = self._image(key[1])
            try:
                await trio.to_thread.run_sync(image.flush, bool(datasync))
            except OSError as e:
                # Not in the write log (flushlog.py): the guest sees it.
                raise pyfuse3.FUSEError(e.errno or errno.EIO)

    async def release(self, fh):
        pass

    async def releasedir(self, fh):
        pass

    async def statfs(self, ctx):
        s = pyfuse3.StatvfsData()
        st = os.statvfs(self.service.cache_dir)
        s.f_bsize = s.f_frsize = st.f_frsize
        s.f_blocks, s.f_bfree, s.f_bavail = (st.f_blocks, st.f_bfree,
                                             st.f_bavail)
        s.f_files = s.f_ffree = s.f_favail = 0
        s.f_namemax = 255
        return s

    async def getxattr(self, inode, name, ctx):
        key = self._key(inode)
        if key[0] != 'image' or name != STATE_XATTR:
            raise pyfuse3.FUSEError(pyfuse3.ENOATTR)
        return json.dumps(self._image(key[1]).stats()).encode()

    async def listxattr(self, inode, ctx):
        return [STATE_XATTR] if self._key(inode)[0] == 'image' else []

    async def setxattr(self, inode, name, value, ctx):
        raise pyfuse3.FUSEError(errno.EPERM)

    async def removexattr(self, inode, name, ctx):
        raise pyfuse3.FUSEError(errno.EPERM)
