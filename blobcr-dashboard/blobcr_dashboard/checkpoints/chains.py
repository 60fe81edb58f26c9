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

"""The project's checkpoint chains and group checkpoints, from Cinder
through Horizon's API layer (openstack_dashboard.api.cinder).

The tree itself is blobcrclient.chain's (the OSC plugin draws the
same one); this module only fetches, picks the roots and adds what the
panel's actions need (which checkpoint a volume can revert to).
"""

import collections
import dataclasses
import typing

from openstack_dashboard.api import cinder

from blobcrclient import chain
from blobcrclient import restart


@dataclasses.dataclass
class Row(object):
    tree: str                   # the tree's drawing, as the CLI prints it
    node: chain.Node
    volume_id: str              # a checkpoint's volume, or the volume
    state: str
    made_by: str = ''
    # The volume's newest snapshot, and the volume detached (Cinder's
    # rules for a revert).
    revertible: bool = False
    root: str = ''              # the chain's root volume (for paging)


@dataclasses.dataclass
class GroupCheckpoint(object):
    id: str
    name: str
    group_id: str
    status: str
    created: str
    members: typing.List[typing.Tuple[str, chain.Node]]  # (volume, node)
    stable: int                 # members whose version is stable
    incomplete: typing.Optional[str]    # why it cannot be restarted
    restart: typing.Any = None          # the panel's last restart of it


def _newest_per_volume(snapshots):
    newest = {}
    for s in snapshots:
        held = newest.get(s.volume_id)
        if held is None or (s.created_at or '') > (held.created_at or ''):
            newest[s.volume_id] = s
    return {s.id for s in newest.values() if s.status == 'available'}


def _roots(volumes, snapshots):
    """Volumes that are not clones of something the user sees."""
    seen_volumes = {v.id for v in volumes}
    seen_snapshots = {s.id for s in snapshots}
    return [v for v in volumes
            if v.snapshot_id not in seen_snapshots
            and chain.source_volume_of(v) not in seen_volumes]


def rows(volumes, snapshots):
    """The chains of ``volumes`` as table rows, depth first."""
    by_volume = collections.defaultdict(list)
    volume_of = {}
    for s in snapshots:
        by_volume[s.volume_id].append(s)
        volume_of[s.id] = s.volume_id
    revertible = _newest_per_volume(snapshots)
    detached = {v.id for v in volumes if v.status == 'available'}
    roots = sorted(_roots(volumes, snapshots),
                   key=lambda v: (v.created_at or '', v.id))
    result = []
    for volume in roots:
        root = chain.build(volume, lambda vid: by_volume.get(vid, []),
                           volumes)
        for text, node in chain.walk(root):
            if node.kind == 'volume':
                result.append(Row(text, node, node.id, node.status,
                                  root=volume.id))
            else:
                result.append(Row(text, node, volume_of[node.id],
                                  chain.state_of(node), chain.made_by(node),
                                  node.id in revertible
                                  and volume_of[node.id] in detached,
                                  root=volume.id))
    return result


def page(all_rows, size, marker=None, prev_marker=None):
    """One page of whole chains: ``size`` chains after the one holding
    row ``marker`` (Horizon's next link), or before the one holding
    ``prev_marker`` (its previous link), or the first ones. Returns
    ``(rows, has_prev, has_more)``; an unknown marker (the row went
    away) gives the first page.
    """
    roots = list(dict.fromkeys(r.root for r in all_rows))
    root_of = {r.node.id: r.root for r in all_rows}
    start = 0
    if prev_marker in root_of:
        start = max(roots.index(root_of[prev_marker]) - size, 0)
    elif marker in root_of:
        start = roots.index(root_of[marker]) + 1
    shown = set(roots[start:start + size])
    return ([r for r in all_rows if r.root in shown], start > 0,
            start + size < len(roots))


def _as_dict(snapshot):
    return {'id': snapshot.id, 'status': snapshot.status,
            'metadata': snapshot.metadata or {}}


def groups(group_snapshots, snapshots, volumes=()):
    """Group checkpoints (Cinder group snapshots), newest first, with
    their members (by volume name, where ``volumes`` has it) and whether
    they are complete as blobcr-restart sees it.
    """
    names = {v.id: v.name for v in volumes}
    members = collections.defaultdict(list)
    for s in snapshots:
        if getattr(s, 'group_snapshot_id', None):
            members[s.group_snapshot_id].append(s)
    result = []
    for gs in group_snapshots:
        mine = sorted(members.get(gs.id, []), key=lambda s: s.volume_id)
        nodes = [(names.get(s.volume_id, s.volume_id),
                  chain.checkpoint_node(s)) for s in mine]
        result.append(GroupCheckpoint(
            gs.id, gs.name or gs.id, gs.group_id, gs.status,
            gs.created_at or '', nodes,
            sum(1 for _, n in nodes if chain.state_of(n) == 'stable'),
            restart.complete({'status': gs.status},
                             [_as_dict(s) for s in mine])))
    return sorted(result, key=lambda g: g.created, reverse=True)


def volume_get(request, volume_id):
    """One volume, without its servers' names: Horizon's volume_get asks
    Nova for them, and the panel needs none (nor a Nova).
    """
    return cinder.Volume(cinder.cinderclient(request).volumes.get(volume_id))
