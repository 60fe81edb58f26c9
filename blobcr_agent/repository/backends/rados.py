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

"""Ceph RADOS object backend.

Chunks go to an erasure-coded pool: they are only ever written whole
(``write_full``) and read, which is all an EC pool without overwrites
allows. Tree-node packs and image headers go to a replicated pool. A
header is changed by compare-and-set on the object's version
(``assert_version``), so a version turns stable in one atomic write.

Writes and batch reads use librados' asynchronous calls, with a bounded
number in flight; a write is durable when librados completes it.

Every write carries LIBRADOS_OPERATION_FULL_TRY. Without it librados
holds a write to a full pool (or one over its quota) until the pool has
room again or ``rados_osd_op_timeout`` runs out; with it the OSD answers
at once: ENOSPC when the cluster is full, EDQUOT when the pool is over
its quota. Both become :class:`~blobcr_common.exception.BackendFull`.
Writes that do not grow the pool (deletes, same-size rewrites) still
succeed on a full pool, so garbage collection can free space.

The flag is set on each ioctx (``rados_set_pool_full_try``: librados
adds it to every op), which keeps ``aio_write_full`` for chunks at no
extra cost; the write ops pass it too. A binding without the ioctx call
gets the chunk writes as write ops with the flag.
"""

import calendar
import contextlib
import errno
import json
import logging
import math
import queue
import threading
import time

from blobcr_agent.repository.backends import base
from blobcr_agent.repository.backends import rados_log
from blobcr_common import exception

try:
    import rados
except ImportError:  # pragma: no cover - depends on the host
    rados = None

LOG = logging.getLogger(__name__)
_PREFIX = {base.NODE: 'node.', base.HEADER: 'header.'}
# Header and conditional-delete ops in flight at once. Each needs its
# ioctx's get_last_version() to itself; with one ioctx under a lock,
# every header op of an agent waited for the others, each a round trip
# queued behind the OSDs' data writes (a group member's registration
# behind its neighbours' stable updates, issue 36).
VERSIONED_IOCTXS = 8
# LIBRADOS_LOCK_FLAG_MAY_RENEW: the holder takes its lock again to renew.
_LOCK_MAY_RENEW = 1
# librados.h; the python binding does not export it.
FULL_TRY = getattr(rados, 'LIBRADOS_OPERATION_FULL_TRY', 64)
_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
# Omap index of header names: listing images must not scan the pool.
_INDEX = 'index.headers'


def _now():
    # The binding passes mtime=0 through as a time: an object written by
    # a write op without one would date from 1970 and look garbage to GC.
    return int(time.time())


def _set_full_try(ioctx):
    """FULL_TRY on every op of ``ioctx``; False if the binding cannot."""
    # set_osdmap_full_try is the older (deprecated) name of the same call.
    for name in ('set_pool_full_try', 'set_osdmap_full_try'):
        method = getattr(ioctx, name, None)
        if method is not None:
            method()
            return True
    return False


def _mtime(struct_time):
    # librados reports whole seconds: round up so that an object written
    # during the cut-off second is never taken for an older one.
    return calendar.timegm(struct_time) + 1


class RadosBackend(rados_log.RadosWriteLog, base.ObjectBackend):

    name = 'rados'

    def __init__(self, conffile, data_pool, meta_pool, namespace='',
                 client_name='client.admin', connect_timeout=10,
                 op_timeout=60, max_in_flight=32):
        super().__init__(max_in_flight)
        if rados is None:
            raise exception.BackendUnavailable(
                'the python "rados" module is missing: install python3-rados '
                'and link it into this environment (tools/install-deps.sh)')
        timeouts = {
            'rados_osd_op_timeout': str(op_timeout),
            'rados_mon_op_timeout': str(connect_timeout),
            'client_mount_timeout': str(connect_timeout),
        }
        self.conffile = conffile
        self.data_pool = data_pool
        self.meta_pool = meta_pool
        self.namespace = namespace
        self._where = 'rados:%s/%s' % (data_pool, meta_pool)
        try:
            self._cluster = rados.Rados(conffile=conffile, name=client_name,
                                        conf=timeouts)
            self._cluster.connect(timeout=connect_timeout)
        except (rados.Error, OSError) as e:
            raise exception.BackendUnavailable(
                'cannot reach the Ceph cluster of %s: %s' % (conffile, e))
        try:
            self._data = self._cluster.open_ioctx(data_pool)
            self._meta = self._cluster.open_ioctx(meta_pool)
            # Headers and conditional deletes need get_last_version(),
            # which is per ioctx: (meta, data) pairs of their own, each
            # used by one op at a time.
            pairs = [(self._cluster.open_ioctx(meta_pool),
                      self._cluster.open_ioctx(data_pool))
                     for _ in range(VERSIONED_IOCTXS)]
        except rados.Error as e:
            self._cluster.shutdown()
            raise exception.BackendUnavailable(
                'cannot open pools %s/%s: %s' % (data_pool, meta_pool, e))
        self._all_ioctxs = [self._data, self._meta] + [
            i for pair in pairs for i in pair]
        for ioctx in self._all_ioctxs:
            ioctx.set_namespace(namespace)
        self._ioctx_full_try = all([_set_full_try(i)
                                    for i in self._all_ioctxs])
        if namespace:
            self._where += '#' + namespace
        self._versioned_pairs = queue.LifoQueue()
        for pair in pairs:
            self._versioned_pairs.put(pair)
        self._completions = {}
        self._completions_lock = threading.Lock()

    @classmethod
    def from_conf(cls, conf):
        return cls(conf.rados.conffile, conf.rados.data_pool,
                   conf.rados.meta_pool, namespace=conf.rados.namespace,
                   client_name=conf.rados.client_name,
                   connect_timeout=conf.rados.connect_timeout,
                   op_timeout=conf.rados.op_timeout,
                   max_in_flight=conf.repository.max_in_flight)

    def describe(self):
        return self._where

    def capacity(self):
        """The data pool's figures from ``ceph df``: ``max_avail`` is
        what can still be stored in it, already divided by the pool's
        erasure-code (or replica) overhead, and ``stored`` is user data
        before that overhead.
        """
        command = json.dumps({'prefix': 'df', 'format': 'json'})
        try:
            ret, out, err = self._cluster.mon_command(command, b'')
        except (rados.Error, OSError) as e:
            raise exception.BackendUnavailable('ceph df failed: %s' % e)
        if ret != 0:
            raise exception.BackendUnavailable('ceph df failed: %s' % err)
        pools = {p['name']: p['stats']
                 for p in json.loads(out).get('pools', [])}
        if self.data_pool not in pools:
            raise exception.BackendUnavailable(
                'ceph df does not list pool %s' % self.data_pool)
        stats = pools[self.data_pool]
        used = int(stats.get('stored', stats.get('bytes_used', 0)))
        free = int(stats['max_avail'])
        return {'total_bytes': used + free, 'free_bytes': free,
                'used_bytes': used,
                'detail': 'pool %s (ceph df: stored + max_avail)'
                          % self.data_pool}

    # Leases: an exclusive RADOS lock on object lease.NAME of the
    # metadata pool, which ends when its duration passes unrenewed, so
    # that a dead holder's ends too. The lock decides; the object's
    # "holder" xattr (name and end) only tells who for messages (the
    # binding cannot list lockers).

    def try_lease(self, name, holder, duration):
        oid = 'lease.' + base.check_name(name)
        try:
            self._meta.lock_exclusive(oid, name, holder, desc=holder,
                                      duration=int(math.ceil(duration)),
                                      flags=_LOCK_MAY_RENEW)
            self._meta.set_xattr(oid, 'holder', json.dumps(
                [holder, time.time() + duration]).encode())
            return True
        except (rados.ObjectBusy, rados.ObjectExists):
            return False
        except rados.Error as e:
            raise exception.BackendUnavailable(
                'cannot take lease %s on %s: %s' % (name, self._where, e))

    def release_lease(self, name, holder):
        oid = 'lease.' + base.check_name(name)
        try:
            self._meta.unlock(oid, name, holder)
            self._meta.rm_xattr(oid, 'holder')
        except rados.ObjectNotFound:
            pass
        except rados.Error as e:
            LOG.warning('cannot release lease %s on %s: %s (it ends with '
                        'its duration)', name, self._where, e)

    def lease_holder(self, name):
        try:
            holder, until = json.loads(self._meta.get_xattr(
                'lease.' + base.check_name(name), 'holder'))
        except (rados.ObjectNotFound, rados.NoData, ValueError):
            return None
        except rados.Error as e:
            raise exception.BackendUnavailable(
                'cannot read lease %s on %s: %s' % (name, self._where, e))
        return holder if until > time.time() else None

    def close(self):
        for ioctx in self._all_ioctxs:
            ioctx.close()
        self._cluster.shutdown()

    @contextlib.contextmanager
    def _versioned(self):
        """A (meta, data) ioctx pair for one versioned op (waits while
        VERSIONED_IOCTXS ops are in flight).
        """
        pair = self._versioned_pairs.get()
        try:
            yield pair
        finally:
            self._versioned_pairs.put(pair)

    def _ioctx(self, kind):
        return self._data if kind == base.CHUNK else self._meta

    def _oid(self, kind, name):
        return _PREFIX.get(kind, '') + base.check_name(name)

    def _full(self, kind, name, err):
        """BackendFull for a write that ENOSPC or EDQUOT refused."""
        pool = self.data_pool if kind == base.CHUNK else self.meta_pool
        if self.namespace:
            pool += ' (namespace %s)' % self.namespace
        if err == errno.EDQUOT:
            why = ('over its quota (EDQUOT): raise it with "ceph osd pool '
                   'set-quota", or free space')
        else:
            why = ('out of space (ENOSPC: the cluster or its OSDs are '
                   'full): add capacity or free space')
        return exception.BackendFull(
            'the Ceph pool %s is full, %s (mark old versions obsolete, '
            'then gc); %s %s was not written' % (pool, why, kind, name))

    def _error(self, kind, name, e):
        if isinstance(e, rados.ObjectNotFound):
            return exception.ObjectNotFound(kind, name)
        if getattr(e, 'errno', None) in _FULL_ERRNOS:
            return self._full(kind, name, e.errno)
        return exception.BackendUnavailable(
            'RADOS %s %s: %s' % (kind, name, e))

    # -- immutable objects ---------------------------------------------

    def _submit_put(self, kind, name, data, callback):
        oid = self._oid(kind, name)
        key = object()

        def done(completion):
            with self._completions_lock:
                self._completions.pop(key, None)
            rc = completion.get_return_value()
            if rc >= 0:
                callback(None)
            elif -rc in _FULL_ERRNOS:
                callback(self._full(kind, name, -rc))
            else:
                callback(exception.BackendUnavailable(
                    'RADOS write of %s %s failed: %s'
                    % (kind, name, errno.errorcode.get(-rc, rc))))

        ioctx = self._ioctx(kind)
        with self._completions_lock:
            # librados must not lose the completion before it fires.
            self._completions[key] = None
        try:
            if self._ioctx_full_try:
                completion = ioctx.aio_write_full(oid, bytes(data),
                                                  oncomplete=done)
            else:
                completion = self._aio_write_op(ioctx, oid, bytes(data),
                                                done)
        except rados.Error as e:
            with self._completions_lock:
                self._completions.pop(key, None)
            raise self._error(kind, name, e)
        with self._completions_lock:
            if key in self._completions:
                self._completions[key] = completion

    @staticmethod
    def _aio_write_op(ioctx, oid, data, done):
        # aio_write_full() takes no flags: the same write as a write op.
        # librados moves the op's contents into the request it sends, so
        # the op may be released as soon as it is submitted.
        op = ioctx.create_write_op()
        try:
            op.write_full(data)
            return ioctx.operate_aio_write_op(
                op, oid, oncomplete=done, mtime=_now(), flags=FULL_TRY)
        finally:
            ioctx.release_write_op(op)

    def _make_durable(self, kinds):
        # A completed librados write is already on every OSD it needs.
        pass

    def get(self, kind, name, offset=0, length=None):
        ioctx = self._ioctx(kind)
        oid = self._oid(kind, name)
        try:
            if length is None:
                size, _ = ioctx.stat(oid)
                length = max(0, size - offset)
                if length == 0:
                    return b''
            data = ioctx.read(oid, length, offset)
        except rados.Error as e:
            raise self._error(kind, name, e)
        if len(data) != length:
            raise exception.CorruptObject(
                kind, name, 'short read at offset %d' % offset)
        return data

    def read_ranges(self, kind, requests):
        ioctx = self._ioctx(kind)
        cond = threading.Condition()
        done = []
        in_flight = [0]

        def reader(request):
            def on_read(completion, data):
                rc = completion.get_return_value()
                name = request[0]
                if rc == -errno.ENOENT:
                    result = exception.ObjectNotFound(kind, name)
                elif rc < 0:
                    result = exception.BackendUnavailable(
                        'RADOS read of %s %s failed: %s'
                        % (kind, name, errno.errorcode.get(-rc, rc)))
                else:
                    result = bytes(data)
                with cond:
                    done.append((request, result))
                    in_flight[0] -= 1
                    cond.notify_all()
            return on_read

        def drain(wait_all):
            with cond:
                while in_flight[0] and (wait_all or
                                        in_flight[0] >= self.max_in_flight):
                    if done and not wait_all:
                        break
                    cond.wait()
                ready, done[:] = list(done), []
            return ready

        # librados must keep each completion until it has fired.
        keep = []
        for request in requests:
            for item in drain(wait_all=False):
                yield item
            name, offset, length = request
            with cond:
                in_flight[0] += 1
            keep.append(ioctx.aio_read(self._oid(kind, name), length, offset,
                                       reader(request)))
            if len(keep) > 4 * self.max_in_flight:
                keep = [c for c in keep if not c.is_complete()]
        for item in drain(wait_all=True):
            yield item

    def stat(self, kind, name):
        try:
            size, mtime = self._ioctx(kind).stat(self._oid(kind, name))
        except rados.Error as e:
            raise self._error(kind, name, e)
        return size, _mtime(mtime)

    def list(self, kind):
        prefix = _PREFIX.get(kind, '')
        try:
            for obj in self._ioctx(kind).list_objects():
                if kind == base.CHUNK or obj.key.startswith(prefix):
                    yield obj.key[len(prefix):]
        except rados.Error as e:
            raise exception.BackendUnavailable('RADOS listing: %s' % e)

    def delete_if_older(self, kind, name, cutoff):
        oid = self._oid(kind, name)
        with self._versioned() as (meta, data):
            ioctx = data if kind == base.CHUNK else meta
            try:
                size, mtime = ioctx.stat(oid)
                version = ioctx.get_last_version()
            except rados.ObjectNotFound:
                return 0
            if _mtime(mtime) >= cutoff:
                return 0
            # Any write since the stat bumps the version and voids this.
            op = ioctx.create_write_op()
            try:
                op.assert_version(version)
                op.remove()
                # Deletes are allowed on a full pool, but only FULL_TRY
                # keeps librados from holding them back.
                ioctx.operate_write_op(op, oid, flags=FULL_TRY)
            except (rados.ObjectNotFound, rados.OSError) as e:
                if getattr(e, 'errno', None) in (errno.ERANGE,
                                                 errno.EOVERFLOW,
                                                 errno.ENOENT):
                    return 0
                raise self._error(kind, name, e)
            finally:
                ioctx.release_write_op(op)
        return size

    # -- headers ---------------------------------------------------------

    def read_header(self, name):
        oid = self._oid(base.HEADER, name)
        with self._versioned() as (ioctx, _):
            try:
                size, _ = ioctx.stat(oid)
                data = ioctx.read(oid, size + 65536, 0)
                token = ioctx.get_last_version()
            except rados.ObjectNotFound:
                return None
            except rados.Error as e:
                raise self._error(base.HEADER, name, e)
        return data, token

    def write_header(self, name, data, token):
        oid = self._oid(base.HEADER, name)
        with self._versioned() as (ioctx, _):
            op = ioctx.create_write_op()
            try:
                if token is None:
                    # Indexed before it exists, so a crash in between
                    # leaves an index entry without header (skipped when
                    # listed), never a header nobody can list.
                    self._index(name, add=True)
                    op.new(rados.LIBRADOS_CREATE_EXCLUSIVE)
                else:
                    op.assert_version(token)
                op.write_full(bytes(data))
                ioctx.operate_write_op(op, oid, mtime=_now(), flags=FULL_TRY)
                return ioctx.get_last_version()
            except (rados.ObjectExists, rados.ObjectNotFound) as e:
                raise exception.Conflict('header %s changed: %s' % (name, e))
            except rados.OSError as e:
                if e.errno in (errno.ERANGE, errno.EOVERFLOW, errno.EEXIST):
                    raise exception.Conflict('header %s changed' % name)
                raise self._error(base.HEADER, name, e)
            except rados.Error as e:
                raise self._error(base.HEADER, name, e)
            finally:
                ioctx.release_write_op(op)

    def delete_header(self, name, token):
        oid = self._oid(base.HEADER, name)
        with self._versioned() as (ioctx, _):
            op = ioctx.create_write_op()
            try:
                op.assert_version(token)
                op.remove()
                ioctx.operate_write_op(op, oid, flags=FULL_TRY)
            except rados.ObjectNotFound:
                raise exception.Conflict('header %s is gone' % name)
            except rados.OSError as e:
                if e.errno in (errno.ERANGE, errno.EOVERFLOW):
                    raise exception.Conflict('header %s changed' % name)
                raise self._error(base.HEADER, name, e)
            finally:
                ioctx.release_write_op(op)
        self._index(name, add=False)

    def _index(self, name, add):
        with rados.WriteOpCtx() as op:
            if add:
                self._meta.set_omap(op, (name,), (b'',))
            else:
                self._meta.remove_omap_keys(op, (name,))
            try:
                self._meta.operate_write_op(op, _INDEX, mtime=_now(),
                                            flags=FULL_TRY)
            except rados.Error as e:
                raise self._error(base.HEADER, _INDEX, e)

    def _keys_oid(self, name):
        # Its own object: an omap write on the header would change the
        # header's version, the token of its compare-and-set.
        return 'keys.' + base.check_name(name)

    def add_keys(self, name, entries):
        for key, value in entries.items():
            base.check_key(key, value)
        if not entries:
            return
        with rados.WriteOpCtx() as op:
            self._meta.set_omap(op, tuple(entries), tuple(entries.values()))
            try:
                self._meta.operate_write_op(op, self._keys_oid(name),
                                            mtime=_now(), flags=FULL_TRY)
            except rados.Error as e:
                raise self._error(base.HEADER, name, e)

    def read_keys(self, name):
        return dict(self._omap(self._keys_oid(name), name))

    def list_headers(self):
        return [key for key, _ in self._omap(_INDEX, _INDEX)]

    def _omap(self, oid, what):
        """Every ``(key, value)`` of ``oid``'s omap, in pages; none if
        the object does not exist.
        """
        found, start = [], ''
        while True:
            with rados.ReadOpCtx() as op:
                it, _ = self._meta.get_omap_vals(op, start, '', 1024)
                try:
                    self._meta.operate_read_op(op, oid)
                except rados.ObjectNotFound:
                    return found
                except rados.Error as e:
                    raise self._error(base.HEADER, what, e)
                page = list(it)
            found.extend(page)
            if len(page) < 1024:
                return found
            start = page[-1][0]
