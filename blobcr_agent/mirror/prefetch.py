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

"""Restart profiles and prefetch (the journal paper's lazy restart).

The native core records the order in which chunks are first read after
an attach. At detach it is stored with the version the image was
attached from; an instance that later restarts from a version sharing
those chunks fetches them in that order ahead of its guest, a few at a
time, through the same fetch path as the guest's reads (a chunk is never
fetched twice, and never over a write: see mc_install).
"""

import logging
import threading

from blobcr_common import exception

LOG = logging.getLogger(__name__)

BATCH = 32


def save_profile(image):
    """Store ``image``'s first-read order since attach with the version it
    was attached from; the stored name, or None.
    """
    order = image.core.read_order()
    if order and image.attached_version is not None:
        return image.repo.save_profile(image.id, image.attached_version,
                                       order)
    return None


def start(image):
    """Start prefetching ``image`` in the order of its version's stored
    profile; the thread, or None when there is nothing to prefetch.
    """
    if image.attached_version is None:
        return None
    try:
        order = image.repo.load_profile(image.header, image.attached_version)
    except exception.BlobCRError as e:
        LOG.warning('no prefetch for %s: %s', image.id, e)
        return None
    if not order:
        return None
    thread = threading.Thread(target=_prefetch, args=(image, order),
                              daemon=True,
                              name='blobcr-prefetch-%s' % image.id[:8])
    thread.start()
    return thread


def _prefetch(image, order):
    for k in range(0, len(order), BATCH):
        if image._closing:
            return
        todo = [i for i in order[k:k + BATCH]
                if not image.core.is_present(i)]
        if todo:
            try:
                image.fetch(todo, reason='profile')
            except exception.BlobCRError as e:
                LOG.warning('prefetch of %s stopped: %s', image.id, e)
                return
