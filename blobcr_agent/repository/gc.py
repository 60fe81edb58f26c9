"""Garbage collection: delete every object no live version references.

Mark and sweep, safe while other processes COMMIT and CLONE:

1. Pending versions whose writer is gone (a dead process of this host, or
   no heartbeat for ``pending_timeout``) are marked failed.
2. Mark: walk the trees of every live root (stable versions, the parents
   of pending versions, sources of clones being created). Shared subtrees
   are walked once.
3. Sweep: delete chunk objects and node packs that were not marked *and*
   were last written before the cut-off. The cut-off is the GC start, or
   the start of the oldest pending version if earlier, minus a grace for
   clock skew. A pending commit writes only after it registered, so its
   objects (including chunks it shares with garbage: rewriting an object
   refreshes its mtime) are never older than the cut-off; the backend's
   delete is conditional, so a rewrite racing with the delete wins.
"""

import dataclasses
import logging
import re
import time

from blobcr_agent import exception
from blobcr_agent.repository.backends import base
from blobcr_agent.repository import image as image_mod
from blobcr_agent.repository import repository as repo_mod
from blobcr_agent.repository import tree

LOG = logging.getLogger(__name__)

_CHUNK_NAME = re.compile(r'^[0-9a-f]{64}$')
_PACK_NAME = re.compile(r'^[0-9a-f]{32}$')


@dataclasses.dataclass
class Report(object):
    versions_failed: int = 0
    live_chunks: int = 0
    live_packs: int = 0
    chunks_deleted: int = 0
    packs_deleted: int = 0
    bytes_freed: int = 0
    headers_deleted: int = 0
    kept_recent: int = 0

    def as_dict(self):
        return dataclasses.asdict(self)


def _abandoned(version, now, pending_timeout):
    if repo_mod.owner_is_gone(version.owner):
        return 'its writer %s is gone' % version.owner
    if now - version.heartbeat > pending_timeout:
        return 'no heartbeat for %d s' % (now - version.heartbeat)
    return None


def fail_abandoned(repo, pending_timeout, report):
    """Mark failed every pending version whose writer is gone."""
    now = time.time()
    for header in repo.images(include_deleted=True):
        for v in header.versions:
            if v.state != image_mod.PENDING:
                continue
            why = _abandoned(v, now, pending_timeout)
            if why and repo.mark_failed(header.id, v.number,
                                        'abandoned: ' + why):
                LOG.warning('version %d of %s abandoned (%s): marked failed',
                            v.number, header.id, why)
                report.versions_failed += 1


def _live_roots(header, pending_timeout, clone_exists, now):
    """Roots that must survive, and the earliest pending start."""
    roots = []
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
        elif v.root:
            # An obsolete version whose clone is still being created.
            for pin in v.clones:
                if now - pin['at'] < pending_timeout and \
                        not clone_exists(pin['image']):
                    roots.append(v.root_ref)
                    break
    return [r for r in roots if r], earliest


def collect(repo, grace=None, pending_timeout=None):
    """Run one garbage collection; return a :class:`Report`."""
    grace = repo.gc_grace if grace is None else grace
    pending_timeout = (repo.pending_timeout if pending_timeout is None
                       else pending_timeout)
    report = Report()
    started = time.time()
    fail_abandoned(repo, pending_timeout, report)

    headers = repo.images(include_deleted=True)
    ids = {h.id for h in headers}
    cutoff = started
    seen_nodes = set()
    live_digests = set()
    for header in headers:
        roots, earliest = _live_roots(
            header, pending_timeout,
            lambda i: i in ids or repo.backend.read_header(i) is not None,
            started)
        if earliest is not None:
            cutoff = min(cutoff, earliest)
        t = header.tree(repo.nodes)
        for root in roots:
            t.walk(root, seen_nodes, live_digests.add)
        for v in header.versions:
            if v.profile and v.state != image_mod.OBSOLETE:
                live_digests.add(bytes.fromhex(v.profile))
    cutoff -= grace
    live_packs = {tree.pack_name(ref) for ref in seen_nodes}
    report.live_chunks = len(live_digests)
    report.live_packs = len(live_packs)

    for kind, pattern, live, counter in (
            (base.CHUNK, _CHUNK_NAME, {d.hex() for d in live_digests},
             'chunks_deleted'),
            (base.NODE, _PACK_NAME, live_packs, 'packs_deleted')):
        for name in list(repo.backend.list(kind)):
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
        if header.deleted and all(v.state == image_mod.OBSOLETE
                                  for v in header.versions):
            found = repo.backend.read_header(header.id)
            if found is None:
                continue
            try:
                repo.backend.delete_header(header.id, found[1])
                report.headers_deleted += 1
            except exception.Conflict:
                pass  # changed meanwhile: the next run sees it
    LOG.info('gc: %s', report.as_dict())
    return report
