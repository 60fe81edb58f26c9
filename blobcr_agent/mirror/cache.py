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

"""Whether a mirror cache can be trusted after a restart: host reboots.

A mirror cache (``<cache>/<image>/``) survives a crash or a restart of
the agent: its state files and mirror data live in the page cache, which
outlives the process. They are not synced at every guest write, so
after a host reboot (a power loss, a kernel panic, even a clean reboot
that raced the write-back) the state files may be torn.

What a power loss cannot tear is the flush record (``durable.bin``,
native/core_durable.c): every guest flush syncs the mirror data, then
records which chunks it holds. So the cache's metadata (``meta.json``,
synced at every change) records the kernel's boot id, and a cache from
another boot is recovered from its flush record (``recover``): every
write the guest flushed is kept, every recorded chunk is dirty (the next
checkpoint persists it), the others are read from the newest stable
version, and the versions that were in flight fail (their copies aside
were in memory) unless the repository has them stable. A cache whose
record is torn or missing is refused, never re-attached. The operator
drops it with ``blobcr-manage detach --discard IMAGE``, which checks
that the repository still has the image's last checkpoint (stable, or
obsoleted since but kept whole by this cache's pin: the image goes back
to it, or to its newest stable version if it was obsoleted) and removes
the cache and its pins (``drop_stale``).

A cache written by a release that recorded no boot id is trusted if its
metadata was written during the current boot (an agent upgrade without a
reboot), and treated as from another boot otherwise.
"""

import errno
import json
import logging
import os
import shutil

from blobcr_agent import _native
from blobcr_agent.mirror import persister
from blobcr_agent.mirror import taken
from blobcr_agent.repository import image as image_mod
from blobcr_common import exception

LOG = logging.getLogger(__name__)

BOOT_ID_PATH = '/proc/sys/kernel/random/boot_id'
META = 'meta.json'


class StaleCache(exception.BlobCRError):
    """A mirror cache written before the host rebooted: not trusted."""


def boot_id():
    """The kernel's id of the current boot (a UUID, new at each boot)."""
    with open(BOOT_ID_PATH) as f:
        return f.read().strip()


def boot_time():
    """When the current boot started (a UNIX time)."""
    with open('/proc/stat') as f:
        for line in f:
            if line.startswith('btime '):
                return int(line.split()[1])
    raise OSError('no btime in /proc/stat')


def incoming_source(cache_dir):
    """The host whose handoff a cache's image waits for (a live
    migration under way, handoff.py), or None.
    """
    try:
        with open(os.path.join(cache_dir, META)) as f:
            return json.load(f).get('incoming')
    except (OSError, ValueError):
        return None


def stamp(meta):
    """Record the current boot in new cache metadata; returns it."""
    meta['boot_id'] = boot_id()
    return meta


def other_boot(meta, cache_dir):
    """None if the cache (its metadata ``meta``) was written during the
    current boot, else why not. Metadata without a boot id (an older
    release) written during this boot is adopted: the current boot is
    recorded in ``meta``.
    """
    current = boot_id()
    recorded = meta.get('boot_id')
    if recorded == current:
        return None
    if recorded is None:
        written = os.stat(os.path.join(cache_dir, META)).st_mtime
        if written >= boot_time():
            LOG.info('mirror cache %s has no boot id (older release) and '
                     'was written during this boot: adopting it',
                     cache_dir)
            meta['boot_id'] = current
            return None
        return ('has no boot id (older release) and was last written '
                'before this boot started')
    return ('was written during another boot of this host (boot id %s, '
            'now %s)' % (recorded, current))


def check_boot(meta, cache_dir):
    """Return ``meta`` (cache metadata, or None for a new cache) if the
    cache was written during the current boot; raise StaleCache, saying
    what to do, if not.
    """
    why = other_boot(meta, cache_dir) if meta else None
    if why is not None:
        raise StaleCache(_refusal(meta, cache_dir, why))
    return meta


def check_epoch(meta, cache_dir, header):
    """Raise StaleCache, saying what to do, if the image was taken over
    by another host since this cache attached it (Repository.take_over:
    this host was given up as lost).
    """
    if meta.get('epoch', 0) == header.epoch:
        return
    raise StaleCache(
        'mirror cache %s of image %s is fenced: %s took the image over '
        '(epoch %d; this cache attached it in epoch %d), so it is not '
        're-attached and none of its writes since its last stable version '
        'is published. Drop it with "blobcr-manage detach --discard %s"'
        % (cache_dir, header.id, header.taken_over_by or 'another host',
           header.epoch, meta.get('epoch', 0), header.id))


def recover(repo, meta, cache_dir, header):
    """Return ``meta``, the cache's metadata, made right for the current
    boot: as it is if written during it, else rebuilt from the cache's
    flush record after a power loss (see the top of this module). Raises
    StaleCache, saying what to do, if the record is torn or missing.
    """
    why = other_boot(meta, cache_dir) if meta else None
    if why is None:
        return meta
    try:
        kept = _native.recover_power_loss(cache_dir, header.size,
                                          header.chunk_size)
    except OSError as e:
        what = ('torn (both of its slots)' if e.errno == errno.EBADMSG
                else 'unreadable (%s)' % e)
        raise StaleCache(_refusal(
            meta, cache_dir, '%s, and its flush record is %s' % (why, what)))
    # What was in flight: stable in the repository, or lost. So is the
    # version reserved: a checkpoint that took it records that without a
    # sync (taken.py), and only a version taken can have turned stable.
    # The slot, if it survived, says it was taken (in flight, not unused).
    taken.fold(meta, cache_dir, persister.in_flight(meta))
    last = meta.get('last')
    reserved = [meta['reserved']] if meta.get('reserved') is not None \
        else []
    for version in persister.in_flight(meta) + reserved:
        try:
            state = repo.image(meta['image']).version(version).state
        except exception.VersionNotFound:
            continue
        if state == image_mod.STABLE:
            last = version
    lost = fail_lost_versions(repo, meta, 'the host lost power while it '
                              'was being persisted', keep=last)
    try:
        os.unlink(os.path.join(cache_dir, persister.JOURNAL))
    except FileNotFoundError:
        pass
    # The chunks the record does not hold are read from the newest
    # stable version from now on: a write to one of them after the last
    # flush is in that version if it was checkpointed, and was never
    # flushed otherwise (a subset of unflushed writes survives, as on a
    # disk). The record's chunks are dirty, so the next version is the
    # image as read.
    for number in {meta.get('attached'), meta.get('last')} - {None, last}:
        repo.unpin_quietly(meta['image'], number, os.path.abspath(cache_dir))
    meta.update(boot_id=boot_id(), attached=last, last=last,
                persisting=None, following=[], reserved=None)
    LOG.warning('mirror cache %s of image %s %s: recovered from its flush '
                'record (%d chunks kept, every flushed write; each is '
                'persisted again by the next checkpoint)%s', cache_dir,
                meta['image'], why, kept,
                '; versions %s, in flight at the power loss, failed'
                % ', '.join(map(str, lost)) if lost else '')
    return meta


def fail_lost_versions(repo, meta, why, keep=None):
    """Mark failed the versions a cache had in flight or reserved when
    the host went down (all but ``keep``); returns those in flight.
    """
    lost = [v for v in persister.in_flight(meta) if v != keep]
    reserved = meta.get('reserved')
    for version in lost + ([reserved] if reserved is not None and
                           reserved not in lost and reserved != keep
                           else []):
        try:
            repo.mark_failed(meta['image'], version,
                             why if version in lost else
                             'reserved for the next checkpoint before the '
                             'host went down; unused')
        except exception.VersionNotFound:
            pass                        # failed and pruned by GC
    return lost


def _refusal(meta, cache_dir, why):
    image = meta['image']
    if meta.get('last') is None:
        back = ('the image goes back to %s'
                % ('version %d' % meta['attached']
                   if meta.get('attached') is not None else 'blank'))
    else:
        back = 'the image goes back to its checkpoint %d' % meta['last']
    pending = ''
    in_flight = persister.in_flight(meta)
    if in_flight:
        pending = ('; %s, being persisted at the reboot, marked failed'
                   % ', '.join('version %d' % v for v in in_flight))
    return ('mirror cache %s of image %s %s: its state cannot be trusted '
            'after a reboot and the image is not re-attached. Drop the '
            'cache with "blobcr-manage detach --discard %s" (%s%s; writes '
            'made after it on the old boot are lost), then attach the '
            'image again'
            % (cache_dir, image, why, image, back, pending))


def load_meta(cache_dir):
    """The metadata of the cache at ``cache_dir``, or None."""
    path = os.path.join(cache_dir, META)
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except ValueError as e:
        raise exception.CorruptObject('mirror', path, str(e))


def drop_stale(repo, cache_dir, image_id, discard):
    """Remove the stale cache of ``image_id`` (not attached) at
    ``cache_dir``, only with ``discard`` and only if it is stale and the
    repository still has the last version it made stable (obsolete
    counts: the cache's pin kept it whole); release the cache's pins.
    Returns what was done; raises InvalidInput (nothing done) otherwise.
    """
    meta = load_meta(cache_dir)
    if not meta or meta.get('image') != image_id:
        raise exception.InvalidInput('image %s is not attached here'
                                     % image_id)
    header = repo.image(image_id)
    fenced = meta.get('epoch', 0) != header.epoch
    try:
        check_boot(dict(meta), cache_dir)
        check_epoch(meta, cache_dir, header)
    except StaleCache as e:
        stale = str(e)
    else:
        raise exception.InvalidInput(
            'image %s is not attached here, but its mirror cache %s is from '
            'this boot: attach the image again to serve it (detach then '
            'works as usual)' % (image_id, cache_dir))
    if not discard:
        raise exception.InvalidInput(stale)
    last = meta.get('last')
    if last is not None and not fenced:
        try:
            state = header.version(last).state
        except exception.VersionNotFound:
            state = 'gone'
        # The refusal keeps the only trace of a version the repository
        # lacks. An obsolete one (a retention policy's, while this cache
        # pinned it as its last checkpoint) is still there, whole.
        if state not in (image_mod.STABLE, image_mod.OBSOLETE):
            raise exception.InvalidInput(
                'version %d of image %s, the last checkpoint the stale '
                'cache %s made, is %s in the repository: not dropping the '
                'cache (it is not trustworthy, but the only trace of that '
                'version); copy it aside if needed and remove it by hand'
                % (last, image_id, cache_dir, state))
    in_flight = fail_lost_versions(repo, meta, 'the host rebooted while '
                                   'it was being persisted')
    shutil.rmtree(cache_dir)
    # As a detach: what the mirror read from and built on is free again
    # (an obsolete last checkpoint can now be collected).
    holder = os.path.abspath(cache_dir)
    for number in {meta.get('attached'), last} - {None}:
        repo.unpin_quietly(image_id, number, holder)
    LOG.warning('dropped the stale mirror cache %s of image %s (it goes '
                'back to version %s)', cache_dir, image_id,
                last if last is not None else meta.get('attached'))
    return {'image': image_id, 'stale_cache_dropped': cache_dir,
            'discarded_chunks': None, 'last_version': last,
            'failed_version': in_flight[0] if in_flight else None,
            'failed_versions': in_flight}
