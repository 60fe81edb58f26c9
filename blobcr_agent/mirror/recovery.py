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

"""Resuming an attached image's persists after the agent stopped or
crashed.

The cache's metadata names the versions that were in flight
(persister.in_flight). The oldest one was being taken: the chunks its
journal shows in the repository are done; every other chunk of its
snapshot is persisted again from the mirror file, which still holds it
unless it was written since the COMMIT (then, or if it was only in the
in-memory copy-on-write buffer, the version is failed). That holds with
versions queued behind it too (a chunk of the oldest that a later one
also holds had its content copied to memory: lost, unless it was taken
and journaled). The versions queued behind it are failed: their
snapshots' copy-on-write content was in memory. A failed version's
chunks are dirty again, so the next checkpoint carries them.
"""

import logging
import os
import socket

from blobcr_agent.mirror import persister as persister_mod
from blobcr_agent.repository.backends import base
from blobcr_agent.repository import chunkpacks
from blobcr_agent.repository import chunks
from blobcr_agent.repository import deltas
from blobcr_agent.repository import identity
from blobcr_agent.repository import image as image_mod
from blobcr_common import exception

LOG = logging.getLogger(__name__)


def recover(image):
    """Resume, adopt or fail what ``image`` (an AttachedImage) had in
    flight; then release the pins of this mirror that it no longer
    knows of.
    """
    try:
        _recover_in_flight(image)
    finally:
        release_forgotten_pins(image)


def release_forgotten_pins(image):
    """A crash between recording a new last checkpoint and releasing the
    previous one's pin leaves that pin behind, known to nobody: its
    version would never be collected, and the image would look attached
    here after its detach. Keep the pins of what the mirror reads from
    (its attached version, its last checkpoint and what is in flight),
    release the rest.
    """
    keep = {image.attached_version, image.meta['last']} | set(
        persister_mod.in_flight(image.meta))
    try:
        header = image.repo.image(image.id)
    except exception.BlobCRError as e:
        LOG.warning('pins of %s not checked: %s', image.id, e)
        return
    host = socket.gethostname()
    for v in header.versions:
        if v.number not in keep and any(
                identity.same_pin(p, host, image.holder) for p in v.pins):
            LOG.warning('releasing the pin of %s on version %d of %s: a '
                        'crash left it behind', image.holder, v.number,
                        image.id)
            image.repo.unpin_quietly(image.id, v.number, image.holder)


def _recover_in_flight(image):
    versions = persister_mod.in_flight(image.meta)
    _fail_orphans(image, versions)
    _fail_reserved(image, versions)
    if not versions:
        return
    number, followers = versions[0], versions[1:]
    for follower in followers:
        mark_failed_quietly(image.repo, image.id, follower,
                            'the agent stopped while it was queued behind '
                            'version %d' % number)
    try:
        found = image.repo.image(image.id).version(number)
    except exception.VersionNotFound as e:
        # Failed and pruned by GC while the agent was down.
        give_up(image, versions, None, str(e))
        return
    if found.state == image_mod.STABLE:
        _adopt(image, number, followers)
        return
    # The oldest's own snapshot: what later ones hold is theirs (failed).
    state = image.core.recovery(oldest=True)
    try:
        pending = image.repo.resume_commit(image.id, number,
                                           epoch=image.epoch)
    except exception.CommitAborted as e:
        LOG.warning('interrupted version %d of %s: %s', number, image.id, e)
        give_up(image, versions, None, str(e))
        return
    # A label and group tag asked for a version registered ahead.
    pending.mark(**(image.meta.get('marks') or {}).get(str(number), {}))
    if state['lost'] or not state['snapshot']:
        if state['lost']:
            why = ('%d snapshot chunks were only in the copy-on-write '
                   'buffer' % state['lost'])
        else:
            # Recorded in flight before its COMMIT, which never came (or
            # froze nothing): not published as a copy of its parent.
            why = 'its snapshot holds no chunk'
        give_up(image, versions, pending, why)
        return
    done = {i: d for i, (d, over) in read_journal(
        os.path.join(image.cache_dir, persister_mod.JOURNAL)).items()
        if _durable(image.repo, d, found.created) and (
            over is None or
            _durable_link(image.repo, d, over, found.created))}
    snapshot = image.core.snapshot_chunks()
    lost = image.core.requeue([i for i in snapshot if i not in done])
    if lost:
        give_up(image, versions, pending, '%d snapshot chunks were '
                'overwritten before they were persisted' % len(lost))
        return
    for index in snapshot:
        if index in done:
            pending.put_digest(index, done[index])
    count = image.core.resume()     # the followers' chunks dirty again
    if followers:
        for follower in followers:
            image.versions[follower] = image_mod.FAILED
        image._record_in_flight([number])
        LOG.warning('versions %s of %s, queued behind version %d, are '
                    'failed: their snapshots were in memory', followers,
                    image.id, number)
    image.versions[number] = image_mod.PENDING
    LOG.warning('resuming the persist of version %d of %s (%d chunks '
                'done, %d to go)', number, image.id, len(done), count)
    image.persister.submit(pending, journal_mode='a')


def _fail_orphans(image, in_flight):
    """Pending versions the earlier agent on this cache (``owner`` in
    its metadata) registered and never recorded: a SIGKILL between the
    registration and the metadata write naming it (a version reserved
    ahead, a checkpoint before its record). This agent is that one's
    successor on the same cache, so it knows it is gone, in whatever
    PID namespace each ran; GC, in another, cannot tell (identity.py).
    """
    before = image.meta.get('owner')
    if not before or before == image.repo.owner:
        return
    known = set(in_flight) | {image.meta.get('reserved')}
    try:
        header = image.repo.image(image.id)
    except exception.BlobCRError as e:
        LOG.warning('orphaned versions of %s not checked: %s', image.id, e)
        return
    for v in header.versions:
        if v.state == image_mod.PENDING and v.owner == before and \
                v.number not in known:
            mark_failed_quietly(image.repo, image.id, v.number,
                                'registered by an agent that stopped before '
                                'recording it (%s)' % before)
            LOG.warning('version %d of %s, registered by the agent before '
                        'this one and never recorded, is failed',
                        v.number, image.id)


def _fail_reserved(image, in_flight):
    """The version registered ahead for the next checkpoint (reserve.py)
    that no checkpoint took: failed at once rather than left pending
    until GC finds its writer gone. A checkpoint that took it recorded
    it in flight in the same metadata write that cleared ``reserved``;
    it is checked all the same.
    """
    number = image.meta.get('reserved')
    if number is None:
        return
    if number not in in_flight:
        mark_failed_quietly(image.repo, image.id, number,
                            'reserved for the next checkpoint by an agent '
                            'that stopped; unused')
        LOG.warning('version %d of %s, reserved for a checkpoint that never '
                    'came, is failed', number, image.id)
    with image._meta_lock:
        image.meta['reserved'] = None
        image._save_meta()


def _adopt(image, number, followers):
    """The oldest version in flight turned stable before the agent
    stopped, which the cache's metadata did not record yet: end its
    snapshot as stable (its chunks are clean) and build on it. The
    followers' chunks are dirty again.

    With followers, the crash may have come after the core ended the
    stable version's snapshot (snapshot_done before _persisted): the
    oldest parked snapshot is then the first follower's, which must not
    be ended as stable (its chunks would be clean, and missing from the
    next version). Every parked snapshot is given up instead: all their
    chunks are dirty again, the stable version's too if its snapshot
    had not ended (the next checkpoint writes them again; their content
    is deduplicated).
    """
    if followers:
        image.core.snapshot_done(False)
    else:
        image.core.resume()
        image.core.snapshot_done(True)
    previous = image.meta['last']
    image.versions[number] = image_mod.STABLE
    for follower in followers:
        image.versions[follower] = image_mod.FAILED
    image._record_in_flight([], last=number)
    if previous not in (None, number, image.attached_version):
        image.repo.unpin_quietly(image.id, previous, image.holder)
    LOG.warning('version %d of %s was persisted before the agent stopped: '
                'adopted%s', number, image.id,
                '; versions %s queued behind it are failed' % followers
                if followers else '')


def mark_failed_quietly(repo, image_id, number, why):
    """Mark a version failed unless GC already pruned it."""
    try:
        repo.mark_failed(image_id, number, why)
    except exception.VersionNotFound:
        pass


def give_up(image, versions, pending, why):
    """Fail ``versions`` (in flight at a crash; ``pending``, the oldest's
    Commit, if it was resumed) and make their chunks dirty again.
    """
    if pending is not None:
        pending.abort(why)
    image.core.snapshot_done(False)
    image._failed(versions, why)


def read_journal(path):
    """``{index: (digest or None, base or None)}`` of the chunks a
    journal lists (a base: the chunk is a delta over it).
    """
    taken = {}
    try:
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) not in (2, 3) or not line.endswith('\n'):
                    continue        # torn last line
                taken[int(parts[0])] = (
                    None if parts[1] == '-' else bytes.fromhex(parts[1]),
                    bytes.fromhex(parts[2]) if len(parts) == 3 else None)
    except FileNotFoundError:
        pass
    return taken


def _durable(repo, chunk_digest, since):
    """True if a chunk handed to the repository before a crash is there
    (content addressing: existing means complete and right) and was
    written since ``since``, the start of its version: an older object
    of the same content may be garbage GC is about to delete, which a
    pending version's cut-off does not protect. (RADOS mtimes are whole
    seconds: one second of slack, well inside GC's grace.)
    """
    if chunk_digest is None:
        return True
    # A packed delta (chunkpacks.py) is there once its pack is: a pack
    # is put whole.
    name = chunkpacks.pack_of(chunk_digest) \
        if chunkpacks.is_ref(chunk_digest) \
        else chunks.object_name(chunk_digest)
    try:
        _, mtime = repo.backend.stat(base.CHUNK, name)
    except exception.ObjectNotFound:
        return False
    return mtime >= since - 1


def _durable_link(repo, delta, over, since):
    """A delta is kept whole only with its link (GC keeps its base
    through it): the same test as :func:`_durable`, on the link. A
    packed delta's pack lists its base itself.
    """
    if chunkpacks.is_ref(delta):
        return True
    try:
        _, mtime = repo.backend.stat(base.CHUNK,
                                     deltas.link_name(delta, over))
    except exception.ObjectNotFound:
        return False
    return mtime >= since - 1
