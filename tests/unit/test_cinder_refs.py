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

"""The references a manage request may give (blobcr_cinder/refs.py):
IMAGE@VERSION, and a snapshot's old id in the forms Tempest and RBD
build.
"""

import uuid

from cinder import exception
import pytest

from blobcr_cinder import refs


def test_a_snapshot_id_reference_in_tempests_and_rbds_forms():
    snapshot_id = str(uuid.uuid4())
    for template in ('snapshot-%s', '_snapshot-%s'):
        found = refs.SNAPSHOT_ID_REF.match(template % snapshot_id)
        assert found and found.group(1) == snapshot_id
    for other in ('volume-%s' % snapshot_id, 'xsnapshot-%s' % snapshot_id,
                  'snapshot-%s@3' % snapshot_id, 'snapshot-12', '%s@3'
                  % snapshot_id):
        assert refs.SNAPSHOT_ID_REF.match(other) is None, other


def test_an_unmanaged_label_names_its_snapshot_and_fits_a_label():
    snapshot_id = str(uuid.uuid4())
    label = refs.unmanaged_label(snapshot_id)
    assert len(label) <= 64                  # the agent's label limit
    assert refs.unmanaged_snapshot(label) == snapshot_id
    # Older labels, and the driver's own, name no snapshot.
    for other in ('unmanaged', 'cinder', 'kept', None, ''):
        assert refs.unmanaged_snapshot(other) is None


def test_version_references_round_trip_and_bad_ones_are_refused():
    image = uuid.uuid4().hex
    assert refs.parse_snapshot_id(refs.version_ref(image, 12)) == (image, 12)
    for bad in (None, 'no-version', '%s@x' % image):
        with pytest.raises(exception.InvalidSnapshot):
            refs.parse_snapshot_id(bad)
