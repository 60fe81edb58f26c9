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

"""What the peers of ``blobcr-bench peers`` share: the interface the
orchestrator (peers.py) drives, and a worker that copies checkpoints out
in order behind the application.

A peer opens a fresh disk of ``size`` bytes, takes ``write(offset,
data)`` from the application's thread, and answers ``checkpoint()`` from
the orchestrator's once the point in time is fixed (the ack); the
copy-out then runs behind the application and ``durable()`` records when
it is on its durable medium, with the bytes it copied (what proves the
path ran) and the bytes it stored.
"""

import queue
import threading
import time


class PeerRefused(Exception):
    """This peer cannot run here; the message says what refused."""


class Peer(object):
    name = None
    # Where this peer's checkpoint is durable, for the report.
    durable_at = None

    def __init__(self, args):
        self.args = args
        self.worker = None

    def open(self, workdir, size):
        raise NotImplementedError

    def write(self, offset, data):
        raise NotImplementedError

    def queue(self, depth):
        """The application's writes with up to ``depth`` in flight
        (``submit``, ``drain``, ``close``): blocking writes on a pool of
        threads, as QEMU's aio=threads issues a guest's requests.
        """
        return QueuedWrites(self.write, depth)

    def checkpoint(self):
        raise NotImplementedError

    def restart_prepare(self, cp):
        """What a restart finds running already, made before the restart
        is timed: BlobCR's mirror runs on every host, so a QEMU peer
        starts its storage daemon here (empty) and a restart adds the
        chain to it, as BlobCR's adds the version to its mirror.
        """

    def restart_open(self, cp):
        """A reader (``read(offset, length)``, ``close()``) of the disk as
        it was at ``cp``, opened as a restart would (timed).
        """
        raise NotImplementedError

    def counters(self):
        """Counters of the peer's own machinery over the run, if any."""
        return {}

    def osd_counters(self):
        """The Ceph cluster's OSD counters (blobcr_lab.ceph), if this
        peer stores into one; None otherwise.
        """
        return None

    def check_runs(self, checks, workload, runs):
        """Checks of this peer's own set-up, run by run (``runs``: the
        results of ``workload``); none by default.
        """

    def close(self):
        pass

    @staticmethod
    def acked(t0, **fields):
        """A checkpoint acknowledged now, requested at ``t0``
        (perf_counter).
        """
        now = time.perf_counter()
        cp = {'t_req': t0, 't_ack': now, 'ack_ms': (now - t0) * 1000,
              'durable_s': None, 'copied_bytes': None,
              'stored_bytes': None}
        cp.update(fields)
        return cp

    @staticmethod
    def durable(cp, copied, stored):
        """``cp``'s copy-out is durable now."""
        cp.update(durable_s=time.perf_counter() - cp['t_req'],
                  copied_bytes=copied, stored_bytes=stored)

    def settle(self, checkpoints):
        """Wait until every checkpoint is durable."""
        if self.worker is not None:
            self.worker.drain()
        missing = [cp['index'] for cp in checkpoints
                   if cp['durable_s'] is None]
        if missing:
            raise RuntimeError('%s: checkpoints %s never became durable'
                               % (self.name, missing))


class QueuedWrites(object):
    """Up to ``depth`` calls of a blocking ``write(offset, data)`` in
    flight on as many threads; ``submit`` waits for a free slot.
    """

    def __init__(self, write, depth):
        import concurrent.futures
        self.write = write
        self.depth = depth
        self.slots = threading.Semaphore(depth)
        self.pool = concurrent.futures.ThreadPoolExecutor(
            depth, thread_name_prefix='peers-write')
        self.error = None

    def take_slot(self):
        """Wait for room for one more write; raise the first error."""
        self.slots.acquire()
        if self.error is not None:
            self.slots.release()
            raise self.error

    def submit(self, offset, data, done):
        """Write ``data`` at ``offset``; ``done()`` once it completed."""
        self.take_slot()

        def run():
            try:
                self.write(offset, data)
            except Exception as e:
                self.error = e
            finally:
                done()
                self.slots.release()
        self.pool.submit(run)

    def drain(self):
        """Wait until every write submitted completed."""
        for _ in range(self.depth):
            self.slots.acquire()
        for _ in range(self.depth):
            self.slots.release()
        if self.error is not None:
            raise self.error

    def close(self):
        self.pool.shutdown(wait=True)


class CopyOutWorker(object):
    """Runs copy-out tasks one after the other, in checkpoint order, on a
    thread of its own; the first error is raised by ``drain``.
    """

    def __init__(self, name):
        self.tasks = queue.Queue()
        self.error = None
        self.thread = threading.Thread(target=self._run, daemon=True,
                                       name='copy-out-%s' % name)
        self.thread.start()

    def _run(self):
        while True:
            task = self.tasks.get()
            try:
                if task is None:
                    return
                if self.error is None:
                    task()
            except Exception as e:
                self.error = e
            finally:
                self.tasks.task_done()

    def put(self, task):
        self.tasks.put(task)

    def drain(self):
        self.tasks.join()
        if self.error is not None:
            raise self.error

    def stop(self):
        self.tasks.put(None)
        self.thread.join(timeout=120)
