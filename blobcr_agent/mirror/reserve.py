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

"""The next version of an attached image, registered ahead.

Registering a version (``repo.begin_commit``: a header read and a
compare-and-set) is slow while the previous version is being persisted
to the same store (on RADOS: 65 ms median, up to 0.4 s, against 3.5 ms
idle). A checkpoint must not wait for it: right after a checkpoint is
acknowledged (and at attach), one thread per image registers the NEXT
pending version in the background, with ``after``/``parent`` as the
checkpoint would compute them then (checkpoints of an image are
serialized, so it is the right successor), and the next checkpoint takes
it instead of registering one (``take``). Only in selective-cow; on
unless turned off (image.py: ``reserve=``, BLOBCR_RESERVE_AHEAD). A
reservation carries no label nor group tag: a checkpoint that asks for
them gets them in the update that makes the version stable
(Commit.mark), kept in the cache's metadata until then.

A reservation is used only if it is still the one the checkpoint would
register (``key``): it follows the newest version in flight, or, with
none in flight, the last stable checkpoint, and no version it follows
has failed. Otherwise it is aborted (failed) and the checkpoint
registers afresh. It is also

* failed with the versions it follows when their persist fails
  (``followed_failed``, from Image._failed), then registered anew;
* kept alive: GC fails a pending version without heartbeat for
  ``pending_timeout``; its heartbeat is renewed once it is older than
  REFRESH of that, and a checkpoint never takes one older than USE
  (it may have been marked failed);
* not used once another process marked it failed (GC, a take-over):
  ``take`` reads its header entry again;
* aborted at close (detach, agent stop);
* recorded in the cache's metadata (``reserved``) while unused, so that
  recovery after a crash fails it at once (recovery.py) instead of
  leaving it pending until GC. A checkpoint clears it in the same
  record that names the version in flight, before its COMMIT (taken.py:
  in memory and in the cache's slot, synced with the next save).
"""

import logging
import threading
import time

from blobcr_agent.repository import image as repo_image

LOG = logging.getLogger(__name__)

# Fractions of the repository's pending_timeout.
REFRESH = 0.25
USE = 0.5


class Reservation(object):
    """A registered pending version (``commit``, a repository Commit)
    not taken yet; ``confirmed``: when (monotonic) it was last known
    pending, taken before the header write that said so.
    """

    def __init__(self, commit, parent, after, confirmed):
        self.commit = commit
        self.version = commit.version
        # What it was registered to follow (begin_commit's arguments;
        # not commit.after, None if that version turned stable before
        # the registration): the version in flight, or with none, the
        # stable version it is built on (None: the image's first).
        self.after = after
        self.parent = parent
        self.confirmed = confirmed


def successor_of(after, last):
    """``begin_commit``'s (parent, after) for the next checkpoint: it
    follows ``after``, the newest version in flight, or is built on
    ``last``, the last stable checkpoint.
    """
    return (last if after is None else None), after


class Reserver(object):
    """Keeps at most one version of ``image`` (an AttachedImage)
    registered ahead; ``enabled`` False: never (the checkpoint
    registers its version, as in the modes without pipelining).
    """

    def __init__(self, image, enabled=True):
        self.image = image
        self.enabled = enabled
        self._cond = threading.Condition()
        self._slot = None           # Reservation
        self._stale = []            # Commits to abort
        self._failed = set()        # versions that failed here
        self._wanted = False
        self._registering = False
        self._stopping = False
        self._thread = None
        self.registered = 0         # reservations made
        self.used = 0               # taken by a checkpoint
        self.aborted = 0            # reservations failed unused

    # -- the state a reservation must match ---------------------------

    def _current(self):
        """(after, last) as a checkpoint would see them now; versions
        still queued but failed (their failure being handled) do not
        count as in flight.
        """
        live = [v for v in self.image.persister.versions()
                if v not in self._failed]
        return (live[-1] if live else None), self.image.meta['last']

    def _valid(self, r, after, last):
        if r.after is not None and r.after in self._failed:
            return False
        if after is not None:
            return r.after == after
        # Nothing in flight: built on the last stable checkpoint, which
        # may be the version it was registered to follow.
        if r.after is not None:
            return r.after == last
        return r.parent == last

    def _unusable(self, r, after, last):
        """Why ``r`` cannot be the next checkpoint's version (None: it
        can). Its header entry is read again (one read, in the ack):
        another process (GC, a take-over) may have failed it, and a
        checkpoint acknowledged on a failed version never exists.
        """
        if not self._valid(r, after, last):
            return 'no longer the successor'
        if not self._young(r, USE):
            return 'too old'
        try:
            state = self.image.repo.image(self.image.id).version(
                r.version).state
        except Exception as e:
            return 'its header entry is unreadable: %s' % e
        if state != repo_image.PENDING:
            return 'marked %s by another process' % state
        return None

    def _young(self, r, fraction):
        timeout = self.image.repo.pending_timeout
        return time.monotonic() - r.confirmed < timeout * fraction

    # -- for the image -------------------------------------------------

    def request(self):
        """Register the next version in the background (after an
        acknowledged checkpoint, at attach).
        """
        if not self.enabled:
            return
        with self._cond:
            if self._stopping:
                return
            self._wanted = True
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, daemon=True,
                    name='blobcr-reserve-%s' % self.image.id[:8])
                self._thread.start()
            self._cond.notify_all()

    def take(self, after, last, timeout=None):
        """The Reservation if it is the successor of (``after``,
        ``last``) and young enough to be surely pending, else None (a
        reservation that is not is aborted in the background). Waits up
        to ``timeout`` s for a registration asked for or under way. The
        caller holds the image's gate: (after, last) cannot change but
        by a persist turning stable, which keeps the successor the same.
        """
        if not self.enabled:
            return None
        with self._cond:
            self._cond.wait_for(
                lambda: self._stopping or self._slot is not None or
                not (self._registering or self._wanted), timeout)
            r, self._slot = self._slot, None
            if r is None:
                return None
            why = self._unusable(r, after, last)
            if why is None:
                self.used += 1
                return r
            LOG.info('reserved version %d of %s not used (%s): registering '
                     'afresh', r.version, self.image.id, why)
            self._stale.append(r.commit)
            self._cond.notify_all()
            return None

    def peek(self):
        """The Commit of the reservation not taken yet (None: none), to
        send chunks ahead for (upload_ahead.py).
        """
        with self._cond:
            return self._slot.commit if self._slot is not None else None

    def put_back(self, r):
        """A checkpoint refused Busy before its COMMIT: keep its
        reservation ``r`` for the next try. False if it cannot be kept
        (closing, or another one registered meanwhile): the caller
        aborts it.
        """
        with self._cond:
            self.used -= 1
            if self._slot is None and not self._stopping:
                self._slot = r
                self._wanted = False
                self._cond.notify_all()
                return True
            return False

    def followed_failed(self, versions):
        """``versions`` failed (from Image._failed, the gate held): the
        reservation following one of them is failed too and dropped,
        and a new one registered.
        """
        if not self.enabled:
            return
        with self._cond:
            self._failed.update(versions)
            r = self._slot
            if r is not None and r.after not in self._failed:
                return
            self._slot = None
            # A new one (once the thread runs: not during recovery).
            # One being registered behind a failed version is aborted
            # when it is back (_register).
            self._wanted = not self._stopping
            self._cond.notify_all()
        if r is not None:
            self._abort(r.commit, 'version %d, which it follows, failed'
                        % r.after)

    def stop(self, timeout=60.0):
        """Abort the reservation (at close); waits up to ``timeout`` s
        for a registration under way, which the thread then aborts: a
        detach must leave no pending version behind (an extend or a
        delete right after it would be refused).
        """
        with self._cond:
            self._stopping = True
            r, self._slot = self._slot, None
            thread = self._thread
            self._cond.notify_all()
        if r is not None:
            self._abort(r.commit, 'the image was detached or its agent '
                        'stopped before the next checkpoint')
        if thread is not None:
            thread.join(timeout)

    # -- the thread ----------------------------------------------------

    def _run(self):
        while True:
            with self._cond:
                while True:
                    if self._stale:
                        job = ('abort', self._stale.pop(0))
                        break
                    if self._stopping:
                        self._thread = None
                        self._cond.notify_all()
                        return
                    r = self._slot
                    if r is not None:
                        after, last = self._current()
                        if not self._valid(r, after, last):
                            # Its base went away (failed, or not the
                            # newest any more): a new one follows.
                            self._slot = None
                            self._wanted = True
                            job = ('abort', r.commit)
                            break
                        due = r.confirmed + self._refresh_after()
                        wait = due - time.monotonic()
                        if wait <= 0:
                            job = ('beat', r)
                            break
                        self._cond.wait(wait)
                        continue
                    if self._wanted:
                        self._wanted = False
                        self._registering = True
                        job = ('register', None)
                        break
                    self._cond.wait()
            try:
                getattr(self, '_' + job[0])(job[1])
            except Exception:
                LOG.exception('reserving the next version of %s',
                              self.image.id)
            finally:
                if job[0] == 'register':
                    with self._cond:
                        self._registering = False
                        self._cond.notify_all()

    def _refresh_after(self):
        return self.image.repo.pending_timeout * REFRESH

    def _register(self, _):
        with self._cond:
            after, last = self._current()
        parent, after = successor_of(after, last)
        confirmed = time.monotonic()
        try:
            commit = self.image.repo.begin_commit(
                self.image.id, parent=parent, after=after,
                epoch=self.image.epoch)
        except Exception as e:
            # The checkpoint registers its version itself (and reports
            # the error, if it persists).
            LOG.warning('next version of %s not reserved: %s',
                        self.image.id, e)
            return
        r = Reservation(commit, parent, after, confirmed)
        with self._cond:
            keep = (not self._stopping and self._slot is None and
                    self._valid(r, *self._current()))
            # Saved (synced) before it can be taken, under the lock: a
            # checkpoint takes it without a sync of its own (taken.py),
            # so one that meta.json does not name is never taken.
            why = 'reserved for a checkpoint that no longer follows it'
            if keep and self._save_reserved(r.version):
                self._slot = r
                self._wanted = False
                self.registered += 1
            elif keep:
                keep = False
                why = 'the cache metadata naming it could not be saved'
        if not keep:
            self._abort(commit, why)

    def _beat(self, r):
        confirmed = time.monotonic()
        try:
            r.commit._beat()
        except Exception as e:
            LOG.warning('reserved version %d of %s could not be kept alive '
                        '(%s): registering another', r.version,
                        self.image.id, e)
            with self._cond:
                if self._slot is r:
                    self._slot = None
                    self._wanted = True
                    self._stale.append(r.commit)
            return
        r.confirmed = confirmed

    def _abort(self, commit, why='not the successor any more'):
        commit.abort('reserved for the next checkpoint, not used: %s' % why)
        with self._cond:
            self.aborted += 1
        # Failed: recovery need not fail it again.
        self._save_reserved(None, unless_not=commit.version)

    def _save_reserved(self, number, unless_not=None):
        """Record ``number`` as the reservation in the cache's metadata
        (with ``unless_not``: only if that is the one recorded); False if
        it could not be saved.
        """
        def change(meta):
            recorded = meta.get('reserved')
            if recorded == number or (unless_not is not None and
                                      recorded != unless_not):
                return False
            meta['reserved'] = number
        try:
            self.image.edit_meta(change)
            return True
        except OSError as e:
            LOG.error('cache metadata of %s not updated: %s', self.image.id,
                      e)
            return False
