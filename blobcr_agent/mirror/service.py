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

"""The mirror service: attached images, the FUSE mount, the control socket.

One process per host owns the mount and every attached image (the
agent, later). Control requests arrive as JSON lines on a root-only UNIX
socket; each gets one JSON line back: ``{"ok": true, "result": ...}`` or
``{"ok": false, "error": "message"}``.

Operations: attach, detach, checkpoint, state, wait_stable, stats,
timing, save_profile, list.
"""

import errno
import logging
import os
import shutil
import socket
import subprocess
import threading
import time

import pyfuse3
import trio

from blobcr_agent import control
from blobcr_agent import crashpoint
from blobcr_agent.mirror import cache
from blobcr_agent.mirror import connection
from blobcr_agent.mirror import fs
from blobcr_agent.mirror import handoff
from blobcr_agent.mirror import hints
from blobcr_agent.mirror import image as image_mod
from blobcr_agent.mirror import restarts
from blobcr_agent.privileged import fuse
from blobcr_common import exception

LOG = logging.getLogger(__name__)
# Seconds before mounting versions/ again after its loop ended, doubling
# up to the maximum while mounting fails.
REMOUNT_DELAY = 1.0
REMOUNT_DELAY_MAX = 60.0


# What a cache directory is renamed to before it is removed.
REMOVED = '.removed'


def _remove_tree(path):
    """Remove a cache directory: renamed first, so that it is gone at
    once as a pin holder (a kill during the removal leaves no half
    cache under the image's name; recover() finishes it).
    """
    gone = path + REMOVED
    try:
        os.rename(path, gone)
    except FileNotFoundError:
        return
    except OSError:
        gone = path
    shutil.rmtree(gone, ignore_errors=True)


class MirrorService(object):

    def __init__(self, repo, mountpoint, cache_dir, mode='selective-cow',
                 cow_chunks=64, adaptive=True, io_loop='native',
                 busy_timeout=120, readahead_chunks=64,
                 delta_tracking_mb=64, restart_hints=True, cow_spill_mb=0,
                 upload_ahead=0.0, durability='', flush_timeout=0.0,
                 cache_reserve_mb=64):
        self.repo = repo
        self.mountpoint = os.path.abspath(mountpoint)
        self.cache_dir = os.path.abspath(cache_dir)
        self.mode = mode
        self.cow_chunks = cow_chunks
        self.cow_spill_mb = cow_spill_mb
        self.cache_reserve_mb = cache_reserve_mb
        self.readahead_chunks = readahead_chunks
        self.delta_tracking_mb = delta_tracking_mb
        self.upload_ahead = upload_ahead
        # A volume's durability when its attach does not say (flushlog.py).
        self.durability = durability or (
            'cluster' if repo.backend.supports_write_log else 'host')
        self.flush_timeout = flush_timeout
        # Images restarting from one group checkpoint share what their
        # guests read (hints.py); the manager connects it to other hosts.
        self.hints = hints.HintHub() if restart_hints else None
        self.adaptive = adaptive
        self.attached = {}
        self.io_loop = io_loop
        self.native_loop = None
        self.started_ns = time.time_ns()
        # On close, how long to wait for a persist (None: until done);
        # one still running is left to resume from its journal.
        self.close_timeout = None
        # How long a checkpoint waits for the image's previous persist.
        self.busy_timeout = busy_timeout
        self._lock = threading.Lock()
        # Set by unmount(): a FUSE loop that ends then is not remounted.
        self._stopping = threading.Event()
        # ask(source, image_id, wait, timeout) -> the source's handoff
        # answer (the manager sets it; handoff.py): what incoming images
        # (attached for a live migration) wait for.
        self.handoff_asker = None
        # (source, image): tells the source a migration began (its early
        # checkpoint, manager/handoff.py prepare_handoff); may be None.
        self.handoff_preparer = None
        self.handoff_timeout = 120.0
        # image id -> the host it was handed off to (manager.handoff),
        # until it is attached here again: no other host gets it.
        self.handed_off = {}
        # image id -> AttachedImage whose detach waits for its persists
        # (detach(background=True)): off the mount, not attached. An
        # attach of it waits that long for the detach to end.
        self.detaching = {}
        self.busy_detach_timeout = 45.0
        os.makedirs(self.cache_dir, mode=0o700, exist_ok=True)
        # images/'s FUSE connection, kept across restarts (connection.py).
        self.kept = connection.KeptConnection(
            os.path.join(self.mountpoint, 'images'), self.cache_dir)
        # Set by hand_over(): run() ends, the connection stays.
        self._handing_over = False

    # -- operations ----------------------------------------------------

    def path_of(self, image_id):
        return os.path.join(self.mountpoint, 'images', image_id)

    def cached(self, image_id):
        """Whether this host holds a mirror cache of the image (attached,
        or not re-attached at a restart: see recover()).
        """
        return os.path.exists(os.path.join(self.cache_dir, image_id,
                                           cache.META))

    def claim_connection(self, stored):
        """At start, before recover(): take over images/'s connection if
        the service manager kept it (``stored``: sdnotify.listen_fds()).
        True if so: guests' open files go on working.
        """
        if self.io_loop != 'native':
            return False
        return self.kept.claim(stored)

    def recover(self):
        """Re-attach every image mirrored here before a restart; this
        resumes (or fails) the persists that were in flight. An image
        that fails to re-attach keeps its cache (its writes since the
        last checkpoint are only there): attaching it again retries.
        """
        for image_id in sorted(os.listdir(self.cache_dir)):
            if image_id.startswith('.'):
                continue                # connection.SESSION, not an image
            if image_id.endswith(REMOVED):
                # A removal a kill cut short (_remove_tree).
                shutil.rmtree(os.path.join(self.cache_dir, image_id),
                              ignore_errors=True)
            elif self.cached(image_id):
                try:
                    self.attach(image_id)
                    if self.attached[image_id].meta.get('detaching'):
                        LOG.info('%s was being detached: resuming', image_id)
                        self.detach(image_id, background=True)
                except cache.StaleCache as e:
                    LOG.error('not re-attaching %s: %s', image_id, e)
                except exception.BlobCRError as e:
                    LOG.error('cannot re-attach %s: %s', image_id, e)
                except Exception:
                    # The other images must come up all the same.
                    LOG.exception('cannot re-attach %s', image_id)
        self._release_orphan_pins()

    def _release_orphan_pins(self):
        """Release this host's pins held by a cache directory of this
        agent that is gone: an agent killed between removing a detached
        cache and unpinning it left them (_remove), and until released
        they say the image is still being detached here. Judged by this
        agent's own cache directory, which no other process uses (GC's
        rule, gc.stale_pin, also needs the pinner's mount namespace,
        which a restarted agent may not share). Runs before the RPC
        server serves, so no attach of this agent is under way.
        """
        host = socket.gethostname()
        mine = os.path.abspath(self.cache_dir) + os.sep
        released = 0
        try:
            for header in self.repo.images():
                for v in header.versions:
                    for holder in {p.get('holder') for p in v.pins
                                   if p.get('host') == host}:
                        if holder and holder.startswith(mine) and \
                                not os.path.lexists(holder):
                            released += self.repo.unpin(header.id, v.number,
                                                        holder)
        except exception.BlobCRError as e:
            LOG.warning('pins left by an earlier run not released at start '
                        '(GC will): %s', e)
        if released:
            LOG.info('released %d pin(s) left by an earlier run', released)

    def attach(self, image, version=None, mode=None, cow_chunks=None,
               adaptive=None, prefetch=True, incoming_from=None,
               durability=None):
        """Mirror ``image``; with ``incoming_from`` (a host), for a live
        migration from there: its requests wait for that host's handoff
        (handoff.py). An incoming image stays incoming across restarts of
        the agent until its handoff.
        """
        header = self.repo.image(image)
        cache_dir = os.path.join(self.cache_dir, header.id)
        if not self.wait_detached(header.id, self.busy_detach_timeout):
            raise exception.Busy(
                'image %s is being detached here: its last versions are '
                'still being persisted; try again' % header.id)
        with self._lock:
            current = self.attached.get(header.id)
            if current is not None:
                if version is not None and \
                        version != current.attached_version:
                    raise exception.InvalidInput(
                        'image %s is attached from version %d already'
                        % (header.id, current.attached_version))
                if incoming_from is not None and \
                        current.incoming is None:
                    raise exception.InvalidInput(
                        'image %s is attached here already; it cannot '
                        'come from %s' % (header.id, incoming_from))
                return self.path_of(header.id)
            if incoming_from is None:
                incoming_from = cache.incoming_source(cache_dir)
            if incoming_from is not None and self.handoff_asker is None:
                raise exception.InvalidInput(
                    'this agent cannot take an image from %s: it has no '
                    'RPC to ask that host for the handoff' % incoming_from)
            attached = image_mod.AttachedImage(
                self.repo, header.id, version, cache_dir,
                mode=mode or self.mode,
                cow_chunks=cow_chunks or self.cow_chunks,
                cow_spill_mb=self.cow_spill_mb,
                cache_reserve_mb=self.cache_reserve_mb,
                adaptive=self.adaptive if adaptive is None else adaptive,
                prefetch=prefetch, incoming=incoming_from is not None,
                readahead_chunks=self.readahead_chunks,
                delta_tracking_mb=self.delta_tracking_mb, hints=self.hints,
                upload_ahead=self.upload_ahead,
                durability=durability or self.durability,
                flush_timeout=self.flush_timeout)
            if incoming_from is not None:
                self._make_incoming(attached, incoming_from)
            self.attached[header.id] = attached
            self.handed_off.pop(header.id, None)        # it is back
            self._serve(attached)
        LOG.info('attached %s at %s%s', header.id, self.path_of(header.id),
                 '' if incoming_from is None
                 else ' (incoming from %s)' % incoming_from)
        if incoming_from is not None:
            self._prepare_handoff(incoming_from, header.id)
        return self.path_of(header.id)

    def _prepare_handoff(self, source, image_id):
        """Tell the source the migration began (a cast: the attach,
        Nova's pre_live_migration, does not wait). Only an optimisation:
        the handoff is right without it.
        """
        if self.handoff_preparer is None:
            return
        try:
            self.handoff_preparer(source, image_id)
        except Exception as e:
            LOG.warning('could not tell %s that %s is migrating here: %s',
                        source, image_id, e)

    def _make_incoming(self, attached, source):
        asker = self.handoff_asker
        incoming = handoff.Incoming(
            attached, source,
            lambda wait, timeout: asker(source, attached.id, wait, timeout),
            timeout=self.handoff_timeout)
        attached.incoming = incoming
        attached.record_incoming(source)

        def opened():
            # In a request, which a detach's remove() waits for: no
            # self._lock here. (rebase() recorded it no longer incoming.)
            loop = self.native_loop
            if loop is not None:
                try:
                    loop.ungate(attached.id)
                except KeyError:
                    pass                    # detached meanwhile
        incoming.on_done = opened

    def get(self, image):
        """The AttachedImage of an image; an error if not attached.
        An id attached here is looked up without reading the store: on
        a busy store that read took a group member's call most of a
        second (issue 36).
        """
        found = self.attached.get(image)
        if found is not None:
            return found
        image_id = self.repo.image(image).id
        try:
            return self.attached[image_id]
        except KeyError:
            raise exception.InvalidInput('image %s is not attached here'
                                         % image_id)

    def detach(self, image, discard=False, background=False):
        """Detach; refuses to drop writes made since the last checkpoint
        unless ``discard``. No checkpoint runs or starts meanwhile, and
        the image leaves the mount before its cache is removed.

        With ``background``, returns as soon as the image has left the
        mount: the versions still being persisted (a detach's final
        checkpoint) go on in the background, then the cache goes. The
        cache's metadata says so, so that a restarted agent resumes the
        persist and the detach; a persist that fails keeps the image
        attached (its chunks are dirty again), as a detach refused.

        An image not attached because its cache is from before a reboot:
        with ``discard``, drops that cache (see cache.drop_stale).
        """
        image_id = self.repo.image(image).id
        with self._lock:
            if image_id not in self.attached:
                return cache.drop_stale(
                    self.repo, os.path.join(self.cache_dir, image_id),
                    image_id, discard)
        attached = self.get(image)
        self._refuse_dirty(attached, discard)           # the common case
        with attached.exclusive(closing=True):
            with self._lock:
                if self.native_loop is not None:
                    self.native_loop.remove(attached.id)    # no more I/O
                    self.kept.forget(attached.id)
            try:
                if not background:
                    attached.wait_persisted()
                dirty = self._refuse_dirty(attached, discard)
                if background:
                    attached.record_detaching(True)
            except BaseException:
                self._serve_again(attached)
                raise
            if background:
                with self._lock:
                    del self.attached[attached.id]
                    self.detaching[attached.id] = attached
                in_flight = attached.persister.versions()
                threading.Thread(target=self._detach_when_persisted,
                                 args=(attached,), daemon=True,
                                 name='blobcr-detach-%s' % attached.id[:8]
                                 ).start()
                LOG.info('detaching %s: versions %s persist in the '
                         'background', attached.id, in_flight)
                return {'image': attached.id, 'discarded_chunks': dirty,
                        'persisting': in_flight}
            self._remove(attached)
        return {'image': attached.id, 'discarded_chunks': dirty}

    def _serve_again(self, attached):
        """A detach that cannot go on: the image is served as it was."""
        attached._closing = False
        with self._lock:
            self.detaching.pop(attached.id, None)
            self.attached[attached.id] = attached
            self._serve(attached)

    def _remove(self, attached):
        """The end of a detach: the cache and its pins go."""
        try:
            attached.save_profile()
        except exception.BlobCRError as e:
            LOG.warning('read profile of %s not saved: %s', attached.id, e)
        with self._lock:
            self.attached.pop(attached.id, None)
            attached.close()
            try:
                attached.forget_log()
            except exception.BlobCRError as e:
                # A later attach refuses until a take-over folds it.
                LOG.error('write log of %s not dropped at its detach: %s',
                          attached.id, e)
            _remove_tree(attached.cache_dir)
            crashpoint.reached('cache-removed')
            self.detaching.pop(attached.id, None)
        # A crash here leaves pins whose holder is gone: the next start
        # releases them (_release_orphan_pins; GC only from the same
        # mount namespace).
        for number in {attached.attached_version, attached.meta['last']}:
            self.repo.unpin_quietly(attached.id, number, attached.holder)

    def _detach_when_persisted(self, attached):
        """A background detach's second half (on its own thread)."""
        attached.wait_persisted()
        if attached._closed:
            return      # the agent stopped: its next start resumes it
        with attached.exclusive():
            if attached.stats()['dirty']:
                LOG.error('detach of %s stopped: version(s) failed to '
                          'persist (%s); the image stays attached here '
                          'with its writes, detach it again',
                          attached.id, attached.last_error)
                attached.record_detaching(False)
                self._serve_again(attached)
                return
            self._remove(attached)
        LOG.info('detached %s: its last versions are stable', attached.id)

    def wait_detached(self, image_id, timeout):
        """Wait up to ``timeout`` s for a background detach of the image
        here; True if none is under way.
        """
        deadline = time.monotonic() + timeout
        while image_id in self.detaching:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    @staticmethod
    def _refuse_dirty(attached, discard):
        dirty = attached.stats()['dirty']
        if dirty and not discard:
            raise exception.InvalidInput(
                'image %s has %d chunks written since its last checkpoint: '
                'checkpoint it first, or detach with discard'
                % (attached.id, dirty))
        return dirty

    def checkpoint(self, image, hold=None, made_by='', group=None):
        """Returns the version and its timing: ``downtime_ms`` from the
        request to the acknowledgment, ``held_ms`` the part inside
        ``hold`` (the guest kept still). Raises Busy, committing nothing,
        if the previous persist of the image is not done within
        ``busy_timeout`` seconds. ``made_by`` and ``group`` mark the
        version (AttachedImage._snapshot: at its registration, or when a
        version registered ahead turns stable).
        """
        attached = self.get(image)
        t0 = time.perf_counter()
        version, count, held = attached.checkpoint(
            hold, wait=self.busy_timeout, made_by=made_by, group=group)
        downtime = (time.perf_counter() - t0) * 1000
        return {'image': attached.id, 'version': version, 'chunks': count,
                'downtime_ms': round(downtime, 3),
                'held_ms': round(held, 3),
                'phases_ms': {k: round(v, 3)
                              for k, v in attached.last_phases.items()}}

    def state(self, image, version):
        return self.get(image).version_state(version)

    def wait_stable(self, image, version, timeout=600):
        attached = self.get(image)
        deadline = time.monotonic() + timeout
        while True:
            state = attached.version_state(version)
            if state != 'pending' or time.monotonic() > deadline:
                return state
            if attached.wait_persisted(timeout=0.05):
                # Nothing in flight here: just persisted (stable now: the
                # persister says so before it leaves the queue), or being
                # persisted elsewhere: poll that, not spin. Sleeping
                # first cost every wait 50 ms, a live migration's handoff
                # included.
                state = attached.version_state(version)
                if state != 'pending':
                    return state
                time.sleep(0.05)

    def stats(self, image):
        return self.get(image).stats()

    def timing(self, image, version):
        """When a version was committed and persisted (UNIX times)."""
        return self.get(image).timing.get(version, {})

    def save_profile(self, image):
        return self.get(image).save_profile()

    def list(self):
        return {i: a.stats() for i, a in self.attached.items()}

    # -- control socket --------------------------------------------------

    OPERATIONS = ('attach', 'detach', 'checkpoint', 'state', 'wait_stable',
                  'stats', 'timing', 'save_profile', 'list')

    def serve_control(self, path):
        return control.serve(path, control.Dispatcher(self, self.OPERATIONS))

    # -- the mount -------------------------------------------------------

    def _serve(self, attached):
        if self.native_loop is not None:
            incoming = attached.incoming
            gate = incoming.gate if incoming is not None and \
                not incoming.done.is_set() else None
            self.native_loop.add(
                attached.id, attached.core, attached.fetch_missed, gate,
                ino=self.kept.inode(attached.id),
                flush=attached.flush if attached.flushlog else None)

    @property
    def fuse_mountpoint(self):
        """Where pyfuse3 is mounted (unmounting it stops run())."""
        if self.io_loop == 'native':
            return os.path.join(self.mountpoint, 'versions')
        return self.mountpoint

    def run(self, ready=None):
        """Mount and serve FUSE requests until ``unmount()``.

        With the native loop (default), ``images/`` is a libfuse3 mount
        served in C by the mirror core, and ``versions/`` a pyfuse3 mount;
        with ``io_loop='pyfuse3'`` one pyfuse3 mount serves both.

        Guests' disks outlive ``versions/``: if its loop ends while the
        service is not stopping (a bug, an operator's umount), the native
        loop goes on serving ``images/`` and ``versions/`` is mounted
        again.
        """
        # A mirror killed with its mounts up left them dead (ENOTCONN):
        # each is cleared before its directory is made, or the
        # makedirs sees a path it can neither stat nor create.
        _clear_stale_mount(self.mountpoint)
        os.makedirs(self.mountpoint, exist_ok=True)
        native = self.io_loop == 'native'
        if native:
            images = os.path.join(self.mountpoint, 'images')
            taken_over = self.kept.taken_over
            # A kept connection has no server until its loop starts: not
            # to be looked at before (a stat would wait for it).
            for path in ([] if taken_over else [images]) + \
                    [self.fuse_mountpoint]:
                _clear_stale_mount(path)
                os.makedirs(path, exist_ok=True)
            self.native_loop = self.kept.open_loop()
            with self._lock:
                # Every image the kernel may ask about is served before
                # the first request is read.
                for attached in self.attached.values():
                    self._serve(attached)
            if self.kept.adopted:
                # What the dead agent had read and not answered: queued
                # again before this loop reads anything, or a request it
                # was serving would be served twice.
                try:
                    self.native_loop.resend()
                except OSError as e:
                    LOG.error('the kernel refused to resend what the '
                              'previous agent left unanswered (%s): those '
                              'requests wait until the mount goes', e)
            self.native_loop.start()
        restarts.log(self.restart_verdict())
        try:
            delay = REMOUNT_DELAY
            first = True
            while True:
                started = time.monotonic()
                if not self._serve_pyfuse3(native, ready, first):
                    break
                first, ready = False, None
                if time.monotonic() - started > REMOUNT_DELAY_MAX:
                    delay = REMOUNT_DELAY       # it had served a while
                LOG.error('%s stopped while the mirror is not stopping; '
                          '%s/images keeps serving the attached images; '
                          'mounting it again in %.0f s',
                          self.fuse_mountpoint, self.mountpoint, delay)
                if self._stopping.wait(delay):
                    break
                delay = min(delay * 2, REMOUNT_DELAY_MAX)
        finally:
            if self.native_loop is not None:
                if self.kept.stored:
                    # hand_over(), or a failure: the connection stays
                    # for the next agent, which answers what waits.
                    self.native_loop.suspend()
                self.native_loop.stop()         # suspended: nothing
            for attached in list(self.attached.values()) + \
                    list(self.detaching.values()):
                attached.close(timeout=self.close_timeout)

    def _serve_pyfuse3(self, native, ready, first):
        """Mount pyfuse3 and serve it until its loop ends. True if it
        ended while the service is not stopping and should be mounted
        again (the native loop serving images/ meanwhile).
        """
        if self._stopping.is_set():
            return False
        options = set(pyfuse3.default_options)
        options.update(['fsname=blobcr', 'allow_other'])
        _clear_stale_mount(self.fuse_mountpoint)
        try:
            pyfuse3.init(fs.MirrorFS(self, versions_only=native),
                         self.fuse_mountpoint, options)
        except Exception:
            if first or not native:
                raise               # nothing serves yet: fail the start
            LOG.exception('cannot mount %s', self.fuse_mountpoint)
            return True
        try:
            # unmount() sets _stopping before it unmounts: if it came
            # before this check, this mount is ours to drop; if after,
            # it unmounts this mount and the loop ends.
            if self._stopping.is_set():
                return False
            # Not os.stat(): this thread serves the mount and is not
            # looping yet, so a GETATTR to it would never be answered.
            self._connections = connection.connections(self._mounts())
            if ready:
                ready()
            trio.run(pyfuse3.main)
        except Exception:
            if not native or self._stopping.is_set():
                raise
            LOG.exception('the FUSE loop of %s failed', self.fuse_mountpoint)
        finally:
            pyfuse3.close(unmount=True)
        return native and not self._stopping.is_set()

    def _mounts(self):
        if self.io_loop == 'native':
            return [os.path.join(self.mountpoint, 'images'),
                    self.fuse_mountpoint]
        return [self.mountpoint]

    def unmount(self):
        """Stop: lazily unmount; run() returns once no file is open on
        it.
        """
        self._stopping.set()
        self.kept.release()
        for path in self._mounts():
            subprocess.run(['fusermount3', '-u', '-z', path], check=False,
                           capture_output=True)

    def restart_verdict(self):
        """Whether an agent restart keeps the guests' disks, as the
        kernel said it at images/'s mount (restarts.py).
        """
        mounted = self.native_loop is not None
        return restarts.verdict(self.kept.init if mounted else None,
                                mounted and self.kept.stored,
                                native=self.io_loop == 'native')

    def can_hand_over(self):
        """Whether a service manager keeps images/'s connection for the
        next agent (connection.py).
        """
        return self.native_loop is not None and self.kept.stored

    def hand_over(self):
        """Stop, leaving images/ mounted and its connection to the next
        agent: requests from now on wait for it; run() returns once those
        being served are done and versions/ is unmounted.
        """
        self._stopping.set()
        self._handing_over = True
        self.native_loop.suspend()
        subprocess.run(['fusermount3', '-u', '-z', self.fuse_mountpoint],
                       check=False, capture_output=True)

    def abort(self):
        """Abort the FUSE connections, so that run() returns even though
        processes (VMs) still have images open: their I/O fails from now
        on. What they wrote is in the cache and is served again after a
        restart. After hand_over(), versions/ only.
        """
        self._stopping.set()
        kept = connection.connections([self.kept.path]) \
            if self._handing_over else []
        for conn in getattr(self, '_connections', []):
            if conn not in kept:
                fuse.abort(conn)


def _clear_stale_mount(path):
    """Lazily unmount what a killed mirror left at ``path``, if anything:
    a FUSE mount whose server died answers ENOTCONN.
    """
    try:
        os.stat(path)
    except OSError as e:
        if e.errno == errno.ENOTCONN:
            LOG.warning('unmounting the stale mount at %s', path)
            subprocess.run(['fusermount3', '-u', '-z', path], check=False)
