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

"""Groups and group snapshots: a consistent group snapshot is one BlobCR
group checkpoint across the hosts its members are attached to. A mixin
of :class:`blobcr_cinder.driver.BlobCRDriver` (its ``_call``,
``_take_version``, ``_take_members``, ``_wait_stable`` and
``_snapshot_model``).

Groups whose type asks for consistent snapshots are BlobCR group
checkpoints; for any other group Cinder's generic implementation (one
snapshot per volume) is right, and NotImplementedError is how a driver
asks for it.

The group checkpoint's phases, each sent to every host at once (one
after another, the hold grew by a call per member):

0. admit: each host checks the member count against the group's index
   once (agent API 1.11), before any guest is held;
1. hold: every attached member's guest is held still;
2. checkpoint: each member COMMITs, and is released.

Phase 2 starts only once every member is held, so the members are
consistent with each other. With agents at API 1.14, phases 1 and 2 are
one call per host (its members together), and each guest is released by
its agent right after its own COMMIT; below 1.14, a call per member and
phase, and a release phase after the last COMMIT.
"""

from concurrent import futures
import itertools
import time

from cinder import exception
from cinder.volume import volume_utils
from oslo_log import log as logging

LOG = logging.getLogger(__name__)

# Calls in flight at once in a phase (to hosts at 1.14, to members
# below it).
GROUP_PARALLEL = 16
# Members per hold_members or checkpoint_members call: what an agent
# checkpoints at once (blobcr_agent.manager.member_batches).
MEMBERS_PER_CALL = 8


def _in_parallel(func, items, done):
    """``func(item)`` for every item, up to GROUP_PARALLEL at a time;
    each result is appended to ``done`` as it comes (what a caller
    undoes on failure), which is returned; the first error is raised
    once every call ended.
    """
    if not items:
        return done
    with futures.ThreadPoolExecutor(min(GROUP_PARALLEL, len(items))) as pool:
        calls = [pool.submit(func, item) for item in items]
        for call in futures.as_completed(calls):
            if call.exception() is None:
                done.append(call.result())
    for call in calls:
        if call.exception() is not None:
            raise call.exception()
    return done


def _each(items, delete, what):
    """Delete every item of a group: the model updates Cinder expects,
    an item that fails in error_deleting and the others deleted.
    """
    updates = []
    for item in items:
        try:
            delete(item)
            updates.append({'id': item.id, 'status': 'deleted'})
        except exception.CinderException as e:
            LOG.error('%s of %s: %s', item.id, what, e)
            updates.append({'id': item.id, 'status': 'error_deleting'})
    return updates


def _by_host(attached):
    """[(host, [snapshot, ...])] of the attached members, by host, in
    calls of at most MEMBERS_PER_CALL members (each call is answered
    within one checkpoint's RPC timeout).
    """
    hosts = {}
    for snapshot, host in attached:
        if host:
            hosts.setdefault(host, []).append(snapshot)
    return [(host, snapshots[k:k + MEMBERS_PER_CALL])
            for host, snapshots in sorted(hosts.items())
            for k in range(0, len(snapshots), MEMBERS_PER_CALL)]


class GroupsMixin(object):
    """create/delete/update_group, create/delete_group_snapshot and
    create_group_from_src.
    """

    @staticmethod
    def _consistent_only(group):
        if not volume_utils.is_group_a_cg_snapshot_type(group):
            raise NotImplementedError()

    def create_group(self, context, group):
        self._consistent_only(group)
        return {'status': 'available'}

    def delete_group(self, context, group, volumes):
        self._consistent_only(group)
        return {'status': 'deleted'}, _each(
            volumes, self.delete_volume, 'group %s' % group.id)

    def update_group(self, context, group, add_volumes=None,
                     remove_volumes=None):
        self._consistent_only(group)
        return None, None, None

    def create_group_snapshot(self, context, group_snapshot, snapshots):
        """One BlobCR group checkpoint across the attached members (the
        phases above), complete once every member is stable; detached
        members are copies of their content. A guest without a domain,
        or quiesce none, holds nothing.
        """
        self._consistent_only(group_snapshot)
        attached = [(s, self._attached_host(s.volume)) for s in snapshots]
        members = sum(1 for _, host in attached if host)
        group = 'cinder-%s' % group_snapshot.id
        taken, updates, held = [], [], []
        try:
            _in_parallel(
                lambda hp: self._call(hp[0], 'admit_group', group, members,
                                      project=hp[1]),
                sorted({(host, s.volume.project_id)
                        for s, host in attached if host}), [])
            # How long the members were held still (first hold to the
            # last release), recorded on each member's snapshot.
            since = time.monotonic()
            if self.api.can_batch_members(
                    hosts=sorted({host for _, host in attached if host})):
                self._checkpoint_by_host(attached, group, members, held,
                                         taken)
            else:
                self._checkpoint_each(attached, group, members, held, taken)
            span = (time.monotonic() - since) * 1000
            for snapshot, result in taken:
                result['group_hold_ms'] = span
            for snapshot, result in taken:
                self._wait_stable(result['host'], result['image'],
                                  result['version'])
                updates.append(dict(self._snapshot_model(snapshot, result),
                                    id=snapshot.id, status='available'))
        except Exception:
            # Any error, not only Cinder's: an agent's builtin one (an
            # OSError) reaches here as itself, and the members held on
            # other hosts stayed still until their hold timed out.
            self._release(held)
            self._forget_versions(taken)
            raise
        return {'status': 'available'}, updates

    def _checkpoint_each(self, attached, group, members, held, taken):
        """Phases 1 and 2 a call per member, then a release phase."""
        if members > 1:
            # All listed first: a hold whose answer is lost may be taken.
            held.extend((host, self._image_of(s.volume))
                        for s, host in attached if host)
            _in_parallel(lambda sh: self._hold(sh[0].volume, sh[1]),
                         [(s, host) for s, host in attached if host], [])
        _in_parallel(
            lambda sh: (sh[0], self._take_version(
                sh[0].volume, sh[1], group=group, members=members,
                project=sh[0].volume.project_id)), attached, taken)
        self._release(held)

    def _checkpoint_by_host(self, attached, group, members, held, taken):
        """Phases 1 and 2 a call per host (API 1.14; several for more
        than MEMBERS_PER_CALL members); each agent releases its members
        once COMMITted. Detached members' copies are taken beside
        phase 2.
        """
        hosts = _by_host(attached)
        held_images = set()
        if members > 1:
            # All listed first: a hold whose answer is lost may be taken.
            held.extend((host, self._image_of(s.volume))
                        for host, snapshots in hosts for s in snapshots)
            for images in _in_parallel(
                    lambda hs: self._hold_members(*hs), hosts, []):
                held_images.update(images)

        def take(host_members):
            host, snapshots = host_members
            if host is None:        # a detached member: a copy
                return [(snapshots[0],
                         self._take_version(snapshots[0].volume, None))]
            return self._take_members(host, snapshots, group, members,
                                      held_images)

        batches = []
        try:
            _in_parallel(take, hosts + [(None, [s]) for s, host in attached
                                        if not host], batches)
        finally:
            taken.extend(itertools.chain.from_iterable(batches))
        # Each was released after its COMMIT by its agent.
        del held[:]

    def _hold(self, volume, host):
        """Hold the guest of an attached volume still (phase one of a
        group snapshot): released at the latest after the RPC timeout
        plus the checkpoints' time, by the agent itself.
        """
        image = self._image_of(volume)
        self._call(host, 'hold', image, quiesce=self._quiesce_of(volume),
                   timeout=3 * self.configuration.blobcr_rpc_timeout)
        return host, image

    def _hold_members(self, host, snapshots):
        """Phase one for ``host``'s members at once: the images whose
        guest is held (a member without a domain holds nothing).
        """
        got = self._call(host, 'hold_members', [
            {'image': self._image_of(s.volume),
             'quiesce': self._quiesce_of(s.volume)} for s in snapshots],
            timeout=3 * self.configuration.blobcr_rpc_timeout)
        return [h['image'] for h in got if h['held']]

    def _release(self, held):
        def release(one):
            host, image = one
            try:
                self.api.release(host, image)
            except Exception as e:
                # The agent resumes the guest when the hold times out.
                LOG.warning('could not release the hold of %s on %s: %s',
                            image, host, e)
        _in_parallel(release, list(held), [])
        del held[:]

    def _forget_versions(self, taken):
        """Obsolete the versions of a failed group snapshot, each once
        written (a pending version cannot be); one that cannot be stays
        labelled as the driver's, and _forget_superseded obsoletes it at
        the volume's next detach or revert.
        """
        def forget(one):
            snapshot, result = one
            image, version = result['image'], result['version']
            try:
                self.api.wait_stable(result['host'], image, version,
                                     timeout=self.configuration
                                     .blobcr_rpc_timeout)
                self.api.delete_snapshot(self.storage_host, image, version)
            except Exception as e:
                LOG.warning('could not forget version %d of %s after a '
                            'failure: %s', version, image, e)
        _in_parallel(forget, list(taken), [])

    def delete_group_snapshot(self, context, group_snapshot, snapshots):
        self._consistent_only(group_snapshot)
        return {'status': 'deleted'}, _each(
            snapshots, self.delete_snapshot,
            'group snapshot %s' % group_snapshot.id)

    def create_group_from_src(self, context, group, volumes,
                              group_snapshot=None, snapshots=None,
                              source_group=None, source_vols=None):
        self._consistent_only(group)
        updates = []
        if group_snapshot is not None:
            by_id = {s.id: s for s in snapshots}
            for volume in volumes:
                updates.append(dict(self.create_volume_from_snapshot(
                    volume, by_id[volume.snapshot_id]), id=volume.id))
        else:
            sources = {v.id: v for v in source_vols}
            for volume in volumes:
                updates.append(dict(self.create_cloned_volume(
                    volume, sources[volume.source_volid]), id=volume.id))
        return None, updates
