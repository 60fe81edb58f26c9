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

"""``openstack blobcr checkpoint list|show|tree VOLUME``."""

from osc_lib.command import command

from blobcrclient import chain

COLUMNS = ('ID', 'Name', 'Version', 'Parent', 'Status', 'Size',
           'Bytes Written', 'Ack ms', 'Held ms', 'Quiesce', 'Created At')


def _row(node):
    """A checkpoint's columns; Cinder keeps metadata as strings, the
    numbers are given back as numbers (``-f json`` sorts and sums them).
    """
    b = node.blobcr
    return (node.id, node.name, chain.number(b.get('version')),
            chain.number(b.get('parent')), node.status, node.size,
            chain.number(b.get('bytes_written')),
            chain.number(b.get('ack_ms')), chain.number(b.get('held_ms')),
            b.get('quiesce'), node.created)


class _VolumeCommand(object):

    def _client(self):
        return self.app.client_manager.blobcr

    def _snapshots_of(self, volume_id):
        return list(self._client().snapshots(details=True,
                                             volume_id=volume_id))

    def _volume(self, name_or_id):
        return self._client().find_volume(name_or_id, ignore_missing=False)

    def _add_volume(self, parser):
        parser.add_argument('volume', metavar='<volume>',
                            help='Volume (name or ID)')
        return parser


class ListCheckpoint(_VolumeCommand, command.Lister):
    """List checkpoints, oldest version first: of one volume
    (``--volume``), or of every BlobCR volume the user sees.
    """

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('--volume', metavar='<volume>',
                            help='Only the checkpoints of this volume '
                                 '(name or ID)')
        parser.add_argument('--status', metavar='<status>',
                            help='Only checkpoints with this snapshot '
                                 'status (available, creating, error...)')
        # The positional form of earlier releases.
        parser.add_argument('volume_positional', metavar='<volume>',
                            nargs='?', help='Same as --volume (deprecated)')
        return parser

    def take_action(self, parsed_args):
        name = parsed_args.volume or parsed_args.volume_positional
        filters = {'status': parsed_args.status} \
            if parsed_args.status else {}
        if name:
            filters['volume_id'] = self._volume(name).id
        snapshots = list(self._client().snapshots(details=True, **filters))
        if not name:
            # Every snapshot the user sees: only BlobCR's (a checkpoint
            # still being made has no BlobCR metadata yet; --volume
            # shows it).
            snapshots = [s for s in snapshots if chain.blobcr_fields(s)]
        nodes = chain.checkpoints_of(snapshots)
        by_id = {s.id: s.volume_id for s in snapshots}
        return COLUMNS + ('Volume ID',), [_row(n) + (by_id[n.id],)
                                          for n in nodes]


class ShowCheckpoint(_VolumeCommand, command.ShowOne):
    """Show one checkpoint: its version, parent, sizes and times."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('checkpoint', metavar='<checkpoint>',
                            help='Checkpoint (snapshot name or ID)')
        return parser

    def take_action(self, parsed_args):
        snapshot = self._client().find_snapshot(parsed_args.checkpoint,
                                                ignore_missing=False)
        node = chain.checkpoint_node(snapshot)
        columns = COLUMNS + ('Volume ID', 'Image', 'Host')
        return columns, _row(node) + (snapshot.volume_id,
                                      node.blobcr.get('image'),
                                      node.blobcr.get('host'))


class TreeCheckpoint(_VolumeCommand, command.Lister):
    """Show the chain of a volume as a tree: its checkpoints by parent
    version, and the volumes cloned from them with their own chains.
    """

    def get_parser(self, prog_name):
        return self._add_volume(super().get_parser(prog_name))

    def take_action(self, parsed_args):
        volume = self._volume(parsed_args.volume)
        volumes = list(self._client().volumes(details=True))
        root = chain.build(volume, self._snapshots_of, volumes)
        columns = ('Tree', 'Kind') + COLUMNS
        return columns, [(text, node.kind) + _row(node)
                         for text, node in chain.walk(root)]
