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

"""The data paths: reading versions (a range, chunks, every stored
chunk with many reads in flight), exporting one to a file, importing or
writing a file as a new version.

Invariants: a read goes through a stable version's tree (or a pinned
one's, for the mirror that holds the pin); an export never follows a
link planted at its path and appears whole or not at all (written to a
new file, fsynced, then linked or renamed into place).
"""

import errno
import os
import tempfile
import time

from blobcr_agent import _native
from blobcr_agent.repository.backends import base
from blobcr_agent.repository import chunkpacks
from blobcr_agent.repository import chunks
from blobcr_agent.repository import deltas
from blobcr_common import exception

_UPLOAD_SMOOTHING = 0.3
_DELTA_GROUP = 64


class DataPaths(object):
    """Reads, exports and file imports (a mixin of
    :class:`~blobcr_agent.repository.repository.Repository`).
    """

    def version_tree(self, header, number=None, pinned=False):
        """``(tree, root)`` of a stable version (with ``pinned``, also of
        an obsolete version that is still pinned).
        """
        if pinned and number is not None:
            v = header.readable_version(number)
        else:
            v = header.stable_version(number)
        return header.tree(self.nodes), v.root_ref

    def read_chunk(self, header, number, index, pinned=False):
        t, root = self.version_tree(header, number, pinned)
        length = header.chunk_len(index)
        d = t.lookup(root, index)
        if d is None:
            return bytes(length)
        return chunks.decode(chunks.value_name(d), self.load_base(d),
                             length, self.load_base)

    def load_base(self, value):
        """The object bytes of a leaf value: a chunk's digest, or a pack
        reference (chunkpacks.py); a delta's base (chunks.decode).
        """
        if chunkpacks.is_ref(value):
            return chunkpacks.load(self.backend, value)
        return self.backend.get(base.CHUNK, chunks.object_name(value))

    def load_many(self, values, max_size):
        """Yield ``(value, object bytes or exception)`` for leaf values,
        many reads in flight.
        """
        refs = [v for v in values if chunkpacks.is_ref(v)]
        names = {chunks.object_name(v): v for v in values
                 if not chunkpacks.is_ref(v)}
        if refs:
            yield from chunkpacks.load_many(self.backend, refs)
        for name, blob in self.backend.get_many(base.CHUNK, list(names),
                                                max_size):
            yield names[name], blob

    def read(self, ref, number, offset, length, pinned=False):
        """Bytes ``[offset, offset+length)`` of a stable version (with
        ``pinned``, also of an obsolete one still pinned: version_tree).
        """
        header = self.image(ref)
        if offset < 0 or length < 0 or offset + length > header.size:
            raise exception.InvalidInput(
                'range %d+%d is outside the %d-byte image'
                % (offset, length, header.size))
        out = bytearray()
        cs = header.chunk_size
        for index in range(offset // cs, (offset + length + cs - 1) // cs):
            data = self.read_chunk(header, number, index, pinned)
            lo = max(offset - index * cs, 0)
            hi = min(offset + length - index * cs, len(data))
            out += data[lo:hi]
        return bytes(out)

    def fetch(self, header, number, indices=None, times=None):
        """Yield ``(index, data)`` of the stored chunks of a version (all,
        or those in ``indices``), many reads in flight; all-zero chunks
        are not yielded. Raises on a missing or corrupt chunk. A pinned
        version is read even once obsolete: its pin holder (a mirror
        attached from it) still reads it. ``times`` (a dict), if given,
        adds the seconds spent looking the chunks up in the version's
        tree (``lookup``), waiting for the store's reads (``load``) and
        checking and decompressing them (``decode``): a restart's trace.
        """
        times = {} if times is None else times
        mark = time.perf_counter()
        t, root = self.version_tree(header, number, pinned=True)
        if indices is None:
            found = t.items(root)
        else:
            # A few chunks of a big image: look them up, do not walk it.
            found = ((i, t.lookup(root, i)) for i in sorted(indices))
        by_value = {}
        for index, d in found:
            if d is not None:
                by_value.setdefault(d, []).append(index)
        mark = _add(times, 'lookup', mark)
        # Deltas wait for their bases, fetched in further rounds per
        # group of deltas (all in flight at once, memory bounded).
        deltas_waiting = []
        for value, blob in self.load_many(list(by_value),
                                          self.max_object_size(header)):
            mark = _add(times, 'load', mark)
            if isinstance(blob, Exception):
                raise blob
            if chunks.is_delta(blob):
                deltas_waiting.append((value, blob))
                if len(deltas_waiting) >= _DELTA_GROUP:
                    yield from self._fetch_deltas(header, deltas_waiting,
                                                  by_value)
                    deltas_waiting = []
                mark = time.perf_counter()
                continue
            first = by_value[value][0]
            data = chunks.decode(chunks.value_name(value), blob,
                                 header.chunk_len(first))
            _add(times, 'decode', mark)
            for index in by_value[value]:
                yield index, data
            # (The time the caller took between yields is its own.)
            mark = time.perf_counter()
        if deltas_waiting:
            yield from self._fetch_deltas(header, deltas_waiting, by_value)

    @staticmethod
    def max_object_size(header):
        # A delta of every page: its header, bitmap and codec bytes on top.
        return header.chunk_size + 128 + header.chunk_size // 32768

    def _fetch_deltas(self, header, waiting, by_value):
        blobs = dict(waiting)
        need = {deltas.base_of(blob) for _, blob in waiting} - set(blobs)
        while need:
            got = []
            for value, blob in self.load_many(sorted(need),
                                              self.max_object_size(header)):
                if isinstance(blob, Exception):
                    raise blob
                blobs[value] = blob
                got.append(blob)
            # A base that is a delta in turn: one round deeper.
            need = {deltas.base_of(blob)
                    for blob in got if chunks.is_delta(blob)} - set(blobs)
        for value, blob in waiting:
            first = by_value[value][0]
            data = chunks.decode(chunks.value_name(value), blob,
                                 header.chunk_len(first), blobs.__getitem__)
            for index in by_value[value]:
                yield index, data

    def stored_chunks(self, header, number):
        t, root = self.version_tree(header, number)
        return sum(1 for _ in t.items(root))

    def export(self, ref, number, path, progress=None, overwrite=False):
        """Write a stable version to ``path`` as a sparse raw image.

        The data goes to a new file next to ``path`` (created with
        O_EXCL: a symlink planted there is never followed), is fsynced
        and then renamed to ``path``. An existing ``path`` (a symlink
        included) is refused unless ``overwrite``, which replaces it
        (the symlink itself, not what it points to).
        """
        header = self.image(ref)
        path = os.path.abspath(path)
        if not overwrite and os.path.lexists(path):
            raise exception.InvalidInput(
                '%s exists; export with overwrite to replace it' % path)
        total = self.stored_chunks(header, number)
        directory, name = os.path.split(path)
        try:
            fd, tmp = tempfile.mkstemp(prefix='.%s.' % name[:200],
                                       suffix='.part', dir=directory)
        except OSError as e:
            raise exception.InvalidInput('cannot write to %s: %s'
                                         % (directory, e))
        if progress:
            progress.start(total * header.chunk_size)
        try:
            try:
                os.fchmod(fd, 0o644 & ~_umask())
                os.ftruncate(fd, header.size)
                for index, data in self.fetch(header, number):
                    os.pwrite(fd, data, index * header.chunk_size)
                    if progress:
                        progress.advance(len(data))
                os.fsync(fd)
                os.close(fd)
                fd = None
                _publish(tmp, path, overwrite)
            except OSError as e:
                raise exception.BlobCRError('cannot write %s: %s'
                                            % (path, e))
            _fsync_dir(directory)
        except BaseException:
            if fd is not None:
                os.close(fd)
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise
        finally:
            if progress:
                progress.finish()
        return header.stable_version(number).number

    def import_file(self, path, name, chunk_size=None, fanout=None,
                    progress=None):
        """Import a raw file as version 1 of a new image."""
        size = _file_size(path)
        header = self.create_image(name, size, chunk_size, fanout)
        number = self.write_file(header.id, path, progress=progress)
        return self.image(header.id), number

    def write_file(self, ref, path, progress=None, made_by=''):
        """A new version of an image whose content is the raw file
        ``path`` (no larger than the image; the rest reads as zeros).
        Only chunks that differ from the newest stable version's are
        written: a file read back from the image costs no chunk.
        ``made_by`` labels the version (Version.made_by).
        """
        header = self.image(ref)
        size = _file_size(path)
        if size > header.size:
            raise exception.InvalidInput(
                '%s has %d bytes, more than the %d of image %s'
                % (path, size, header.size, header.id))
        cs = header.chunk_size
        block = max(cs, (16 << 20) // cs * cs)
        pending = self.begin_commit(header.id, made_by=made_by)
        base = {}
        if pending._base_root is not None:
            base = dict(header.tree(self.nodes).items(pending._base_root))
        if progress:
            progress.start(header.size)
        try:
            with open(path, 'rb') as f:
                offset = 0
                while offset < size:
                    buf = f.read(block)
                    if not buf:
                        raise exception.InvalidInput(
                            '%s shrank while it was read' % path)
                    if len(buf) % cs and offset + len(buf) < header.size:
                        # The file's tail: the image goes on with zeros.
                        buf += bytes(min(header.size - offset - len(buf),
                                         cs - len(buf) % cs))
                    zero = _native.zero_map(buf, cs)
                    view = memoryview(buf)
                    for k, is_zero in enumerate(zero):
                        index = offset // cs + k
                        data = bytes(view[k * cs:(k + 1) * cs])
                        if is_zero:
                            if index in base:
                                pending.put_digest(index, None)
                        elif chunks.digest(data) != base.get(index):
                            pending.put(index, data)
                    offset += len(buf)
                    if progress:
                        progress.advance(len(buf))
            # Past the file's end the image is zeros.
            for index in base:
                if index * cs >= offset:
                    pending.put_digest(index, None)
            number = pending.finish()
        except BaseException as e:
            pending.abort('writing %s failed: %s' % (path, e))
            raise
        finally:
            if progress:
                progress.finish()
        return number

    def record_upload(self, bps):
        if bps:
            self.upload_bps = bps if self.upload_bps is None else (
                self.upload_bps + _UPLOAD_SMOOTHING * (bps - self.upload_bps))


def _file_size(path):
    try:
        size = os.stat(path).st_size
    except OSError as e:
        raise exception.InvalidInput('cannot read %s: %s' % (path, e))
    if size == 0:
        raise exception.InvalidInput('%s is empty' % path)
    return size


def _umask():
    """The process umask, read without changing it (Linux), else 022."""
    try:
        with open('/proc/self/status') as f:
            for line in f:
                if line.startswith('Umask:'):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def _publish(tmp, path, overwrite):
    """Rename the finished ``tmp`` to ``path``; without ``overwrite``,
    atomically refuse an existing ``path`` (a hard link fails if it
    exists, a rename would not).
    """
    if overwrite:
        os.replace(tmp, path)
        return
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise exception.InvalidInput(
            '%s exists; export with overwrite to replace it' % path)
    except OSError as e:
        if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP,
                           errno.EMLINK):
            raise
        # No hard links on this file system: check, then rename.
        if os.path.lexists(path):
            raise exception.InvalidInput(
                '%s exists; export with overwrite to replace it' % path)
        os.replace(tmp, path)
        return
    os.unlink(tmp)


def _fsync_dir(directory):
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _add(times, phase, since):
    """Add the seconds since ``since`` to ``times[phase]``; now."""
    now = time.perf_counter()
    times[phase] = times.get(phase, 0.0) + now - since
    return now
