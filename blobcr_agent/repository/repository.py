"""The versioned chunk repository: images, versions, COMMIT and CLONE.

An image is a versioned BLOB of fixed size cut into fixed-size chunks.
COMMIT writes the given chunks, then the path-copied tree nodes, and only
then turns the new version stable with one compare-and-set of the image
header: a crash at any earlier point leaves a pending version (later
declared failed) and unreachable objects that garbage collection reclaims.
CLONE writes one header whose first version shares the source's root.

PIN keeps a version's objects for a reader on this host (a mirror reads
the chunks its guest has not written from the version it was attached
at): GC treats pinned versions as live even once they are obsolete.
Obsoleting a pinned version is deferred: it is obsolete at once for
everyone else (no clone, export or new COMMIT from it), and its objects
are freed by the first GC after the last pin is released.
"""

import array
import errno
import hashlib
import logging
import os
import random
import socket
import tempfile
import threading
import time
import uuid
import zlib

from blobcr_agent import _native
from blobcr_agent import crashpoint
from blobcr_agent import exception
from blobcr_agent.repository import backends
from blobcr_agent.repository.backends import base
from blobcr_agent.repository import chunks
from blobcr_agent.repository import image as image_mod
from blobcr_agent.repository import tree

LOG = logging.getLogger(__name__)

MIN_CHUNK_SIZE = 512
HEARTBEAT_SECONDS = 30
_CAS_TRIES = 100
_UPLOAD_SMOOTHING = 0.3


def process_identity(pid=None):
    """``host:pid:start-time``, unique even when PIDs are reused."""
    pid = pid or os.getpid()
    return '%s:%d:%s' % (socket.gethostname(), pid, _start_time(pid))


def _start_time(pid):
    try:
        with open('/proc/%d/stat' % pid) as f:
            # Field 22, counted after the parenthesised command name.
            return f.read().rsplit(')', 1)[1].split()[19]
    except (OSError, IndexError):
        return '?'


def boot_id():
    """The kernel's id of the current boot, or None if unknown."""
    try:
        with open('/proc/sys/kernel/random/boot_id') as f:
            return f.read().strip() or None
    except OSError:
        return None


def fs_view():
    """Which file system tree this process sees (its mount namespace and
    root), so that a path recorded by one process is only checked by
    another that sees the same files; None if unknown.
    """
    try:
        ns = os.stat('/proc/self/ns/mnt')
        root = os.stat('/')
    except OSError:
        return None
    return '%d:%d/%d:%d' % (ns.st_dev, ns.st_ino, root.st_dev, root.st_ino)


def pin_record(holder):
    """A pin held by ``holder`` (a path, e.g. a mirror's cache directory)
    on this host, in this boot.
    """
    if not isinstance(holder, str) or not holder:
        raise exception.InvalidInput('a pin needs a holder')
    return {'host': socket.gethostname(), 'holder': holder,
            'boot': boot_id(), 'fs': fs_view(), 'at': time.time()}


def _same_pin(pin, host, holder):
    return pin.get('host') == host and pin.get('holder') == holder


def owner_is_gone(owner):
    """True if ``owner`` was a process of this host that no longer runs."""
    try:
        host, pid, started = owner.rsplit(':', 2)
        pid = int(pid)
    except ValueError:
        return False
    if host != socket.gethostname():
        return False
    return _start_time(pid) != started


class Repository(object):

    def __init__(self, backend, chunk_size=256 * 1024, fanout=64,
                 compression='auto', compression_level=1,
                 pack_max_bytes=1 << 20, node_cache_bytes=64 << 20,
                 pending_timeout=3600, gc_grace=60):
        self.backend = backend
        self.chunk_size = chunk_size
        self.fanout = fanout
        self.pack_max_bytes = pack_max_bytes
        self.pending_timeout = pending_timeout
        self.gc_grace = gc_grace
        self.nodes = tree.NodeStore(backend, node_cache_bytes)
        self.policy = chunks.CompressionPolicy(compression,
                                               compression_level)
        self.owner = process_identity()
        self.upload_bps = None
        # Versions this process gave up but could not mark failed (the
        # backend refused the header write): retried later.
        self._unmarked = {}
        self._unmarked_lock = threading.Lock()

    @classmethod
    def from_conf(cls, conf, backend=None):
        r = conf.repository
        return cls(backend or backends.from_conf(conf),
                   chunk_size=r.chunk_size, fanout=r.tree_fanout,
                   compression=r.compression,
                   compression_level=r.compression_level,
                   pack_max_bytes=r.pack_max_bytes,
                   node_cache_bytes=r.node_cache_mb << 20,
                   pending_timeout=r.pending_timeout, gc_grace=r.gc_grace)

    def close(self):
        self.backend.close()

    # -- headers -------------------------------------------------------

    def _read(self, image_id):
        if '.' in image_id:
            raise exception.ImageNotFound(image_id)     # not an image id
        found = self.backend.read_header(image_id)
        if found is None:
            raise exception.ImageNotFound(image_id)
        data, token = found
        return image_mod.ImageHeader.from_bytes(data, image_id), token

    def update_header(self, image_id, mutate):
        """Apply ``mutate(header)`` by compare-and-set, retrying races.

        ``mutate`` may raise to refuse; it is re-run on a fresh header
        after every lost race, so it must not have other side effects.
        """
        def decode(data):
            if data is None:
                raise exception.ImageNotFound(image_id)
            return image_mod.ImageHeader.from_bytes(data, image_id)
        return self.update_record(image_id, decode, mutate,
                                  'header of image %s' % image_id)

    def label(self, ref, number, made_by):
        """Record who made version ``number`` (Version.made_by)."""
        def mutate(header):
            header.version(number).made_by = made_by
        self.update_header(self.image(ref).id, mutate)

    def update_record(self, name, decode, mutate, what):
        """Compare-and-set of any record kept beside the image headers
        (a name with a dot is never an image): ``decode(bytes or None)``
        gives an object with ``to_bytes()``, ``mutate`` changes it (see
        update_header). Returns ``(object, mutate's result)``.
        """
        for attempt in range(_CAS_TRIES):
            found = self.backend.read_header(name)
            data, token = found if found is not None else (None, None)
            record = decode(data)
            result = mutate(record)
            try:
                self.backend.write_header(name, record.to_bytes(), token)
                crashpoint.reached('header')
                return record, result
            except exception.Conflict:
                time.sleep(random.uniform(0, 0.002 * (attempt + 1)))
        raise exception.Conflict('%s keeps changing; gave up after %d tries'
                                 % (what, _CAS_TRIES))

    def image(self, ref):
        """The header of an image named by id or by (unique) name."""
        if not isinstance(ref, str) or not ref:
            raise exception.InvalidInput('an image id or name is needed')
        try:
            header, _ = self._read(ref)
            if not header.deleted:
                return header
        except (exception.ImageNotFound, exception.InvalidInput):
            pass
        matches = [h for h in self.images() if h.name == ref]
        if not matches:
            raise exception.ImageNotFound(ref)
        if len(matches) > 1:
            raise exception.AmbiguousImage(ref, [h.id for h in matches])
        return matches[0]

    def images(self, include_deleted=False):
        result = []
        for image_id in self.backend.list_headers():
            if '.' in image_id:
                continue        # a record beside the images (groups.py)
            try:
                header, _ = self._read(image_id)
            except exception.ImageNotFound:
                continue  # deleted while we listed
            if include_deleted or not header.deleted:
                result.append(header)
        return sorted(result, key=lambda h: (h.created, h.id))

    # -- images ----------------------------------------------------------

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
        """Mark every version obsolete and hide the image; GC frees it."""
        image_id = self.image(ref).id

        def mutate(header):
            if any(v.state == image_mod.PENDING for v in header.versions):
                raise exception.InvalidInput(
                    'image %s has a version being written' % image_id)
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
        for _ in range(_CAS_TRIES):
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

    # -- versions --------------------------------------------------------

    def begin_commit(self, ref, parent=None, after=None, made_by=''):
        """Register a pending version and return its :class:`Commit`.

        The new version is ``parent`` (default: the newest stable
        version) plus the chunks put into the commit. With ``after``, a
        version of the image still pending (pipelined checkpoints), the
        new version follows it instead: its tree is built on that one's
        when it finishes, and it fails if that one does not become
        stable first. ``made_by`` labels it (Version.made_by).
        """
        image_id = self.image(ref).id
        self.retry_failed_marks()
        now = time.time()

        def mutate(header):
            if header.deleted:
                raise exception.ImageNotFound(image_id)
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
                made_by=made_by))
            return number, base_version

        header, (number, base_version) = self.update_header(image_id, mutate)
        if base_version is not None and \
                base_version.state == image_mod.PENDING:
            return Commit(self, header, number, None,
                          after=base_version.number)
        return Commit(self, header, number,
                      base_version.root_ref if base_version else None)

    def resume_commit(self, ref, number):
        """Adopt pending version ``number`` left by a writer that died,
        to finish it; raises CommitAborted if it is no longer pending.
        """
        image_id = self.image(ref).id
        now = time.time()

        def adopt(header):
            v = header.version(number)
            if v.state != image_mod.PENDING:
                raise exception.CommitAborted(
                    'version %d of %s is %s, it cannot be resumed'
                    % (number, image_id, v.state))
            v.owner, v.heartbeat = self.owner, now
            return header.version(v.parent) if v.parent else None

        header, parent = self.update_header(image_id, adopt)
        if parent is not None and parent.state == image_mod.PENDING:
            return Commit(self, header, number, None, after=parent.number)
        return Commit(self, header, number,
                      parent.root_ref if parent else None)

    def save_profile(self, ref, number, order):
        """Store the order in which chunks of version ``number`` were
        first read after an attach; restarts from it prefetch that way.
        """
        image_id = self.image(ref).id
        blob = zlib.compress(array.array('I', order).tobytes())
        name = hashlib.sha256(blob).hexdigest()
        batch = self.backend.batch()
        batch.put(base.CHUNK, name, blob)
        batch.wait()

        def mutate(header):
            header.version(number).profile = name
        self.update_header(image_id, mutate)
        return name

    def load_profile(self, header, number):
        """The read order recorded for a version, or for the version it
        was cloned from; [] if none.
        """
        v = header.version(number)
        if not v.profile and number == 1 and header.origin:
            try:
                source = self.image(header.origin['image'])
                return self.load_profile(source, header.origin['version'])
            except exception.BlobCRError:
                return []
        if not v.profile:
            return []
        blob = self.backend.get(base.CHUNK, v.profile)
        if hashlib.sha256(blob).hexdigest() != v.profile:
            raise exception.CorruptObject(base.CHUNK, v.profile,
                                          'profile does not match its hash')
        order = array.array('I')
        order.frombytes(zlib.decompress(blob))
        return [i for i in order if i < header.nchunks]

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

    def obsolete(self, ref, numbers):
        """Mark versions obsolete; GC then frees what nothing else uses.

        A pinned version is obsolete at once too, but GC keeps its
        objects until its last pin is released (its reader, a mirror,
        detaches). Returns the numbers of those pinned versions.
        """
        image_id = self.image(ref).id

        def mutate(header):
            pinned = []
            for number in numbers:
                v = header.version(number)
                if v.state == image_mod.PENDING:
                    raise exception.InvalidInput(
                        'version %d of %s is still being written'
                        % (number, image_id))
                v.state = image_mod.OBSOLETE
                if v.pins:
                    pinned.append(v.number)
            return pinned
        _, pinned = self.update_header(image_id, mutate)
        if pinned:
            LOG.info('versions %s of %s are obsolete; pinned, they are '
                     'freed once released', pinned, image_id)
        return pinned

    # -- pins --------------------------------------------------------------

    def pin(self, ref, number, holder):
        """Keep version ``number`` (None: the newest stable one) of an
        image whole for ``holder`` on this host, until :meth:`unpin`;
        return its number. Pinning again is harmless (it refreshes the
        pin), and works on a version obsoleted meanwhile: its objects
        were kept. A version that is not stable and not pinned by this
        holder is refused (VersionNotStable).
        """
        image_id = self.image(ref).id
        mine = pin_record(holder)

        def mutate(header):
            if header.deleted:
                raise exception.ImageNotFound(image_id)
            v = (header.version(number) if number is not None
                 else header.stable_version())
            for p in v.pins:
                if _same_pin(p, mine['host'], holder):
                    p.update(mine)
                    return v.number
            if v.state != image_mod.STABLE:
                raise exception.VersionNotStable(image_id, v.number, v.state)
            v.pins.append(mine)
            return v.number
        return self.update_header(image_id, mutate)[1]

    def unpin(self, image_id, number, holder, host=None):
        """Release the pins of ``holder`` (on ``host``, default this one)
        on version ``number``; return how many were released. Nothing
        to release (no such pin, version or image) is not an error.
        """
        host = host or socket.gethostname()

        def mutate(header):
            try:
                v = header.version(number)
            except exception.VersionNotFound:
                return 0
            kept = [p for p in v.pins if not _same_pin(p, host, holder)]
            released = len(v.pins) - len(kept)
            v.pins = kept
            return released
        try:
            if not any(_same_pin(p, host, holder)
                       for p in self._pins_of(image_id, number)):
                return 0
            released = self.update_header(image_id, mutate)[1]
        except exception.ImageNotFound:
            return 0
        if released:
            LOG.info('released the pin of %s on version %d of %s',
                     holder, number, image_id)
        return released

    def unpin_quietly(self, image_id, number, holder):
        """:meth:`unpin` for clean-up paths (a mirror's detach, after its
        cache is gone): never raises; GC releases the pins of this host
        whose holder path is gone, should this fail.
        """
        if number is None:
            return 0
        try:
            return self.unpin(image_id, number, holder)
        except exception.BlobCRError as e:
            LOG.warning('could not release the pin of %s on version %d of '
                        '%s (gc will, as %s is gone): %s', holder, number,
                        image_id, holder, e)
            return 0

    def _pins_of(self, image_id, number):
        header, _ = self._read(image_id)
        try:
            return header.version(number).pins
        except exception.VersionNotFound:
            return []

    def pins(self, host=None):
        """Every pin (of ``host`` only, if given), as dicts with the
        image, the version and its state.
        """
        found = []
        for header in self.images(include_deleted=True):
            for v in header.versions:
                for p in v.pins:
                    if host is None or p.get('host') == host:
                        found.append(dict(p, image=header.id,
                                          version=v.number, state=v.state))
        return found

    def release_pins(self, host, image=None, holder=None):
        """Release every pin of ``host`` (of one image, one holder): for
        an operator, when a host is gone for good. Its mirrors must not
        be serving any more: what they have not fetched yet may be freed
        by the next GC. Returns the pins released.
        """
        if not host:
            raise exception.InvalidInput('release_pins needs a host')
        released = []
        for found in self.pins(host):
            if image is not None and found['image'] != image:
                continue
            if holder is not None and found['holder'] != holder:
                continue
            if self.unpin(found['image'], found['version'],
                          found['holder'], host):
                released.append(found)
        return released

    def mark_failed(self, image_id, number, reason):
        """Turn a pending version failed (idempotent; stable stays)."""
        def mutate(header):
            v = header.version(number)
            if v.state == image_mod.PENDING:
                v.state = image_mod.FAILED
                v.error = reason[:500]
                return True
            return False
        return self.update_header(image_id, mutate)[1]

    def remember_unmarked(self, image_id, number, reason):
        """A version this process gave up but could not mark failed:
        :meth:`retry_failed_marks` tries again (GC also marks it failed
        once its writer is gone or silent for ``pending_timeout``).
        """
        with self._unmarked_lock:
            self._unmarked[(image_id, number)] = reason

    def retry_failed_marks(self):
        """Mark failed the versions :meth:`remember_unmarked` holds;
        never raises. Returns how many were marked.
        """
        with self._unmarked_lock:
            todo = list(self._unmarked.items())
        marked = 0
        for (image_id, number), reason in todo:
            try:
                marked += bool(self.mark_failed(image_id, number, reason))
            except (exception.ImageNotFound, exception.VersionNotFound):
                pass
            except Exception as e:
                LOG.debug('version %d of %s still not marked failed: %s',
                          number, image_id, e)
                continue
            with self._unmarked_lock:
                self._unmarked.pop((image_id, number), None)
        return marked

    # -- reading ---------------------------------------------------------

    def version_tree(self, header, number=None, pinned=False):
        """``(tree, root)`` of a stable version (with ``pinned``, also of
        an obsolete version that is still pinned).
        """
        if pinned and number is not None:
            v = header.readable_version(number)
        else:
            v = header.stable_version(number)
        return header.tree(self.nodes), v.root_ref

    def read_chunk(self, header, number, index, pinned=False):
        t, root = self.version_tree(header, number, pinned)
        length = header.chunk_len(index)
        d = t.lookup(root, index)
        if d is None:
            return bytes(length)
        name = chunks.object_name(d)
        return chunks.decode(name, self.backend.get(base.CHUNK, name),
                             length)

    def read(self, ref, number, offset, length, pinned=False):
        """Bytes ``[offset, offset+length)`` of a stable version (with
        ``pinned``, also of an obsolete one still pinned: version_tree).
        """
        header = self.image(ref)
        if offset < 0 or length < 0 or offset + length > header.size:
            raise exception.InvalidInput(
                'range %d+%d is outside the %d-byte image'
                % (offset, length, header.size))
        out = bytearray()
        cs = header.chunk_size
        for index in range(offset // cs, (offset + length + cs - 1) // cs):
            data = self.read_chunk(header, number, index, pinned)
            lo = max(offset - index * cs, 0)
            hi = min(offset + length - index * cs, len(data))
            out += data[lo:hi]
        return bytes(out)

    def fetch(self, header, number, indices=None):
        """Yield ``(index, data)`` of the stored chunks of a version (all,
        or those in ``indices``), many reads in flight; all-zero chunks
        are not yielded. Raises on a missing or corrupt chunk. A pinned
        version is read even once obsolete: its pin holder (a mirror
        attached from it) still reads it.
        """
        t, root = self.version_tree(header, number, pinned=True)
        if indices is None:
            found = t.items(root)
        else:
            # A few chunks of a big image: look them up, do not walk it.
            found = ((i, t.lookup(root, i)) for i in sorted(indices))
        by_name = {}
        for index, d in found:
            if d is not None:
                by_name.setdefault(chunks.object_name(d), []).append(index)
        max_size = header.chunk_size + 1
        for name, blob in self.backend.get_many(base.CHUNK, list(by_name),
                                                max_size):
            if isinstance(blob, Exception):
                raise blob
            first = by_name[name][0]
            data = chunks.decode(name, blob, header.chunk_len(first))
            for index in by_name[name]:
                yield index, data

    def stored_chunks(self, header, number):
        t, root = self.version_tree(header, number)
        return sum(1 for _ in t.items(root))

    def export(self, ref, number, path, progress=None, overwrite=False):
        """Write a stable version to ``path`` as a sparse raw image.

        The data goes to a new file next to ``path`` (created with
        O_EXCL: a symlink planted there is never followed), is fsynced
        and then renamed to ``path``. An existing ``path`` (a symlink
        included) is refused unless ``overwrite``, which replaces it
        (the symlink itself, not what it points to).
        """
        header = self.image(ref)
        path = os.path.abspath(path)
        if not overwrite and os.path.lexists(path):
            raise exception.InvalidInput(
                '%s exists; export with overwrite to replace it' % path)
        total = self.stored_chunks(header, number)
        directory, name = os.path.split(path)
        try:
            fd, tmp = tempfile.mkstemp(prefix='.%s.' % name[:200],
                                       suffix='.part', dir=directory)
        except OSError as e:
            raise exception.InvalidInput('cannot write to %s: %s'
                                         % (directory, e))
        if progress:
            progress.start(total * header.chunk_size)
        try:
            try:
                os.fchmod(fd, 0o644 & ~_umask())
                os.ftruncate(fd, header.size)
                for index, data in self.fetch(header, number):
                    os.pwrite(fd, data, index * header.chunk_size)
                    if progress:
                        progress.advance(len(data))
                os.fsync(fd)
                os.close(fd)
                fd = None
                _publish(tmp, path, overwrite)
            except OSError as e:
                raise exception.BlobCRError('cannot write %s: %s'
                                            % (path, e))
            _fsync_dir(directory)
        except BaseException:
            if fd is not None:
                os.close(fd)
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise
        finally:
            if progress:
                progress.finish()
        return header.stable_version(number).number

    def import_file(self, path, name, chunk_size=None, fanout=None,
                    progress=None):
        """Import a raw file as version 1 of a new image."""
        size = _file_size(path)
        header = self.create_image(name, size, chunk_size, fanout)
        number = self.write_file(header.id, path, progress=progress)
        return self.image(header.id), number

    def write_file(self, ref, path, progress=None, made_by=''):
        """A new version of an image whose content is the raw file
        ``path`` (no larger than the image; the rest reads as zeros).
        Only chunks that differ from the newest stable version's are
        written: a file read back from the image costs no chunk.
        ``made_by`` labels the version (Version.made_by).
        """
        header = self.image(ref)
        size = _file_size(path)
        if size > header.size:
            raise exception.InvalidInput(
                '%s has %d bytes, more than the %d of image %s'
                % (path, size, header.size, header.id))
        cs = header.chunk_size
        block = max(cs, (16 << 20) // cs * cs)
        pending = self.begin_commit(header.id, made_by=made_by)
        base = {}
        if pending._base_root is not None:
            base = dict(header.tree(self.nodes).items(pending._base_root))
        if progress:
            progress.start(header.size)
        try:
            with open(path, 'rb') as f:
                offset = 0
                while offset < size:
                    buf = f.read(block)
                    if not buf:
                        raise exception.InvalidInput(
                            '%s shrank while it was read' % path)
                    if len(buf) % cs and offset + len(buf) < header.size:
                        # The file's tail: the image goes on with zeros.
                        buf += bytes(min(header.size - offset - len(buf),
                                         cs - len(buf) % cs))
                    zero = _native.zero_map(buf, cs)
                    view = memoryview(buf)
                    for k, is_zero in enumerate(zero):
                        index = offset // cs + k
                        data = bytes(view[k * cs:(k + 1) * cs])
                        if is_zero:
                            if index in base:
                                pending.put_digest(index, None)
                        elif chunks.digest(data) != base.get(index):
                            pending.put(index, data)
                    offset += len(buf)
                    if progress:
                        progress.advance(len(buf))
            # Past the file's end the image is zeros.
            for index in base:
                if index * cs >= offset:
                    pending.put_digest(index, None)
            number = pending.finish()
        except BaseException as e:
            pending.abort('writing %s failed: %s' % (path, e))
            raise
        finally:
            if progress:
                progress.finish()
        return number

    # -- measurement -----------------------------------------------------

    def record_upload(self, bps):
        if bps:
            self.upload_bps = bps if self.upload_bps is None else (
                self.upload_bps + _UPLOAD_SMOOTHING * (bps - self.upload_bps))


class Commit(object):
    """A pending version being written (COMMIT in progress).

    ``put`` may be called from several threads; ``finish`` makes the
    version stable, ``abort`` makes it failed. ``after``: the pending
    version this one follows, whose tree is the base, read at finish.
    """

    def __init__(self, repo, header, number, base_root, after=None):
        self.repo = repo
        self.header = header
        self.version = number
        self.image_id = header.id
        self._base_root = base_root
        self.after = after
        self._changes = {}
        self._batch = repo.backend.batch()
        self._heartbeat = time.monotonic()
        self._stored = 0

    def put(self, index, data):
        """Write chunk ``index``; return its digest (None: all zero)."""
        expected = self.header.chunk_len(index)
        if len(data) != expected:
            raise exception.InvalidInput(
                'chunk %d of image %s must be %d bytes, got %d'
                % (index, self.image_id, expected, len(data)))
        if _native.is_zero(data):
            d = None
        else:
            d = chunks.digest(data)
            blob = self.repo.policy.encode(
                data, self._batch.rate() or self.repo.upload_bps)
            self._batch.put(base.CHUNK, chunks.object_name(d), blob)
        self._changes[index] = d
        if time.monotonic() - self._heartbeat > HEARTBEAT_SECONDS:
            self._beat()
        return d

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

    def finish(self, pin=None):
        """Make every chunk and node durable, then the version stable;
        pinned for ``pin`` (a holder) in the same header update, so that
        it cannot be obsoleted and collected unpinned in between.
        """
        base_root = self._resolve_base()
        self._batch.wait()
        self.repo.record_upload(self._batch.rate())
        t = self.header.tree(self.repo.nodes)
        nodes = self.repo.backend.batch()
        writer = tree.PackWriter(self.repo.nodes, self.repo.pack_max_bytes,
                                 nodes)
        root = t.update(base_root, self._changes, writer)
        writer.close()
        nodes.wait()
        stored = self._batch.bytes + nodes.bytes

        def mutate(header):
            v = header.version(self.version)
            if v.state != image_mod.PENDING:
                raise exception.CommitAborted(
                    'version %d of %s was marked %s before it became stable'
                    % (self.version, self.image_id, v.state))
            v.state = image_mod.STABLE
            v.seq = header.next_seq()
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


def _file_size(path):
    try:
        size = os.stat(path).st_size
    except OSError as e:
        raise exception.InvalidInput('cannot read %s: %s' % (path, e))
    if size == 0:
        raise exception.InvalidInput('%s is empty' % path)
    return size


class _Retry(Exception):
    """The header changed under an update that must be recomputed."""


def _describe_pins(v):
    return ', '.join('%s:%s' % (p.get('host'), p.get('holder'))
                     for p in v.pins)


def _umask():
    """The process umask, read without changing it (Linux), else 022."""
    try:
        with open('/proc/self/status') as f:
            for line in f:
                if line.startswith('Umask:'):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def _publish(tmp, path, overwrite):
    """Rename the finished ``tmp`` to ``path``; without ``overwrite``,
    atomically refuse an existing ``path`` (a hard link fails if it
    exists, a rename would not).
    """
    if overwrite:
        os.replace(tmp, path)
        return
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise exception.InvalidInput(
            '%s exists; export with overwrite to replace it' % path)
    except OSError as e:
        if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP,
                           errno.EMLINK):
            raise
        # No hard links on this file system: check, then rename.
        if os.path.lexists(path):
            raise exception.InvalidInput(
                '%s exists; export with overwrite to replace it' % path)
        os.replace(tmp, path)
        return
    os.unlink(tmp)


def _fsync_dir(directory):
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
