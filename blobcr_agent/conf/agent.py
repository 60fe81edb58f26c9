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

"""Options of the per-host agent, its guest endpoint and its hypervisor."""

import socket

from oslo_config import cfg

from blobcr_common import rpc

agent_group = cfg.OptGroup(
    'agent', title='Per-host agent',
    help='The blobcr-agent daemon of a compute host: its mirror, its RPC '
         'server and its admin socket.')


# Also the benchmarks' defaults: they measure what the agent ships.
DEFAULT_COW_SPILL_MB = 1024
# 0.05 s: on the paced benchmark the checkpoint had about 12 chunks left
# to send against 20 at 0.1 s (peers-issue34-paced.json).
DEFAULT_UPLOAD_AHEAD_INTERVAL = 0.05

agent_opts = [
    cfg.StrOpt('host', default=socket.gethostname(),
               sample_default='<hostname>',
               help='Name of this host: the RPC server name Cinder and Nova '
                    'address (topic blobcr-agent, server = host).'),
    cfg.StrOpt('state_path', default='/var/lib/blobcr',
               help='Directory of the agent\'s local state: mirror caches '
                    '(the working copy of every attached image) and the '
                    'instance table. Put it on a fast local disk.'),
    cfg.StrOpt('mountpoint', default='/var/lib/blobcr/mnt',
               help='Where the mirror is mounted; attached images appear as '
                    'raw files under <mountpoint>/images/.'),
    cfg.StrOpt('admin_socket', default='/run/blobcr/agent.sock',
               help='UNIX socket of blobcr-manage\'s agent commands '
                    '(attach, checkpoint, detach, export...): root only '
                    '(mode 0600), or root and admin_group (0660).'),
    cfg.StrOpt('admin_group',
               help='A group whose members may use the admin socket '
                    'besides root (unset: root only). The socket is then '
                    'mode 0660 with this group, and its directory, if '
                    'the agent makes it, 0710 with this group. Every '
                    'connection is also checked against the peer\'s '
                    'credentials (SO_PEERCRED), whatever the file modes '
                    'say; refused callers get a JSON error and a line in '
                    'the log. Members can do everything root can there, '
                    'except that their exports go under export_dir, as '
                    'RPC callers\' do.'),
    cfg.StrOpt('export_dir', default='/var/lib/blobcr/exports',
               help='The only directory RPC callers may export versions to '
                    'and import raw files from (the Cinder driver\'s image '
                    'copies): the real path of the file (symlinks '
                    'resolved) must be inside it; made (mode 0700) on the '
                    'first export. Root on the admin socket (blobcr-manage '
                    'export) may use any path; admin_group members only '
                    'this one. Keep it writable by root only.'),
    cfg.StrOpt('mirror_mode', default='selective-cow',
               choices=[('selective-cow', 'copy a chunk aside only when the '
                         'guest rewrites it before it is persisted'),
                        ('live-cow', 'copy every dirty chunk aside at the '
                         'checkpoint, then persist the copies'),
                        ('offline', 'no live checkpoint: the image is '
                         'persisted when it is closed')],
               help='How a checkpoint snapshots an image: selective-cow '
                    'copies a chunk aside only if the guest rewrites it '
                    'before it is persisted (the BlobCR scheme).'),
    cfg.FloatOpt('handoff_timeout', default=120.0, min=1.0,
                 help='Live migration to this host: how long the guest\'s '
                      'first requests here wait for the source host to '
                      'hand its image off (commit what it wrote last) '
                      'before they fail with EIO. The source still holds '
                      'every write then.'),
    cfg.IntOpt('protect_interval', default=300, min=0,
               help='Seconds after which the agent checkpoints an attached '
                    'image written since its last checkpoint by itself (a '
                    'protection version, superseded and collected once a '
                    'newer one is stable): what a lost host can lose is '
                    'bounded by about this plus a persist. 0: never by '
                    'time.'),
    cfg.IntOpt('protect_dirty_bytes', default=0, min=0,
               help='Also checkpoint an attached image by itself once this '
                    'many bytes of it (whole chunks) are written since its '
                    'last checkpoint. 0: never by size.'),
    cfg.IntOpt('guest_checkpoints_kept', default=8, min=0,
               help='Guest checkpoints (versions a guest asked for through '
                    'the guest endpoint, unlabelled) kept per image when '
                    'they are not Cinder snapshots: after each new one, '
                    'the agent obsoletes those past the newest this many, '
                    'and GC frees them, so that a guest cannot fill the '
                    'shared store. Never obsoleted this way: a version '
                    'that is a Cinder snapshot (the driver labels it when '
                    'blobcr-cinder-sync, or anyone, manages it; deleting '
                    'the snapshot deletes the version), members of the '
                    'newest guest_groups_kept group checkpoints, pinned '
                    'versions, versions a clone was made from. 0: keep '
                    'them all (up to the budgets below).'),
    cfg.IntOpt('guest_groups_kept', default=4, min=0,
               help='Group checkpoints whose members a guest\'s image '
                    'keeps (its newest this many groups); the members of '
                    'older groups that are not Cinder snapshots are '
                    'obsoleted with the guest checkpoints past '
                    'guest_checkpoints_kept. 0: every group\'s members '
                    'are kept (up to the budgets below).'),
    cfg.IntOpt('guest_checkpoints_per_image', default=64, min=0,
               help='Budget of an image\'s guest checkpoints the store '
                    'keeps (pending or stable, Cinder snapshots of them '
                    'included, the image\'s first content not): a guest '
                    'asking for one more is answered 507 with the reason, '
                    'and nothing is taken. It frees itself as retention '
                    'obsoletes old ones, or as the tenant deletes '
                    'snapshots. 0: no budget.'),
    cfg.IntOpt('guest_checkpoints_per_project', default=512, min=0,
               help='Budget of guest checkpoints of one project\'s images '
                    'attached on any host (an image counts for the '
                    'project its instance was attached for), as '
                    'guest_checkpoints_per_image counts them; past it, '
                    '507. Other hosts\' images count as their agents '
                    'last published them in the store (a few seconds '
                    'behind). 0: no budget.'),
    cfg.IntOpt('guest_checkpoint_mib_per_image', default=256 * 1024, min=0,
               help='Budget of the bytes an image\'s guest checkpoints '
                    'wrote to the store (MiB; each version\'s own '
                    'objects, as counted when it turned stable), past '
                    'which the next guest checkpoint is answered 507. '
                    '0: no budget.'),
    cfg.IntOpt('guest_checkpoint_mib_per_project', default=1024 * 1024,
               min=0,
               help='The same budget in MiB for one project\'s images '
                    'attached on any host. 0: no budget.'),
    cfg.IntOpt('guest_groups_per_project', default=1000, min=0,
               help='Group ids guests of one project may have made (each '
                    'is an index record in the store): a guest naming a '
                    'new group past this many is answered 507 with the '
                    'reason, and nothing is taken. Groups none of whose '
                    'members still has a version in the group (retention '
                    'obsoleted them, GC freed them) are forgotten to make '
                    'room, their records deleted. 0: no cap.'),
    cfg.FloatOpt('settle_timeout', default=45.0, min=0.0,
                 help='A detach asked from Cinder returns once the last '
                      'checkpoint is taken; it persists in the background. '
                      'Until it is stable, every operation on the detached '
                      'volume (attach on any host, snapshot, clone, revert, '
                      'delete, extend, export) waits for it, this many '
                      'seconds at most (then it is refused busy). Keep it '
                      'under Cinder\'s rpc_response_timeout.'),
    cfg.IntOpt('readahead_chunks', default=64, min=0,
               help='A lazily restarted image read in order gets up to '
                    'this many chunks after the ones it misses fetched '
                    'ahead, in a window that doubles while the reads stay '
                    'sequential. 0: fetch only what is read.'),
    cfg.BoolOpt('restart_hints', default=True,
                help='Images restarting from one group checkpoint share '
                     'the order in which their guests first read their '
                     'chunks: the slower ones prefetch what the faster '
                     'ones read (a fanout cast to every agent over RPC, '
                     'and directly between images of this host). False: '
                     'neither send nor follow hints.'),
    cfg.IntOpt('delta_tracking_mb', default=64, min=0,
               help='Memory per attached image for the page hashes of the '
                    'chunks its mirror stored (2.3 KiB per 256 KiB chunk '
                    'written). A chunk remembered there is persisted as a '
                    'delta of its changed pages when few changed (see '
                    '[repository] delta_max_fraction); one forgotten is '
                    'persisted whole. 0: whole chunks only.'),
    cfg.IntOpt('cow_chunks', default=64, min=1,
               help='Chunks of memory per image for copy-on-write copies; '
                    'when these and the spill file (cow_spill_mb) are '
                    'full, guest writes to unpersisted chunks wait for '
                    'the store.'),
    cfg.IntOpt('cow_spill_mb', default=DEFAULT_COW_SPILL_MB, min=0,
               help='Disk per attached image, in MiB, for copy-on-write '
                    'copies past the memory ones (cow_chunks): a nameless, '
                    'sparse file in the image\'s cache directory, holding '
                    'only copies not yet persisted. A guest that rewrites '
                    'more than memory holds while a checkpoint persists '
                    'then waits for neither the store nor memory. If the '
                    'file system fills up first, writes wait for the store '
                    'as without a spill file; nothing is lost. A kill or a '
                    'power cut loses the spilled copies, like the memory '
                    'ones: the checkpoint being persisted fails, and its '
                    'data is carried by the next. 0: memory only.'),
    cfg.StrOpt('durability', default='',
               choices=[('', 'cluster on a store that has a write-ahead '
                             'log (RADOS), host on the others'),
                        ('cluster', 'a guest flush returns once its writes '
                                    'are in the cluster'),
                        ('host', 'a guest flush returns once its writes '
                                 'are on this host\'s disk')],
               help='What a guest\'s flush makes durable on a volume whose '
                    'type does not say (its blobcr:durability extra '
                    'spec). cluster: every write it covers is in the '
                    'image\'s write-ahead log in RADOS, as replicated as '
                    'the metadata pool, so losing this host for good '
                    'loses nothing flushed (a take-over replays the log). '
                    'host: on this host\'s disk only, until the next '
                    'stable version; for scratch volumes that restart '
                    'from checkpoints anyway. The local store has no '
                    'cluster: cluster is refused there.'),
    cfg.FloatOpt('flush_timeout', default=0.0, min=0,
                 help='Seconds a guest flush of a cluster volume waits for '
                      'a full or unreachable cluster before it fails (EIO '
                      'to the guest); the blocks stay owed to the next '
                      'flush. 0: it waits for ever, as RBD\'s I/O does.'),
    cfg.IntOpt('cache_reserve_mb', default=64, min=0,
               help='MiB the copy-on-write spill files leave free on the '
                    'file system of the mirror caches: the agent\'s own '
                    'durable writes (the persister\'s journal, each '
                    'cache\'s metadata and flush record) and the other '
                    'images\' caches need that room. A copy aside that '
                    'would go below it waits for the store instead, as '
                    'when the file system is full; spill slots are used '
                    'again once there is room. Guest writes that meet a '
                    'full file system wait for room rather than fail.'),
    cfg.FloatOpt('upload_ahead_interval',
                 default=DEFAULT_UPLOAD_AHEAD_INTERVAL, min=0,
                 help='Seconds between the rounds in which an image\'s '
                      'dirty chunks that were not written for a round are '
                      'sent to the store ahead of the next checkpoint (as '
                      'the objects its persist would write, under the '
                      'version registered ahead; garbage collection keeps '
                      'them). The checkpoint then has only the rest to '
                      'send, and is safe sooner. A chunk rewritten after '
                      'it was sent is sent again once quiet for 2, 4 or 8 '
                      'rounds (by how often it went in the last 32), or '
                      'by the persist. Only in selective-cow. 0: send '
                      'chunks only after the checkpoint.'),
    cfg.StrOpt('quiesce', default='suspend', choices=rpc.QUIESCE_CHOICES,
               help='How the guest is held still while a checkpoint is '
                    'taken, unless the request says otherwise: none (the '
                    'guest synced itself), fsfreeze (qemu-guest-agent) or '
                    'suspend (pause the domain: the BlobCR paper\'s '
                    'choice).'),
    cfg.StrOpt('libvirt_uri', default='qemu:///system',
               help='libvirt connection used to find and quiesce the '
                    'domain that uses an image.'),
    cfg.IntOpt('shutdown_timeout', default=300, min=0,
               help='On SIGTERM, seconds to wait for background persists '
                    'to finish. A persist still running after that is '
                    'resumed from its journal when the agent starts '
                    'again.'),
    cfg.BoolOpt('rpc_enabled', default=True,
                help='Serve the RPC API (needs transport_url). Off for a '
                     'single host driven by blobcr-manage only.'),
]

proxy_group = cfg.OptGroup(
    'proxy', title='Checkpointing proxy',
    help='The HTTP endpoint through which guests on this host request '
         'checkpoints.')

proxy_opts = [
    cfg.BoolOpt('enabled', default=True,
                help='Serve the guest checkpoint endpoint.'),
    cfg.HostAddressOpt('listen', default='127.0.0.1',
                       help='Address of the endpoint. Guests reach it '
                            'through the metadata address 169.254.169.254 '
                            '(a forward set up by the network).'),
    cfg.PortOpt('port', default=8789,
                help='TCP port of the endpoint (0: any free port, '
                     'written to <state_path>/proxy.port).'),
    cfg.StrOpt('host_secret', secret=True,
               help='The secret per-instance tokens are signed with: '
                    'blobcr-vendordata\'s [vendordata] token_secret. A '
                    'token (handed to the guest through Nova vendordata) '
                    'is good for one instance, on the host whose [agent] '
                    'host it was made for (the name Nova knows this host '
                    'by: its nova-compute\'s [DEFAULT] host), until it '
                    'expires. Clocks must agree (NTP).'),
    cfg.ListOpt('previous_host_secrets', default=[], secret=True,
                help='Secrets that signed tokens before host_secret, '
                     'still accepted: to rotate the secret, set the new '
                     'one as host_secret and the old one here on every '
                     'agent, then as [vendordata] token_secret; remove it '
                     'from here once the tokens it signed have expired '
                     '([vendordata] token_lifetime, plus Nova\'s [api] '
                     'metadata_cache_expiration).'),
    cfg.StrOpt('metadata_proxy_shared_secret', secret=True,
               help='The secret Neutron\'s metadata proxy signs '
                    'X-Instance-ID with (same as Nova\'s [neutron] '
                    'metadata_proxy_shared_secret).'),
    cfg.FloatOpt('rate', default=1.0, min=0.001,
                 help='Checkpoints per second an instance may request '
                      'over time.'),
    cfg.IntOpt('burst', default=5, min=1,
               help='Checkpoints an instance may request at once.'),
    cfg.IntOpt('max_body', default=4096, min=64, max=999999,
               help='Largest request body accepted, in bytes.'),
    cfg.FloatOpt('poll_rate', default=20.0, min=0.001,
                 help='Other requests (state and group polls) per second '
                      'an instance may send over time.'),
    cfg.IntOpt('poll_burst', default=40, min=1,
               help='Other requests an instance may send at once.'),
    cfg.FloatOpt('header_timeout', default=5.0, min=0.1,
                 help='Seconds a client has, from its connection, to send '
                      'its request line and headers (all of them, not '
                      'per read); then it gets 408 and is cut off. Until '
                      'then a connection holds no thread, and its '
                      'request is authenticated as soon as its headers '
                      'are whole, before its body is read.'),
    cfg.FloatOpt('request_timeout', default=10.0, min=0.1,
                 help='Seconds a client has, from its connection, to send '
                      'a whole request, body included; a slower one is '
                      'cut off.'),
    cfg.IntOpt('max_connections', default=64, min=1,
               help='Requests served at once (a thread each, from when '
                    'their headers are whole); more are answered 503 '
                    'busy without a thread.'),
    cfg.IntOpt('max_per_source', default=16, min=0,
               help='Requests from one address served at once before '
                    'they are authenticated (0: no limit); authenticated '
                    'ones count for their instance instead.'),
    cfg.IntOpt('max_per_instance', default=4, min=0,
               help='Authenticated requests of one instance served at '
                    'once (0: no limit); more are answered 503 busy.'),
]


def register_opts(conf):
    conf.register_group(agent_group)
    conf.register_opts(agent_opts, group=agent_group)
    conf.register_group(proxy_group)
    conf.register_opts(proxy_opts, group=proxy_group)


def list_opts():
    return [(agent_group, agent_opts), (proxy_group, proxy_opts)]
