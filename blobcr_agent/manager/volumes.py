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

"""Versions and volumes: what the Cinder driver and blobcr-manage ask of
images, attached here or not (clone, versions and labels, create,
delete, extend, snapshot, revert, delete_snapshot, import, export,
capacity, GC).

Invariants: the content of a detached image is its head (the stable
version that turned stable last) once no detach is under way: a detach
returns while its final checkpoint still persists (its pins say
"detaching"), so every operation on a detached image settles first
(waits for that, bounded); one attached elsewhere is in that host's
mirror, so snapshot, revert and import refuse it; deleting a snapshot
never loses the image's content (a head obsoleted gets a copy in the
same header update).
"""

import os
import time

from blobcr_agent.repository import gc
from blobcr_agent.repository import image as image_mod
from blobcr_agent.repository import treeview
from blobcr_common import exception


class Volumes(object):
    """Versions and volumes (a mixin of
    :class:`~blobcr_agent.manager.AgentManager`).
    """

    def settle(self, image):
        """The image's header once nothing persists it in the
        background: no host detaching it (its final versions persisting,
        mirror/service.py) and, detached, no version pending (a persist
        an agent resumed after its restart, a copy being made); Busy
        after ``settle_timeout`` seconds. The versions an attached
        image's mirror has in flight are not waited for.
        """
        deadline = time.monotonic() + self.settle_timeout
        while True:
            header = self.repo.image(image)
            busy = _background_writes(header, self.mirror.attached,
                                      self.repo.pending_timeout)
            if not busy:
                return header
            if time.monotonic() >= deadline:
                raise exception.Busy('image %s %s; try again'
                                     % (header.id, busy))
            time.sleep(0.1)

    def clone(self, image, version=None, name=None):
        self.settle(image)
        return treeview.summary(self.repo.clone(image, version, name))

    def list_versions(self, image):
        header = self.repo.image(image)
        head = header.head()
        return {'image': header.id, 'name': header.name,
                'origin': header.origin,
                'head': head.number if head else None,
                'epoch': header.epoch,
                'versions': [_version_dict(v) for v in header.versions]}

    def label(self, image, version, made_by):
        if not isinstance(made_by, str) or not 0 < len(made_by) <= 64:
            raise exception.InvalidInput('a label is 1-64 characters')
        self.repo.label(image, version, made_by)
        return self._version_of(self.repo.image(image).id, version)

    def obsolete(self, image, versions):
        self.repo.obsolete(image, versions)
        self.collector.kick()
        return self.list_versions(image)

    def create_image(self, name, size, chunk_size=None):
        """A blank volume: an image whose version 1 is all zeros, so
        that it can be snapshotted and cloned before anything is written.
        """
        header = self.repo.create_image(name, size, chunk_size=chunk_size)
        self.repo.commit(header.id, {})
        return treeview.summary(self.repo.image(header.id))

    def delete_image(self, image):
        header = self.settle(image)
        if header.id in self.mirror.attached:
            raise exception.InvalidInput('image %s is attached on %s: '
                                         'detach it first'
                                         % (header.id, self.host))
        self.repo.delete_image(header.id)
        self.collector.kick()
        return {'image': header.id, 'deleted': True}

    def extend_image(self, image, size):
        self.settle(image)
        return treeview.summary(self.repo.extend(image, size))

    def _attached_hosts(self, header):
        """The hosts whose mirror holds the image (pins name them; this
        host's own attachment may not have pinned anything yet).
        """
        hosts = {p.get('host') for v in header.versions for p in v.pins}
        if header.id in self.mirror.attached:
            hosts.add(self.host)
        return sorted(hosts)

    def _refuse_if_attached(self, header, what):
        """A detached image's content is its newest stable version; an
        attached one's is in the mirror of the host that pins it.
        """
        hosts = self._attached_hosts(header)
        if hosts:
            raise exception.InvalidInput(
                'image %s is attached (on %s): %s'
                % (header.id, ', '.join(hosts), what))

    def list_images(self):
        """Every image with its versions and the hosts it is attached
        on: what the Cinder driver offers to manage.
        """
        return [dict(treeview.summary(h), attached_on=self._attached_hosts(h),
                     versions=[_version_dict(v) for v in h.versions])
                for h in self.repo.images()]

    def snapshot(self, image):
        """A new version of a detached image equal to its current
        content, sharing every chunk. An attached image is checkpointed
        instead, by the agent of its host.
        """
        header = self.settle(image)
        self._refuse_if_attached(header, 'checkpoint it on that host')
        number = self.repo.commit_copy(header.id, made_by='snapshot')
        return self._version_of(header.id, number)

    def revert(self, image, version):
        """Make a detached image's content equal to ``version`` again:
        a new version sharing its tree; later versions stay.
        """
        header = self.settle(image)
        self._refuse_if_attached(header, 'detach it before reverting it')
        number = self.repo.commit_copy(header.id, version, made_by='revert')
        return self._version_of(header.id, number)

    def delete_snapshot(self, image, version):
        """Obsolete ``version`` without losing the image's content: if it
        is the head (the content of the image detached, or the base its
        mirror builds on) when it is obsoleted, a copy of it takes its
        place in the same header update (Repository.obsolete). Clones
        and other versions keep what they share with it.
        """
        header = self.settle(image)
        v = header.version(version)
        self.repo.obsolete(header.id, [v.number], keep_head=True)
        self.collector.kick()
        return self.list_versions(header.id)

    def import_file(self, image, path):
        """A new version of a detached image with the content of the raw
        file ``path`` on this host (the RPC endpoint holds it to
        ``[agent] export_dir``).
        """
        if not isinstance(path, str) or not os.path.isabs(path):
            raise exception.InvalidInput('import needs an absolute path')
        header = self.settle(image)
        self._refuse_if_attached(header, 'detach it before writing it')
        number = self.repo.write_file(header.id, path, made_by='import')
        return self._version_of(header.id, number)

    def _version_of(self, image_id, number):
        return dict(_version_dict(self.repo.image(image_id).version(number)),
                    image=image_id)

    def capacity(self):
        """The store's room for data, and what its images provision."""
        result = self.repo.backend.capacity()
        images = self.repo.images()
        result.update(provisioned_bytes=sum(h.size for h in images),
                      images=len(images),
                      backend=self.repo.backend.describe(),
                      max_exposure_s=round(_max_exposure(images), 1))
        return result

    def gc(self, grace=None, pending_timeout=None):
        return self.collector.run_once(grace, pending_timeout).as_dict()

    def export(self, image, version, path, timeout=600, overwrite=False):
        """Write ``image@version`` to ``path`` (absolute, on this host),
        waiting for the version to be persisted first. An existing
        ``path`` is replaced only with ``overwrite``. Any path: RPC
        callers are held to ``[agent] export_dir`` by the RPC endpoint.
        """
        if not isinstance(path, str) or not os.path.isabs(path):
            raise exception.InvalidInput('export needs an absolute path')
        if not overwrite and os.path.lexists(path):
            raise exception.InvalidInput(
                '%s exists; export with overwrite to replace it' % path)
        header = self.settle(image)
        if version is None:
            version = header.stable_version().number
        state = self.wait_stable(header.id, version, timeout)
        if state != image_mod.STABLE:
            raise exception.VersionNotStable(header.id, version, state)
        number = self.repo.export(header.id, version, path,
                                  overwrite=overwrite)
        return {'image': header.id, 'version': number, 'path': path,
                'size': header.size}


def _background_writes(header, attached_here, pending_timeout):
    """What ``header``'s image waits for before it is settled, said for
    an error (None: nothing).
    """
    hosts = sorted({p.get('host') for v in header.versions
                    for p in v.pins if p.get('detaching')})
    if hosts:
        return ('is being detached on %s: its last versions are still '
                'being persisted there (if that host is gone for good, '
                'release its pins with "blobcr-manage release-pins")'
                % ', '.join(hosts))
    if header.id in attached_here or any(v.pins for v in header.versions):
        return None
    now = time.time()
    pending = [v.number for v in header.versions
               if v.state == image_mod.PENDING and
               not gc.abandoned(v, now, pending_timeout)]
    if pending:
        return ('is detached but versions %s are still being persisted '
                '(an agent resuming them after a restart, or a copy being '
                'made)' % pending)
    return None


def _max_exposure(images):
    """The age of the newest stable version of the image attached the
    longest without one (any host: its pins say where): what a lost host
    could lose at most, bounded by protection checkpoints. 0 if none is
    attached.
    """
    now, ages = time.time(), [0.0]
    for header in images:
        head = header.head()
        if head is not None and any(v.pins for v in header.versions):
            ages.append(now - (head.stable_at or head.created))
    return max(ages)


def _version_dict(v):
    return {'version': v.number, 'state': v.state, 'parent': v.parent,
            'created': v.created, 'stable_at': v.stable_at,
            'chunks': v.chunks, 'stored_bytes': v.stored_bytes,
            'error': v.error or None, 'group': v.group,
            'made_by': v.made_by or None,
            'clones': [c['image'] for c in v.clones]}
