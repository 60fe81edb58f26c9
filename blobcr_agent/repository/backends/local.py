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

"""The embedded object backend: a directory tree on this host.

Layout under the root directory::

    chunk/ab/<name>     chunk objects, fanned out by the name's first byte
    node/ab/<name>      tree-node packs
    header/<name>       image headers: "<generation>\\n" + payload
    keys/<name>/<key>   a header's key set: one file per key, its value
    lock/<name>         flock files serialising header compare-and-set
    tmp/                files being written, renamed into place when whole
    grave/<kind>.<uuid>.<name>   objects GC moved aside to delete them

Objects are written to tmp/ and renamed into place, so a reader never sees
a partial object and a SIGKILL leaves at most a stray tmp file. A batch is
made durable by one syncfs() of the file system rather than one fsync per
chunk; node packs, few and on the COMMIT's critical path, are fsynced one
by one as they are written. Headers are fsynced on every write, together
with their directory.

GC's conditional delete moves an object aside into grave/, checks its
modification time there and either deletes it or links it back. A GC
killed in between leaves the object in grave/; whoever opens the store
next (and every GC, before it starts) links every such object back to
its place (a live object is never lost; garbage comes back, and the next
GC deletes it again).

A write the file system refuses with ENOSPC or EDQUOT raises
:class:`~blobcr_common.exception.BackendFull`, and its tmp file is
removed at once: a full store keeps no partial objects.
"""

import collections
import concurrent.futures
import contextlib
import ctypes
import ctypes.util
import errno
import fcntl
import os
import shutil
import threading
import time
import uuid

from blobcr_agent.repository.backends import base
from blobcr_common import exception

_libc = ctypes.CDLL(ctypes.util.find_library('c'), use_errno=True)


_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
# Tests only: seconds every object write waits, to stand for a store
# that persists slowly (a remote one under load) in a real agent.
_TEST_PUT_DELAY = float(os.environ.get('BLOBCR_TEST_STORE_DELAY') or 0)


def _syncfs(fd):
    if _libc.syncfs(fd) != 0:
        err = ctypes.get_errno()
        raise OSError(err, 'syncfs: %s' % os.strerror(err))


def _unlink_quietly(path):
    try:
        os.unlink(path)
    except OSError:
        pass


class LocalBackend(base.ObjectBackend):

    name = 'local'

    def __init__(self, path, max_in_flight=32):
        super().__init__(max_in_flight)
        self.root = os.path.abspath(path)
        try:
            for sub in ('chunk', 'node', 'header', 'keys', 'lock', 'tmp',
                        'grave'):
                os.makedirs(os.path.join(self.root, sub), exist_ok=True)
        except OSError as e:
            raise exception.BackendUnavailable(
                'cannot use %s as a local store: %s' % (self.root, e))
        self._root_fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        self._leases = {}               # name -> (holder, locked fd)
        self._leases_lock = threading.Lock()
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=min(8, max_in_flight),
            thread_name_prefix='blobcr-local')
        self.recover()

    @classmethod
    def from_conf(cls, conf):
        return cls(conf.local_store.path,
                   max_in_flight=conf.repository.max_in_flight)

    def describe(self):
        return 'local:%s' % self.root

    def capacity(self):
        # The file system's own view: other files on it count as used.
        try:
            st = os.statvfs(self.root)
        except OSError as e:
            raise exception.BackendUnavailable('cannot stat %s: %s'
                                               % (self.root, e))
        total = st.f_blocks * st.f_frsize
        free = st.f_bavail * st.f_frsize
        return {'total_bytes': total, 'free_bytes': free,
                'used_bytes': total - st.f_bfree * st.f_frsize,
                'detail': 'file system of %s' % self.root}

    # Leases: an flock on lock/lease.NAME, which ends with the process
    # that holds it (no duration needed); the file names the holder.

    def _lease_path(self, name):
        return os.path.join(self.root, 'lock', 'lease.' + name)

    def try_lease(self, name, holder, duration):
        base.check_name(name)
        with self._leases_lock:
            held = self._leases.get(name)
            if held is not None:
                return held[0] == holder
            fd = os.open(self._lease_path(name), os.O_RDWR | os.O_CREAT,
                         0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return False
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, holder.encode(), 0)
            except OSError as e:
                # A full file system, the moment a collection matters
                # most, has no page for the holder's name: the flock
                # alone is the lease (its holder shows as '?'). Any
                # other error gives the lock back rather than keep it
                # with nobody to release it.
                if e.errno != errno.ENOSPC:
                    os.close(fd)
                    raise
            self._leases[name] = (holder, fd)
            return True

    def release_lease(self, name, holder):
        with self._leases_lock:
            held = self._leases.get(name)
            if held is None or held[0] != holder:
                return
            del self._leases[name]
            os.ftruncate(held[1], 0)
            os.close(held[1])           # and the flock with it

    def lease_holder(self, name):
        base.check_name(name)
        with self._leases_lock:
            if name in self._leases:
                return self._leases[name][0]
        try:
            fd = os.open(self._lease_path(name), os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return os.pread(fd, 4096, 0).decode(errors='replace') or '?'
            return None                 # nobody holds it
        finally:
            os.close(fd)

    def close(self):
        with self._leases_lock:
            for _, fd in self._leases.values():
                os.close(fd)
            self._leases.clear()
        self._pool.shutdown(wait=True)
        if self._root_fd is not None:
            os.close(self._root_fd)
            self._root_fd = None

    # -- immutable objects ---------------------------------------------

    def _path(self, kind, name):
        base.check_name(name)
        return os.path.join(self.root, kind, name[:2], name)

    def _tmp_path(self):
        return os.path.join(self.root, 'tmp', uuid.uuid4().hex)

    def _full(self, what, e):
        return exception.BackendFull(
            'the local store %s is full (%s): %s was not written; free '
            'space on its file system (mark old versions obsolete, then '
            'gc)' % (self.root, os.strerror(e.errno), what))

    @contextlib.contextmanager
    def _writing(self, what, tmp=None):
        """Turn a refused write into BackendFull, removing ``tmp``."""
        try:
            yield
        except OSError as e:
            if tmp is not None:
                _unlink_quietly(tmp)
            if e.errno in _FULL_ERRNOS:
                raise self._full(what, e) from e
            raise
        except BaseException:
            if tmp is not None:
                _unlink_quietly(tmp)
            raise

    def _put_sync(self, kind, name, data):
        if _TEST_PUT_DELAY:
            time.sleep(_TEST_PUT_DELAY)
        path = self._path(kind, name)
        try:
            # Same name, same bytes: refreshing the mtime is enough, and
            # tells garbage collection the object is wanted again.
            os.utime(path)
            # Still in place after the refresh: a GC that moves it aside
            # from now on sees the new time and puts it back. (utime
            # resolves the path before it sets the time: a GC may have
            # moved the file aside in between and seen the old time.)
            os.stat(path)
            return
        except FileNotFoundError:
            pass
        tmp = self._tmp_path()
        with self._writing('%s %s' % (kind, name), tmp):
            with open(tmp, 'wb') as f:
                f.write(data)
                if kind == base.NODE:
                    # Few, large and on the COMMIT's critical path: made
                    # durable here, in parallel, instead of by a syncfs
                    # that would also flush everything else on the file
                    # system.
                    f.flush()
                    os.fsync(f.fileno())
            try:
                os.replace(tmp, path)
            except FileNotFoundError:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                os.replace(tmp, path)
        if kind == base.NODE:
            with self._writing('%s %s' % (kind, name)):
                self._fsync_dir(os.path.dirname(path))

    def _submit_put(self, kind, name, data, callback):
        future = self._pool.submit(self._put_sync, kind, name, data)
        future.add_done_callback(lambda f: callback(f.exception()))

    def _make_durable(self, kinds):
        if kinds - {base.NODE}:
            with self._writing('the written chunks'):
                _syncfs(self._root_fd)

    def get(self, kind, name, offset=0, length=None):
        try:
            with open(self._path(kind, name), 'rb') as f:
                if length is None:
                    f.seek(offset)
                    return f.read()
                data = os.pread(f.fileno(), length, offset)
        except FileNotFoundError:
            raise exception.ObjectNotFound(kind, name)
        if len(data) != length:
            raise exception.CorruptObject(
                kind, name, 'short read at offset %d' % offset)
        return data

    def read_ranges(self, kind, requests):
        def read(request):
            name, offset, length = request
            try:
                with open(self._path(kind, name), 'rb') as f:
                    return request, os.pread(f.fileno(), length, offset)
            except FileNotFoundError:
                return request, exception.ObjectNotFound(kind, name)
        # Bounded look-ahead keeps memory flat on huge exports.
        pending = collections.deque()
        for request in requests:
            pending.append(self._pool.submit(read, request))
            if len(pending) >= self.max_in_flight:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()

    def stat(self, kind, name):
        try:
            st = os.stat(self._path(kind, name))
        except FileNotFoundError:
            raise exception.ObjectNotFound(kind, name)
        return st.st_size, st.st_mtime

    def list(self, kind):
        top = os.path.join(self.root, kind)
        for sub in sorted(os.listdir(top)):
            for name in os.listdir(os.path.join(top, sub)):
                yield name

    def _grave_path(self, kind, name):
        return os.path.join(self.root, 'grave', '%s.%s.%s'
                            % (kind, uuid.uuid4().hex, name))

    def delete_if_older(self, kind, name, cutoff):
        path = self._path(kind, name)
        grave = self._grave_path(kind, name)
        # Move it aside first: a put racing with us either lands before
        # the rename (and its fresh mtime makes us put it back) or after
        # it (and finds no file, so writes a whole new one).
        try:
            os.rename(path, grave)
        except FileNotFoundError:
            return 0
        try:
            st = os.stat(grave)
        except FileNotFoundError:
            return 0        # another process's recover() put it back
        if st.st_mtime >= cutoff:
            self._put_back(grave, path)
            return 0
        _unlink_quietly(grave)
        return st.st_size

    def _put_back(self, grave, path):
        try:
            os.link(grave, path)
        except FileExistsError:
            pass            # written again meanwhile: same bytes
        except FileNotFoundError:
            if not os.path.exists(grave):
                return      # put back by another process
            os.makedirs(os.path.dirname(path), exist_ok=True)
            try:
                os.link(grave, path)
            except FileExistsError:
                pass
        _unlink_quietly(grave)

    def recover(self):
        """Put back every object a killed GC left aside (the rule: always
        put back; the next GC deletes what is garbage). Returns how many.
        """
        top = os.path.join(self.root, 'grave')
        restored = 0
        for entry in os.listdir(top):
            kind, _, name = entry.partition('.')
            name = name.partition('.')[2]
            if kind not in base.KINDS:
                continue        # not one of ours: left alone
            try:
                path = self._path(kind, name)
            except exception.InvalidInput:
                continue
            self._put_back(os.path.join(top, entry), path)
            restored += 1
        if restored:
            _syncfs(self._root_fd)
        return restored

    def remove_stale_tmp(self, cutoff):
        """Delete tmp files older than cutoff (left by killed writers)."""
        freed = 0
        top = os.path.join(self.root, 'tmp')
        for name in os.listdir(top):
            path = os.path.join(top, name)
            try:
                st = os.stat(path)
                if st.st_mtime < cutoff:
                    os.unlink(path)
                    freed += st.st_size
            except FileNotFoundError:
                pass
        return freed

    # -- headers ---------------------------------------------------------

    def _header_path(self, name):
        return os.path.join(self.root, 'header', base.check_name(name))

    def read_header(self, name):
        try:
            with open(self._header_path(name), 'rb') as f:
                raw = f.read()
        except FileNotFoundError:
            return None
        generation, _, payload = raw.partition(b'\n')
        try:
            return payload, int(generation)
        except ValueError:
            raise exception.CorruptObject('header', name,
                                          'bad generation line')

    def _locked(self, name):
        with self._writing('lock file of header %s' % name):
            fd = os.open(os.path.join(self.root, 'lock',
                                      base.check_name(name)),
                         os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd

    def write_header(self, name, data, token):
        path = self._header_path(name)
        fd = self._locked(name)
        try:
            current = self.read_header(name)
            current_token = None if current is None else current[1]
            if current_token != token:
                raise exception.Conflict(
                    'header %s changed (expected %s, found %s)'
                    % (name, token, current_token))
            new_token = (token or 0) + 1
            tmp = self._tmp_path()
            with self._writing('header %s' % name, tmp):
                with open(tmp, 'wb') as f:
                    f.write(b'%d\n' % new_token)
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
                self._fsync_dir(os.path.dirname(path))
            return new_token
        finally:
            os.close(fd)

    def delete_header(self, name, token):
        path = self._header_path(name)
        fd = self._locked(name)
        try:
            current = self.read_header(name)
            if current is None or current[1] != token:
                raise exception.Conflict('header %s changed' % name)
            os.unlink(path)
            self._fsync_dir(os.path.dirname(path))
            # Its key set goes with it, as an object's omap does.
            shutil.rmtree(os.path.join(self.root, 'keys',
                                       base.check_name(name)),
                          ignore_errors=True)
        finally:
            # The lock file stays: unlinking it would let a waiter lock
            # an orphaned inode while a newcomer locks a fresh one.
            os.close(fd)

    def list_headers(self):
        return sorted(os.listdir(os.path.join(self.root, 'header')))

    def add_keys(self, name, entries):
        top = os.path.join(self.root, 'keys', base.check_name(name))
        with self._writing('keys of %s' % name):
            os.makedirs(top, exist_ok=True)
        for key, value in entries.items():
            base.check_key(key, value)
            tmp = self._tmp_path()
            with self._writing('key %s of %s' % (key, name), tmp):
                with open(tmp, 'wb') as f:
                    f.write(value)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, os.path.join(top, key))
        if entries:
            self._fsync_dir(top)
            self._fsync_dir(os.path.dirname(top))

    def read_keys(self, name):
        top = os.path.join(self.root, 'keys', base.check_name(name))
        try:
            keys = os.listdir(top)
        except FileNotFoundError:
            return {}
        found = {}
        for key in keys:
            try:
                with open(os.path.join(top, key), 'rb') as f:
                    found[key] = f.read()
            except FileNotFoundError:
                pass
        return found

    @staticmethod
    def _fsync_dir(path):
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
