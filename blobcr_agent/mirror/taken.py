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

"""The version a checkpoint took from its reservation, off the ack's
path (``taken.bin`` in the mirror's cache).

A checkpoint records the version it COMMITs as in flight before the
COMMIT, so that a restart knows it. Where the version was registered
ahead (reserve.py), the cache's synced metadata (``meta.json``) already
names it (``reserved``), and that is all a power loss needs: after one,
every version in flight or reserved is failed unless the repository has
it stable (cache.recover). So the checkpoint does not sync anything on
its ack path: it writes the version's number into this file's one
preallocated slot (a store into the page cache, which a SIGKILL of the
agent does not lose) and records the version in flight in memory;
``meta.json`` gets it, synced, with its next save (the reservation that
follows saves it at once, and none is taken before it is saved). A
restart after a SIGKILL folds the slot in (``fold``): a reserved version
the slot names was taken, and is in flight.
"""

import json
import os
import struct

NAME = 'taken.bin'
SIZE = 4096         # one page: a store to it is never torn by a SIGKILL
_HEADER = struct.Struct('<8sI')
_MAGIC = b'BCRTAKEN'


class Slot(object):
    """The cache's slot, open for the attachment's life."""

    def __init__(self, cache_dir):
        path = os.path.join(cache_dir, NAME)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
                           0o600)
        if os.fstat(self._fd).st_size < SIZE:
            # Allocated once: later stores overwrite it in place.
            self._store(b'')

    def fits(self, version, marks):
        return len(self._encode(version, marks)) <= SIZE - _HEADER.size

    @staticmethod
    def _encode(version, marks):
        return json.dumps({'version': version, 'marks': marks or {}}).encode()

    def record(self, version, marks=None):
        """``version`` was taken from its reservation, with ``marks``
        (``{version: {"made_by", "group"}}``, as the metadata keeps them
        until it turns stable); None: nothing taken.
        """
        self._store(b'' if version is None else
                    self._encode(version, marks))

    def _store(self, body):
        data = (_HEADER.pack(_MAGIC, len(body)) + body).ljust(SIZE, b'\0')
        if len(data) > SIZE:
            raise ValueError('%s: %d bytes do not fit' % (NAME, len(body)))
        if os.pwrite(self._fd, data, 0) != SIZE:
            raise OSError('short write to %s' % NAME)

    def close(self):
        if self._fd is not None:        # an image may be closed twice
            os.close(self._fd)
            self._fd = None


def read(cache_dir):
    """``(version, marks)`` the slot names, or None."""
    try:
        with open(os.path.join(cache_dir, NAME), 'rb') as f:
            data = f.read(SIZE)
        magic, length = _HEADER.unpack_from(data)
        if magic != _MAGIC or not length:
            return None
        taken = json.loads(data[_HEADER.size:_HEADER.size + length])
        return int(taken['version']), dict(taken['marks'])
    except (FileNotFoundError, struct.error, ValueError, KeyError,
            TypeError):
        return None


def fold(meta, cache_dir, in_flight):
    """Return True after recording in ``meta`` (metadata of this boot)
    the reserved version the slot says a checkpoint took, in flight
    after the versions ``in_flight`` (persister.in_flight(meta)) names,
    with its marks; False if the slot names none, or not the one
    reserved (a later save recorded it, or the checkpoint put it back).
    """
    taken = read(cache_dir)
    if taken is None:
        return False
    number, marks = taken
    if number != meta.get('reserved') or number in in_flight:
        return False
    versions = list(in_flight) + [number]
    kept = dict(meta.get('marks') or {})
    kept.update((str(k), v) for k, v in marks.items())
    meta.update(persisting=versions[0], following=versions[1:],
                reserved=None, marks=kept)
    return True
