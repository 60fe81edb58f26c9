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

"""The checkpoint tree the OSC plugin draws, from Cinder-shaped records
(the functional test drives the real CLI against real Cinder).
"""

import types

from blobcrclient import chain


def volume(id, snapshot_id=None, source=None):
    return types.SimpleNamespace(id=id, name=id, status='available', size=1,
                                 created_at='', snapshot_id=snapshot_id,
                                 source_volume_id=source)


def snapshot(id, version, parent, created='t'):
    meta = {'blobcr:version': str(version), 'other': 'x'}
    if parent is not None:
        meta['blobcr:parent'] = str(parent)
    return types.SimpleNamespace(id=id, name=id, status='available', size=1,
                                 created_at=created, metadata=meta)


def test_tree_follows_parents_and_clones():
    snaps = {'vol': [snapshot('s4', 4, 3), snapshot('s2', 2, 1),
                     snapshot('s3', 3, 2), snapshot('s6', 6, 5)],
             'clone': [snapshot('c2', 2, 1)]}
    volumes = [volume('vol'), volume('clone', snapshot_id='s3'),
               volume('copy', source='vol')]
    root = chain.build(volumes[0], lambda v: snaps.get(v, []), volumes)
    lines = [(text, node.id) for text, node in chain.walk(root)]
    assert lines == [
        ('volume vol', 'vol'),
        # v2's parent (1) is not a snapshot: it hangs from the volume.
        ('├─ v2 s2', 's2'),
        ('│  └─ v3 s3', 's3'),
        ('│     ├─ v4 s4', 's4'),
        ('│     └─ volume clone', 'clone'),
        ('│        └─ v2 c2', 'c2'),
        ('├─ v6 s6', 's6'),
        ('└─ volume copy', 'copy')]
    assert chain.blobcr_fields(snaps['vol'][0]) == {'version': '4',
                                                    'parent': '3'}


def test_state_and_maker_of_checkpoints():
    driver = snapshot('d', 2, 1)
    driver.metadata['blobcr:host'] = 'compute-a'
    synced = snapshot('g', 3, 2)        # registered by manage: no host
    labelled = snapshot('l', 4, 3)
    labelled.metadata['blobcr:made_by'] = 'cinder'
    failed = snapshot('f', 5, 4)
    failed.status = 'error'
    pending = snapshot('p', 6, 5)
    pending.status = 'creating'
    nodes = {n.id: n for n in chain.checkpoints_of(
        [driver, synced, labelled, failed, pending])}
    assert {k: chain.made_by(n) for k, n in nodes.items()} == {
        'd': 'operator', 'g': 'guest', 'l': 'operator', 'f': 'guest',
        'p': 'guest'}
    assert {k: chain.state_of(n) for k, n in nodes.items()} == {
        'd': 'stable', 'g': 'stable', 'l': 'stable', 'f': 'failed',
        'p': 'pending'}


def test_clones_found_by_cinderclient_attribute():
    # Horizon's api.cinder wraps cinderclient volumes: source_volid.
    vol = volume('vol')
    copy = types.SimpleNamespace(id='copy', name='copy', status='available',
                                 size=1, created_at='', snapshot_id=None,
                                 source_volid='vol')
    root = chain.build(vol, lambda v: [], [vol, copy])
    assert [n.id for _, n in chain.walk(root)] == ['vol', 'copy']
