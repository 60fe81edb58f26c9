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

"""A randomized walk through the Cinder driver's operations, checked
against a model (tests/integration/test_cinder_model.py runs it in CI,
tools/soak.sh for hours).

The driver (blobcr_cinder.driver.BlobCRDriver, in this process) calls
real blobcr-agents over RabbitMQ: a storage agent and two compute
agents sharing one store, each with its FUSE mount. The walk does what
Cinder and Nova ask of a backend, on attached and detached volumes:
create, attach (initialize_connection), write through the mirror file
(random spans across chunk borders, several threads on the same chunks
while a reader races them), flush, snapshot, clone, volume from
snapshot, delete snapshot, revert, extend, detach (terminate_connection),
delete, GC, guest checkpoints, live migration (the destination attached
incoming, the handoff at the guest's first request there), and SIGKILL
plus restart of a compute agent at any point between them.

The model holds the bytes every volume and snapshot must read as. Every
read is checked against it; after each GC every surviving volume and
snapshot is read back whole: the written region byte for byte, the rest
of the image as chunks that must not exist (never written: zeros).

What is not real, and why: Cinder's database. The driver asks it for a
volume's snapshots (``_forget_superseded``) and attachments; the walk
answers from the model, which holds the same records. The flows through
cinder-api, the scheduler and cinder-volume are in test_cinder_driver.py
(each of them costs seconds, a walk takes hundreds of steps).

Each walk is one seed: ``Walk(seed, ...)`` makes the same choices again,
so a failure is replayed by its seed (the test prints how). The walks run
in a process of their own (tests/cinder_model_run.py), as the driver
runs in cinder-volume: Cinder's modules bring eventlet, which must not
reach the test session's process.
"""

import random
import threading
import time
import types
import uuid

from blobcr_common import exception
from blobcr_lab import agent_rpc
from blobcr_lab.guest_disk import GuestDisk
from blobcr_lab import nova_attach
from tests import cinder_model_overlap

GiB = 1 << 30
CHUNK = 64 * 1024
# Every write falls in the first REGION bytes of a volume: the walk
# meets the same chunks again and again.
REGION = 24 * CHUNK
BLOCK = 4096


class ModelError(AssertionError):
    pass


class Volume(object):

    def __init__(self, content, size_gb=1):
        self.id = str(uuid.uuid4())
        self.name = 'volume-%s' % self.id
        self.display_name = self.name
        self.provider_id = None
        self.size = size_gb
        self.volume_type = None
        self.volume_attachment = []
        self.project_id = 'model'
        self.host = None            # the compute host it is attached on
        self.device_path = None     # its mirror file there, as Nova sees it
        self.path = None            # the same file, from the walk
        self.content = bytearray(content)

    def attach_record(self, host, instance, info):
        """Cinder's attachment record once ``info`` (the connection
        info) was handed out: the attachments of the same instance
        still reserved (Nova's moves) become this one.
        """
        self.host = host
        self.device_path = info['data']['device_path']
        self.volume_attachment = [types.SimpleNamespace(
            attach_status='attached', attached_host=host,
            instance_uuid=instance or str(uuid.uuid4()),
            connector={'host': host}, connection_info=info)]

    @property
    def instance(self):
        return self.volume_attachment[0].instance_uuid

    def detach_record(self):
        self.host = self.path = self.device_path = None
        self.volume_attachment = []


class Snapshot(object):

    def __init__(self, volume):
        self.id = str(uuid.uuid4())
        self.name = 'snapshot-%s' % self.id
        self.volume = volume
        self.volume_id = volume.id
        self.volume_size = volume.size
        self.metadata = {}
        self.status = 'creating'
        self.provider_id = None
        self.content = bytes(volume.content)


class Walk(cinder_model_overlap.Overlaps):
    """One seeded walk. ``world`` has: ``driver`` (set up, its ``api``
    on the broker), ``api`` (an AgentAPI), ``storage`` (the storage
    agent's host), ``compute`` ({host: AgentProcess}), ``restart(host)``
    (SIGKILL and start that agent again), ``repo`` (a Repository on the
    same store, for reading versions back).
    """

    MAX_VOLUMES = 6
    MAX_SNAPSHOTS = 10

    def __init__(self, seed, world, log=print):
        self.seed = seed
        self.rng = random.Random(seed)
        self.world = world
        self.driver = world.driver
        self.log = log
        self.volumes = []
        self.snapshots = []
        self.steps = 0
        self.counts = {}
        self.history = []
        self.overlaps = []          # the Logs of steps with overlaps

    # -- Cinder's records, as the driver reads them --------------------

    def snapshots_of(self, volume_id):
        return [s for s in self.snapshots if s.volume_id == volume_id]

    def attachments_of(self, volume_id):
        volume = next((v for v in self.volumes if v.id == volume_id), None)
        return list(volume.volume_attachment) if volume else []

    # -- the walk --------------------------------------------------------

    def run(self, steps):
        for _ in range(steps):
            self.step()
        self.verify_all()

    def step(self):
        ops = self._enabled()
        names = sorted(ops)
        weights = [ops[n] for n in names]
        name = self.rng.choices(names, weights)[0]
        self.steps += 1
        self.counts[name] = self.counts.get(name, 0) + 1
        self.history.append(name)
        try:
            getattr(self, 'op_' + name)()
        except Exception as e:
            raise ModelError('seed %d, step %d (%s): %s: %s\nlast steps: %s'
                             '\nstore: %s'
                             % (self.seed, self.steps, name,
                                type(e).__name__, e,
                                ' '.join(self.history[-25:]),
                                self._store_state())) from e

    def _store_state(self):
        """The versions of every image that are pending or pinned (what
        a refusal usually comes from), for the failure's message.
        """
        try:
            return '; '.join(
                '%s%s: %s' % (h.id[:8], ' (deleted)' if h.deleted else '',
                              ', '.join('v%d %s pins %s' % (
                                  v.number, v.state,
                                  [p['holder'][-40:] for p in v.pins])
                                  for v in h.versions
                                  if v.pins or v.state == 'pending'))
                for h in self.world.repo.images(include_deleted=True))
        except Exception as e:          # the failure is what matters
            return 'unreadable (%s)' % e

    def _enabled(self):
        attached = [v for v in self.volumes if v.host]
        detached = [v for v in self.volumes if not v.host]
        ops = {'gc': 1, 'verify': 1}
        if len(self.volumes) < self.MAX_VOLUMES:
            ops['create'] = 2
        if detached:
            ops.update(attach=4, extend=1)
            if any(not self.snapshots_of(v.id) for v in detached):
                ops['delete'] = 1
        if attached:
            ops.update(write=10, read=2, flush=1, detach=3,
                       guest_checkpoint=2, kill_agent=1, kill_in_persist=1,
                       migrate=1, overlap_snapshot=3, overlap_detach=2,
                       nova_move=2, evacuate=1, pause_agent=1)
            if len(self.volumes) < self.MAX_VOLUMES:
                # Enabled only below the volume cap, where walks spend
                # little time: at weight 1 one CI walk of 480 steps never
                # drew it.
                ops['overlap_clone'] = 3
        if self.volumes:
            ops.update(snapshot=3, clone=2)
        if self.snapshots:
            ops.update(delete_snapshot=3, from_snapshot=1)
            if any(not s.volume.host for s in self.snapshots):
                ops['revert'] = 1
        if len(self.snapshots) >= self.MAX_SNAPSHOTS:
            ops.pop('snapshot', None)
        if len(self.volumes) >= self.MAX_VOLUMES:
            ops.pop('clone', None)
            ops.pop('from_snapshot', None)
        return ops

    def _pick(self, items):
        return items[self.rng.randrange(len(items))]

    # -- operations ------------------------------------------------------

    def op_create(self):
        volume = Volume(bytes(REGION))
        volume.provider_id = self.driver.create_volume(volume)['provider_id']
        self.volumes.append(volume)

    def op_attach(self):
        volume = self._pick([v for v in self.volumes if not v.host])
        host = self._pick(sorted(self.world.compute))
        info = self.driver.initialize_connection(volume, {'host': host})
        volume.attach_record(host, None, info)
        volume.path = self.world.path(host, volume.device_path)
        if self.rng.random() < 0.5:
            self._check_file(volume)

    def op_write(self):
        """Random spans, some across chunk borders; sometimes several
        threads on the same chunks (disjoint blocks) while a reader
        checks the blocks nobody writes.
        """
        volume = self._pick([v for v in self.volumes if v.host])
        if self.rng.random() < 0.3:
            self._threaded_writes(volume)
        else:
            self._write_spans(volume)

    def _write_spans(self, volume, spans=None):
        with GuestDisk(volume.path) as disk:
            for _ in range(spans or self.rng.randint(1, 4)):
                length = self.rng.choice(
                    [1, 511, BLOCK, CHUNK - 7, CHUNK, CHUNK + 4097,
                     3 * CHUNK])
                offset = self.rng.randrange(0, REGION - length)
                data = self.rng.randbytes(length)
                if disk.pwrite(data, offset) != length:
                    raise ModelError('short write')
                volume.content[offset:offset + length] = data

    def _threaded_writes(self, volume):
        first = self.rng.randrange(0, REGION // CHUNK - 3)
        span = range(first * CHUNK // BLOCK, (first + 3) * CHUNK // BLOCK)
        blocks = [b for b in span if self.rng.random() < 0.6]
        writers = 3
        plan = {w: [(b, self.rng.randbytes(BLOCK)) for b in blocks
                    if b % writers == w] for w in range(writers)}
        written = {b for w in plan.values() for b, _ in w}
        expected = bytes(volume.content)
        errors = []
        stop = threading.Event()

        def write(items):
            try:
                with GuestDisk(volume.path) as disk:
                    for block, data in items:
                        disk.pwrite(data, block * BLOCK)
            except Exception as e:
                errors.append(e)

        def read():
            # Blocks nobody writes must read as before while the others
            # are written (fetches racing writes on the same chunks).
            try:
                with GuestDisk(volume.path, readonly=True) as disk:
                    while not stop.is_set():
                        got = disk.pread(3 * CHUNK, first * CHUNK)
                        for i in range(0, 3 * CHUNK, BLOCK):
                            block = first * CHUNK // BLOCK + i // BLOCK
                            at = first * CHUNK + i
                            if block not in written and \
                                    got[i:i + BLOCK] != \
                                    expected[at:at + BLOCK]:
                                errors.append(ModelError(
                                    'block %d changed while others were '
                                    'written' % block))
                                return
            except Exception as e:
                errors.append(e)
        threads = [threading.Thread(target=write, args=(items,))
                   for items in plan.values()]
        reader = threading.Thread(target=read)
        reader.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stop.set()
        reader.join()
        if errors:
            raise errors[0]
        for items in plan.values():
            for block, data in items:
                volume.content[block * BLOCK:(block + 1) * BLOCK] = data

    def op_read(self):
        self._check_file(self._pick([v for v in self.volumes if v.host]))

    def op_flush(self):
        volume = self._pick([v for v in self.volumes if v.host])
        with GuestDisk(volume.path) as disk:
            disk.fsync()

    def op_guest_checkpoint(self):
        """A checkpoint the guest asks for (not Cinder's, not waited
        for): versions in flight when the next step comes.
        """
        volume = self._pick([v for v in self.volumes if v.host])
        self.world.api.checkpoint(volume.host, volume.provider_id,
                                  quiesce='none')

    def op_kill_in_persist(self):
        """Write a few chunks, take a guest checkpoint and SIGKILL the
        agent at once: its persist is cut short (resumed or failed at
        the restart, the writes dirty again if failed).
        """
        volume = self._pick([v for v in self.volumes if v.host])
        self._write_spans(volume)
        self.world.api.checkpoint(volume.host, volume.provider_id,
                                  quiesce='none')
        self._restart(volume.host)

    def op_kill_agent(self):
        """SIGKILL and restart an agent a volume is attached to (its
        persists in flight resume or fail), now and then the storage
        agent.
        """
        hosts = sorted({v.host for v in self.volumes if v.host})
        if self.rng.random() < 0.2:
            hosts = [self.world.storage]
        self._restart(self._pick(hosts))

    def _restart(self, host, skip=None):
        """SIGKILL and start ``host``'s agent; the volumes attached there
        (but ``skip``) read as before.
        """
        self.world.restart(host)
        for volume in self.volumes:
            if volume.host == host and volume is not skip:
                volume.path = self.world.path(host, volume.device_path)
                self._wait_reopened(volume)
                self._check_file(volume)

    @staticmethod
    def _wait_reopened(volume, timeout=30):
        if not nova_attach.wait_reopenable(volume.path, timeout):
            raise ModelError('volume %s: %s is not back %d s after the '
                             'agent restarted' % (volume.provider_id,
                                                  volume.path, timeout))

    def op_migrate(self):
        """Nova's live migration: the destination connects the volume
        (a second attachment of the same instance) while the guest still
        writes on the source; the guest's first request on the
        destination waits for the source's handoff; then the source's
        connection is terminated.
        """
        volume = self._pick([v for v in self.volumes if v.host])
        source = volume.host
        dest = self._pick(sorted(set(self.world.compute) - {source}))
        volume.volume_attachment.append(types.SimpleNamespace(
            attach_status='attaching', attached_host=None,
            instance_uuid=volume.instance, connector={'host': dest},
            connection_info=None))
        info = self.driver.initialize_connection(volume, {'host': dest})
        if self.rng.random() < 0.7:
            self._write_spans(volume)           # still on the source
        on_source = list(volume.volume_attachment)
        volume.attach_record(dest, volume.instance, info)
        volume.path = self.world.path(dest, volume.device_path)
        self._check_file(volume)
        gone = types.SimpleNamespace(
            id=volume.id, provider_id=volume.provider_id,
            volume_attachment=on_source)
        self.terminate(gone, {'host': source})

    def op_snapshot(self):
        volume = self._pick(self.volumes)
        snapshot = Snapshot(volume)
        update = self.driver.create_snapshot(snapshot)
        snapshot.provider_id = update['provider_id']
        snapshot.status = 'available'
        self.snapshots.append(snapshot)
        self._check_version(snapshot.provider_id, snapshot.content)

    def op_clone(self):
        source = self._pick(self.volumes)
        self._new_volume(source.content, source.size,
                         self.driver.create_cloned_volume, source)

    def op_from_snapshot(self):
        snapshot = self._pick(self.snapshots)
        # An extend grows every version of the image, the snapshot's
        # too: the new volume has the volume's size now, not the one
        # Cinder recorded with the snapshot (a known difference from
        # Cinder's own drivers; the extra space reads as zeros).
        self._new_volume(snapshot.content, snapshot.volume.size,
                         self.driver.create_volume_from_snapshot, snapshot)

    def _new_volume(self, content, size, create, source):
        volume = Volume(content, size)
        volume.provider_id = create(volume, source)['provider_id']
        self.volumes.append(volume)
        self._check_detached(volume)

    def op_delete_snapshot(self):
        snapshot = self._pick(self.snapshots)
        self.driver.delete_snapshot(snapshot)
        self.snapshots.remove(snapshot)

    def op_revert(self):
        snapshot = self._pick([s for s in self.snapshots
                               if not s.volume.host])
        volume = snapshot.volume
        self.driver.revert_to_snapshot(None, volume, snapshot)
        volume.content[:] = snapshot.content
        self._check_detached(volume)

    def op_extend(self):
        volume = self._pick([v for v in self.volumes if not v.host])
        self.driver.extend_volume(volume, volume.size + 1)
        volume.size += 1

    def op_detach(self):
        volume = self._pick([v for v in self.volumes if v.host])
        self.terminate(volume, {'host': volume.host})
        volume.detach_record()
        self._check_detached(volume)

    def op_delete(self):
        volume = self._pick([v for v in self.volumes if not v.host and
                             not self.snapshots_of(v.id)])
        self.driver.delete_volume(volume)
        self.volumes.remove(volume)

    def collect(self):
        """GC through the storage agent, as an operator asks it: an
        agent's own collection (kicked by a delete) may hold the store's
        lease, and the request waits for it rather than failing. An agent
        the walk killed while it collected holds the lease until it
        expires (gc.LEASE_SECONDS): that collection is skipped (None),
        never a lease of a live agent.
        """
        def killed_holds_it(busy):
            return any('running in %s;' % holder in str(busy)
                       for holder in self.world.killed_holders)
        try:
            # Not waited for: it holds the lease until it expires.
            return agent_rpc.collect_garbage(self.world.api,
                                             self.world.storage,
                                             unless=killed_holds_it)
        except exception.Busy as e:
            if not killed_holds_it(e):
                raise
            # Counted beside the steps: the summary shows how often.
            self.counts['gc_lease_of_a_killed_agent'] = \
                self.counts.get('gc_lease_of_a_killed_agent', 0) + 1
            return None

    def op_gc(self):
        self.collect()
        self.verify_all()

    def op_verify(self):
        self.verify_all()

    # -- checks ------------------------------------------------------------

    def verify_all(self):
        for volume in self.volumes:
            if volume.host:
                self._check_file(volume)
            else:
                self._check_detached(volume)
        for snapshot in self.snapshots:
            self._check_version(snapshot.provider_id, snapshot.content)

    def _check_file(self, volume):
        with GuestDisk(volume.path, readonly=True) as disk:
            got = disk.pread(REGION, 0)
            tail = disk.pread(CHUNK, volume.size * GiB - CHUNK)
        _same(got, volume.content, 'volume %s attached on %s'
              % (volume.provider_id, volume.host))
        if any(tail):
            raise ModelError('volume %s: its last chunk was never written '
                             'but is not zero' % volume.provider_id)

    def _settled(self, image, timeout=60):
        """The image's header once nothing persists it in the background
        (the agent's Volumes.settle): no agent detaching it, and no
        version of it pending while no host holds it.
        """
        deadline = time.monotonic() + timeout
        while True:
            header = self.world.repo.image(image)
            pinned = any(v.pins for v in header.versions)
            pending = any(v.state == 'pending' for v in header.versions)
            if not any(p.get('detaching') for v in header.versions
                       for p in v.pins) and (pinned or not pending):
                return header
            if time.monotonic() > deadline:
                raise ModelError('image %s is still being persisted after '
                                 '%d s: %s' % (image, timeout, [
                                     (v.number, v.state, v.pins)
                                     for v in header.versions
                                     if v.pins or v.state == 'pending']))
            time.sleep(0.05)

    def _check_detached(self, volume):
        header = self._settled(volume.provider_id)
        if header.size != volume.size * GiB:
            raise ModelError('volume %s is %d bytes, not %d GiB'
                             % (volume.provider_id, header.size, volume.size))
        head = header.head()
        self._check_version('%s@%d' % (header.id, head.number),
                            volume.content)

    def _check_version(self, ref, content):
        _same(self._read_version(ref), content, 'version %s' % ref)

    def _read_version(self, ref):
        """The first REGION bytes of stable version ``ref``; nothing may
        be stored beyond them (nothing was ever written there).
        """
        image, number = ref.rsplit('@', 1)
        repo = self.world.repo
        header = repo.image(image)
        version = header.stable_version(int(number))
        got = bytearray(header.size if header.size < REGION else REGION)
        beyond = []
        for index, data in repo.fetch(header, version.number):
            at = index * header.chunk_size
            if at >= REGION:
                beyond.append(index)
            else:
                got[at:at + len(data)] = data
        if beyond:
            raise ModelError('version %s stores chunks %s, outside what was '
                             'ever written' % (ref, beyond[:5]))
        return bytes(got)


def _same(got, expected, what):
    if bytes(got) == bytes(expected):
        return
    diff = [i for i in range(0, len(expected), BLOCK)
            if got[i:i + BLOCK] != expected[i:i + BLOCK]]
    zero = sum(1 for i in diff if not any(got[i:i + BLOCK]))
    raise ModelError('%s differs from the model in %d of %d blocks (first '
                     'at byte %d; %d of them read as zeros)'
                     % (what, len(diff), len(expected) // BLOCK, diff[0],
                        zero))


def answer_records(walk_of):
    """Answer the driver's database reads from the running walk's model
    (``walk_of()``), in this process (tests/cinder_model_run.py).
    """
    from blobcr_cinder import driver as driver_mod
    objects = driver_mod.objects
    objects.SnapshotList.get_all_for_volume = staticmethod(
        lambda ctxt, volume_id: walk_of().snapshots_of(volume_id))
    objects.VolumeAttachmentList.get_all_by_volume_id = staticmethod(
        lambda ctxt, volume_id: walk_of().attachments_of(volume_id))
