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

"""The commit protocol: a pending version registered, its chunks and
nodes written, then made stable (or failed).

Invariants: every chunk and tree node of a version is durable before the
compare-and-set that turns it stable, and that same update gives it its
``seq`` (the chain's order) and, for a mirror, its pin; a crash before
it leaves a pending version (failed later: by its writer's abort, its
restart, or GC once the writer is gone) and unreachable objects that GC
reclaims. A version that follows another still pending (``after``)
fails unless that one turns stable first.
"""

import logging
import threading
import time

from blobcr_agent import _native
from blobcr_agent.repository.backends import base
from blobcr_agent.repository import chunkpacks
from blobcr_agent.repository import chunks
from blobcr_agent.repository import deltas
from blobcr_agent.repository.identity import pin_record
from blobcr_agent.repository import image as image_mod
from blobcr_agent.repository import tree
from blobcr_common import exception

LOG = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 30
# How long finish() waits for an upload ahead that the persist adopted
# while it was in flight, before it puts the chunk itself (content
# addressing makes a second put of it harmless).
ADOPTED_WAIT_SECONDS = 60


class Commits(object):
    """COMMIT and its variants (a mixin of
    :class:`~blobcr_agent.repository.repository.Repository`).
    """

    def commit_copy(self, ref, number=None, pin=None, made_by=''):
        """A new version equal to stable version ``number`` (default the
        newest): no chunk is written, the tree is shared. This is a
        snapshot of a detached image (its content is its newest version)
        and a revert (the newest version becomes equal to an older one).
        ``made_by`` labels the version (Version.made_by).
        """
        header = self.image(ref)
        parent = header.stable_version(number).number
        pending = self.begin_commit(header.id, parent=parent,
                                    made_by=made_by)
        try:
            return pending.finish(pin=pin)
        except BaseException as e:
            pending.abort('%s: %s' % (type(e).__name__, e))
            raise

    def begin_commit(self, ref, parent=None, after=None, made_by='',
                     epoch=None, group=None):
        """Register a pending version and return its :class:`Commit`.

        The new version is ``parent`` (default: the newest stable
        version) plus the chunks put into the commit. With ``after``, a
        version of the image still pending (pipelined checkpoints), the
        new version follows it instead: its tree is built on that one's
        when it finishes, and it fails if that one does not become
        stable first. ``made_by`` labels it (Version.made_by), ``group``
        tags it as a group member (Version.group), in the same header
        write that registers it. With ``epoch`` (a mirror's), it is
        refused (Fenced) once the image was taken over, and so is its
        finish.
        """
        image_id = self.image(ref).id
        self.retry_failed_marks()
        now = time.time()

        def mutate(header):
            if header.deleted:
                raise exception.ImageNotFound(image_id)
            header.check_epoch(epoch)
            base_version = None
            if after is not None:
                base_version = header.version(after)
                if base_version.state not in (image_mod.PENDING,
                                              image_mod.STABLE):
                    raise exception.CommitAborted(
                        'version %d of %s is %s: no version can follow it'
                        % (after, image_id, base_version.state))
            elif parent is not None:
                base_version = header.version(parent)
                # Obsolete but pinned (a mirror's last checkpoint): its
                # tree is kept whole, so it can still be built on.
                if base_version.state != image_mod.STABLE and not (
                        base_version.state == image_mod.OBSOLETE and
                        base_version.pins):
                    raise exception.VersionNotStable(image_id, parent,
                                                     base_version.state)
            elif any(v.state == image_mod.STABLE for v in header.versions):
                base_version = header.stable_version()
            number = header.next_number()
            header.versions.append(image_mod.Version(
                number=number, state=image_mod.PENDING,
                parent=base_version.number if base_version else None,
                created=now, owner=self.owner, heartbeat=now,
                made_by=made_by, group=group))
            return number, base_version

        header, (number, base_version) = self.update_header(image_id, mutate)
        if base_version is not None and \
                base_version.state == image_mod.PENDING:
            return Commit(self, header, number, None,
                          after=base_version.number, epoch=epoch)
        return Commit(self, header, number,
                      base_version.root_ref if base_version else None,
                      epoch=epoch)

    def resume_commit(self, ref, number, epoch=None):
        """Adopt pending version ``number`` left by a writer that died,
        to finish it; raises CommitAborted if it is no longer pending.
        """
        image_id = self.image(ref).id
        now = time.time()

        def adopt(header):
            header.check_epoch(epoch)
            v = header.version(number)
            if v.state != image_mod.PENDING:
                raise exception.CommitAborted(
                    'version %d of %s is %s, it cannot be resumed'
                    % (number, image_id, v.state))
            v.owner, v.heartbeat = self.owner, now
            return header.version(v.parent) if v.parent else None

        header, parent = self.update_header(image_id, adopt)
        if parent is not None and parent.state == image_mod.PENDING:
            return Commit(self, header, number, None, after=parent.number,
                          epoch=epoch)
        return Commit(self, header, number,
                      parent.root_ref if parent else None, epoch=epoch)

    def commit(self, ref, chunk_items, parent=None):
        """COMMIT: a new version from ``parent`` plus ``{index: data}``."""
        pending = self.begin_commit(ref, parent)
        try:
            items = (chunk_items.items() if hasattr(chunk_items, 'items')
                     else chunk_items)
            for index, data in items:
                pending.put(index, data)
            return pending.finish()
        except BaseException as e:
            pending.abort('%s: %s' % (type(e).__name__, e))
            raise


class Commit(object):
    """A pending version being written (COMMIT in progress).

    ``put`` may be called from several threads; ``finish`` makes the
    version stable, ``abort`` makes it failed. ``after``: the pending
    version this one follows, whose tree is the base, read at finish.
    """

    def __init__(self, repo, header, number, base_root, after=None,
                 epoch=None):
        self.repo = repo
        self.epoch = epoch
        self._marks = {}            # made_by, group: set by finish()
        self.header = header
        self.version = number
        self.image_id = header.id
        self._base_root = base_root
        self.after = after
        self._changes = {}
        # index -> the object the base version must hold there: the
        # chunks stored relative to what the writer remembers of it.
        self._expected = {}
        self.tracker = None
        self._batch = repo.backend.batch()
        # Deltas go into packs (chunkpacks.py), unless packing is off.
        self._packs = chunkpacks.PackWriter(
            self._batch, repo.delta_pack_max_bytes) \
            if repo.delta_pack_max_bytes else None
        self._heartbeat = time.monotonic()
        self._stored = 0
        # digest -> object bytes: durable, sent before this version's
        # persist under its registration (mirror/upload_ahead.py)
        self._ahead = {}
        # index -> (write clock, digest, page hashes) of what was sent
        self._sent = {}
        # ... of what is being sent (not durable yet), and the persist's
        # chunks linked to those: index -> (digest, chunk bytes)
        self._flying = {}
        self._adopted = {}
        self._ahead_cond = threading.Condition()
        # The mirror's write clock just before its COMMIT: content sent
        # with an earlier clock, unchanged since, is the snapshot's.
        self.commit_clock = None
        # index -> the pack reference a compaction moved on from
        self._moved = {}
        self.compacted = 0          # entries moved (their count)
        self.objects_put = 0        # chunks, packs and node packs: finish()
        self.ahead_used = 0         # chunks linked to those, not put
        self.ahead_unhashed = 0     # ... without reading them again
        self._ahead_bytes = 0

    def track(self, tracker):
        """Store chunks as deltas where ``tracker`` (a deltas.Tracker of
        this writer's earlier versions) knows the chunk replaced: see
        :meth:`put`. What each put stored is staged in the tracker.
        """
        self.tracker = tracker

    def put(self, index, data):
        """Write chunk ``index``; return its object's digest (None: all
        zero).

        With a tracker (:meth:`track`) that knows the chunk at ``index``
        in the base version, a chunk that differs from it or from its
        anchor in few pages (at most ``delta_max_fraction`` of its
        bytes, and at least one: an equal chunk is rewritten whole) is
        stored as a delta (deltas.choose); finish() then checks that the
        base version holds what the tracker knew.
        """
        self._check_length(index, data)
        if _native.is_zero(data):
            d = None
            if self.tracker is not None:
                self.tracker.stage(index, None)
        elif self.tracker is not None:
            return self._put_tracked(index, data)
        else:
            d = self._put_whole(data)
        self._changes[index] = d
        self._tick()
        return d

    def _check_length(self, index, data):
        expected = self.header.chunk_len(index)
        if len(data) != expected:
            raise exception.InvalidInput(
                'chunk %d of image %s must be %d bytes, got %d'
                % (index, self.image_id, expected, len(data)))

    def _tick(self):
        if time.monotonic() - self._heartbeat > HEARTBEAT_SECONDS:
            self._beat()

    def _put_whole(self, data):
        d = chunks.digest(data)
        with self._ahead_cond:
            size = self._ahead.get(d)
        if size is not None:
            self.ahead_used += 1
            self._ahead_bytes += size
            return d
        blob = self.repo.policy.encode(
            data, self._batch.rate() or self.repo.upload_bps)
        if chunkpacks.PackWriter.must_pack(d):
            # A digest that would read as a pack reference (one in 2**64).
            return self._pack_writer().append(blob)
        self._batch.put(base.CHUNK, chunks.object_name(d), blob)
        return d

    @property
    def packed(self):
        """``(entries, packs)`` this commit put into delta packs."""
        if self._packs is None:
            return 0, 0
        return self._packs.entries, self._packs.packs

    def _pack_writer(self):
        if self._packs is None:
            self._packs = chunkpacks.PackWriter(self._batch,
                                                chunkpacks.DEFAULT_MAX_BYTES)
        return self._packs

    def _put_tracked(self, index, data):
        hashes = deltas.page_hashes(data)
        prior = self.tracker.get(index)
        choice = deltas.choose(prior, hashes, self.repo.delta_max_fraction)
        if choice is not None:
            over, pages, depth = choice
            self._expected[index] = prior.name
            d, blob = chunks.encode_delta(
                self.repo.policy, over, data, pages,
                self._batch.rate() or self.repo.upload_bps)
            if self._packs is not None:
                # The pack's index keeps the base once no version holds it.
                d = self._packs.append(blob, over)
            else:
                # So does the link of a delta stored alone.
                self._batch.put(base.CHUNK, deltas.link_name(d, over),
                                b'\x01')
                self._batch.put(base.CHUNK, chunks.object_name(d), blob)
            tracked = deltas.Tracked(d, over, depth, hashes, prior.anchor,
                                     prior.anchor_hashes)
        else:
            d = self._put_whole(data)
            tracked = deltas.whole(d, hashes)
        self.tracker.stage(index, tracked)
        self._changes[index] = d
        self._tick()
        return d

    def upload_ahead(self, batch, index, data, written, hashes=None):
        """Start writing ``data``, chunk ``index`` as the mirror held it
        at write clock ``written``, into ``batch`` as the object a later
        :meth:`put` of it would write; ``(digest, object bytes)``.
        ``hashes``: its page hashes, for the delta tracker. Only for a
        version registered before the call: GC keeps it while the
        version is pending (gc.py's cut-off). Until :meth:`add_uploaded`
        or :meth:`drop_uploads` settles it, the persist may adopt it
        (:meth:`sent_unchanged`).
        """
        self._check_length(index, data)
        d = chunks.digest(data)
        blob = self.repo.policy.encode(data, batch.rate() or
                                       self.repo.upload_bps)
        with self._ahead_cond:
            self._flying[index] = (written, d, hashes)
        try:
            batch.put(base.CHUNK, chunks.object_name(d), blob)
        except Exception:
            self._settle({index: (d, 0, (written, hashes))}, durable=False)
            raise
        return d, len(blob), (written, hashes)

    def add_uploaded(self, uploaded):
        """``{index: upload_ahead's result}`` are durable: a put of the
        same content links them (and :meth:`sent_unchanged` knows them).
        """
        self._settle(uploaded, durable=True)

    def drop_uploads(self, uploaded):
        """``{index: upload_ahead's result}`` failed or were abandoned:
        what the persist adopted of them, finish() puts itself.
        """
        self._settle(uploaded, durable=False)

    def _settle(self, uploaded, durable):
        with self._ahead_cond:
            for index, (d, size, (written, hashes)) in uploaded.items():
                if durable:
                    self._ahead[d] = size
                    self._sent[index] = (written, d, hashes)
                if self._flying.get(index, (None, None))[1] == d:
                    del self._flying[index]
            self._ahead_cond.notify_all()

    def sent_unchanged(self, index, clock_of):
        """The (digest, page hashes) sent ahead for chunk ``index`` (or
        being sent: the persist adopts an upload in flight rather than
        send the chunk twice) if its content then is the snapshot's:
        sent from its write at ``clock_of(index)`` (the chunk's last
        write now, read after the take; asked only for a chunk that was
        sent), which came before the COMMIT. None: put() it.
        """
        with self._ahead_cond:
            # One in flight is newer than one durable for the index.
            sent = self._flying.get(index) or self._sent.get(index)
        if sent is None or self.commit_clock is None:
            return None
        clock = clock_of(index)
        if sent[0] != clock or \
                not clock_at_or_before(clock, self.commit_clock):
            return None
        return sent[1], sent[2]

    def put_sent(self, index, chunk_digest, hashes, data):
        """Link chunk ``index`` (its bytes: ``data``) to the object sent
        ahead under ``chunk_digest`` (sent_unchanged), without hashing
        it again; staged whole in the tracker. One still in flight is
        settled by finish().
        """
        with self._ahead_cond:
            size = self._ahead.get(chunk_digest)
            if size is None:
                self._adopted[index] = (chunk_digest, data)
        if size is not None:
            self._count_linked(size)
        if self.tracker is not None:
            # No hashes: forgotten, so no delta is made on a stale one.
            self.tracker.stage(index, None if hashes is None else
                               deltas.whole(chunk_digest, hashes))
        self._changes[index] = chunk_digest
        self._tick()
        return chunk_digest

    def _settle_adopted(self):
        """Wait for the uploads the persist adopted in flight; put those
        that did not become durable.
        """
        deadline = time.monotonic() + ADOPTED_WAIT_SECONDS
        with self._ahead_cond:
            while any(self._flying.get(i, (None, None))[1] == d
                      for i, (d, _) in self._adopted.items()):
                left = deadline - time.monotonic()
                if left <= 0:
                    LOG.warning('version %d of %s: uploads ahead still in '
                                'flight after %d s; put again',
                                self.version, self.image_id,
                                ADOPTED_WAIT_SECONDS)
                    break
                self._ahead_cond.wait(left)
            adopted, self._adopted = self._adopted, {}
        for index, (d, data) in sorted(adopted.items()):
            with self._ahead_cond:
                size = self._ahead.get(d)
            if size is not None:
                self._count_linked(size)
            elif self._put_whole(data) != d:
                raise exception.CommitAborted(
                    'version %d of %s: chunk %d is not the content sent '
                    'ahead for it' % (self.version, self.image_id, index))

    def _count_linked(self, size):
        self._ahead_bytes += size
        self.ahead_used += 1
        self.ahead_unhashed += 1

    def put_digest(self, index, chunk_digest):
        """Record chunk ``index`` as the object already stored under
        ``chunk_digest`` (None: zeros), without writing it. The caller
        vouches that the object is durable.
        """
        self.header.chunk_len(index)
        self._changes[index] = chunk_digest

    def _beat(self):
        self._heartbeat = time.monotonic()

        def mutate(header):
            v = header.version(self.version)
            if v.state != image_mod.PENDING:
                raise exception.CommitAborted(
                    'version %d of %s was marked %s while being written'
                    % (self.version, self.image_id, v.state))
            v.heartbeat = time.time()
        self.repo.update_header(self.image_id, mutate)

    def _resolve_base(self):
        """The root of the version this one follows, which must be
        stable by now (versions turn stable in order).
        """
        if self.after is None:
            return self._base_root
        base = self.repo.image(self.image_id).version(self.after)
        # Obsolete but pinned (by the mirror that wrote it): still whole.
        if base.state != image_mod.STABLE and not (
                base.state == image_mod.OBSOLETE and base.pins):
            raise exception.CommitAborted(
                'version %d of %s follows version %d, which is %s'
                % (self.version, self.image_id, self.after, base.state))
        return base.root_ref

    def mark(self, made_by='', group=None):
        """Label the version (Version.made_by) and tag it as a group
        member (Version.group) in the header update that makes it
        stable: a version registered before its caller knew them (a
        reservation, mirror/reserve.py). Replaces earlier marks.
        """
        self._marks = {}
        if made_by:
            self._marks['made_by'] = made_by
        if group is not None:
            self._marks['group'] = group

    def finish(self, pin=None):
        """Make every chunk and node durable, then the version stable;
        pinned for ``pin`` (a holder) and marked (:meth:`mark`) in the
        same header update, so that it cannot be obsoleted and collected
        unpinned in between, nor be seen stable without its marks.
        """
        base_root = self._resolve_base()
        self._settle_adopted()
        if self._packs is not None:
            self._compact()
            self._packs.close()
        self._batch.wait()
        self.repo.record_upload(self._batch.rate())
        t = self.header.tree(self.repo.nodes)
        self._check_expected(t, base_root)
        nodes = self.repo.backend.batch()
        writer = tree.PackWriter(self.repo.nodes, self.repo.pack_max_bytes,
                                 nodes)
        root = t.update(base_root, self._changes, writer)
        writer.close()
        nodes.wait()
        stored = self._batch.bytes + nodes.bytes + self._ahead_bytes
        self.objects_put = self._batch.objects + nodes.objects

        def mutate(header):
            header.check_epoch(self.epoch)
            v = header.version(self.version)
            if v.state != image_mod.PENDING:
                raise exception.CommitAborted(
                    'version %d of %s was marked %s before it became stable'
                    % (self.version, self.image_id, v.state))
            v.state = image_mod.STABLE
            v.seq = header.next_seq()
            for name, value in self._marks.items():
                setattr(v, name, value)
            if pin is not None:
                v.pins.append(pin_record(pin))
            v.root = root.hex() if root else None
            v.stable_at = time.time()
            v.chunks = len(self._changes)
            v.stored_bytes = stored
        self.repo.update_header(self.image_id, mutate)
        LOG.info('version %d of %s is stable (%d chunks, %d nodes, '
                 '%d bytes written)', self.version, self.image_id,
                 len(self._changes), writer.nodes, stored)
        return self.version

    def _compact(self):
        """Move the entries the writer's newest version still holds in
        its sparse packs (chunkpacks.py) into this version's pack, so
        that the old packs go once older versions do. Best effort: what
        cannot be read stays where it is.
        """
        if self.tracker is None:
            return
        moves = {i: t for i, t in self.tracker.sparse(
            chunkpacks.COMPACT_BELOW) if i not in self._changes}
        if not moves:
            return
        entries = {}
        for ref, entry in chunkpacks.load_many(
                self.repo.backend, {t.name for t in moves.values()}):
            if isinstance(entry, Exception):
                LOG.warning('version %d of %s: %s not moved: %s',
                            self.version, self.image_id,
                            chunkpacks.describe(ref), entry)
            else:
                entries[ref] = entry
        for index, tracked in sorted(moves.items()):
            entry = entries.get(tracked.name)
            if entry is None:
                continue
            ref = self._packs.append(entry, tracked.base)
            self._moved[index] = tracked.name
            self.compacted += 1
            self._changes[index] = ref
            self.tracker.stage(index, tracked._replace(name=ref))

    def _check_expected(self, t, base_root):
        """A delta's anchor is kept by the base version (or by a link
        of its delta there) only if the base holds what the writer
        remembered: otherwise fail, and the writer stores whole chunks.
        An entry moved by compaction over a base that no longer holds
        it is left out (the base's chunk stays).
        """
        for index, old in sorted(self._moved.items()):
            found = t.lookup(base_root, index) if base_root else None
            if found != old:
                del self._changes[index], self._moved[index]
                self.tracker.stage(index, None)
                self.compacted -= 1
        for index, name in sorted(self._expected.items()):
            found = t.lookup(base_root, index) if base_root else None
            if found != name:
                raise exception.CommitAborted(
                    'version %d of %s: chunk %d of its base is %s, not the '
                    '%s its deltas were made from'
                    % (self.version, self.image_id, index,
                       found.hex()[:16] if found else 'zeros',
                       name.hex()[:16]))

    def abort(self, reason):
        """Mark the version failed; never raises (it runs on error paths)."""
        try:
            # Puts still in flight first: on a full store they would
            # take the room the header write needs.
            self._batch.drain()
            self.repo.mark_failed(self.image_id, self.version, reason)
        except Exception:
            LOG.exception('could not mark version %d of %s failed (it is '
                          'retried; it stays pending meanwhile)',
                          self.version, self.image_id)
            self.repo.remember_unmarked(self.image_id, self.version, reason)


def clock_at_or_before(clock, other):
    """A mirror's write clock ``clock`` is at or before ``other``: they
    are 32-bit counters that wrap (Mirror.quiet_dirty).
    """
    diff = (clock - other) & 0xffffffff
    return diff == 0 or diff >= 0x80000000
