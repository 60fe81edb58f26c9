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

"""Images and their versions as wholes: create, delete, extend, clone,
obsolete.

Invariants: a deleted image hides at once and GC frees it later; a
clone's record is added to its source version before the clone's header
exists, so GC never frees a root a clone shares; an extend switches the
size and every version's root in one compare-and-set, its new nodes
durable before it.
"""

import logging
import time
import uuid

from blobcr_agent.repository import identity
from blobcr_agent.repository import image as image_mod
from blobcr_agent.repository.records import CAS_TRIES
from blobcr_agent.repository import tree
from blobcr_common import exception

LOG = logging.getLogger(__name__)

MIN_CHUNK_SIZE = 512


class Lifecycle(object):
    """Image life cycle (a mixin of
    :class:`~blobcr_agent.repository.repository.Repository`).
    """

    def create_image(self, name, size, chunk_size=None, fanout=None,
                     origin=None, versions=None, image_id=None):
        chunk_size = chunk_size or self.chunk_size
        fanout = fanout or self.fanout
        if not isinstance(name, str) or not name or len(name) > 255 or \
                not name.isprintable():
            raise exception.InvalidInput(
                'image name must be 1-255 printable characters')
        if not isinstance(size, int) or size <= 0:
            raise exception.InvalidInput('image size must be a positive '
                                         'number of bytes, not %r' % (size,))
        if chunk_size < MIN_CHUNK_SIZE:
            raise exception.InvalidInput('chunk size must be at least %d'
                                         % MIN_CHUNK_SIZE)
        if fanout < 2:
            raise exception.InvalidInput('tree fan-out must be at least 2')
        header = image_mod.ImageHeader(
            id=image_id or uuid.uuid4().hex, name=name, size=size,
            chunk_size=chunk_size, fanout=fanout, created=time.time(),
            origin=origin, versions=versions or [])
        self.backend.write_header(header.id, header.to_bytes(), None)
        LOG.info('created image %s (%s, %d bytes, chunk %d)',
                 header.id, name, size, chunk_size)
        return header

    def delete_image(self, ref):
        """Mark every version obsolete and hide the image; GC frees it.

        Refused while a version is being written; a pending version
        whose writer was a process of this host that is gone (killed
        inside COMMIT) is not being written: it is given up, as GC would.
        """
        image_id = self.image(ref).id

        def mutate(header):
            pending = [v for v in header.versions
                       if v.state == image_mod.PENDING]
            writing = [v.number for v in pending
                       if not identity.owner_is_gone(v.owner)]
            if writing:
                raise exception.InvalidInput(
                    'image %s has a version being written (%s)'
                    % (image_id, ', '.join('v%d' % n for n in writing)))
            for v in pending:
                v.error = 'abandoned: its writer %s is gone' % v.owner
            pinned = ['v%d by %s' % (v.number, _describe_pins(v))
                      for v in header.versions if v.pins]
            if pinned:
                raise exception.InvalidInput(
                    'image %s is in use (pinned: %s): detach it first (an '
                    'operator releases the pins of a host gone for good: '
                    'see "Pins" in the repository documentation)'
                    % (image_id, '; '.join(pinned)))
            for v in header.versions:
                v.state = image_mod.OBSOLETE
            header.deleted = True
        self.update_header(image_id, mutate)

    def extend(self, ref, size):
        """Grow an image to ``size`` bytes; the new space reads as zeros in
        every version. Refused while a version is being written or a
        mirror reads the image (pinned): it must be detached, as the
        mirror's file keeps the size it was attached with.

        Where the tree needs more levels for the new chunk count, each
        version's root moves under new nodes (slot 0 of each) written
        before the header update: one compare-and-set switches the size
        and every root at once, so no reader sees a root of the wrong
        depth.
        """
        header = self.image(ref)
        if not isinstance(size, int) or size <= 0:
            raise exception.InvalidInput('image size must be a positive '
                                         'number of bytes, not %r' % (size,))
        if size < header.size:
            raise exception.InvalidInput(
                'image %s has %d bytes: it can grow, not shrink to %d'
                % (header.id, header.size, size))
        for _ in range(CAS_TRIES):
            header = self.image(header.id)
            if size == header.size:
                return header
            wrapped = self._wrap_roots(header, size)

            def mutate(h, seen_size=header.size, wrapped=wrapped):
                if h.size != seen_size:
                    raise _Retry()
                pinned = [v for v in h.versions if v.pins]
                if pinned:
                    raise exception.InvalidInput(
                        'image %s is attached (pinned: %s): detach it '
                        'before extending it'
                        % (h.id, '; '.join('v%d by %s' % (
                            v.number, _describe_pins(v)) for v in pinned)))
                busy = [v.number for v in h.versions
                        if v.state == image_mod.PENDING]
                if busy:
                    raise exception.InvalidInput(
                        'image %s has versions being written (%s): extend '
                        'it once they are persisted' % (h.id, busy))
                for v in h.versions:
                    if v.root and v.root not in wrapped:
                        raise _Retry()          # a version came meanwhile
                for v in h.versions:
                    if v.root:
                        v.root = wrapped[v.root]
                h.size = size
            try:
                header, _ = self.update_header(header.id, mutate)
            except _Retry:
                continue
            LOG.info('extended image %s to %d bytes', header.id, size)
            return header
        raise exception.Conflict('image %s keeps changing; gave up '
                                 'extending it' % header.id)

    def _wrap_roots(self, header, size):
        """{old root hex: root hex at the depth of ``size``}, the new
        nodes durable.
        """
        old_depth = tree.depth_for(header.nchunks, header.fanout)
        new_depth = tree.depth_for(
            (size + header.chunk_size - 1) // header.chunk_size,
            header.fanout)
        roots = {v.root for v in header.versions if v.root}
        if new_depth == old_depth or not roots:
            return {r: r for r in roots}
        batch = self.backend.batch()
        writer = tree.PackWriter(self.nodes, self.pack_max_bytes, batch)
        wrapped = {}
        for root in roots:
            ref = bytes.fromhex(root)
            for _ in range(new_depth - old_depth):
                ref = writer.append(tree.parent_of(ref, header.fanout))
            wrapped[root] = ref.hex()
        writer.close()
        batch.wait()
        return wrapped

    def clone(self, ref, version=None, name=None):
        """CLONE: a new image whose version 1 shares ``ref@version``."""
        source = self.image(ref)
        number = source.stable_version(version).number
        clone_id = uuid.uuid4().hex

        def pin(header):
            # Registered before the clone exists, so that GC keeps the
            # source root alive even if the source is made obsolete now.
            v = header.stable_version(number)
            v.clones.append({'image': clone_id, 'at': time.time()})
            return v
        _, v = self.update_header(source.id, pin)
        now = time.time()
        first = image_mod.Version(
            number=1, state=image_mod.STABLE, parent=None, created=now,
            owner=self.owner, root=v.root, stable_at=now, seq=1)
        header = self.create_image(
            name or '%s@%d' % (source.name, number), source.size,
            chunk_size=source.chunk_size, fanout=source.fanout,
            origin={'image': source.id, 'version': number},
            versions=[first], image_id=clone_id)
        LOG.info('cloned %s@%d as %s', source.id, number, clone_id)
        return header

    def obsolete(self, ref, numbers, keep_head=False, still=None):
        """Mark versions obsolete; GC then frees what nothing else uses.

        A pinned version is obsolete at once too, but GC keeps its
        objects until its last pin is released (its reader, a mirror,
        detaches). Returns the numbers of those pinned versions.

        With ``keep_head``, a version that is the head (the image's
        content) when the header is swapped gets a copy in its place in
        that same compare-and-set (a new stable version sharing its
        tree, made by "kept"). Deciding from an earlier read loses
        writes: a checkpoint in flight can turn stable in between, and a
        copy that turns stable after it would then be the head with the
        older content (issue 32).

        ``still(header)``: the numbers that may still go, judged again on
        the header being swapped; the others of ``numbers`` are left as
        they are (a version labelled meanwhile, as a Cinder snapshot is
        by its manage, is not obsoleted by a retention that read the
        header before; records.label refuses the other order).
        """
        image_id = self.image(ref).id

        def mutate(header):
            pinned = []
            head = header.head() if keep_head else None
            allowed = set(still(header)) if still is not None else None
            for number in numbers:
                if allowed is not None and number not in allowed:
                    continue
                v = header.version(number)
                if v.state == image_mod.PENDING:
                    raise exception.InvalidInput(
                        'version %d of %s is still being written'
                        % (number, image_id))
                if v is head:
                    _append_copy(header, v, 'kept')
                v.state = image_mod.OBSOLETE
                if v.pins:
                    pinned.append(v.number)
            return pinned
        _, pinned = self.update_header(image_id, mutate)
        if pinned:
            LOG.info('versions %s of %s are obsolete; pinned, they are '
                     'freed once released', pinned, image_id)
        return pinned


def _append_copy(header, v, made_by):
    """A stable version equal to ``v`` that is the new head: it shares
    v's tree (nothing to write, so it needs no pending phase) and takes
    the next ``seq``.
    """
    now = time.time()
    header.versions.append(image_mod.Version(
        number=header.next_number(), state=image_mod.STABLE,
        parent=v.number, created=now, root=v.root, stable_at=now,
        seq=header.next_seq(), made_by=made_by))


class _Retry(Exception):
    """The header changed under an update that must be recomputed."""


def _describe_pins(v):
    return ', '.join('%s:%s' % (p.get('host'), p.get('holder'))
                     for p in v.pins)
