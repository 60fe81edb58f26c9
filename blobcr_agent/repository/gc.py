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

"""Garbage collection: delete every object no live version references.

Mark and sweep, safe while other processes COMMIT, CLONE and PIN:

1. One listing of the headers. Pending versions whose writer is gone (a
   dead process of this host, or no heartbeat for ``pending_timeout``)
   are marked failed, and pins of this host whose holder is gone (see
   :func:`stale_pin`) are released, in the headers and in the listing.
2. Mark: walk the trees of every live root, as the listing shows them:
   stable versions, pinned versions (obsolete or not), the parents of
   pending versions, and sources of clones the listing does not show
   (being created, or created after the listing). Shared subtrees are
   walked once.
   A delta's base (and the link naming both) is live with the delta,
   and so on down its chain (deltas.py): the links are read from the
   listing of the chunks. A delta pack (chunkpacks.py) referenced by a
   leaf is live whole, and so are the bases its index lists.
3. Sweep: delete chunk objects and node packs that were not marked *and*
   were last written before the cut-off. The cut-off is the GC start, or
   the start of the oldest pending version if earlier, minus a grace for
   clock skew. A pending commit writes only after it registered, so its
   objects (including chunks it shares with garbage: rewriting an object
   refreshes its mtime) are never older than the cut-off; the backend's
   delete is conditional, so a rewrite racing with the delete wins.
4. Headers: a deleted image whose versions are all obsolete and unneeded
   loses its header; other headers lose the entries of the obsolete
   versions nothing needs any more (and of failed versions older than
   ``pending_timeout``), so that they stay small.

Why the listing is enough: a version only becomes live by a header write
that needs it stable (COMMIT's parent, CLONE's source, PIN), and an
obsolete version never turns stable again, so a version the listing
shows obsolete and unpinned can be needed later only through a clone or
pin recorded on it, which the listing shows too. A clone whose image is
not in the listing keeps its source root alive even if its header exists
by now: that header's own root was not walked.

One collection at a time per store (:func:`collect_exclusive`): the
store's ``gc`` lease, renewed while the collection runs. Every agent
collects periodically and after its deletes (manager/collector.py);
``blobcr-manage gc`` takes the same lease.
"""

import dataclasses
import logging
import os
import re
import socket
import threading
import time

from blobcr_agent.repository.backends import base
from blobcr_agent.repository import chunkpacks
from blobcr_agent.repository import deltas
from blobcr_agent.repository import identity
from blobcr_agent.repository import image as image_mod
from blobcr_agent.repository import tree
from blobcr_common import exception

LOG = logging.getLogger(__name__)

_CHUNK_NAME = re.compile(r'^[0-9a-f]{64}$')
_LINK_NAME = re.compile(r'^[0-9a-f]{64}\.')
_PACK_NAME = re.compile(r'^[0-9a-f]{32}$')


@dataclasses.dataclass
class Report(object):
    versions_failed: int = 0
    live_chunks: int = 0
    live_packs: int = 0
    live_delta_packs: int = 0
    chunks_deleted: int = 0
    packs_deleted: int = 0
    delta_packs_deleted: int = 0
    links_deleted: int = 0
    bytes_freed: int = 0
    headers_deleted: int = 0
    kept_recent: int = 0
    pins_released: int = 0
    versions_pruned: int = 0

    def as_dict(self):
        return dataclasses.asdict(self)


def abandoned(version, now, pending_timeout):
    """Why pending ``version`` will never turn stable (None: it may)."""
    if identity.owner_is_gone(version.owner):
        return 'its writer %s is gone' % version.owner
    if now - version.heartbeat > pending_timeout:
        return 'no heartbeat for %d s' % (now - version.heartbeat)
    return None


def fail_abandoned(repo, pending_timeout, report, headers=None):
    """Mark failed every pending version whose writer is gone (in
    ``headers``, a listing, too).
    """
    report.versions_failed += repo.retry_failed_marks()
    now = time.time()
    if headers is None:
        headers = repo.images(include_deleted=True)
    for header in headers:
        for v in header.versions:
            if v.state != image_mod.PENDING:
                continue
            why = abandoned(v, now, pending_timeout)
            if not why:
                continue
            try:
                marked = repo.mark_failed(header.id, v.number,
                                          'abandoned: ' + why)
            except exception.ImageNotFound:
                continue
            if marked:
                # Not marked: it turned stable or failed meanwhile; the
                # listing keeps it pending, which only keeps more.
                v.state = image_mod.FAILED
                LOG.warning('version %d of %s abandoned (%s): marked failed',
                            v.number, header.id, why)
                report.versions_failed += 1


def stale_pin(pin, host=None, boot=None, view=None):
    """Why a pin can be released without asking its holder, or None.

    Only pins of this host are judged: one taken during an earlier boot
    (its holder, a mirror, never re-attaches a cache from before a
    reboot), or one whose holder path is gone, as seen by a process that
    sees the same files (same mount namespace and root) as the pinner.
    """
    host = host or socket.gethostname()
    if pin.get('host') != host:
        return None
    boot = boot or identity.boot_id()
    if pin.get('boot') and boot and pin['boot'] != boot:
        return 'pinned before this host rebooted'
    view = view or identity.fs_view()
    holder = pin.get('holder') or ''
    if view and pin.get('fs') == view and holder.startswith('/') and \
            not os.path.lexists(holder):
        return 'its holder %s is gone' % holder
    return None


def release_stale_pins(repo, headers, report):
    """Release the stale pins (:func:`stale_pin`) of ``headers``, in the
    repository and in the listing.
    """
    host, boot, view = (socket.gethostname(), identity.boot_id(),
                        identity.fs_view())
    for header in headers:
        for v in header.versions:
            stale = [p for p in v.pins if stale_pin(p, host, boot, view)]
            if not stale:
                continue

            def mutate(fresh, number=v.number, stale=stale):
                try:
                    target = fresh.version(number)
                except exception.VersionNotFound:
                    return 0
                # Only the very pins judged: a pin refreshed meanwhile
                # (its holder came back) is another dict and stays.
                kept = [p for p in target.pins if p not in stale]
                released = len(target.pins) - len(kept)
                target.pins = kept
                return released
            try:
                released = repo.update_header(header.id, mutate)[1]
            except exception.ImageNotFound:
                continue
            for p in stale:
                LOG.warning('released the pin of %s on version %d of %s: '
                            '%s', p.get('holder'), v.number, header.id,
                            stale_pin(p, host, boot, view))
            v.pins = [p for p in v.pins if p not in stale]
            report.pins_released += released


def _source_needed(clone, listed, now, pending_timeout, exists):
    """True if an obsolete source version must stay for ``clone``: its
    image was not in the listing (so its own root was not walked) and
    is being created, or exists by now.
    """
    if clone['image'] in listed:
        return False
    return now - clone['at'] < pending_timeout or exists(clone['image'])


def _live_roots(header, needed):
    """Roots that must survive, the roots kept only for clones that may
    be being created, and the earliest pending start.
    """
    roots = []
    maybe = []
    earliest = None
    by_number = {v.number: v for v in header.versions}
    for v in header.versions:
        if v.state == image_mod.STABLE:
            roots.append(v.root_ref)
        elif v.state == image_mod.PENDING:
            earliest = v.created if earliest is None else min(earliest,
                                                              v.created)
            parent = by_number.get(v.parent)
            if parent is not None:
                roots.append(parent.root_ref)
        elif v.root and v.pins:
            roots.append(v.root_ref)        # obsolete but pinned
        elif v.root and any(needed(c) for c in v.clones):
            maybe.append(v.root_ref)        # the source of a clone not listed
    return [r for r in roots if r], maybe, earliest


def collect(repo, grace=None, pending_timeout=None):
    """Run one garbage collection; return a :class:`Report`."""
    grace = repo.gc_grace if grace is None else grace
    pending_timeout = (repo.pending_timeout if pending_timeout is None
                       else pending_timeout)
    report = Report()
    started = time.time()
    repo.backend.recover()
    # Versions this process gave up on first: the listing then shows
    # them failed.
    report.versions_failed += repo.retry_failed_marks()
    headers = repo.images(include_deleted=True)
    fail_abandoned(repo, pending_timeout, report, headers)
    release_stale_pins(repo, headers, report)
    listed = {h.id for h in headers}
    existing = {}

    def exists(image_id):
        if image_id not in existing:
            existing[image_id] = repo.backend.read_header(image_id) is not None
        return existing[image_id]

    def needed(clone):
        return _source_needed(clone, listed, started, pending_timeout, exists)

    cutoff = started
    seen_nodes = set()
    live_digests = set()
    for header in headers:
        roots, maybe, earliest = _live_roots(header, needed)
        if earliest is not None:
            cutoff = min(cutoff, earliest)
        t = header.tree(repo.nodes)
        for root in roots:
            t.walk(root, seen_nodes, live_digests.add)
        for root in maybe:
            try:
                t.walk(root, seen_nodes, live_digests.add)
            except exception.ObjectNotFound as e:
                # A clone record left by an earlier release (its clone's
                # header went first, see _forget_clone): no clone can be
                # made from objects already gone.
                LOG.warning('gc: image %s: a source version kept for a '
                            'clone not listed is incomplete (%s): not kept',
                            header.id, e)
        for v in header.versions:
            if v.profile and (v.state != image_mod.OBSOLETE or v.pins):
                live_digests.add(bytes.fromhex(v.profile))
    cutoff -= grace
    live_packs = {tree.pack_name(ref) for ref in seen_nodes}
    chunk_names = list(repo.backend.list(base.CHUNK))
    live_chunks, live_links, live_delta_packs = _live_closure(
        repo, live_digests, chunk_names)
    report.live_chunks = len(live_chunks)
    report.live_packs = len(live_packs)
    report.live_delta_packs = len(live_delta_packs)

    for kind, names, pattern, live, counter in (
            (base.CHUNK, chunk_names, _CHUNK_NAME, live_chunks,
             'chunks_deleted'),
            (base.CHUNK, chunk_names, _LINK_NAME, live_links,
             'links_deleted'),
            (base.CHUNK, chunk_names, chunkpacks.NAME, live_delta_packs,
             'delta_packs_deleted'),
            (base.NODE, list(repo.backend.list(base.NODE)), _PACK_NAME,
             live_packs, 'packs_deleted')):
        for name in names:
            if not pattern.match(name) or name in live:
                continue
            # Objects are never empty, so 0 bytes freed means kept.
            freed = repo.backend.delete_if_older(kind, name, cutoff)
            if freed:
                setattr(report, counter, getattr(report, counter) + 1)
                report.bytes_freed += freed
            else:
                report.kept_recent += 1

    if hasattr(repo.backend, 'remove_stale_tmp'):
        report.bytes_freed += repo.backend.remove_stale_tmp(cutoff)

    for header in headers:
        if header.deleted:
            _delete_header(repo, header, needed, report)
        else:
            prune(repo, header, needed, started - pending_timeout, report)
    LOG.info('gc: %s', report.as_dict())
    return report


def _live_closure(repo, live, chunk_names):
    """``(chunk names, link names, delta pack names)`` that must stay
    for the leaf values ``live`` (digests and pack references): the
    objects they name, and down each delta's chain its base with what
    keeps it. A delta stored alone names its base in its link object
    (deltas.py), listed in ``chunk_names``; a delta pack's index lists
    the bases of all its entries (chunkpacks.py), and a live pack stays
    whole. Either kind of base may be either kind of value. A pack whose
    index cannot be read stops the collection: what its deltas need is
    unknown.
    """
    bases_of = {}
    for name in chunk_names:
        link = deltas.parse_link(name)
        if link is not None:
            bases_of.setdefault(link[0], []).append((name, link[1]))
    chunks_kept, links_kept, packs_kept = set(), set(), set()
    todo = list(live)
    while todo:
        value = todo.pop()
        if chunkpacks.is_ref(value):
            pack = chunkpacks.pack_of(value)
            if pack in packs_kept:
                continue
            packs_kept.add(pack)
            try:
                todo.extend(chunkpacks.read_bases(repo.backend, pack))
            except exception.ObjectNotFound:
                LOG.warning('gc: delta pack %s is referenced but missing',
                            pack)
            continue
        name = value.hex()
        if name in chunks_kept:
            continue
        chunks_kept.add(name)
        for link, over in bases_of.get(name, ()):
            links_kept.add(link)
            todo.append(bytes.fromhex(over))
    return chunks_kept, links_kept, packs_kept


LEASE = 'gc'
LEASE_SECONDS = 300         # renewed every third of it while collecting


def lease_holder_name():
    """This process, as a lease holder names it."""
    return '%s:%d' % (socket.gethostname(), os.getpid())


def collect_exclusive(repo, holder=None, grace=None, pending_timeout=None):
    """:func:`collect`, holding the store's ``gc`` lease; raises Busy,
    collecting nothing, while another process holds it.
    """
    holder = holder or lease_holder_name()
    backend = repo.backend
    if not backend.try_lease(LEASE, holder, LEASE_SECONDS):
        raise exception.Busy('garbage collection of %s is running in %s; '
                             'try again later' % (
                                 backend.describe(),
                                 backend.lease_holder(LEASE) or 'another '
                                 'process'))
    done = threading.Event()

    def renew():
        while not done.wait(LEASE_SECONDS / 3):
            if not backend.try_lease(LEASE, holder, LEASE_SECONDS):
                LOG.error('gc: lost the lease of %s to %s', backend.describe(),
                          backend.lease_holder(LEASE))
    renewer = threading.Thread(target=renew, name='blobcr-gc-lease',
                               daemon=True)
    renewer.start()
    try:
        return collect(repo, grace=grace, pending_timeout=pending_timeout)
    finally:
        done.set()
        renewer.join()
        backend.release_lease(LEASE, holder)


def _unneeded(v, needed, failed_before, pending_parents):
    """True if the entry of version ``v`` can go: obsolete (or failed
    before ``failed_before``), unpinned, no pending version's parent, no
    clone depending on it.
    """
    if v.state == image_mod.FAILED:
        if v.created >= failed_before:
            return False
    elif v.state != image_mod.OBSOLETE:
        return False
    return not v.pins and v.number not in pending_parents and \
        not any(needed(c) for c in v.clones)


def _pending_parents(header):
    return {v.parent for v in header.versions
            if v.state == image_mod.PENDING}


def prune(repo, header, needed, failed_before, report):
    """Remove from the header of an image the entries of the versions
    that nothing needs any more (as ``header``, the listing, shows them
    and as they still are). Numbering goes on from the highest number
    ever given; ``pruned`` counts the entries removed.
    """
    parents = _pending_parents(header)
    candidates = {v.number for v in header.versions
                  if _unneeded(v, needed, failed_before, parents)}
    if not candidates:
        return

    def mutate(fresh):
        parents = _pending_parents(fresh)
        kept = [v for v in fresh.versions
                if v.number not in candidates or
                not _unneeded(v, needed, failed_before, parents)]
        removed = len(fresh.versions) - len(kept)
        fresh.last_version = fresh.newest_number()
        fresh.versions = kept
        fresh.pruned += removed
        return removed
    try:
        report.versions_pruned += repo.update_header(header.id, mutate)[1]
    except exception.ImageNotFound:
        pass


def _deletable(header, needed):
    return header.deleted and all(
        v.state == image_mod.OBSOLETE and not v.pins and
        not any(needed(c) for c in v.clones) for v in header.versions)


def _delete_header(repo, header, needed, report):
    if not _deletable(header, needed):
        return
    found = repo.backend.read_header(header.id)
    if found is None:
        return
    fresh = image_mod.ImageHeader.from_bytes(found[0], header.id)
    if not _deletable(fresh, needed):
        return
    if fresh.origin:
        _forget_clone(repo, fresh.origin, header.id)
    # Its write log first (a crash in between leaves a deleted header,
    # which the next run finds again).
    repo.backend.log_destroy(header.id)
    try:
        repo.backend.delete_header(header.id, found[1])
        report.headers_deleted += 1
    except exception.Conflict:
        pass  # changed meanwhile: the next run sees it


def _forget_clone(repo, origin, clone_id):
    """Remove a clone's record from its source version, before the
    clone's header goes: a record naming no header reads as a clone
    being created, whose source must be walked, and this run may have
    freed that source's objects already (it was obsolete, and the clone,
    still listed, did not need it). A crash between the two leaves the
    clone's header, which the next run removes the same way.
    """
    def mutate(header):
        v = header.version(origin['version'])
        v.clones = [c for c in v.clones if c['image'] != clone_id]
    try:
        repo.update_header(origin['image'], mutate)
    except (exception.ImageNotFound, exception.VersionNotFound):
        pass            # the source (or its entry) is gone already
