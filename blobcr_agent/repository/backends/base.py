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

"""The small interface every object backend implements.

Objects come in three kinds:

* ``chunk``: content-addressed chunk objects, immutable, written whole
  (the erasure-coded data pool on Ceph);
* ``node``: packs of version-tree nodes, immutable, written whole, read by
  byte range;
* ``header``: one small mutable object per image, changed only by
  compare-and-set so that a version turns stable in one atomic step;
  beside a header, a set of *keys* that writers add to without
  compare-and-set (the members of a group's index: many hosts add to
  it at once, and none should retry because another did).

Writes of chunks and nodes go through a :class:`WriteBatch`: ``put`` may
return before the object is durable, with a bounded number in flight, and
``wait`` returns once every put of the batch is durable, raising the first
error any of them hit. Each commit has its own batch, so the errors of one
never surface in another.
"""

import abc
import re
import threading
import time

from blobcr_common import exception

CHUNK = 'chunk'
NODE = 'node'
HEADER = 'header'
KINDS = (CHUNK, NODE)


_NAME_RE = re.compile(r'^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$')


def check_name(name):
    """Object names become file names and RADOS ids: refuse anything else."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise exception.InvalidInput('invalid object name %r' % (name,))
    return name


MAX_KEY_VALUE = 256


def check_key(key, value):
    """A key of a header's key set and its value: refuse anything else."""
    check_name(key)
    if not isinstance(value, bytes) or len(value) > MAX_KEY_VALUE:
        raise exception.InvalidInput('the value of key %s: at most %d bytes'
                                     % (key, MAX_KEY_VALUE))


class WriteBatch(object):
    """Puts in flight for one caller, bounded, with one durability wait."""

    def __init__(self, backend, max_in_flight):
        self._backend = backend
        self._max = max(1, max_in_flight)
        self._cond = threading.Condition()
        self._in_flight = 0
        self._error = None
        self._started = None
        self._done_bytes = 0
        self.objects = 0
        self.bytes = 0
        self.kinds = set()

    def put(self, kind, name, data):
        """Start writing an immutable object (whole).

        Writing an object that already exists is allowed (content
        addressing makes the bytes identical) and refreshes its
        modification time, which garbage collection relies on.
        """
        check_name(name)
        with self._cond:
            while self._in_flight >= self._max and self._error is None:
                self._cond.wait()
            if self._error is not None:
                raise self._error
            self._in_flight += 1
            self.objects += 1
            self.bytes += len(data)
            self.kinds.add(kind)
            if self._started is None:
                self._started = time.monotonic()
        size = len(data)
        try:
            self._backend._submit_put(
                kind, name, data, lambda error: self._completed(error, size))
        except Exception as e:
            self._completed(e, 0)
            raise

    def rate(self):
        """Bytes per second completed so far (None before any)."""
        with self._cond:
            if self._started is None or not self._done_bytes:
                return None
            elapsed = time.monotonic() - self._started
            return self._done_bytes / max(elapsed, 1e-6)

    def _completed(self, error, size):
        with self._cond:
            self._in_flight -= 1
            self._done_bytes += size
            if error is not None and self._error is None:
                self._error = error
            self._cond.notify_all()

    def drain(self):
        """Wait until no put is in flight, ignoring errors (for aborts:
        afterwards nothing of this batch still writes, or fills a disk).
        """
        with self._cond:
            while self._in_flight:
                self._cond.wait()

    def wait(self):
        """Return when every put is durable; raise the first error."""
        with self._cond:
            while self._in_flight:
                self._cond.wait()
            if self._error is not None:
                raise self._error
        if self.objects:
            self._backend._make_durable(self.kinds)


class ObjectBackend(metaclass=abc.ABCMeta):

    #: a short name shown in listings and logs
    name = None

    def __init__(self, max_in_flight=32):
        self.max_in_flight = max_in_flight

    def batch(self):
        """A new :class:`WriteBatch` for one caller's puts."""
        return WriteBatch(self, self.max_in_flight)

    @abc.abstractmethod
    def _submit_put(self, kind, name, data, callback):
        """Start a put; call ``callback(error_or_None)`` when it is done."""

    @abc.abstractmethod
    def _make_durable(self, kinds):
        """Make every completed put of these kinds durable (a no-op if it
        already is).
        """

    @abc.abstractmethod
    def get(self, kind, name, offset=0, length=None):
        """Read an object, or a byte range of it; ObjectNotFound if absent."""

    @abc.abstractmethod
    def read_ranges(self, kind, requests):
        """Read many ``(name, offset, length)`` ranges at once.

        Yield ``(request, data or exception)`` in any order; data is
        shorter than asked where the object ends.
        """

    def get_many(self, kind, names, max_size):
        """Yield ``(name, data or exception)`` for whole objects, in any
        order; an object larger than ``max_size`` is reported corrupt.
        """
        requests = ((name, 0, max_size + 1) for name in names)
        for (name, _, _), data in self.read_ranges(kind, requests):
            if not isinstance(data, Exception) and len(data) > max_size:
                data = exception.CorruptObject(
                    kind, name, 'larger than %d bytes' % max_size)
            yield name, data

    @abc.abstractmethod
    def stat(self, kind, name):
        """Return ``(size, mtime)``; ObjectNotFound if absent."""

    @abc.abstractmethod
    def list(self, kind):
        """Yield the names of every object of a kind."""

    @abc.abstractmethod
    def delete_if_older(self, kind, name, cutoff):
        """Delete an object only if it was last written before ``cutoff``
        (a UNIX time), atomically with respect to a concurrent put of the
        same object. Return the bytes freed, or 0 if it was kept or gone.
        """

    @abc.abstractmethod
    def read_header(self, name):
        """Return ``(data, token)`` or ``None`` if there is no header."""

    @abc.abstractmethod
    def write_header(self, name, data, token):
        """Replace a header if its token is still ``token`` (``None``:
        create it, which fails if it exists). Raise Conflict otherwise.
        Durable when it returns.
        """

    @abc.abstractmethod
    def delete_header(self, name, token):
        """Delete a header if its token is still ``token``."""

    @abc.abstractmethod
    def list_headers(self):
        """Yield every header name."""

    @abc.abstractmethod
    def add_keys(self, name, entries):
        """Add ``entries`` (``{key: bytes}``, keys valid object names,
        values at most 256 bytes) to the key set of header ``name``,
        which need not exist: one write whatever else is added at the
        same time, so concurrent writers never retry on each other. A
        key added again keeps one of its values. The set lives apart
        from the header (its token does not change). Durable when it
        returns.
        """

    @abc.abstractmethod
    def read_keys(self, name):
        """``{key: bytes}``: the key set of header ``name`` ({} if none)."""

    def recover(self):
        """Finish what a process killed inside a backend call left half
        done (the local store: objects GC moved aside). Garbage
        collection calls it before it starts.
        """
        return 0

    def try_lease(self, name, holder, duration):
        """Take the store-wide lease ``name`` for ``holder`` (a string
        naming one process) for ``duration`` seconds, or renew it if
        ``holder`` has it: True; False if another holder has it. A lease
        ends at release_lease, with its holder's process (local store),
        or when ``duration`` passes without a renewal (RADOS).
        """
        raise NotImplementedError

    def release_lease(self, name, holder):
        """End ``holder``'s lease ``name``; nothing if it has none."""
        raise NotImplementedError

    def lease_holder(self, name):
        """Who holds lease ``name`` now, or None."""
        raise NotImplementedError

    # The write-ahead log of `cluster` volumes (repository/writelog.py):
    # only a backend whose writes are replicated away from the host has
    # one (RADOS); the others refuse `cluster` durability.
    supports_write_log = False

    def log_state(self, image):
        return None, {}

    def log_destroy(self, image):
        return 0

    def _no_log(self, *args, **kwargs):
        raise exception.InvalidInput(
            '%s keeps no write-ahead log: `cluster` durability needs the '
            'RADOS backend' % self.describe())

    log_append = log_seal = log_read = log_drop = log_reopen = _no_log
    log_next_segment = _no_log

    def close(self):
        """Release connections and threads."""

    def describe(self):
        """One line saying where the objects are, for listings."""
        return self.name

    def capacity(self):
        """Room for chunk data: ``{'total_bytes', 'free_bytes',
        'used_bytes'}`` as a user of the store counts them (after
        replication or erasure-code overhead), plus ``detail``.
        """
        raise NotImplementedError
