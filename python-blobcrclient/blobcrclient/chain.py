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

"""The checkpoint chain of a volume, built from what Cinder returns.

A checkpoint is a Cinder snapshot of a BlobCR volume; the driver records
its image version and parent version in the snapshot's metadata
(``blobcr:version``, ``blobcr:parent``...). A version whose parent is
not a listed snapshot (an internal version, or a deleted snapshot) hangs
from the volume. Volumes made from a checkpoint hang from it, with their
own chains.
"""

import dataclasses
import typing

META = 'blobcr:'
FIELDS = ('version', 'parent', 'bytes_written', 'ack_ms', 'held_ms',
          'quiesce', 'host', 'image', 'group', 'made_by')
# A snapshot's status as a version's state.
STATES = {'available': 'stable', 'creating': 'pending', 'error': 'failed',
          'error_deleting': 'failed'}


@dataclasses.dataclass
class Node(object):
    kind: str                       # 'volume' or 'checkpoint'
    id: str
    name: str
    status: str
    size: int
    created: str = ''
    blobcr: dict = dataclasses.field(default_factory=dict)
    children: typing.List['Node'] = dataclasses.field(default_factory=list)


def blobcr_fields(snapshot):
    """The driver's metadata of a snapshot, keys without the prefix."""
    meta = snapshot.metadata or {}
    return {k[len(META):]: v for k, v in meta.items() if k.startswith(META)}


def number(text):
    """A metadata value as a number: int if whole, float otherwise, None
    if missing or not a number.
    """
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return int(value) if value.is_integer() else value


def version_of(node):
    """The image version of a checkpoint node (None if unknown)."""
    value = number(node.blobcr.get('version'))
    return value if isinstance(value, int) else None


def state_of(node):
    """pending, stable or failed (Cinder's status for the others)."""
    return STATES.get(node.status, node.status)


def made_by(node):
    """Who took a checkpoint: ``guest`` or ``operator``.

    The driver's own snapshots record the host that took them (and
    ``made_by`` where it is recorded); versions a guest made and
    blobcr-cinder-sync registered through manage record neither.
    """
    if node.blobcr.get('made_by') or 'host' in node.blobcr:
        return 'operator'
    return 'guest'


def source_volume_of(volume):
    """The volume a volume was cloned from (openstacksdk names it
    source_volume_id, cinderclient source_volid).
    """
    return (getattr(volume, 'source_volume_id', None)
            or getattr(volume, 'source_volid', None))


def checkpoint_node(snapshot):
    return Node('checkpoint', snapshot.id, snapshot.name or '',
                snapshot.status, snapshot.size, snapshot.created_at or '',
                blobcr_fields(snapshot))


def checkpoints_of(snapshots):
    """Checkpoint nodes of snapshots, by version (unknown ones last)."""
    return sorted((checkpoint_node(s) for s in snapshots),
                  key=lambda n: (version_of(n) is None, version_of(n) or 0,
                                 n.created))


def build(volume, snapshots_of, volumes, depth=8):
    """The tree under ``volume``: ``snapshots_of(volume_id)`` lists its
    snapshots, ``volumes`` every volume the user sees (for clones).
    """
    root = Node('volume', volume.id, volume.name or '', volume.status,
                volume.size, volume.created_at or '')
    if depth <= 0:
        return root
    checkpoints = checkpoints_of(snapshots_of(volume.id))
    by_version = {version_of(n): n for n in checkpoints
                  if version_of(n) is not None}
    for node in checkpoints:
        try:
            parent = by_version.get(int(node.blobcr.get('parent')))
        except (TypeError, ValueError):
            parent = None
        (parent or root).children.append(node)
    for node in checkpoints:        # after the versions that follow it
        for clone in volumes:
            if clone.snapshot_id == node.id:
                node.children.append(build(clone, snapshots_of, volumes,
                                           depth - 1))
    for clone in volumes:
        if source_volume_of(clone) == volume.id:
            root.children.append(build(clone, snapshots_of, volumes,
                                       depth - 1))
    return root


def walk(node, prefix='', last=True, top=True):
    """Yield (tree text, node), depth first."""
    yield _label(node, prefix, last, top), node
    inner = '' if top else prefix + ('   ' if last else '│  ')
    for k, child in enumerate(node.children):
        yield from walk(child, inner, k == len(node.children) - 1, False)


def _label(node, prefix, last, top):
    text = ('volume %s' % (node.name or node.id) if node.kind == 'volume'
            else 'v%s %s' % (node.blobcr.get('version', '?'),
                             node.name or node.id))
    return text if top else prefix + ('└─ ' if last else '├─ ') + text
