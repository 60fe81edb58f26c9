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

"""The image header: an image's geometry and its list of versions.

One header object per image, replaced as a whole by compare-and-set. A
version turns stable by the one header write that sets its root and its
state together, after every chunk and node it references is durable.

A version may carry *pins*: a mirror pins the version it reads untouched
chunks from, for as long as the image is attached, and GC keeps a pinned
version's objects even after it was marked obsolete. GC prunes the
entries of obsolete versions it no longer needs (and of failed ones after
a while) so that the header of an image checkpointed every few seconds
stays small; ``last_version`` keeps the numbering monotonic and
``pruned`` counts the entries removed.
"""

import dataclasses
import json
import typing

from blobcr_agent.repository import tree
from blobcr_common import exception

FORMAT = 1

PENDING = 'pending'
STABLE = 'stable'
FAILED = 'failed'
OBSOLETE = 'obsolete'
STATES = (PENDING, STABLE, FAILED, OBSOLETE)


@dataclasses.dataclass
class Version(object):
    number: int
    state: str
    parent: typing.Optional[int]
    created: float
    owner: str = ''
    heartbeat: float = 0.0
    root: typing.Optional[str] = None       # hex of the root reference
    stable_at: typing.Optional[float] = None
    chunks: int = 0                         # chunks this version wrote
    stored_bytes: int = 0                   # bytes of objects it wrote
    error: str = ''
    clones: typing.List[dict] = dataclasses.field(default_factory=list)
    profile: typing.Optional[str] = None    # chunk object: read order
    group: typing.Optional[dict] = None     # {"id": ..., "members": n}
    # {"host", "holder", "boot", "ns", "at"}: readers that need it whole
    pins: typing.List[dict] = dataclasses.field(default_factory=list)
    # Who made it when it is not a checkpoint to show as one: "snapshot"
    # (a copy of a detached image), "revert", "kept" (a copy taking a
    # deleted snapshot's place), or a checkpoint caller's label ("cinder").
    made_by: str = ''
    # The order in which versions turned stable (ImageHeader.head): set
    # by the header update that makes it stable. Numbers are given when a
    # version is registered, which may be long before (a reservation, a
    # pipelined checkpoint), so they do not tell which content is newest.
    seq: int = 0

    @property
    def root_ref(self):
        return bytes.fromhex(self.root) if self.root else None


_OPTIONAL_HEADER = ('last_version', 'pruned', 'epoch', 'taken_over_by')
_OPTIONAL_VERSION = ('pins', 'made_by', 'seq')


@dataclasses.dataclass
class ImageHeader(object):
    id: str
    name: str
    size: int
    chunk_size: int
    fanout: int
    created: float
    origin: typing.Optional[dict] = None    # {"image": id, "version": n}
    deleted: bool = False
    versions: typing.List[Version] = dataclasses.field(default_factory=list)
    format: int = FORMAT
    last_version: int = 0       # highest number given, set when pruning
    pruned: int = 0             # entries GC removed (obsolete or failed)
    # Raised by each take-over (a host lost, its volume evacuated): a
    # writer registered under an older epoch can publish nothing.
    epoch: int = 0
    taken_over_by: str = ''     # the host that raised it last

    @property
    def nchunks(self):
        return (self.size + self.chunk_size - 1) // self.chunk_size

    def chunk_len(self, index):
        if not 0 <= index < self.nchunks:
            raise exception.InvalidInput(
                'chunk %d is outside image %s (0..%d)'
                % (index, self.id, self.nchunks - 1))
        return min(self.chunk_size, self.size - index * self.chunk_size)

    def version(self, number):
        for v in self.versions:
            if v.number == number:
                return v
        if isinstance(number, int) and 0 < number <= self.newest_number():
            raise exception.VersionNotFound(
                self.id, '%d any more (it was obsolete or failed, and gc '
                'removed its entry)' % number)
        raise exception.VersionNotFound(self.id, number)

    def newest_number(self):
        """The highest version number given so far (0: none)."""
        return max([v.number for v in self.versions] + [self.last_version])

    def next_number(self):
        """The number of a new version: never one given before, even once
        the entries of the newest versions were pruned (pruning records
        the highest number in ``last_version``).
        """
        return self.newest_number() + 1

    def head(self):
        """The image's content: the stable version that turned stable
        last (None: no stable version). Entries from before ``seq`` was
        recorded (0) come first, in number order.
        """
        stable = [v for v in self.versions if v.state == STABLE]
        if not stable:
            return None
        return max(stable, key=lambda v: (v.seq, v.number))

    def next_seq(self):
        """The ``seq`` of the next version to turn stable."""
        return max([v.seq for v in self.versions] + [0]) + 1

    def stable_version(self, number=None):
        """The given version, which must be stable, or the head."""
        if number is None:
            head = self.head()
            if head is None:
                raise exception.VersionNotFound(self.id, 'stable')
            return head
        v = self.version(number)
        if v.state != STABLE:
            raise exception.VersionNotStable(self.id, number, v.state)
        return v

    def readable_version(self, number):
        """Version ``number`` if its objects are guaranteed: stable, or
        obsolete but still pinned (its pin holders read it until they
        release it).
        """
        v = self.version(number)
        if v.state == STABLE or (v.state == OBSOLETE and v.pins):
            return v
        raise exception.VersionNotStable(self.id, number, v.state)

    def check_epoch(self, epoch):
        """Raise Fenced unless ``epoch`` (a writer's; None: any) is the
        header's.
        """
        if epoch is not None and epoch != self.epoch:
            raise exception.Fenced(
                'image %s was taken over by %s (epoch %d, this writer has '
                '%d): nothing of it may be published from here'
                % (self.id, self.taken_over_by or 'another host',
                   self.epoch, epoch))

    def tree(self, store):
        return tree.Tree(store, self.nchunks, self.fanout)

    def to_bytes(self):
        raw = dataclasses.asdict(self)
        # Fields added later are left out at their defaults: a header
        # that does not use them stays readable by older releases.
        for key in _OPTIONAL_HEADER:
            if not raw[key]:
                del raw[key]
        for v in raw['versions']:
            for key in _OPTIONAL_VERSION:
                if not v[key]:
                    del v[key]
        return json.dumps(raw, sort_keys=True, separators=(',', ':')).encode()

    @classmethod
    def from_bytes(cls, data, name='?'):
        try:
            raw = json.loads(data)
            if raw.get('format') != FORMAT:
                raise ValueError('format %r' % raw.get('format'))
            raw['versions'] = [Version(**v) for v in raw['versions']]
            return cls(**raw)
        except (ValueError, TypeError, KeyError) as e:
            raise exception.CorruptObject('header', name,
                                          'unreadable: %s' % e)
