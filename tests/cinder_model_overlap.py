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

"""Steps of the Cinder model walk (tests/cinder_model.py) with requests
in flight together, and Nova's flows call by call (issue 32).

Overlaps, as far as Cinder's API and cinder-volume's locks let them run
together on one attached volume (the guest writing all along, one 4 KiB
write at a time, each timed):

* a snapshot create with the delete of an older snapshot (most often
  the newest: the head), a guest checkpoint not waited for, GC;
* a clone of the attached volume during a guest checkpoint, GC;
* a detach while a guest checkpoint persists, with the delete of an
  older snapshot and GC (the guest stopped writing first, as it does
  before Nova detaches).

Every request's invocation and answer are logged; a snapshot or a clone
must hold the volume as it was at some instant between its request and
its answer (tests/history.py), and a volume after its detach every write
acknowledged before the detach was asked. Protection checkpoints run
every few seconds behind all of them (tests/cinder_model_run.py).

Nova's flows, in the order nova/compute/manager.py calls Cinder:

* resize, revert-resize, cold migration, shelve-offload then unshelve:
  an attachment reserved without a connector for the same instance, the
  old one deleted (terminate_connection on the source), the reserved
  one given the destination's connector (initialize_connection). The
  source's agent is paused now and then (SIGSTOP) for longer than the
  driver's probes: the host is alive, so the detach must fail with
  "try again" and lose nothing, or go through once the agent answers;
* evacuate: the source host hangs (its agent SIGSTOPped) and Nova
  reports its compute service down, then the same calls: the volume
  becomes its newest stable version. The host comes back rebooted (its
  agent SIGKILLed and started again) and the operator drops the fenced
  cache.

What is not real: Nova. Its calls are made here in its order, and its
answer to "is this host down?" (os-services) comes from the walk
(``world.nova_down``). Seeds replay the walk's choices; the timing of
requests in flight together is the machine's.
"""

import functools
import os
import signal
import threading
import time
import types

from blobcr_agent.privileged import loop as privileged_loop
from blobcr_lab.guest_disk import GuestDisk
from tests import history

# Requests of one step that may run together, at most.
TOGETHER = 4


class Overlaps(object):
    """A mixin of :class:`tests.cinder_model.Walk`."""

    # -- requests in flight together -------------------------------------

    def _overlap(self, volume, requests, write=True):
        """Run ``requests`` ((name, target, callable) each) in threads
        while the guest writes to ``volume`` (``write``); returns the
        Register of its writes and the Log of the requests.
        """
        register = history.Register(volume.content)
        log = history.Log()
        errors = []
        stop = threading.Event()
        rng = self.rng.__class__(self.rng.getrandbits(64))
        writer = threading.Thread(
            target=self._guest_writes,
            args=(volume, register, stop, rng, errors)) if write else None

        def run(name, target, func):
            try:
                log.call(name, target, func)
            except Exception as e:
                errors.append(e)
        threads = [threading.Thread(target=run, args=r) for r in requests]
        if writer:
            writer.start()
            time.sleep(rng.uniform(0, 0.05))
        for t in threads:
            t.start()
            time.sleep(rng.uniform(0, 0.02))
        for t in threads:
            t.join()
        stop.set()
        if writer:
            writer.join()
        self.overlaps.append(log)
        if errors:
            raise self._history_error('a request failed: %s: %s'
                                      % (type(errors[0]).__name__,
                                         errors[0]), log) from errors[0]
        return register, log

    def _guest_writes(self, volume, register, stop, rng, errors, most=200):
        from tests import cinder_model
        try:
            # As QEMU with cache=none: a write is acknowledged once it
            # reached the mirror (O_DIRECT on a loop device).
            with GuestDisk(volume.path) as disk:
                for _ in range(most):
                    if stop.is_set():
                        return
                    block = rng.randrange(cinder_model.REGION //
                                          cinder_model.BLOCK)
                    data = rng.randbytes(cinder_model.BLOCK)
                    i = register.invoke(block * cinder_model.BLOCK, data)
                    disk.pwrite(data, block * cinder_model.BLOCK)
                    register.complete(i)
                    time.sleep(rng.uniform(0, 0.01))
        except Exception as e:
            errors.append(e)

    def _history_error(self, what, log):
        from tests import cinder_model
        return cinder_model.ModelError('%s\nhistory: %s'
                                       % (what, log.describe()))

    def _fits(self, register, log, name, got, what):
        """The number of guest writes ``got`` holds: it must fit an
        instant of request ``name``'s window.
        """
        entry = next(e for e in log.entries if e['op'] == name)
        inv, comp = log.absolute(entry)
        k = register.fits(got, inv, comp)
        if k is None:
            lo, hi = register.window(inv, comp)
            raise self._history_error(
                '%s holds the volume at no instant between its request '
                'and its answer (%d guest writes acknowledged before the '
                'request, %d asked before the answer)' % (what, lo, hi), log)
        return k

    def _side_requests(self, volume, gc=0.4):
        """A guest checkpoint not waited for, and GC, now and then."""
        extra = []
        if self.rng.random() < 0.6:
            extra.append(('guest_checkpoint', volume.provider_id,
                          functools.partial(self.world.api.checkpoint,
                                            volume.host, volume.provider_id,
                                            quiesce='none')))
        if self.rng.random() < gc:
            extra.append(('gc', self.world.storage, self.collect))
        return extra

    def _victim(self, volume):
        """An older snapshot of ``volume`` to delete, most often the
        newest (the head, while nothing newer turned stable); or None.
        """
        older = [s for s in self.snapshots_of(volume.id)
                 if s.status == 'available']
        if not older or self.rng.random() < 0.2:
            return None
        return older[-1] if self.rng.random() < 0.7 else self._pick(older)

    def op_overlap_snapshot(self):
        from tests import cinder_model
        volume = self._pick([v for v in self.volumes if v.host])
        snapshot = cinder_model.Snapshot(volume)
        victim = self._victim(volume)
        # Cinder's records while they are made: "creating", "deleting".
        self.snapshots.append(snapshot)
        requests = [('create_snapshot', snapshot.id,
                     functools.partial(self.driver.create_snapshot,
                                       snapshot))]
        if victim:
            victim.status = 'deleting'
            requests.append(('delete_snapshot', victim.id,
                             functools.partial(self.driver.delete_snapshot,
                                               victim)))
        requests += self._side_requests(volume)
        register, log = self._overlap(volume, requests[:TOGETHER])
        update = next(e for e in log.entries
                      if e['op'] == 'create_snapshot')['result']
        snapshot.provider_id = update['provider_id']
        snapshot.status = 'available'
        got = self._read_version(snapshot.provider_id)
        self._fits(register, log, 'create_snapshot', got,
                   'snapshot %s' % snapshot.provider_id)
        snapshot.content = bytes(got)
        volume.content[:] = register.final()
        if victim:
            self.snapshots.remove(victim)

    def op_overlap_clone(self):
        from tests import cinder_model
        source = self._pick([v for v in self.volumes if v.host])
        clone = cinder_model.Volume(bytes(cinder_model.REGION), source.size)
        requests = [('clone', source.provider_id,
                     functools.partial(self.driver.create_cloned_volume,
                                       clone, source))]
        requests += self._side_requests(source)
        register, log = self._overlap(source, requests[:TOGETHER])
        clone.provider_id = log.entries[0]['result']['provider_id']
        header = self._settled(clone.provider_id)
        got = self._read_version('%s@%d' % (header.id, header.head().number))
        self._fits(register, log, 'clone', got,
                   'clone %s' % clone.provider_id)
        clone.content[:] = got
        self.volumes.append(clone)
        source.content[:] = register.final()

    def op_overlap_detach(self):
        """The guest writes while a checkpoint is taken, stops (Nova
        detaches once the guest let the disk go), then the detach runs
        while that checkpoint, or the next, persists.
        """
        volume = self._pick([v for v in self.volumes if v.host])
        register, _ = self._overlap(volume, self._side_requests(volume, 0))
        volume.content[:] = register.final()
        requests = [('guest_checkpoint', volume.provider_id,
                     functools.partial(self.world.api.checkpoint,
                                       volume.host, volume.provider_id,
                                       quiesce='none'))]
        requests.append(('detach', volume.provider_id, functools.partial(
            self.terminate, volume, {'host': volume.host})))
        victim = self._victim(volume)
        if victim:
            victim.status = 'deleting'
            requests.append(('delete_snapshot', victim.id,
                             functools.partial(self.driver.delete_snapshot,
                                               victim)))
        if self.rng.random() < 0.4:
            requests.append(('gc', self.world.storage, self.collect))
        _, log = self._overlap(volume, requests, write=False)
        volume.detach_record()
        if victim:
            self.snapshots.remove(victim)
        try:
            self._check_detached(volume)
        except AssertionError as e:
            raise self._history_error(
                'after its detach: %s (every write was acknowledged before '
                'the detach was asked)' % e, log) from e

    def terminate(self, volume, connector):
        """terminate_connection as Nova and operators retry it: refused
        with "try again" while the host's agent was paused (a pause_agent
        step), it is asked again once the agent runs. A refusal when no
        pause explains it fails the walk.
        """
        from cinder import exception as cinder_exception
        start = time.monotonic()
        try:
            return self.driver.terminate_connection(volume, connector)
        except cinder_exception.VolumeBackendAPIException as e:
            if 'try again' not in str(e) or not self.world.paused_during(
                    connector['host'], start, time.monotonic()):
                raise
        self.counts['detach_retried'] = \
            self.counts.get('detach_retried', 0) + 1
        return self.driver.terminate_connection(volume, connector)

    # -- Nova's flows ------------------------------------------------------

    def op_nova_move(self):
        """Resize, revert-resize, cold migration or shelve-offload and
        unshelve, as Nova calls Cinder.
        """
        volume = self._pick([v for v in self.volumes if v.host])
        flow = self._pick(['resize', 'revert_resize', 'cold_migrate',
                           'shelve_unshelve'])
        source = volume.host
        dest = self._pick(sorted(set(self.world.compute) - {source}))
        self.counts['nova_' + flow] = self.counts.get('nova_' + flow, 0) + 1
        hops = [dest, source] if flow == 'revert_resize' else [dest]
        for host in hops:
            if not self._nova_move(volume, host, flow):
                return

    def op_pause_agent(self):
        """SIGSTOP a compute agent for a few seconds, past the driver's
        probes, and go on: the next steps meet it stopped.
        """
        host = self._pick(sorted(self.world.compute))
        self.world.pause(host, self.rng.uniform(0.5, 4))

    def _reserve(self, volume):
        """Nova's attachment without a connector, for the same instance."""
        reserved = types.SimpleNamespace(
            attach_status='reserved', attached_host=None,
            instance_uuid=volume.instance, connector=None,
            connection_info=None)
        volume.volume_attachment.append(reserved)
        return reserved

    def _nova_move(self, volume, dest, flow, pause=None):
        """One hop: False if the detach was refused (the source agent
        paused longer than the probes): Nova's operation fails there,
        the volume stays where it was and reads as before. ``pause``:
        seconds the source agent is stopped (None: now and then).
        """
        from cinder import exception as cinder_exception
        source = volume.host
        reserved = self._reserve(volume)
        if pause is None:
            pause = self.rng.uniform(0.5, 6) \
                if self.rng.random() < 0.4 else 0
        resumed = self.world.pause(source, pause) if pause else None
        start = time.monotonic()
        try:
            self.driver.terminate_connection(volume, {'host': source})
        except cinder_exception.VolumeBackendAPIException as e:
            # Refused only while that agent was stopped (this step's
            # pause or a pause_agent step's).
            if 'try again' not in str(e) or not self.world.paused_during(
                    source, start, time.monotonic()):
                raise
            # paused_during waited until the agent ran again: the
            # stop may be a pause_agent step's, with no ``resumed``.
            self.counts['nova_refused'] = \
                self.counts.get('nova_refused', 0) + 1
            volume.volume_attachment.remove(reserved)
            self._check_file(volume)
            return False
        finally:
            if resumed:
                resumed.wait()
        volume.detach_record()
        volume.volume_attachment = [reserved]   # Nova's, until connected
        if flow == 'shelve_unshelve':
            self.op_gc()                    # offloaded for a while
        self._connect(volume, dest, reserved.instance_uuid)
        return True

    def _connect(self, volume, host, instance):
        info = self.driver.initialize_connection(volume, {'host': host})
        volume.attach_record(host, instance, info)
        volume.path = self.world.path(host, info['data']['device_path'])
        self._check_file(volume)

    def op_evacuate(self):
        """The source host hangs after a checkpoint turned stable and one
        more write; Nova reports it down and evacuates: the volume is one
        of the two states, never anything else.
        """
        volume = self._pick([v for v in self.volumes if v.host])
        source = volume.host
        dest = self._pick(sorted(set(self.world.compute) - {source}))
        image = volume.provider_id
        version = self.world.api.checkpoint(source, image, quiesce='none')
        state = self.world.api.wait_stable(source, image,
                                           version['version'])
        if state != 'stable':
            raise AssertionError('checkpoint v%s is %s'
                                 % (version['version'], state))
        before = bytes(volume.content)
        self._write_spans(volume, spans=1)
        epoch = self.world.repo.image(image).epoch
        self.world.pause(source, None)
        self.world.nova_down.add(source)
        reserved = self._reserve(volume)
        try:
            self.driver.terminate_connection(volume, {'host': source})
        finally:
            self.world.nova_down.discard(source)
            # The hung host reboots.
            self.world.send(source, signal.SIGCONT)
            self._restart(source, skip=volume)
        header = self._settled(image)
        got = self._read_version('%s@%d' % (header.id, header.head().number))
        if bytes(got) not in (before, bytes(volume.content)):
            raise AssertionError('volume %s after the evacuation of %s is '
                                 'neither its last stable checkpoint nor '
                                 'what followed it' % (image, source))
        volume.content[:] = got
        volume.volume_attachment.remove(
            next(a for a in volume.volume_attachment
                 if a.attached_host == source))
        # The operator drops the fenced cache on the host back from the
        # dead (blobcr-manage detach --discard), unless the agent came
        # back before the probe (a pause_agent step ending): detached.
        if header.epoch > epoch:
            self.world.api.detach(source, image, discard=True)
        self._connect(volume, dest, reserved.instance_uuid)


def resize_with_a_paused_source(walk):
    """Nova's resize while the source agent is stopped past both probes
    (issue 32, fix 2): the detach is refused with "try again" and loses
    nothing (before, the reserved attachment made it look like an
    evacuation and the volume was taken over: every write since its
    last stable version lost); once the agent answers, the resize goes
    through with every write.
    """
    walk.op_create()
    walk.op_attach()
    volume = walk.volumes[0]
    walk._write_spans(volume, spans=4)
    dest = next(h for h in sorted(walk.world.compute) if h != volume.host)
    if walk._nova_move(volume, dest, 'resize', pause=6):
        raise AssertionError('the detach went through while the source '
                             'agent was stopped')
    if not walk._nova_move(volume, dest, 'resize', pause=0):
        raise AssertionError('the resize was refused with the agent back')
    walk.verify_all()


def local_connection(walk):
    """``blobcr_connection_type = local`` (issue 33): the driver hands
    out the agent's loop device, O_DIRECT writes and a flush through it
    are the volume's, and the detach releases the device.
    """
    from tests import cinder_model
    walk.driver.configuration.blobcr_connection_type = 'local'
    walk.op_create()
    volume = walk.volumes[0]
    host = sorted(walk.world.compute)[0]
    info = walk.driver.initialize_connection(volume, {'host': host})
    device = info['data']['device_path']
    if info['driver_volume_type'] != 'local' or \
            not os.path.realpath(device).startswith('/dev/loop') or \
            os.path.basename(device) != info['data']['blobcr_image']:
        raise AssertionError('not a local connection: %s' % info)
    volume.attach_record(host, None, info)
    loop = os.path.realpath(device)
    data = walk.rng.randbytes(4 * cinder_model.BLOCK)
    at = 2 * cinder_model.CHUNK
    with GuestDisk(device) as disk:
        assert disk.direct
        disk.pwrite(data, at)
        disk.fsync()
    volume.content[at:at + len(data)] = data
    walk.terminate(volume, {'host': host})
    volume.detach_record()
    if os.path.lexists(device) or privileged_loop.identity(loop) is not None:
        raise AssertionError('%s (%s) still set up after the detach'
                             % (device, loop))
    walk.verify_all()


SCENARIOS = {'resize-paused-source': resize_with_a_paused_source,
             'local-connection': local_connection}
