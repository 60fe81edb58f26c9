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

"""The slot of a version taken from its reservation (mirror/taken.py):
what a restart after a SIGKILL folds into the cache's metadata. Real
files; the crash and power-cut sweeps (tests/functional) kill and cut
the agent at the slot's store.
"""

from blobcr_agent.mirror import taken


def _meta(reserved, persisting=None, following=()):
    return {'reserved': reserved, 'persisting': persisting,
            'following': list(following), 'marks': {}}


def test_a_taken_reservation_is_folded_in_flight_with_its_marks(tmp_path):
    slot = taken.Slot(str(tmp_path))
    slot.record(7, {7: {'made_by': 'cinder', 'group': 'g'}})
    slot.close()
    meta = _meta(7, persisting=5, following=[6])
    assert taken.fold(meta, str(tmp_path), [5, 6])
    assert (meta['persisting'], meta['following'], meta['reserved']) == \
        (5, [6, 7], None)
    assert meta['marks'] == {'7': {'made_by': 'cinder', 'group': 'g'}}


def test_a_slot_not_naming_the_reservation_changes_nothing(tmp_path):
    slot = taken.Slot(str(tmp_path))
    slot.record(4)
    for meta, in_flight in ((_meta(None), []),      # saved since
                            (_meta(5), []),         # a later reservation
                            (_meta(4, persisting=4), [4])):  # recorded
        before = dict(meta)
        assert not taken.fold(meta, str(tmp_path), in_flight)
        assert meta == before
    # Put back (a checkpoint refused Busy before its COMMIT): nothing.
    slot.record(None)
    assert taken.read(str(tmp_path)) is None
    assert not taken.fold(_meta(4), str(tmp_path), [])
    slot.close()


def test_a_torn_or_foreign_slot_reads_as_nothing(tmp_path):
    assert taken.read(str(tmp_path)) is None            # no file
    (tmp_path / taken.NAME).write_bytes(b'\0' * taken.SIZE)
    assert taken.read(str(tmp_path)) is None
    (tmp_path / taken.NAME).write_bytes(b'BCRTAKEN\xff\xff\x00\x00{')
    assert taken.read(str(tmp_path)) is None
    # An existing slot is reused in place, never grown.
    slot = taken.Slot(str(tmp_path))
    slot.record(3)
    slot.close()
    assert (tmp_path / taken.NAME).stat().st_size == taken.SIZE
    assert taken.read(str(tmp_path)) == (3, {})
