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

"""The Ceph RBD peers of ``blobcr-bench peers``, in the same cluster as
BlobCR-on-Ceph, written through librbd by the application's own client:

* ``rbd-snap``: the image's data in an erasure-coded pool (overwrites
  enabled) of the same profile and as many placement groups as BlobCR's
  data pool, its header in a replicated pool;
* ``rbd-snap-rep``: the whole image in the replicated pool, as most
  RBD deployments keep it;
* ``rbd-snap-wb``: ``rbd-snap-rep`` with librbd's writeback cache on,
  as QEMU sets it with cache=writeback.

Images have RBD's default 4 MiB objects (``--rbd-object-size``).

The client is set up as Nova sets it: librbd's cache off (cache mode
none, Nova's default); ``--rbd-cache writeback`` is the variant with
QEMU's cache=writeback.

A checkpoint is a snapshot made by a second client (the orchestrator's,
as an operator's ``rbd snap create`` would be): with the exclusive-lock
feature librbd asks the lock owner, the application's client, to take
it, which holds its writes for that time and first flushes its cache
(``--rbd-cache``: on, as QEMU sets it with cache=writeback, or off).
The snapshot is in RADOS when acknowledged (its durable point); ``rbd
export-diff`` from the previous snapshot, fsync'ed, is its copy-out,
timed apart. A restart opens the image at the snapshot and reads it, as
a clone of it would.
"""

import os
import subprocess
import time

from blobcr_bench import peers_common
from blobcr_bench import rbd_common
from blobcr_lab import ceph


class RbdPeer(peers_common.Peer):
    name = 'rbd-snap'
    durable_at = 'snapshot in RADOS (ack); export-diff file fsync\'ed'
    erasure_coded = True
    # librbd's cache of the application's client: --rbd-cache, unless
    # the peer is a cache mode of its own.
    cache = None

    def __init__(self, args):
        super().__init__(args)
        try:
            import rados
            import rbd
        except ImportError as e:
            raise peers_common.PeerRefused('no librbd binding: %s' % e)
        self.rbd = rbd
        if not os.path.exists(args.ceph_conf):
            raise peers_common.PeerRefused('no Ceph cluster: %s is missing'
                                           % args.ceph_conf)
        try:
            rbd_common.ensure_rbd_pool(args.ceph_conf, args.rbd_pool)
        except Exception as e:
            raise peers_common.PeerRefused('cannot have the RBD pool %s: %s'
                                           % (args.rbd_pool, e))
        self.data_pool = (args.rbd_data_pool or None) \
            if self.erasure_coded else None
        self.data_pool_refused = self.data_pool_shape = None
        if self.data_pool:
            self.data_pool_refused, self.data_pool_shape = \
                rbd_common.ensure_ec_data_pool(
                    args.ceph_conf, self.data_pool, like=args.data_pool)
            if self.data_pool_refused:
                raise peers_common.PeerRefused(
                    'cannot have the erasure-coded data pool %s: %s'
                    % (self.data_pool, self.data_pool_refused))
        # Two clients: the application's (it owns the exclusive lock) and
        # the orchestrator's, which asks for snapshots.
        self.cache_mode = self.cache or args.rbd_cache
        self.clients = []
        for conf in ({'rbd_cache': str(self.cache_mode == 'writeback')
                      .lower()}, {}):
            c = rados.Rados(conffile=args.ceph_conf, conf=conf)
            c.connect(timeout=10)
            self.clients.append(c)
        # As librbd will read it: the setting measured, not the one asked.
        self.client_cache = self.clients[0].conf_get('rbd_cache')
        self.app_io = self.clients[0].open_ioctx(args.rbd_pool)
        self.admin_io = self.clients[1].open_ioctx(args.rbd_pool)
        self.image = self.admin = None
        # The OSDs' clones, by run (its work directory's name).
        self.clones = {}

    def open(self, workdir, size):
        self.run_name = os.path.basename(workdir)
        self.workdir = workdir
        self.size = size
        self.index = 0
        self.image_name = 'blobcr-peers-%d-%d' % (os.getpid(),
                                                  int(time.time() * 1000))
        rbd = self.rbd
        features = (rbd.RBD_FEATURE_LAYERING | rbd.RBD_FEATURE_EXCLUSIVE_LOCK
                    | rbd.RBD_FEATURE_OBJECT_MAP | rbd.RBD_FEATURE_FAST_DIFF)
        order = self.args.rbd_object_size.bit_length() - 1
        rbd.RBD().create(self.app_io, self.image_name, size, order=order,
                         old_format=False, features=features,
                         data_pool=self.data_pool)
        self.image = rbd.Image(self.app_io, self.image_name)
        # With the cache on (QEMU's cache=writeback), librbd caches writes
        # through until the first flush, which a guest sends at once.
        self.image.flush()
        self.admin = rbd.Image(self.admin_io, self.image_name)
        self.worker = peers_common.CopyOutWorker(self.name)

    def write(self, offset, data):
        self.image.write(bytes(data), offset)

    def queue(self, depth):
        return rbd_common.AioWrites(self.image, depth)

    def checkpoint(self):
        # In use, as a running guest's disk is: the application's client
        # holds the exclusive lock, so the snapshot goes through it.
        in_use = self.image.is_exclusive_lock_owner()
        t0 = time.perf_counter()
        snap = 'cp-%d' % self.index
        self.admin.create_snap(snap)
        cp = self.acked(t0, index=self.index, snap=snap)
        cp['application_owns_lock'] = in_use
        # In RADOS at the ack: durable there; the export-diff is timed as
        # its copy-out.
        cp['durable_s'] = cp['ack_ms'] / 1000.0
        previous = 'cp-%d' % (self.index - 1) if self.index else None
        self.index += 1
        self.worker.put(lambda: self._export(cp, previous))
        return cp

    def _export(self, cp, previous):
        path = os.path.join(self.workdir, '%s.diff' % cp['snap'])
        command = ['rbd', '--conf', self.args.ceph_conf, 'export-diff']
        if previous:
            command += ['--from-snap', previous]
        command += ['%s/%s@%s' % (self.args.rbd_pool, self.image_name,
                                  cp['snap']), path]
        proc = subprocess.run(command, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL)
        if proc.returncode:
            raise RuntimeError('%s: %s' % (' '.join(command),
                                           proc.stderr.strip()))
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        size = os.path.getsize(path)
        cp['copy_out_s'] = time.perf_counter() - cp['t_req']
        cp.update(copied_bytes=size, stored_bytes=size)

    def settle(self, checkpoints):
        super().settle(checkpoints)
        missing = [cp['index'] for cp in checkpoints
                   if cp.get('copy_out_s') is None]
        if missing:
            raise RuntimeError('rbd export-diff of %s never ran' % missing)

    def restart_open(self, cp):
        return _SnapshotReader(self.rbd.Image(self.admin_io, self.image_name,
                                              snapshot=cp['snap'],
                                              read_only=True))

    def close(self):
        if self.worker is not None:
            self.worker.stop()
            self.worker = None
        for image in (self.image, self.admin):
            if image is not None:
                image.close()
        self.image = self.admin = None
        if getattr(self, 'image_name', None):
            img = self.rbd.Image(self.app_io, self.image_name)
            try:
                self.clones[self.run_name] = self._clones(img)
                for s in list(img.list_snaps()):
                    img.remove_snap(s['name'])
            finally:
                img.close()
            self.rbd.RBD().remove(self.app_io, self.image_name)
            self.image_name = None

    def _clones(self, img):
        """The OSDs' clones of ``img``'s data objects (``rados
        listsnaps``: a clone per object per snapshot it was written
        after), its snapshots and its data objects.
        """
        stat = img.stat()
        prefix = stat['block_name_prefix'] + '.'
        pool = self.data_pool or self.args.rbd_pool
        clones = objects = 0
        # Every data object the image may have, by name (a pool listing
        # may miss some while placement groups peer).
        for n in range(-(-img.size() // stat['obj_size'])):
            listed = subprocess.run(
                ['rados', '--conf', self.args.ceph_conf, '-p', pool,
                 'listsnaps', '%s%016x' % (prefix, n)], capture_output=True,
                text=True, stdin=subprocess.DEVNULL)
            if listed.returncode:
                if 'No such file' in listed.stderr:
                    continue        # never written
                raise RuntimeError('rados listsnaps: %s' % listed.stderr)
            objects += 1
            # After the object's name: a header, then a line per clone
            # (its id first) and one for the head.
            clones += sum(1 for line in listed.stdout.splitlines()[2:]
                          if line.split() and line.split()[0].isdigit())
        return {'clones': clones, 'objects': objects,
                'expected': self._objects_written_after_snapshots(img)}

    def _objects_written_after_snapshots(self, img):
        """Per snapshot, the data objects written between it and the
        next one (or the head), summed: each is one clone an OSD makes
        (librbd's diff, by whole object).
        """
        osz = img.stat()['obj_size']
        size = img.size()
        snaps = [s['name'] for s in sorted(img.list_snaps(),
                                           key=lambda s: s['id'])]
        total = 0
        for k, snap in enumerate(snaps):
            later = self.rbd.Image(self.admin_io, self.image_name,
                                   snapshot=snaps[k + 1], read_only=True) \
                if k + 1 < len(snaps) else img
            changed = set()

            def extent(offset, length, exists):
                changed.update(range(offset // osz,
                                     (offset + length - 1) // osz + 1))
            try:
                later.diff_iterate(0, size, snap, extent, whole_object=True)
            finally:
                if later is not img:
                    later.close()
            total += len(changed)
        return total

    def shutdown(self):
        for io in (self.app_io, self.admin_io):
            io.close()
        for c in self.clients:
            c.shutdown()

    def osd_counters(self):
        return ceph.osd_counters(self.args.ceph_conf)

    def check_runs(self, checks, workload, runs):
        what = '%s/%s' % (self.name, workload)
        wanted = str(self.cache_mode == 'writeback').lower()
        checks.require_true(
            '%s: the application client\'s rbd_cache, read back' % what,
            self.client_cache == wanted,
            'the cache setting measured must be the one asked for '
            '(%s)' % self.cache_mode,
            value=self.client_cache)
        checks.require_true(
            '%s: the application owned the exclusive lock at every '
            'snapshot, per run' % what,
            all(c.get('application_owns_lock') for r in runs
                for c in r['checkpoints']),
            'the volume must be in use (locked by its writer) when it is '
            'snapshotted, as a running guest\'s is',
            value=[sum(1 for c in r['checkpoints']
                       if c.get('application_owns_lock')) for r in runs])
        self.check_runs_clones(checks, workload)

    def check_runs_clones(self, checks, workload):
        """Every data object written after each snapshot was cloned by
        its OSD, and the run wrote at least the disk's objects after its
        snapshots.
        """
        found = [c for run, c in self.clones.items()
                 if run.startswith('%s-%s-' % (self.name, workload))]
        checks.require_true(
            '%s/%s: OSD clones per run, one per object written after each '
            'snapshot, and at least the disk\'s objects'
            % (self.name, workload),
            found and all(c['clones'] == c['expected'] >= c['objects']
                          for c in found),
            'an RBD snapshot of a volume in use must cost the OSDs a clone '
            'of each object written after it',
            value=found)

    def describe(self):
        return {'pool': self.args.rbd_pool, 'data_pool': self.data_pool,
                'data_pool_shape': self.data_pool_shape,
                'object_size': self.args.rbd_object_size,
                'rbd_cache': self.cache_mode,
                'rbd_cache_client': self.client_cache,
                'features': 'layering,exclusive-lock,object-map,fast-diff'}


class ReplicatedRbdPeer(RbdPeer):
    """The same, with the image's data in the replicated pool."""

    name = 'rbd-snap-rep'
    erasure_coded = False


class WritebackRbdPeer(ReplicatedRbdPeer):
    """The replicated one with librbd's writeback cache."""

    name = 'rbd-snap-wb'
    cache = 'writeback'


class _SnapshotReader(object):
    def __init__(self, image):
        self.image = image

    def read(self, offset, length):
        return self.image.read(offset, length)

    def close(self):
        self.image.close()
