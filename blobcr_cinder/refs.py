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

"""How the driver names BlobCR things in Cinder's records: a volume's
image, a snapshot's version (``provider_id`` IMAGE@VERSION), and the
references a manage request may give.
"""

import datetime
import re

from cinder import exception
from cinder.i18n import _

# Version.made_by of a version whose Cinder snapshot was unmanaged:
# 'unmanaged:<snapshot id>', so that a manage request can name it again
# by that id.
UNMANAGED = 'unmanaged'
# Version.made_by of a version that is a Cinder snapshot made by manage
# (blobcr-cinder-sync's registrations, or an admin's): 'managed:<snapshot
# id>'. The agent's retention of guest checkpoints never obsoletes a
# labelled version, and its budget counts these as the guest's
# (blobcr_agent/manager/budget.py, MANAGED).
MANAGED = 'managed'
# A snapshot reference built from a snapshot's id, as Tempest's
# [volume] manage_snapshot_ref builds it ('_snapshot-%s' by default) and
# as RBD names its snapshots ('snapshot-%s').
SNAPSHOT_ID_REF = re.compile(r'^_?snapshot-([0-9a-fA-F-]{36})$')


def image_name(volume):
    return 'volume-%s' % volume.id


def version_ref(image, number):
    """A version as a snapshot's provider_id: IMAGE@VERSION."""
    return '%s@%d' % (image, number)


def parse_snapshot_id(provider_id):
    """(image id, version number) of a snapshot's provider_id."""
    try:
        image, version = provider_id.rsplit('@', 1)
        return image, int(version)
    except (AttributeError, ValueError):
        raise exception.InvalidSnapshot(
            reason=_('not a BlobCR snapshot (provider_id %r)')
            % (provider_id,))


def origin_ref(origin):
    """An image's origin (the version it was cloned from), or None."""
    return version_ref(origin['image'], origin['version']) if origin else None


def unmanaged_label(snapshot_id):
    return '%s:%s' % (UNMANAGED, snapshot_id)


def managed_label(snapshot_id):
    return '%s:%s' % (MANAGED, snapshot_id)


def managed_snapshot(made_by):
    """The id of the Cinder snapshot a managed version is, or None."""
    prefix = MANAGED + ':'
    if made_by and made_by.startswith(prefix):
        return made_by[len(prefix):]
    return None


def unmanaged_snapshot(made_by):
    """The id of the Cinder snapshot a version was, if it was unmanaged
    (None: it was not, or before labels named the snapshot).
    """
    prefix = UNMANAGED + ':'
    if made_by and made_by.startswith(prefix):
        return made_by[len(prefix):]
    return None


def iso(timestamp):
    return datetime.datetime.fromtimestamp(
        timestamp, datetime.timezone.utc).isoformat(timespec='seconds')
