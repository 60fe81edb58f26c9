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

"""Options of the versioned chunk repository and its object backends."""

from oslo_config import cfg

repository_group = cfg.OptGroup(
    'repository', title='Versioned chunk repository',
    help='Where checkpoint images live and how they are laid out.')

repository_opts = [
    cfg.StrOpt('backend', default='local',
               choices=[('local', 'a directory tree on this host'),
                        ('rados', 'a Ceph pool through librados')],
               help='Object backend: "local" is a directory tree on this '
                    'host (the embedded default, not distributed); "rados" '
                    'stores chunks in an erasure-coded Ceph pool.'),
    cfg.IntOpt('chunk_size', default=256 * 1024, min=4096,
               help='Chunk size in bytes for new images. Every chunk is one '
                    'object; a power of two between 64 KiB and 4 MiB is '
                    'sensible.'),
    cfg.IntOpt('tree_fanout', default=64, min=2, max=4096,
               help='Children per node of the version tree of new images. '
                    '64 keeps the metadata of a random 4096-chunk commit '
                    'near 1% of its data.'),
    cfg.StrOpt('compression', default='auto',
               choices=[('auto', 'when it is predicted to pay'),
                        ('never', 'store chunks raw'),
                        ('always', 'compress every chunk')],
               help='Per-chunk zstd compression. "auto" compresses only when '
                    'compressing plus uploading the smaller chunk is '
                    'predicted to beat uploading it raw.'),
    cfg.IntOpt('compression_level', default=1, min=1, max=19,
               help='zstd level used when a chunk is compressed.'),
    cfg.FloatOpt('delta_max_fraction', default=0.5, min=0.0, max=1.0,
                 help='A chunk a mirror persists is stored as a delta over '
                      'the whole chunk it last stored at that place (its '
                      'changed 4 KiB pages) when the pages that differ are '
                      'at most this fraction of the chunk. A delta costs a '
                      'second object read when the chunk is fetched. 0: '
                      'always whole chunks.'),
    cfg.IntOpt('delta_pack_max_kb', default=4096, min=0,
               help='The deltas of a version are packed into objects of at '
                    'most this many KiB, written as they fill: under '
                    'scattered small writes a version is then a few '
                    'objects, not two per chunk (a delta and its link). '
                    'A pack stays while any of its deltas is live; the '
                    'writer moves what is left of a sparse pack into its '
                    'next one. 0: every delta an object of its own, with '
                    'a link object.'),
    cfg.IntOpt('max_in_flight', default=32, min=1,
               help='Object writes or reads kept in flight at once.'),
    cfg.IntOpt('pack_max_bytes', default=1024 * 1024, min=65536,
               help='Tree nodes written by one commit are packed into '
                    'objects of at most this size. Packs are written as '
                    'they fill, in parallel: 1 MiB measured fastest for a '
                    '4096-chunk commit on both backends.'),
    cfg.IntOpt('node_cache_mb', default=64, min=0,
               help='Memory for decoded tree nodes, in MiB.'),
    cfg.IntOpt('pending_timeout', default=3600, min=0,
               help='Seconds without a heartbeat after which garbage '
                    'collection declares a pending version abandoned and '
                    'marks it failed.'),
    cfg.IntOpt('gc_interval', default=900, min=0,
               help='Seconds between the garbage collections every agent '
                    'runs by itself (one at a time per store: a lease, a '
                    'RADOS lock on Ceph, a lock file on the local store). '
                    'An agent also collects a few seconds after it deletes '
                    'a volume or a version, and again once gc_grace has '
                    'passed, so that space comes back within gc_interval '
                    '+ gc_grace at most. 0: only those after deletes and '
                    '"blobcr-manage gc".'),
    cfg.IntOpt('gc_grace', default=60, min=0,
               help='Seconds of clock skew tolerated between hosts: garbage '
                    'collection never deletes objects written this recently '
                    'before its cut-off.'),
]

local_group = cfg.OptGroup(
    'local_store', title='Local object backend',
    help='The embedded directory-tree backend.')

local_opts = [
    cfg.StrOpt('path', default='/var/lib/blobcr/repository',
               help='Directory holding chunks, tree nodes and headers.'),
]

rados_group = cfg.OptGroup(
    'rados', title='Ceph RADOS object backend',
    help='Chunks go to an erasure-coded pool, metadata to a replicated '
         'one.')

rados_opts = [
    cfg.StrOpt('conffile', default='/etc/ceph/ceph.conf',
               help='ceph.conf of the cluster.'),
    cfg.StrOpt('client_name', default='client.admin',
               help='Ceph client name (with its "client." prefix).'),
    cfg.StrOpt('data_pool', default='blobcr-data',
               help='Pool for chunk objects; erasure-coded, no overwrites '
                    'needed (chunks are written whole).'),
    cfg.StrOpt('meta_pool', default='blobcr-meta',
               help='Replicated pool for image headers and tree nodes.'),
    cfg.StrOpt('namespace', default='',
               help='RADOS namespace inside both pools, to let several '
                    'repositories share the pools.'),
    cfg.IntOpt('connect_timeout', default=10, min=1,
               help='Seconds to wait for the monitors before reporting the '
                    'backend unreachable.'),
    cfg.IntOpt('op_timeout', default=60, min=0,
               help='Seconds after which a RADOS operation fails instead of '
                    'hanging (0 waits forever).'),
]


def register_opts(conf):
    conf.register_group(repository_group)
    conf.register_opts(repository_opts, group=repository_group)
    conf.register_group(local_group)
    conf.register_opts(local_opts, group=local_group)
    conf.register_group(rados_group)
    conf.register_opts(rados_opts, group=rados_group)


def list_opts():
    return [(repository_group, repository_opts),
            (local_group, local_opts),
            (rados_group, rados_opts)]
