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

"""Group membership of checkpoints: the index, recorded after the ack.

A member version carries its tag from the header write that registers
it (mirror/image.py). What is left is the group's index, which every
member of the group joins (a key each, repository/groups.py: still a
write on an object M hosts write to, queued behind the OSD's data
writes). A guest (the guest endpoint) or Cinder's group snapshot (over
RPC, every member held still meanwhile) must not wait for it: the ack
returns once the snapshot is taken; one thread per agent joins the
index in the background, and the members of one group waiting together
(on this host) take one write between them.
``wait_stable`` of a version also waits for its index entry, and
raises why it could not be recorded: Cinder's snapshot turns available
with its group recorded.

The group cannot look complete early: it is complete when every member
is in its index and stable, and a member waiting here is not in it yet
(``pending`` lists it for polls, so that its guest sees it as a member
whose version is not stable). An agent killed before a tag leaves that
member out: the group stays incomplete, and a restart takes the newest
complete one (as for a version that failed to persist).
"""

import collections
import logging
import threading
import time

from blobcr_agent.repository import groups
from blobcr_common import exception

LOG = logging.getLogger(__name__)

RETRIES = 5
BACKOFF = 1.0       # seconds, doubled at each retry


class GroupTagger(object):

    def __init__(self, repo):
        self.repo = repo
        self._cond = threading.Condition()
        self._queue = collections.deque()
        self._pending = {}          # (group, project) -> {image: version}
        self._members = {}          # (group, project) -> member count
        self._busy = False
        self._stopped = False
        self.tagged = 0
        # (group, project) -> member count of the indexes this agent read
        # or joined: groups.admit need not read them again.
        self.counts = {}
        # (group, project) -> member count of the indexes this agent
        # joined: made, with that count (unlike counts, which a
        # coordinator's declaration fills before any index exists).
        self._joined = {}
        self.errors = []            # the last few failures, for status
        self._failed = {}           # (image, version) -> why (bounded)
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name='blobcr-group-tags')
        self._thread.start()

    def submit(self, image_id, number, group, members, project, creator):
        key = (group, project)
        with self._cond:
            self._queue.append((key, image_id, number, members, creator))
            self._pending.setdefault(key, {})[image_id] = number
            self._members[key] = members
            self._cond.notify()

    def pending(self, group, project):
        """(member count, ``{image id: version}``) of this group's tags
        not recorded yet; (0, {}) when none is waiting.
        """
        key = (group, project)
        with self._cond:
            waiting = dict(self._pending.get(key, {}))
            return (self._members.get(key, 0) if waiting else 0), waiting

    def _take(self):
        """Every queued tag of the group at the head of the queue."""
        with self._cond:
            while not self._queue and not self._stopped:
                self._cond.wait()
            if not self._queue:
                return None
            key = self._queue[0][0]
            batch = [t for t in self._queue if t[0] == key]
            self._queue = collections.deque(t for t in self._queue
                                            if t[0] != key)
            self._busy = True
            return batch

    def _run(self):
        while True:
            batch = self._take()
            if batch is None:
                return
            try:
                self._record(batch)
            finally:
                with self._cond:
                    key = batch[0][0]
                    waiting = self._pending.get(key, {})
                    for _, image_id, number, _, _ in batch:
                        if waiting.get(image_id) == number:
                            del waiting[image_id]
                    if not waiting:
                        self._pending.pop(key, None)
                        self._members.pop(key, None)
                    self._busy = False
                    self._cond.notify_all()

    def _record(self, batch):
        (group, project), _, _, members, creator = batch[0]
        versions = [(image_id, number) for _, image_id, number, _, _ in batch]
        delay = BACKOFF
        for attempt in range(RETRIES):
            try:
                groups.join(self.repo,
                            [image_id for image_id, _ in versions], group,
                            members, project=project, creator=creator,
                            made=self._joined.get((group, project)) ==
                            members)
                self.counts[(group, project)] = members
                self._joined[(group, project)] = members
                self.tagged += len(versions)
                return
            except exception.BackendUnavailable as e:
                error = e
                if attempt + 1 < RETRIES:
                    time.sleep(delay)
                    delay *= 2
            except exception.BlobCRError as e:
                error = e
                break
        LOG.error('checkpoints %s not recorded in group %s: %s (the '
                  'group stays incomplete)', versions, group, error)
        with self._cond:
            for version in versions:
                self._failed[version] = 'not recorded in group %s: %s' % (
                    group, error)
            while len(self._failed) > 1000:
                self._failed.pop(next(iter(self._failed)))
        self.errors = (self.errors + [{'group': group, 'versions': versions,
                                       'error': str(error)}])[-10:]

    def wait_for(self, image_id, number, timeout=None):
        """Wait until the tag of version ``number`` of ``image_id`` (if
        one was submitted) is recorded; raise the reason it could not
        be. False if it is still waiting after ``timeout`` s.
        """
        deadline = None if timeout is None else time.monotonic() + timeout

        def waiting():
            return any(w.get(image_id) == number
                       for w in self._pending.values())
        with self._cond:
            while waiting():
                left = None if deadline is None else \
                    deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
            why = self._failed.get((image_id, number))
        if why:
            raise exception.BlobCRError('version %d of %s %s'
                                        % (number, image_id, why))
        return True

    def wait(self, timeout=None):
        """Wait until every submitted tag is recorded (or failed); True
        if none is left.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._queue or self._busy:
                left = None if deadline is None else \
                    deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def stop(self, timeout=None):
        """Record what is queued (up to ``timeout`` s), then stop."""
        drained = self.wait(timeout)
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        self._thread.join(timeout)
        return drained

    def status(self):
        with self._cond:
            queued = len(self._queue)
        return {'tagged': self.tagged, 'queued': queued,
                'errors': list(self.errors)}
