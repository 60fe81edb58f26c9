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

"""The write-ahead logs of `cluster` volumes on RADOS (a mixin of
:class:`~blobcr_agent.repository.backends.rados.RadosBackend`); the log
itself is :mod:`blobcr_agent.repository.writelog`.

Everything is in the replicated metadata pool:

* ``wlog.IMAGE``, the log's index: omap key ``state`` is ``open:E``
  (writers of epoch E may append) or ``sealed:E`` (a take-over to
  epoch E closed it), and one key ``seg.NNNNNNNNNNNN`` per segment whose
  value is the version its entries follow (JSON; a dict for a segment
  opened because its predecessor was full: writelog._opening);
* ``wlog.IMAGE.NNNNNNNNNNNN``, a segment: entries appended whole, and
  its own omap ``state`` (``open:E`` or ``sealed``); and ``next``, a
  segment number after every sealed one, and ``tomb.N`` for each (they
  are kept, emptied, until GC deletes the image: ``log_destroy``).

Fencing is in the ops themselves: every append compares the segment's
``state`` with ``open:E`` in the same op (``omap_cmp``), and a new
segment is registered only by an op that compares the index's state.
A take-over sets both to sealed; an append after it fails (ECANCELED)
whatever its host believes. A sealed segment is never deleted, only
emptied (a host cut off mid-registration cannot create it afresh).
"""

import errno
import json

from blobcr_agent.repository.backends import base
from blobcr_common import exception

try:
    import rados
except ImportError:  # pragma: no cover - depends on the host
    rados = None

_STATE = 'state'
_NEXT = 'next'
_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


def _index_oid(image):
    return 'wlog.' + base.check_name(image)


def _segment_oid(image, segment):
    return 'wlog.%s.%012d' % (base.check_name(image), segment)


def _segment_key(segment):
    return 'seg.%012d' % segment


def _tomb_key(segment):
    return 'tomb.%012d' % segment


def _open(epoch):
    return 'open:%d' % epoch


class RadosWriteLog(object):

    supports_write_log = True

    def _log_op(self, oid, op, what, flags=0):
        """Run write op ``op`` on ``oid``; ECANCELED (a compare failed)
        and EEXIST become Fenced, a full pool BackendFull.
        """
        try:
            self._meta.operate_write_op(op, oid, flags=flags)
        except (rados.ObjectExists, rados.ObjectNotFound):
            raise
        except rados.Error as e:
            code = getattr(e, 'errno', None)
            if code == errno.ECANCELED:
                raise exception.Fenced(
                    'the write log of %s was sealed (%s): the image was '
                    'taken over' % (what, self._where))
            if code in _FULL_ERRNOS:
                raise self._full('an entry of the write log of', what, code)
            raise exception.BackendUnavailable(
                'RADOS write-log op on %s: %s' % (oid, e))

    def _log_omap(self, oid):
        found, start = {}, ''
        while True:
            with rados.ReadOpCtx() as op:
                it, _ = self._meta.get_omap_vals(op, start, '', 1024)
                try:
                    self._meta.operate_read_op(op, oid)
                except rados.ObjectNotFound:
                    return None
                except rados.Error as e:
                    raise exception.BackendUnavailable(
                        'RADOS read of %s: %s' % (oid, e))
                page = list(it)
            found.update(page)
            if len(page) < 1024:
                return found
            start = page[-1][0]

    def log_state(self, image):
        """``(state, {segment: base})`` of ``image``'s log; (None, {})
        if it has none.
        """
        omap = self._log_omap(_index_oid(image))
        if omap is None:
            return None, {}
        segments = {int(k[4:]): json.loads(v) for k, v in omap.items()
                    if k.startswith('seg.')}
        state = omap.get(_STATE, b'').decode()
        return state, segments

    def log_next_segment(self, image):
        """A segment number never used in ``image``'s log (sealed ones
        stay, emptied, after a take-over: ``next`` remembers them).
        """
        omap = self._log_omap(_index_oid(image)) or {}
        used = [int(k[4:]) for k in omap if k.startswith('seg.')]
        return max(used + [int(omap.get(_NEXT, b'1')) - 1]) + 1

    def log_append(self, image, segment, data, epoch, base_version=None,
                   new=False, rolled=False):
        """Append entry ``data`` to ``segment`` as a writer of ``epoch``;
        ``new``: register the segment first (after ``base_version``;
        ``rolled``: opened because the previous one was full, not by a
        COMMIT, see writelog.py) and create it. Raises Fenced once the log
        is sealed.
        """
        if new:
            self._log_register(
                image, segment,
                {'base': base_version, 'rolled': True} if rolled
                else base_version, epoch)
        oid = _segment_oid(image, segment)
        with rados.WriteOpCtx() as op:
            if new:
                op.new(rados.LIBRADOS_CREATE_EXCLUSIVE)
                self._meta.set_omap(op, (_STATE,), (_open(epoch).encode(),))
            else:
                op.omap_cmp(_STATE, _open(epoch))
            op.append(bytes(data))
            try:
                self._log_op(oid, op, image)
            except rados.ObjectExists:
                # Sealed (created) by a take-over before it existed.
                raise exception.Fenced(
                    'segment %d of the write log of %s was sealed before '
                    'it was made: the image was taken over'
                    % (segment, image))
            except rados.ObjectNotFound:
                raise exception.Fenced(
                    'segment %d of the write log of %s is gone'
                    % (segment, image))

    def _log_register(self, image, segment, value, epoch):
        oid = _index_oid(image)
        for _ in range(3):
            with rados.WriteOpCtx() as op:
                op.omap_cmp(_STATE, _open(epoch))
                self._meta.set_omap(op, (_segment_key(segment),),
                                    (json.dumps(value).encode(),))
                try:
                    self._log_op(oid, op, image)
                    return
                except rados.ObjectNotFound:
                    pass
            # The first segment: the index is made, open, unless a
            # take-over made it (sealed) first.
            with rados.WriteOpCtx() as op:
                op.new(rados.LIBRADOS_CREATE_EXCLUSIVE)
                self._meta.set_omap(op, (_STATE,), (_open(epoch).encode(),))
                try:
                    self._log_op(oid, op, image)
                except rados.ObjectExists:
                    pass
        raise exception.BackendUnavailable(
            'the write log index of %s could not be made' % image)

    def log_seal(self, image, epoch):
        """Close ``image``'s log to every writer (a take-over to
        ``epoch``): no append succeeds after this returns. Returns its
        segments ``{segment: base}``.
        """
        oid = _index_oid(image)
        with rados.WriteOpCtx() as op:
            self._meta.set_omap(op, (_STATE,),
                                (('sealed:%d' % epoch).encode(),))
            self._log_op(oid, op, image)
        _, segments = self.log_state(image)
        for segment in segments:
            with rados.WriteOpCtx() as op:
                self._meta.set_omap(op, (_STATE,), (b'sealed',))
                self._log_op(_segment_oid(image, segment), op, image)
        return segments

    def log_read(self, image, segment):
        oid = _segment_oid(image, segment)
        try:
            size, _ = self._meta.stat(oid)
            return self._meta.read(oid, size, 0) if size else b''
        except rados.ObjectNotFound:
            return b''
        except rados.Error as e:
            raise exception.BackendUnavailable(
                'RADOS read of %s: %s' % (oid, e))

    def log_drop(self, image, segments, epoch):
        """The log's owner (a writer of ``epoch``) drops ``segments``
        that a stable version covers: unregistered, then deleted.
        """
        oid = _index_oid(image)
        if not segments:
            return
        with rados.WriteOpCtx() as op:
            op.omap_cmp(_STATE, _open(epoch))
            self._meta.remove_omap_keys(
                op, tuple(_segment_key(s) for s in segments))
            try:
                self._log_op(oid, op, image)
            except rados.ObjectNotFound:
                return
        for segment in segments:
            try:
                self._meta.remove_object(_segment_oid(image, segment))
            except rados.ObjectNotFound:
                pass
            except rados.Error as e:
                raise exception.BackendUnavailable(
                    'RADOS delete of a write-log segment of %s: %s'
                    % (image, e))

    def log_reopen(self, image, epoch, segments):
        """After a take-over folded the log into a version: the sealed
        ``segments`` are emptied (kept sealed) and unregistered, and the
        log opens to writers of ``epoch``.
        """
        for segment in segments:
            with rados.WriteOpCtx() as op:
                op.truncate(0)
                self._log_op(_segment_oid(image, segment), op, image)
        following = self.log_next_segment(image)
        with rados.WriteOpCtx() as op:
            keys = tuple(_segment_key(s) for s in segments)
            if keys:
                self._meta.remove_omap_keys(op, keys)
            tombs = tuple(_tomb_key(s) for s in segments)
            self._meta.set_omap(op, (_STATE, _NEXT) + tombs, (
                _open(epoch).encode(),
                str(following).encode()) + (b'',) * len(tombs))
            self._log_op(_index_oid(image), op, image)

    def log_destroy(self, image):
        """Every object of ``image``'s log (a deleted image's, by GC)."""
        omap = self._log_omap(_index_oid(image))
        if omap is None:
            return 0
        numbers = [int(k[5:]) for k in omap if k.startswith('tomb.')] + [
            int(k[4:]) for k in omap if k.startswith('seg.')]
        for oid in [_segment_oid(image, n) for n in numbers] + [
                _index_oid(image)]:
            try:
                self._meta.remove_object(oid)
            except rados.ObjectNotFound:
                pass
            except rados.Error as e:
                raise exception.BackendUnavailable(
                    'RADOS delete of %s: %s' % (oid, e))
        return len(numbers)
