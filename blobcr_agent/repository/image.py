"""The image header: an image's geometry and its list of versions.

One header object per image, replaced as a whole by compare-and-set. A
version turns stable by the one header write that sets its root and its
state together, after every chunk and node it references is durable.
"""

import dataclasses
import json
import typing

from blobcr_agent import exception
from blobcr_agent.repository import tree

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

    @property
    def root_ref(self):
        return bytes.fromhex(self.root) if self.root else None


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
        raise exception.VersionNotFound(self.id, number)

    def stable_version(self, number=None):
        """The given version, or the newest stable one, which must be
        stable.
        """
        if number is None:
            stable = [v for v in self.versions if v.state == STABLE]
            if not stable:
                raise exception.VersionNotFound(self.id, 'stable')
            return stable[-1]
        v = self.version(number)
        if v.state != STABLE:
            raise exception.VersionNotStable(self.id, number, v.state)
        return v

    def tree(self, store):
        return tree.Tree(store, self.nchunks, self.fanout)

    def to_bytes(self):
        return json.dumps(dataclasses.asdict(self), sort_keys=True,
                          separators=(',', ':')).encode()

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
