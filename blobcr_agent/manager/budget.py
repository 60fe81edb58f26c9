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

"""The guest checkpoints' budget (issue 54, finding 3): how many of a
guest's checkpoints the store keeps, and how many bytes they wrote, per
image and per project, before the guest endpoint refuses the next one
(HTTP 507, nothing committed).

What counts: an image's live versions (pending or stable) that a guest
made, registered as a Cinder snapshot or not: unlabelled ones (an
operator's checkpoint without a label too, as retention sees it), and
those labelled ``managed:<snapshot id>`` (the Cinder driver's manage,
blobcr_cinder/manage.py), but not the image's first content. Their
bytes are what each wrote to the store (Version.stored_bytes; a version
still persisting counts 0 until it is stable). Retention
(manager/checkpoints.py) obsoletes the unregistered ones past the
newest ``guest_checkpoints_kept``; what it keeps, and what Cinder
snapshots keep, is what fills the budget; a tenant frees it by deleting
snapshots.

A project's count is over its images attached on every host: an
instance bound to a project (an attach from Cinder or Nova names it)
counts for that project; an image with no project is counted per image
only. This host's images are counted live: the image asking is read
each time, the project's others at most every REFRESH seconds. Other
hosts' are what they last published (repository/usage.py: one record
per project), as this agent's Publisher thread last read it: nothing
is read from the store for them on the checkpoint's path, once the
project's record was read here. Each agent publishes its own count
within TICK seconds of a change it made (a guest checkpoint taken or
turned stable, retention), and every HEARTBEAT seconds anyway (what an
operator or Cinder obsoleted); it reads the others' every
OTHERS_REFRESH seconds. So another host's checkpoints count here
within about TICK + OTHERS_REFRESH seconds (plus the persist, for
their bytes); until then the project may pass its budget by what its
guests on other hosts checkpointed in that window. A host that stops
publishing counts for usage.STALE seconds more; one whose last image
of the project is detached drops its entry within TICK seconds.
"""

import logging
import threading
import time

from blobcr_agent.manager import periodic
from blobcr_agent.repository import image as image_mod
from blobcr_agent.repository import usage as usage_mod
from blobcr_common import exception

LOG = logging.getLogger(__name__)

MANAGED = 'managed:'    # blobcr_cinder/refs.py: a Cinder snapshot's label
REFRESH = 10.0          # seconds an image's count is reused for others
MiB = 1 << 20
# The cross-host count (see above): the Publisher looks every TICK
# seconds, writes this host's entry when its count changed or every
# HEARTBEAT seconds, and reads the other hosts' every OTHERS_REFRESH.
TICK = 2.0
HEARTBEAT = 60.0
OTHERS_REFRESH = 5.0
# Older than this, the other hosts' count is read on the check's path:
# the Publisher stopped reading (stuck behind a slow store, or off).
OTHERS_STUCK = 60.0
NOBODY = {'versions': 0, 'bytes': 0, 'hosts': 0}


def is_guest_checkpoint(v):
    """Whether a version is a guest's checkpoint the budget counts."""
    return v.parent is not None and \
        (not v.made_by or v.made_by.startswith(MANAGED)) and \
        v.state in (image_mod.PENDING, image_mod.STABLE)


def counted(header):
    """The versions of an image the budget counts."""
    found = [v for v in header.versions if is_guest_checkpoint(v)]
    # The mirror's reservation of the next version (pending, nothing
    # written, registered ahead: mirror/reserve.py) is no checkpoint.
    if found and found[-1] is header.versions[-1] and \
            found[-1].state == image_mod.PENDING and \
            not found[-1].chunks:
        found.pop()
    return found


def usage_of(header):
    """``{"versions", "bytes"}`` of an image's guest checkpoints."""
    counted_ = counted(header)
    return {'versions': len(counted_),
            'bytes': sum(v.stored_bytes or 0 for v in counted_)}


class GuestBudget(object):
    """The limits, the counts seen, and the refusals (for status)."""

    def __init__(self, per_image=0, per_project=0, mib_per_image=0,
                 mib_per_project=0):
        self.limits = {'image': {'versions': per_image,
                                 'bytes': mib_per_image * MiB},
                       'project': {'versions': per_project,
                                   'bytes': mib_per_project * MiB}}
        self.refused = {'image': 0, 'project': 0, 'groups': 0}
        self._lock = threading.Lock()
        self._seen = {}         # image id -> (monotonic time, usage)
        # project -> (monotonic time, other hosts' usage), as read from
        # the project's record (repository/usage.py).
        self._others = {}
        # Images whose count changed here and is not published yet.
        self._dirty = set()

    @property
    def per_project(self):
        return any(self.limits['project'].values())

    def _usage(self, repo, image_id, fresh, max_age=REFRESH):
        with self._lock:
            seen = self._seen.get(image_id)
        if seen is not None and not fresh and \
                time.monotonic() - seen[0] < max_age:
            return seen[1]
        try:
            usage = usage_of(repo.image(image_id))
        except exception.ImageNotFound:
            usage = {'versions': 0, 'bytes': 0}
        with self._lock:
            self._seen[image_id] = (time.monotonic(), usage)
        return usage

    def forget(self, image_id):
        with self._lock:
            self._seen.pop(image_id, None)
            self._dirty.add(image_id)

    def changed(self, image_id):
        """``image_id``'s count changed here (a checkpoint taken,
        retention): re-read and published by the Publisher's next tick.
        """
        with self._lock:
            self._dirty.add(image_id)

    def others(self, repo, host, project):
        """The other hosts' usage of ``project``, as last read; read now
        only if never read (the project's first checkpoint here), or
        not for OTHERS_STUCK seconds.
        """
        with self._lock:
            seen = self._others.get(project)
        if seen is not None and time.monotonic() - seen[0] < OTHERS_STUCK:
            return seen[1]
        return self.read_others(repo, host, project)

    def read_others(self, repo, host, project, record=None):
        if record is None:
            try:
                record = usage_mod.read(repo, project)
            except exception.CorruptObject:
                LOG.exception('usage of project %s: counted as none',
                              project)
                record = usage_mod.ProjectUsage(project)
        found = record.others(host)
        with self._lock:
            self._others[project] = (time.monotonic(), found)
        return found

    def check(self, repo, image_id, project, images_of_project,
              host=None):
        """Refuse (OverBudget) a new guest checkpoint of ``image_id``
        whose image or ``project`` (its images attached here:
        ``images_of_project``, a list of ids; and on hosts other than
        ``host``, as they published them) is at its budget.
        """
        mine = self._usage(repo, image_id, fresh=True)
        self._refuse('image', 'image %s' % image_id, mine)
        if project is None:
            return
        total = dict(mine)
        for other in images_of_project:
            if other == image_id:
                continue
            usage = self._usage(repo, other, fresh=False)
            total['versions'] += usage['versions']
            total['bytes'] += usage['bytes']
        if self.per_project:
            others = self.others(repo, host, project)
            total['versions'] += others['versions']
            total['bytes'] += others['bytes']
        self._refuse('project', 'project %s' % project, total)

    def _refuse(self, scope, what, usage):
        limits = self.limits[scope]
        for key, unit in (('versions', 'checkpoints'),
                          ('bytes', 'bytes written')):
            if limits[key] and usage[key] >= limits[key]:
                raise exception.OverBudget(
                    'checkpoint budget of %s reached: %d %s kept, at most '
                    '%d; delete snapshots of its volumes to make room '
                    '(older unregistered checkpoints are obsoleted by '
                    'themselves)' % (what, usage[key], unit, limits[key]),
                    scope, usage, limits)

    def count_refusal(self, scope):
        with self._lock:
            self.refused[scope] = self.refused.get(scope, 0) + 1

    def status(self, projects):
        """The limits, the refusals, and the counts last seen by project
        (``projects``: image id -> project or None).
        """
        with self._lock:
            seen = dict(self._seen)
            others = dict(self._others)
        by_project = {}
        for image_id, (_, usage) in seen.items():
            if image_id not in projects:
                continue
            key = projects[image_id] or '-'
            total = by_project.setdefault(key, {'versions': 0, 'bytes': 0,
                                                'images': 0})
            total['versions'] += usage['versions']
            total['bytes'] += usage['bytes']
            total['images'] += 1
        for project, total in by_project.items():
            total['other_hosts'] = dict(
                others.get(project, (0, NOBODY))[1])
        return {'limits': self.limits, 'refused': dict(self.refused),
                'usage': by_project}

    def usage_here(self, repo, images):
        """The summed usage of ``images`` (attached here), reading those
        changed since their last publish; one with a checkpoint still
        persisting (its bytes not counted yet) is read again next time.
        """
        with self._lock:
            dirty = self._dirty & set(images)
            self._dirty -= dirty
        total = {'versions': 0, 'bytes': 0}
        for image_id in images:
            if image_id in dirty:
                persisting = False
                try:
                    header = repo.image(image_id)
                    usage = usage_of(header)
                    # Its bytes count once stable: read it again then.
                    persisting = any(v.state == image_mod.PENDING
                                     for v in counted(header))
                except exception.ImageNotFound:
                    usage = {'versions': 0, 'bytes': 0}
                with self._lock:
                    self._seen[image_id] = (time.monotonic(), usage)
                    if persisting:
                        self._dirty.add(image_id)
            else:
                # Changed by no one here: re-read once a HEARTBEAT, for
                # what an operator or Cinder obsoleted.
                usage = self._usage(repo, image_id, fresh=False,
                                    max_age=HEARTBEAT)
            total['versions'] += usage['versions']
            total['bytes'] += usage['bytes']
        return total


class Publisher(periodic.Periodic):
    """This host's count of each project's guest checkpoints, written to
    the project's record, and the other hosts' read from it (see the
    module's doc): one thread, off every guest's wait.
    """

    def __init__(self, manager):
        super(Publisher, self).__init__('blobcr-project-usage', TICK)
        self.manager = manager
        self.budget = manager.guest_budget
        self._published = {}    # project -> (monotonic time, usage)
        self.writes = 0

    @property
    def enabled(self):
        return self.budget.per_project

    def tick(self):
        manager = self.manager
        repo, host = manager.repo, manager.host
        attached = manager._projects_of_images()
        projects = {p for p in attached.values() if p}
        with self.budget._lock:
            self.budget._dirty &= set(attached)
        now = time.monotonic()
        for project in projects:
            images = manager.images_of_project(project)
            mine = self.budget.usage_here(repo, images)
            last = self._published.get(project)
            if last is None or last[1] != mine or \
                    now - last[0] >= HEARTBEAT:
                record = usage_mod.publish(repo, project, host, mine)
                self.writes += 1
                self._published[project] = (now, mine)
                self.budget.read_others(repo, host, project, record)
                continue
            with self.budget._lock:
                seen = self.budget._others.get(project)
            if seen is None or now - seen[0] >= OTHERS_REFRESH:
                self.budget.read_others(repo, host, project)
        for project in set(self._published) - projects:
            # Its last image here detached: this host counts no more.
            usage_mod.publish(repo, project, host, None)
            self.writes += 1
            del self._published[project]
            with self.budget._lock:
                self.budget._others.pop(project, None)

    def status(self):
        return {'projects': len(self._published), 'writes': self.writes,
                'errors': self.errors}
