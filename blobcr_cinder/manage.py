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

"""Cinder's manage API on BlobCR: what Cinder did not make becomes its
own. A guest's checkpoints (through the agent's endpoint) and images made
outside Cinder become Cinder snapshots and volumes;
blobcr-cinder-sync (blobcr_cinder/sync.py) registers every guest
checkpoint that way. A mixin of :class:`blobcr_cinder.driver.BlobCRDriver`
(its ``_call`` and ``storage_host``).
"""

import math

from cinder import context as cinder_context
from cinder import exception
from cinder.i18n import _
from cinder import objects
from cinder.volume import volume_utils
from oslo_log import log as logging
from oslo_utils import units

from blobcr_cinder import refs
from blobcr_cinder import specs
from blobcr_common import exception as agent_exception

LOG = logging.getLogger(__name__)
GiB = units.Gi


class ManageMixin(object):
    """manage_existing, manage_existing_snapshot, their listings and
    unmanage.
    """

    def _images(self):
        return self._call(self.storage_host, 'list_images')

    def _existing_image(self, existing_ref):
        """The image (list_images entry) a reference names:
        ``{"source-id": image id}`` or ``{"source-name": image name}``.
        """
        ref = existing_ref.get('source-id') or existing_ref.get('source-name')
        if not ref:
            raise exception.ManageExistingInvalidReference(
                existing_ref=existing_ref,
                reason=_('give source-id (a BlobCR image id) or '
                         'source-name (its name)'))
        images = self._images()
        found = [i for i in images if i['id'] == ref] or \
            [i for i in images if i['name'] == ref]
        if len(found) != 1:
            raise exception.ManageExistingInvalidReference(
                existing_ref=existing_ref,
                reason=(_('no BlobCR image named %(ref)s on %(host)s')
                        if not found else
                        _('more than one BlobCR image named %(ref)s on '
                          '%(host)s'))
                % {'ref': ref, 'host': self.storage_host})
        return found[0]

    @staticmethod
    def _claimed_by(volume_id, image):
        """A Cinder volume other than ``volume_id`` whose image it is."""
        others = objects.VolumeList.get_all(
            cinder_context.get_admin_context(),
            filters={'provider_id': image})
        return [v.id for v in others if v.id != volume_id]

    def manage_existing_get_size(self, volume, existing_ref):
        return int(math.ceil(self._existing_image(existing_ref)['size'] /
                             GiB))

    def manage_existing(self, volume, existing_ref):
        """Adopt an image: it keeps its id, name and versions."""
        specs.quiesce_of(volume.volume_type, None)        # refuse bad specs
        specs.refuse_encrypted(volume)
        image = self._existing_image(existing_ref)
        reason = self._not_manageable(image, self._claimed_by(volume.id,
                                                              image['id']))
        if reason:
            raise exception.ManageExistingInvalidReference(
                existing_ref=existing_ref, reason=reason)
        # Cinder sizes are whole GiB (manage_existing_get_size rounds up;
        # Cinder records it after this call): the rest reads as zeros.
        whole = int(math.ceil(image['size'] / GiB)) * GiB
        if whole > image['size']:
            self._call(self.storage_host, 'extend_image', image['id'], whole)
        LOG.info('volume %s manages BlobCR image %s', volume.id, image['id'])
        return {'provider_id': image['id']}

    @staticmethod
    def _not_manageable(image, claimed):
        if claimed:
            return _('image %(image)s is already volume %(volumes)s') % {
                'image': image['id'], 'volumes': ', '.join(claimed)}
        if image['attached_on']:
            return _('image %(image)s is attached on %(hosts)s: detach it '
                     'first') % {'image': image['id'],
                                 'hosts': ', '.join(image['attached_on'])}
        if image['newest_stable'] is None:
            return _('image %s has no stable version') % image['id']
        return None

    def unmanage(self, volume):
        LOG.info('volume %s no longer manages BlobCR image %s', volume.id,
                 volume.provider_id)

    def get_manageable_volumes(self, cinder_volumes, marker, limit, offset,
                               sort_keys, sort_dirs):
        managed = {v.provider_id: v.id for v in cinder_volumes}
        entries = []
        for image in self._images():
            cinder_id = managed.get(image['id'])
            reason = self._not_manageable(
                image, [cinder_id] if cinder_id else [])
            entries.append({
                'reference': {'source-id': image['id']},
                'size': int(math.ceil(image['size'] / GiB)),
                'safe_to_manage': reason is None,
                'reason_not_safe': reason,
                'cinder_id': cinder_id,
                'extra_info': {'name': image['name'],
                               'versions': str(len(image['versions'])),
                               'newest_stable': str(image['newest_stable']),
                               'origin': refs.origin_ref(image['origin'])}})
        return volume_utils.paginate_entries_list(
            entries, marker, limit, offset, sort_keys, sort_dirs)

    def _existing_version(self, snapshot, existing_ref):
        """``(image, version entry)`` of a stable version of the
        snapshot's volume, named by ``{"source-name": ...}`` (or
        source-id): ``IMAGE@VERSION``, or ``snapshot-<id>`` (also
        ``_snapshot-<id>``, Tempest's default) for the version that
        Cinder snapshot <id> was until it was unmanaged.
        """
        ref = existing_ref.get('source-name') or existing_ref.get('source-id')
        image = snapshot.volume.provider_id
        by_id = refs.SNAPSHOT_ID_REF.match(ref or '')
        listed = self._call(self.storage_host, 'list_versions', image)
        if by_id:
            number = self._unmanaged_version(image, listed, by_id.group(1),
                                             existing_ref)
        else:
            try:
                named, number = refs.parse_snapshot_id(ref)
            except exception.InvalidSnapshot:
                raise exception.ManageExistingInvalidReference(
                    existing_ref=existing_ref,
                    reason=_('give source-name IMAGE@VERSION (a BlobCR '
                             'version) or snapshot-ID (a snapshot this '
                             'volume had before it was unmanaged)'))
            if named != image:
                raise exception.ManageExistingInvalidReference(
                    existing_ref=existing_ref,
                    reason=_('%(ref)s is not a version of volume '
                             '%(volume)s (image %(image)s)')
                    % {'ref': ref, 'volume': snapshot.volume_id,
                       'image': image})
        found = [v for v in listed['versions'] if v['version'] == number]
        if not found or found[0]['state'] != 'stable':
            raise exception.ManageExistingInvalidReference(
                existing_ref=existing_ref,
                reason=_('version %(version)d of image %(image)s is '
                         '%(state)s')
                % {'version': number, 'image': image,
                   'state': found[0]['state'] if found else
                   _('not there (any more)')})
        return image, found[0]

    @staticmethod
    def _unmanaged_version(image, listed, snapshot_id, existing_ref):
        """The version of ``image`` (``listed``: its list_versions) that
        Cinder snapshot ``snapshot_id`` was until it was unmanaged
        (unmanage_snapshot's label).
        """
        label = refs.unmanaged_label(snapshot_id.lower())
        found = [v['version'] for v in listed['versions']
                 if v.get('made_by') == label]
        if not found:
            raise exception.ManageExistingInvalidReference(
                existing_ref=existing_ref,
                reason=_('no version of image %(image)s was snapshot '
                         '%(id)s (only an unmanaged snapshot of this '
                         'volume can be named by its id)')
                % {'image': image, 'id': snapshot_id})
        return found[-1]

    def manage_existing_snapshot_get_size(self, snapshot, existing_ref):
        self._existing_version(snapshot, existing_ref)
        return snapshot.volume.size

    def manage_existing_snapshot(self, snapshot, existing_ref):
        image, version = self._existing_version(snapshot, existing_ref)
        provider_id = refs.version_ref(image, version['version'])
        taken = [s.id for s in objects.SnapshotList.get_all_for_volume(
                 cinder_context.get_admin_context(), snapshot.volume_id)
                 if s.provider_id == provider_id and s.id != snapshot.id]
        if taken:
            raise exception.ManageExistingInvalidReference(
                existing_ref=existing_ref,
                reason=_('%(ref)s is already snapshot %(taken)s')
                % {'ref': provider_id, 'taken': ', '.join(taken)})
        # Marked in the store as this snapshot's, so that the agents'
        # retention of guest checkpoints never obsoletes it (issue 54,
        # finding 3). The label refuses a version obsoleted meanwhile,
        # and the retention re-checks the label in the same header swap:
        # one of the two wins, never both.
        try:
            # A version labelled otherwise (an unmanaged snapshot's, the
            # driver's own) keeps its label: retention spares it already.
            if not version.get('made_by') or \
                    refs.managed_snapshot(version['made_by']):
                self.api.label(self.storage_host, image,
                               version['version'],
                               refs.managed_label(snapshot.id))
        except (agent_exception.ImageNotFound,
                agent_exception.VersionNotFound,
                agent_exception.VersionNotStable) as e:
            raise exception.ManageExistingInvalidReference(
                existing_ref=existing_ref,
                reason=_('version %(ref)s is gone: %(error)s')
                % {'ref': provider_id, 'error': e})
        # Only the reference: the snapshot keeps the metadata its manage
        # request gave, as given (Tempest checks it; blobcr-cinder-sync
        # gives the version's facts itself).
        return {'provider_id': provider_id}

    def unmanage_snapshot(self, snapshot):
        """The version stays; labelled with the snapshot's id, so that
        blobcr-cinder-sync does not register it again and a manage
        request can name it by that id (``snapshot-<id>``).
        """
        image, version = refs.parse_snapshot_id(snapshot.provider_id)
        try:
            self.api.label(self.storage_host, image, version,
                           refs.unmanaged_label(snapshot.id))
        except (agent_exception.ImageNotFound,
                agent_exception.VersionNotFound):
            pass

    def get_manageable_snapshots(self, cinder_snapshots, marker, limit,
                                 offset, sort_keys, sort_dirs):
        """The stable versions of this backend's volumes, safe to manage
        when they are checkpoints nobody labelled (a guest's) and not
        snapshots yet. Each entry's source_reference names the volume
        (``volume_id``) that a manage request must give.
        """
        managed = {s.provider_id: s.id for s in cinder_snapshots}
        managed_ids = set(managed.values())
        volumes = {v.provider_id: v
                   for v in objects.VolumeList.get_all_by_host(
                       cinder_context.get_admin_context(), self.host)
                   if v.provider_id}
        entries = []
        for image in self._images():
            volume = volumes.get(image['id'])
            if volume is None:
                continue
            for v in image['versions']:
                # Pending (a checkpoint in flight, the mirror's
                # reservation), gone, or the volume's first content: none
                # is a snapshot to offer.
                if v['state'] != 'stable' or v['parent'] is None:
                    continue
                ref = refs.version_ref(image['id'], v['version'])
                if ref in managed and not v['made_by']:
                    # A snapshot registered before versions were marked
                    # (issue 54): marked now, before retention finds it.
                    self._mark_managed(image['id'], v, managed[ref])
                was = refs.unmanaged_snapshot(v['made_by'])
                # Labelled by a manage whose snapshot is no more (its
                # record removed without the driver's delete): offered
                # again.
                stale = refs.managed_snapshot(v['made_by']) and \
                    ref not in managed and \
                    refs.managed_snapshot(v['made_by']) not in managed_ids
                # Unsafe, so that blobcr-cinder-sync leaves it alone: an
                # unmanaged snapshot (named by its old id), or one of the
                # driver's own versions.
                reason = (
                    'already a snapshot' if ref in managed else
                    'unmanaged snapshot %s' % was if was else
                    'made by %s, not a checkpoint' % v['made_by']
                    if v['made_by'] and not stale else None)
                entries.append({
                    'reference': {'source-name':
                                  'snapshot-%s' % was if was else ref},
                    'size': volume.size,
                    'safe_to_manage': reason is None,
                    'reason_not_safe': reason,
                    'cinder_id': managed.get(ref),
                    'extra_info': {
                        'version': str(v['version']),
                        'parent': str(v['parent']),
                        'created': refs.iso(v['created']),
                        'group': (v['group'] or {}).get('id'),
                        'made_by': v['made_by']},
                    'source_reference': {'source-id': image['id'],
                                         'volume_id': volume.id}})
        return volume_utils.paginate_entries_list(
            entries, marker, limit, offset, sort_keys, sort_dirs)

    def _mark_managed(self, image, version, snapshot_id):
        try:
            self.api.label(self.storage_host, image, version['version'],
                           refs.managed_label(snapshot_id))
            version['made_by'] = refs.managed_label(snapshot_id)
        except agent_exception.BlobCRError as e:
            LOG.warning('could not mark version %d of image %s as snapshot '
                        '%s: %s', version['version'], image, snapshot_id, e)
