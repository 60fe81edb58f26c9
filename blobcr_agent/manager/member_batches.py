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

from blobcr_common import exception

LOG = logging.getLogger(__name__)

# Members checkpointed at once on a host: their COMMITs are short, and
# each waits for its own guest's hold.
MEMBERS_AT_ONCE = 8


def _member(item):
    """(image, quiesce, project) of one member entry, checked."""
    if not isinstance(item, dict) or not isinstance(item.get('image'), str):
        raise exception.InvalidInput(
            'each member is a dict with its image: %r' % (item,))
    return item['image'], item.get('quiesce'), item.get('project')


def _all_or_raise(calls, undo):
    """The results of ``calls`` (futures) in their order; if any failed,
    ``undo(result)`` for each that did not, then the first error.
    """
    futures.wait(calls)
    errors = [c.exception() for c in calls if c.exception() is not None]
    if not errors:
        return [c.result() for c in calls]
    for call in calls:
        if call.exception() is None:
            undo(call.result())
    raise errors[0]


class MemberBatches(object):
    """Holds and checkpoints of several members in one call (a mixin of
    :class:`~blobcr_agent.manager.AgentManager`).
    """

    def _each_member(self, func, members):
        members = [_member(item) for item in members]
        if not members:
            raise exception.InvalidInput('no member given')
        if len({image for image, _, _ in members}) != len(members):
            raise exception.InvalidInput('a member is listed twice')
        workers = min(MEMBERS_AT_ONCE, len(members))
        with futures.ThreadPoolExecutor(workers) as pool:
            return [pool.submit(func, *m) for m in members]

    def hold_members(self, members, timeout=60):
        """Phase one: hold every member's guest still (as hold(), each),
        or none of them.
        """
        calls = self._each_member(
            lambda image, quiesce, _: self.hold(image, quiesce=quiesce,
                                                timeout=timeout),
            members)
        return _all_or_raise(calls, self._undo_hold)

    def _undo_hold(self, held):
        if held['held']:
            self.release(held['image'])

    def checkpoint_members(self, members, group, count, creator='rpc',
                           label=None):
        """Phase two: checkpoint every member as a member of ``group``
        (``count`` members in all), each released from its hold once
        COMMITted; all or none of the versions are kept.
        """
        def one(image, quiesce, project):
            started = time.monotonic()
            try:
                result = self.checkpoint(
                    image, quiesce=quiesce, group=group, members=count,
                    project=project, creator=creator, label=label,
                    tag_after_ack=True)
            finally:
                released = self.release(image)
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
