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

"""The versioned chunk repository: images, versions, COMMIT and CLONE.

An image is a versioned BLOB of fixed size cut into fixed-size chunks.
COMMIT writes the given chunks, then the path-copied tree nodes, and only
then turns the new version stable with one compare-and-set of the image
header: a crash at any earlier point leaves a pending version (later
declared failed) and unreachable objects that garbage collection reclaims.
CLONE writes one header whose first version shares the source's root.

PIN keeps a version's objects for a reader on this host (a mirror reads
the chunks its guest has not written from the version it was attached
at): GC treats pinned versions as live even once they are obsolete.
Obsoleting a pinned version is deferred: it is obsolete at once for
everyone else (no clone, export or new COMMIT from it), and its objects
are freed by the first GC after the last pin is released.

:class:`Repository` is the facade; each concern is a module of its own:

- :mod:`.records`: headers and the compare-and-set every change goes
  through;
- :mod:`.lifecycle`: create, delete, extend, clone, obsolete;
- :mod:`.commits`: the commit protocol (:class:`~.commits.Commit`);
- :mod:`.chunks`, :mod:`.deltas`: chunk objects, whole or as sub-chunk
  deltas;
- :mod:`.pins`: pins and failed-version marks;
- :mod:`.datapath`: reads, fetches, export, import and write_file;
- :mod:`.profiles`: restart profiles;
- :mod:`.identity`: who wrote a record, and where.
"""

import threading

from blobcr_agent.repository import backends
from blobcr_agent.repository import chunkpacks
from blobcr_agent.repository import chunks
from blobcr_agent.repository.commits import Commit  # noqa: F401 (facade)
from blobcr_agent.repository.commits import Commits
from blobcr_agent.repository.datapath import DataPaths
from blobcr_agent.repository.identity import process_identity
from blobcr_agent.repository.lifecycle import Lifecycle
from blobcr_agent.repository.pins import Pins
from blobcr_agent.repository.profiles import Profiles
from blobcr_agent.repository.records import Records
from blobcr_agent.repository import tree


class Repository(Records, Lifecycle, Commits, Pins, DataPaths, Profiles):

    def __init__(self, backend, chunk_size=256 * 1024, fanout=64,
                 compression='auto', compression_level=1,
                 pack_max_bytes=1 << 20, node_cache_bytes=64 << 20,
                 pending_timeout=3600, gc_grace=60, delta_max_fraction=0.5,
                 delta_pack_max_bytes=chunkpacks.DEFAULT_MAX_BYTES):
        self.backend = backend
        self.delta_max_fraction = delta_max_fraction
        self.delta_pack_max_bytes = delta_pack_max_bytes
        self.chunk_size = chunk_size
        self.fanout = fanout
        self.pack_max_bytes = pack_max_bytes
        self.pending_timeout = pending_timeout
        self.gc_grace = gc_grace
        self.nodes = tree.NodeStore(backend, node_cache_bytes)
        self.policy = chunks.CompressionPolicy(compression,
                                               compression_level)
        self.owner = process_identity()
        self.upload_bps = None
        # Versions this process gave up but could not mark failed (the
        # backend refused the header write): retried later.
        self._unmarked = {}
        self._unmarked_lock = threading.Lock()

    @classmethod
    def from_conf(cls, conf, backend=None):
        r = conf.repository
        return cls(backend or backends.from_conf(conf),
                   chunk_size=r.chunk_size, fanout=r.tree_fanout,
                   compression=r.compression,
                   compression_level=r.compression_level,
                   pack_max_bytes=r.pack_max_bytes,
                   node_cache_bytes=r.node_cache_mb << 20,
                   pending_timeout=r.pending_timeout, gc_grace=r.gc_grace,
                   delta_max_fraction=r.delta_max_fraction,
                   delta_pack_max_bytes=r.delta_pack_max_kb << 10)

    def close(self):
        self.backend.close()
