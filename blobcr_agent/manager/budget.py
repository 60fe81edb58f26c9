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

A project's count is over its images attached on this host (each
agent sees its own): an instance bound to a project (an attach from
Cinder or Nova names it) counts for that project; an image with no
project is counted per image only. The other images' counts are read
at most every REFRESH seconds; the image asking is read each time.
"""

import threading
import time

from blobcr_agent.repository import image as image_mod
from blobcr_common import exception

MANAGED = 'managed:'    # blobcr_cinder/refs.py: a Cinder snapshot's label
REFRESH = 10.0          # seconds an image's count is reused for others
MiB = 1 << 20


def is_guest_checkpoint(v):
    """Whether a version is a guest's checkpoint the budget counts."""
    return v.parent is not None and \
        (not v.made_by or v.made_by.startswith(MANAGED)) and \
        v.state in (image_mod.PENDING, image_mod.STABLE)


def usage_of(header):
    """``{"versions", "bytes"}`` of an image's guest checkpoints."""
    counted = [v for v in header.versions if is_guest_checkpoint(v)]
    # The mirror's reservation of the next version (pending, nothing
    # written, registered ahead: mirror/reserve.py) is no checkpoint.
    if counted and counted[-1] is header.versions[-1] and \
            counted[-1].state == image_mod.PENDING and \
            not counted[-1].chunks:
        counted.pop()
    return {'versions': len(counted),
            'bytes': sum(v.stored_bytes or 0 for v in counted)}


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

    def _usage(self, repo, image_id, fresh):
        with self._lock:
            seen = self._seen.get(image_id)
        if seen is not None and not fresh and \
                time.monotonic() - seen[0] < REFRESH:
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

    def check(self, repo, image_id, project, images_of_project):
        """Refuse (OverBudget) a new guest checkpoint of ``image_id``
        whose image or ``project`` (its images attached here:
        ``images_of_project``, a list of ids) is at its budget.
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
        self._refuse('project', 'project %s (its images on this host)'
                     % project, total)

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
        return {'limits': self.limits, 'refused': dict(self.refused),
                'usage': by_project}
