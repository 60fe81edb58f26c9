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

"""The write-ahead log of a `cluster` volume: what its guest flushed
since its newest stable version, in the cluster, so that losing its host
loses nothing flushed (cinder.rst, "What is durable when").

A guest's flush appends one *entry*: the 4 KiB blocks written since the
previous one (the core's log map, native/core_log.c) with their content
read after the cut, so each block holds its newest write at least. The
entries are grouped in *segments*, each registered after a *base*: the
newest version whose COMMIT came before its first entry's cut. The
mirror starts a new segment at its first flush after each checkpoint
(mirror/flushlog.py), so every write of the earlier segments was
acknowledged before that COMMIT, and a segment is covered, and dropped,
once a later segment's base is stable (:func:`needed`). A segment that
grows past ``MAX_SEGMENT`` is followed by one with the same base,
marked *rolled*: no COMMIT came between them, so it covers nothing
(RADOS objects have a size limit, ``osd_max_object_size``, 128 MiB by
default).

After a take-over (its host lost), :func:`fold` seals the log (no
append from the lost host succeeds from then on: backends/rados_log.py),
replays the needed segments, in order, over the newest stable version
into a new stable version, and opens the log to the new epoch: the
volume then holds every write flushed before the loss, and possibly
later ones, never an older block.
"""

import logging
import struct
import zlib

from blobcr_agent import crashpoint
from blobcr_agent.repository import image as image_mod
from blobcr_common import exception

LOG = logging.getLogger(__name__)

MAGIC = b'BWL1'
# Bytes of entries after which the next entry opens a new segment: well
# under the OSDs' object size limit (osd_max_object_size, 128 MiB).
MAX_SEGMENT = 32 << 20
# magic, crc32 (of what follows it), sequence, extents, entry length
_HEADER = struct.Struct('<4sIQII')
_EXTENT = struct.Struct('<QI')


def encode(seq, writes):
    """An entry: ``writes`` is ``[(offset, data)]``, in order."""
    extents = b''.join(_EXTENT.pack(off, len(data)) for off, data in writes)
    body = extents + b''.join(bytes(data) for _, data in writes)
    length = _HEADER.size + len(body)
    rest = struct.pack('<QII', seq, len(writes), length) + body
    return MAGIC + struct.pack('<I', zlib.crc32(rest)) + rest


def decode(blob, what='write log'):
    """The entries of a segment: ``[(seq, [(offset, data)])]``. A
    segment's entries are appended whole (one RADOS op each), so any
    damage is corruption, not a torn tail.
    """
    entries, pos = [], 0
    view = memoryview(blob)
    while pos < len(blob):
        if len(blob) - pos < _HEADER.size:
            raise exception.CorruptObject('write log', what,
                                          'a short entry at %d' % pos)
        magic, crc, seq, count, length = _HEADER.unpack_from(blob, pos)
        if magic != MAGIC or length < _HEADER.size or \
                pos + length > len(blob) or \
                zlib.crc32(view[pos + 8:pos + length]) != crc:
            raise exception.CorruptObject('write log', what,
                                          'a bad entry at %d' % pos)
        at = pos + _HEADER.size
        data_at = at + count * _EXTENT.size
        writes = []
        for k in range(count):
            off, n = _EXTENT.unpack_from(blob, at + k * _EXTENT.size)
            writes.append((off, bytes(view[data_at:data_at + n])))
            data_at += n
        entries.append((seq, writes))
        pos += length
    return entries


def _opening(value):
    """A segment's index value: ``(base, by_commit)``. A segment opened
    by a checkpoint's COMMIT is its base version (an int, or None before
    any version); one opened because its predecessor was full is
    ``{"base": b, "rolled": true}``: no COMMIT came between, so it
    covers nothing before it.
    """
    if isinstance(value, dict):
        return value.get('base'), not value.get('rolled')
    return value, True


def needed(segments, stable):
    """The segments (``{segment: value}``) whose writes stable version
    ``stable`` (None: no version) may not hold, in order: a segment is
    covered once a later segment opened by a COMMIT has its base at or
    before ``stable`` (that COMMIT came after every write of the earlier
    segments). The last segment is never covered.
    """
    order = sorted(segments)
    keep = []
    for k, segment in enumerate(order):
        covered = stable is not None and any(
            by_commit and (base is None or base <= stable)
            for base, by_commit in (_opening(segments[s])
                                    for s in order[k + 1:]))
        if not covered:
            keep.append(segment)
    return keep


def covered(segments, stable):
    """The segments a stable version ``stable`` holds every write of."""
    keep = set(needed(segments, stable))
    return [s for s in sorted(segments) if s not in keep]


def replay(backend, image_id, segments):
    """The writes of ``segments``, oldest first: ``[(offset, data)]``."""
    writes = []
    for segment in segments:
        blob = backend.log_read(image_id, segment)
        for _, entry in decode(blob, '%s segment %d' % (image_id, segment)):
            writes.extend(entry)
    return writes


def _newest_stable(header):
    stable = [v.number for v in header.versions
              if v.state == image_mod.STABLE]
    return max(stable) if stable else None


def fold(repo, image_id, epoch, why):
    """Seal the log of ``image_id`` (taken over to ``epoch``), replay
    what its newest stable version lacks into a new stable version, and
    open the log to writers of ``epoch``. Returns ``{segments, writes,
    bytes, version}`` (version None: nothing to replay), or None if the
    store keeps no logs. Run again after a crash anywhere in it, it ends
    the same (the replay is idempotent over the version it made).
    """
    backend = repo.backend
    if not backend.supports_write_log:
        return None
    # Sealed even if it has no log yet: a lost host that never flushed
    # must not start one under its old epoch.
    segments = backend.log_seal(image_id, epoch)
    crashpoint.reached('log-sealed')
    header = repo.image(image_id)
    stable = _newest_stable(header)
    keep = needed(segments, stable)
    writes = replay(backend, image_id, keep)
    version = None
    if writes:
        version = _commit_writes(repo, header, stable, writes, why)
    crashpoint.reached('log-folded')
    backend.log_reopen(image_id, epoch, sorted(segments))
    result = {'segments': len(keep), 'writes': len(writes),
              'bytes': sum(len(d) for _, d in writes), 'version': version}
    LOG.warning('write log of %s replayed after a take-over: %s', image_id,
                result)
    return result


def _commit_writes(repo, header, stable, writes, why):
    """A new stable version: ``stable`` with ``writes`` applied."""
    chunk_size = header.chunk_size
    chunks = {}
    for off, data in writes:
        end = off + len(data)
        if end > header.size:
            raise exception.CorruptObject(
                'write log', header.id, 'a write past the end (%d > %d)'
                % (end, header.size))
        pos = off
        while pos < end:
            index = pos // chunk_size
            buf = chunks.get(index)
            if buf is None:
                buf = bytearray(
                    repo.read_chunk(header, stable, index)
                    if stable is not None else header.chunk_len(index))
                chunks[index] = buf
            at = pos - index * chunk_size
            n = min(end - pos, len(buf) - at)
            buf[at:at + n] = data[pos - off:pos - off + n]
            pos += n
    pending = repo.begin_commit(header.id, parent=stable,
                                made_by='write log replay (%s)' % why)
    try:
        for index in sorted(chunks):
            pending.put(index, bytes(chunks[index]))
        return pending.finish()
    except BaseException as e:
        pending.abort('%s: %s' % (type(e).__name__, e))
        raise
