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

"""A host's members of one group checkpoint in one call per phase: hold
them all, then checkpoint them all (agent API 1.14).

A group snapshot's caller made a call per member and phase: 16 members
on 4 hosts were 48 calls through the broker, and the slowest member
waited behind the others' (issue 36). Per host, the phases are one call
each, and every call is all or nothing on this host: a member that
fails undoes what the call did to the others (holds released before
the error is raised, versions taken forgotten once written), so that a
caller undoes nothing per member.

Each member's hold is released right after its own COMMIT: every member
of the group was held before any COMMITted (the caller's first phase),
so the versions stay consistent with each other, and no guest waits for
the slowest member's COMMIT.
"""

from concurrent import futures
import logging
import threading
import time

from blobcr_agent.repository import groups
from blobcr_common import exception

LOG = logging.getLogger(__name__)

# Members checkpointed at once on a host: their COMMITs are short, and
# each waits for its own guest's hold. The Cinder driver sends at most
# this many per call, so that one call lasts about one checkpoint.
MEMBERS_AT_ONCE = 8
# Members one call may name (threads and holds it may start).
MAX_MEMBERS_PER_CALL = 64


class Member(object):
    """One member entry of a call, checked: its image's id (attached
    here), quiesce mode and project, and whether phase one held it.
    """

    def __init__(self, item, resolve):
        if not isinstance(item, dict) or \
                not isinstance(item.get('image'), str):
            raise exception.InvalidInput(
                'each member is a dict with its image: %r' % (item,))
        self.image = resolve(item['image'])
        self.quiesce = item.get('quiesce')
        self.project = item.get('project')
        self.held = item.get('held') is True


def _all_or_raise(calls, undo):
    """The results of ``calls`` (futures) in their order; if any failed,
    ``undo(result)`` for each that did not (an undo that fails is logged:
    the others are still undone), then the first error.
    """
    futures.wait(calls)
    errors = [c.exception() for c in calls if c.exception() is not None]
    if not errors:
        return [c.result() for c in calls]
    for call in calls:
        if call.exception() is None:
            try:
                undo(call.result())
            except Exception:
                LOG.exception('could not undo %r after another member '
                              'failed', call.result())
    raise errors[0]


class MemberBatches(object):
    """Holds and checkpoints of several members in one call (a mixin of
    :class:`~blobcr_agent.manager.AgentManager`).
    """

    def _members(self, members):
        """The checked Members of a call: a list of 1 to
        MAX_MEMBERS_PER_CALL entries, each image attached here once.
        """
        if not isinstance(members, list) or \
                not 0 < len(members) <= MAX_MEMBERS_PER_CALL:
            raise exception.InvalidInput(
                'members: a list of 1 to %d members'
                % MAX_MEMBERS_PER_CALL)
        checked = [Member(item, lambda image: self.mirror.get(image).id)
                   for item in members]
        if len({m.image for m in checked}) != len(checked):
            raise exception.InvalidInput('a member is listed twice')
        return checked

    def _each_member(self, func, members):
        with futures.ThreadPoolExecutor(
                min(MEMBERS_AT_ONCE, len(members))) as pool:
            return [pool.submit(func, m) for m in members]

    def hold_members(self, members, timeout=60):
        """Phase one: hold every member's guest still (as hold(), each),
        or none of them.
        """
        members = self._members(members)
        calls = self._each_member(
            lambda m: self.hold(m.image, quiesce=m.quiesce, timeout=timeout),
            members)
        return _all_or_raise(calls, self._undo_hold)

    def _undo_hold(self, held):
        if held['held']:
            self.release(held['image'])

    def checkpoint_members(self, members, group, count, creator='rpc',
                           label=None):
        """Phase two: checkpoint every member as a member of ``group``
        (``count`` members in all), each released from its hold once
        COMMITted; all or none of the versions are kept. A member that
        phase one held (``held``) fails if its hold ended before its
        checkpoint (it expired: its guest ran on).
        """
        named = members
        try:
            members = self._members(members)
            groups.check(group, count)
            if len(members) > count:
                raise exception.InvalidInput(
                    '%d members named, of a group of %d'
                    % (len(members), count))
        except exception.BlobCRError:
            # Refused as a whole: no guest waits for its caller's
            # release (which may never come) to run on.
            self._release_named(named)
            raise

        def one(m):
            started = time.monotonic()
            hold = self.holds.get(m.image)
            try:
                if m.held and hold is None:
                    raise exception.QuiesceFailed(
                        'the hold of %s ended before its checkpoint: its '
                        'guest ran on' % m.image)
                result = self.checkpoint(
                    m.image, quiesce=m.quiesce, group=group, members=count,
                    project=m.project, creator=creator, label=label,
                    tag_after_ack=True)
            finally:
                released = self.release(m.image)
            if hold is not None and hold.expired:
                # Expired before the release: possibly before the
                # checkpoint joined it. Not consistent for sure.
                self._undo_checkpoint(result)
                raise exception.QuiesceFailed(
                    'the hold of %s expired before its checkpoint was '
                    'released' % m.image)
            if released['released']:
                # Phase one to this release: how long its guest stood
                # still for the group (held_ms: the part in its COMMIT).
                result['guest_held_ms'] = round(released['held_ms'], 3)
            # This member's own part of the call (the others' go on
            # meanwhile).
            result['member_ms'] = round(
                (time.monotonic() - started) * 1e3, 3)
            return result
        calls = self._each_member(one, members)
        return _all_or_raise(calls, self._undo_checkpoint)

    def _release_named(self, named):
        for item in named if isinstance(named, list) else ():
            if isinstance(item, dict) and isinstance(item.get('image'), str):
                try:
                    self.release(item['image'])
                except exception.BlobCRError:
                    pass            # not an image here: nothing held

    def _undo_checkpoint(self, result):
        # A version is forgotten once written (a pending one cannot be
        # obsoleted), in the background: the caller gets its error now.
        threading.Thread(target=self._forget_when_written,
                         args=(result['image'], result['version']),
                         name='blobcr-forget-member', daemon=True).start()

    def _forget_when_written(self, image, version):
        try:
            self.wait_stable(image, version, timeout=self.settle_timeout)
            self.delete_snapshot(image, version)
        except exception.BlobCRError as e:
            # Left labelled as the caller's and listed in no snapshot:
            # the Cinder driver obsoletes such versions at the volume's
            # next detach or revert (its _forget_superseded).
            LOG.warning('could not forget version %s of %s after another '
                        'member failed: %s', version, image, e)
