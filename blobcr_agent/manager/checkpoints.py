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

"""Checkpoints and holds: the guest held still (none, fsfreeze or
suspend) for the snapshot alone, group checkpoints, the state of the
versions a checkpoint made, and the wait for their persists.

Invariants: an explicitly asked quiesce mode needs a running domain on
the image (the configured default falls back to none); a group's
members are admitted before the checkpoint, their versions carry the
group tag (and the caller's label) from the header write that registers
them or makes them stable, and the group's index lists them before the
checkpoint (a direct call) or after the ack (tagger.py).
"""

import logging
import time

from blobcr_agent.hypervisor import domains
from blobcr_agent.repository import groups
from blobcr_agent.repository import image as image_mod
from blobcr_common import exception

LOG = logging.getLogger(__name__)


class Checkpoints(object):
    """Checkpoints and holds (a mixin of
    :class:`~blobcr_agent.manager.AgentManager`).
    """

    def _domain(self, image_id):
        """The active domain that uses the image (its mirror file or its
        loop device), or None; BackendUnavailable if libvirt cannot tell.
        """
        if self.hypervisor is None:
            return None
        return self.hypervisor.domain_for(*self._disk_paths(image_id))

    def _hold(self, image_id, mode, explicit):
        """(context manager, mode used) that keeps the guest still."""
        if mode == 'none':
            return None, 'none'
        domain = self._domain(image_id)
        if domain is None:
            if explicit:
                raise exception.InvalidInput(
                    'no running domain uses image %s: cannot %s'
                    % (image_id, mode))
            # Attached but not used by a VM (yet): nothing to hold still.
            LOG.info('no running domain uses %s: checkpoint without %s '
                     '(the configured quiesce mode)', image_id, mode)
            return None, 'none'
        return self.hypervisor.quiesced(domain, mode), mode

    def checkpoint(self, image, quiesce=None, group=None, members=None,
                   project=None, creator='operator', label=None,
                   tag_after_ack=False, guest=False):
        """Hold the guest still, COMMIT, resume; returns as soon as the
        snapshot is taken (the version is ``pending`` until persisted).

        ``quiesce`` asked for explicitly (fsfreeze, suspend) needs a
        running domain on the image; the configured default falls back
        to none when no domain uses it. ``group`` is one of ``project``'s
        (None: the scope of callers without a project); ``creator`` is
        recorded by the group's first member. ``label`` marks the version
        as made by its caller for its own use (Version.made_by: the Cinder
        driver's checkpoints are its snapshots or a detached volume's
        content, not checkpoints for Cinder to register); unlabelled
        checkpoints (the guest's) cost no header update here.
        ``tag_after_ack`` (the guest endpoint's and RPC's): the group
        membership is recorded in the background (tagger.py), off the
        guest's wait; ``wait_stable`` waits for it. ``guest`` (the guest
        endpoint's): refused (OverBudget, nothing taken) past the image's
        or ``project``'s budget (manager/budget.py), or for a new group
        past the project's ``guest_groups_per_project``.
        """
        mode = self._mode(quiesce)
        if (group is None) != (members is None):
            raise exception.InvalidInput('group and members go together')
        phases = {}
        mark = time.perf_counter()
        index = None
        if group is not None:
            index = groups.admit(self.repo, group, members, project,
                                 known=self.tagger.counts)
            mark = _phase(phases, 'admit', mark)
        # Attached here by id (Cinder's calls): no header read.
        image_id = self.mirror.get(image).id    # attached here?
        mark = _phase(phases, 'lookup', mark)
        if guest:
            try:
                self._within_budget(image_id, project)
                if group is not None and index is None and \
                        (group, project) not in self.tagger.counts:
                    groups.count_new(self.repo, group, project,
                                     self.guest_groups_per_project)
            except exception.OverBudget as e:
                self.guest_budget.count_refusal(e.scope)
                raise
            mark = _phase(phases, 'budget', mark)
        tag = None
        if group is not None:
            # Tagged and labelled by the header write that registers the
            # version: no header update of its own. The index lists the
            # image before (here) or after the ack (tagger.py); either
            # way a crash in between leaves a member missing, never a
            # group wrongly complete (repository/groups.py).
            tag = groups.member_tag(group, members, project)
            if not tag_after_ack:
                groups.join(self.repo, [image_id], group, members, project,
                            creator, index=index)
                mark = _phase(phases, 'join', mark)
        hold, used = self._hold(image_id, mode, explicit=bool(quiesce))
        _phase(phases, 'quiesce', mark)
        result = self.mirror.checkpoint(image_id, hold, made_by=label or '',
                                        group=tag)
        # Its project's count, as this host publishes it (budget.py).
        self.guest_budget.changed(image_id)
        # Where the whole call went (ms): the manager's steps, then the
        # mirror's (mirror/image.py: last_phases).
        result['phases_ms'] = dict(phases, **result['phases_ms'])
        result['quiesce'] = used
        if group is not None and tag_after_ack:
            self.tagger.submit(image_id, result['version'], group, members,
                               project, creator)
        if group is not None:
            result['group'] = group
        return result

    def _within_budget(self, image_id, project):
        """OverBudget past the image's or the project's budget (what
        retention leaves counts; versions it has not looked at yet, an
        operator's unlabelled checkpoints among them, are retired first).
        """
        images = self.images_of_project(project)
        try:
            self.guest_budget.check(self.repo, image_id, project, images,
                                    self.host)
        except exception.OverBudget:
            retired = 0
            for other in set(images) | {image_id}:
                if self.retain_guest_checkpoints(other):
                    retired += 1
                    self.guest_budget.forget(other)
            if not retired:
                raise
            self.guest_budget.check(self.repo, image_id, project, images,
                                    self.host)

    def retain_guest_checkpoints(self, image, newest=None):
        """A guest checkpoint (unlabelled: made_by '') was just taken as
        version ``newest`` of ``image``: the guest checkpoints past the
        newest ``guest_checkpoints_kept`` (it included, in the order
        they turned stable) are obsoleted, so that GC frees them, and so
        are the members of groups older than the image's newest
        ``guest_groups_kept`` (0: every group's kept). Never a labelled
        version (a Cinder snapshot's: manage.py labels it
        ``managed:<id>``; the driver's own), a pinned one, nor what
        Protector.retire keeps. Without ``newest`` (no new one pending),
        the newest ``guest_checkpoints_kept`` stable ones are kept.
        Returns how many were obsoleted.
        """
        kept = self.guest_checkpoints_kept
        groups_kept = self.guest_groups_kept
        attached = self.mirror.attached.get(image)
        if not kept or attached is None:
            return 0

        def past_budget(versions):
            guest = sorted((v for v in versions
                            if v.state == image_mod.STABLE and
                            not v.made_by and v.parent is not None and
                            v.number != newest),
                           key=lambda v: v.seq)
            plain = [v for v in guest if not v.group]
            # The new one (still pending) is the newest of the kept.
            room = kept - 1 if newest is not None else kept
            over = [v for v in plain[:max(0, len(plain) - room)]
                    if not v.pins]
            if not groups_kept:
                return over
            # Groups by their newest member here, newest first; any
            # version of the image tagged counts (a labelled one too).
            newest_of = {}
            for v in versions:
                if v.group and v.state in (image_mod.STABLE,
                                           image_mod.PENDING):
                    key = _group_key(v.group)
                    newest_of[key] = max(newest_of.get(key, 0), v.seq or
                                         float('inf'))
            keep = set(sorted(newest_of, key=newest_of.get,
                              reverse=True)[:groups_kept])
            return over + [v for v in guest
                           if v.group and not v.pins and
                           _group_key(v.group) not in keep]
        retired = self.protector.retire(attached.id, attached, past_budget)
        self.guest_retired += retired
        if retired:
            self.guest_budget.changed(attached.id)
        return retired

    def images_of_project(self, project):
        """The images attached here for instances of ``project``."""
        if project is None:
            return []
        return [image_id for image_id in list(self.mirror.attached)
                if any(self.instances.project_of(i) == project
                       for i in self.instances.instances_of(image_id))]

    def hold(self, image, quiesce=None, timeout=60):
        """Phase one of a group checkpoint across hosts: hold the guest
        of ``image`` still until release(image), or ``timeout`` seconds
        (hypervisor/timed_hold.py). A checkpoint in the same mode joins
        the hold. Without a domain to hold (or mode none) nothing is
        held, as a checkpoint would hold nothing either.
        """
        mode = self._mode(quiesce)
        image_id = self.mirror.get(image).id    # attached here?
        context, used = self._hold(image_id, mode, explicit=bool(quiesce))
        if context is None:
            return {'image': image_id, 'quiesce': used, 'held': False}
        self.holds.hold(image_id, context, timeout)
        return {'image': image_id, 'quiesce': used, 'held': True}

    def admit_group(self, group, members, project=None):
        """Phase zero of a group checkpoint across hosts: check and
        remember the member count here, so that the members' own
        checkpoints admit it without a read (groups.admit).
        """
        groups.admit(self.repo, group, members, project,
                     known=self.tagger.counts, declare=True)
        return {'group': group, 'members': members}

    def _image_id(self, image):
        """The id of ``image``: read from the store only when it is not
        an id attached here (a group snapshot's calls, on a store busy
        with persists, waited most of a second for each read).
        """
        attached = self.mirror.attached.get(image)
        return attached.id if attached is not None else \
            self.repo.image(image).id

    def release(self, image):
        image_id = self._image_id(image)
        held = self.holds.release(image_id)
        if held is None:
            return {'image': image_id, 'released': False}
        return {'image': image_id, 'released': True,
                'held_ms': held.held_ms, 'expired': held.expired}

    def _mode(self, quiesce):
        mode = quiesce or self.default_quiesce
        if mode not in domains.QUIESCE_MODES:
            raise exception.InvalidInput('quiesce mode must be one of %s'
                                         % ', '.join(domains.QUIESCE_MODES))
        return mode

    def state(self, image, version):
        image_id = self._image_id(image)
        if image_id in self.mirror.attached:
            return self.mirror.state(image_id, version)
        return self.repo.image(image_id).version(version).state

    def wait_stable(self, image, version, timeout=600):
        image_id = self._image_id(image)
        deadline = time.monotonic() + timeout
        if image_id in self.mirror.attached:
            state = self.mirror.wait_stable(image_id, version, timeout)
        else:
            state = self.state(image_id, version)
        # Its group tag too (tagger.py), if one is on its way.
        self.tagger.wait_for(image_id, version,
                             max(0, deadline - time.monotonic()))
        return state

    def group_state(self, group, project=None):
        # Members whose tag is still on its way (tagger.py): listed,
        # pending, and the group not complete. Asked before the store:
        # the tagger drops a tag from its list only once it is recorded,
        # so a tag recorded meanwhile is in what the store says next.
        # (In the other order, a tag recorded between the two reads was
        # in neither, and its guest was told it is in no such group.)
        members, waiting = self.tagger.pending(group, project)
        # Members whose version (registered ahead) gets its tag when it
        # turns stable: pending here too (their tag is in the metadata).
        tag = groups.member_tag(group, members, project)
        for image_id, a in list(self.mirror.attached.items()):
            for number, marks in a.marks_in_flight().items():
                if groups.same_group(marks.get('group'), tag) and \
                        number > waiting.get(image_id, 0):
                    waiting[image_id] = number
                    members = members or marks['group']['members']
        found = groups.state(self.repo, group, project)
        if waiting and not found['members']:
            found['members'] = members      # the index is not made yet
        for image_id, number in waiting.items():
            known = found['versions'].get(image_id)
            if known is None or known['version'] < number:
                found['versions'][image_id] = {
                    'image': image_id, 'name': None, 'version': number,
                    'state': 'pending', 'created': None}
                found['complete'] = False
        return found

    def wait_persists(self, timeout):
        """Wait for every background persist; the images still
        persisting after ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        left = []
        for image_id, a in list(self.mirror.attached.items()) + \
                list(self.mirror.detaching.items()):
            if not a.wait_persisted(max(0, deadline - time.monotonic())):
                left.append(image_id)
        return left


def _group_key(tag):
    return (tag.get('id'), tag.get('project'))


def _phase(phases, name, since):
    """Time from ``since`` to now into ``phases[name]`` (ms); now."""
    now = time.perf_counter()
    phases[name] = round((now - since) * 1000, 3)
    return now
