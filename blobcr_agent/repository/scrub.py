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

"""verify (scrub): re-read every chunk of a version and check its hash."""

import dataclasses
import typing

from blobcr_agent.repository.backends import base
from blobcr_agent.repository import chunkpacks
from blobcr_agent.repository import chunks
from blobcr_common import exception


@dataclasses.dataclass
class Problem(object):
    kind: str           # 'chunk' or 'node'
    name: str           # object name
    chunks: str         # the chunk indices it affects, e.g. "12" or "0-63"
    error: str


@dataclasses.dataclass
class Report(object):
    image: str
    version: int
    chunks_checked: int = 0
    bytes_checked: int = 0
    problems: typing.List[Problem] = dataclasses.field(default_factory=list)

    @property
    def ok(self):
        return not self.problems

    def as_dict(self):
        d = dataclasses.asdict(self)
        d['ok'] = self.ok
        return d


def verify(repo, ref, number=None, progress=None):
    """Check every node and chunk object of a stable version."""
    header = repo.image(ref)
    v = header.stable_version(number)
    report = Report(image=header.id, version=v.number)
    t = header.tree(repo.nodes)

    def node_error(ref, first, last, error):
        report.problems.append(Problem(
            base.NODE, ref[:16].hex(), '%d-%d' % (first, last), str(error)))

    by_value = {}
    for index, d in t.items(v.root_ref, on_node_error=node_error):
        by_value.setdefault(d, []).append(index)
    if progress:
        progress.start(sum(len(i) for i in by_value.values()))
    # Packed deltas (chunkpacks.py) are read by reference, their crc32
    # checked, and named by pack and offset.
    for value, blob in repo.load_many(list(by_value),
                                      repo.max_object_size(header)):
        indices = by_value[value]
        name = chunks.value_name(value)
        try:
            if isinstance(blob, Exception):
                raise blob
            # A delta's bases are read and checked with it.
            chunks.decode(name, blob, header.chunk_len(indices[0]),
                          repo.load_base)
            report.bytes_checked += len(blob) * len(indices)
        except exception.BlobCRError as e:
            report.problems.append(Problem(
                base.CHUNK, name or chunkpacks.describe(value),
                ','.join(str(i) for i in indices[:8]) +
                (',...' if len(indices) > 8 else ''), str(e)))
        report.chunks_checked += len(indices)
        if progress:
            progress.advance(len(indices))
    if progress:
        progress.finish()
    report.problems.sort(key=lambda p: (p.kind, p.name))
    return report
