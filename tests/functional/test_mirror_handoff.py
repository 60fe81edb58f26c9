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

"""An incoming mirror's gate at the switch, with threads racing it.

A real FUSE mount (the C libfuse3 loop, and the pyfuse3 one) and a real
local repository. The source host is played by a function that answers
as manager.handoff does: "running" while the test says the guest runs
there, then one COMMIT of the source's last writes into the same
repository and that version (the RPC between two real agents is
tests/integration/test_live_migration.py; here what is under test is
the destination's gate when many requests hit it at the switch).

Writers to the same chunks start before the switch and must wait; after
it, each write must land on the source's last version (a chunk fetched
from the old base before the rebase would bring back its bytes), and
readers racing the writers see the source's data or a writer's, never
the old base's.
"""

import os
import threading
import time

import pytest

from blobcr_agent.mirror import service as service_mod
from blobcr_agent.repository.backends import local
from blobcr_agent.repository import repository

CHUNK = 256 * 1024
CHUNKS = 8
SLOT = 4096
WRITERS = 12            # 3 slots in each of chunks 2..5
OLD, NEW = b'o', b'n'   # base version / the source's last version


class Source(object):
    """The source host's answers (manager.handoff's contract)."""

    def __init__(self, repo, image):
        self.repo, self.image = repo, image
        self.running = threading.Event()
        self.running.set()
        self.asks = 0
        self.version = None
        self._lock = threading.Lock()

    def ask(self, source, image, wait, timeout):
        with self._lock:
            self.asks += 1
            if self.running.is_set():
                time.sleep(min(wait, 0.05))
                return {'running': True}
            if self.version is None:
                # What the source wrote last: chunks 1..5.
                self.version = self.repo.commit(
                    image, {i: NEW * CHUNK for i in range(1, 6)})
            return {'running': False, 'version': self.version}


def serve(repo, mountpoint, cache_dir, io_loop):
    """A mirror service mounted and serving in a thread, its handoffs
    waited for 20 s: (service, thread).
    """
    service = service_mod.MirrorService(repo, mountpoint, cache_dir,
                                        io_loop=io_loop)
    service.handoff_timeout = 20
    ready = threading.Event()
    thread = threading.Thread(target=service.run,
                              kwargs={'ready': ready.set}, daemon=True)
    thread.start()
    assert ready.wait(30)
    return service, thread


@pytest.fixture(params=['native', 'pyfuse3'])
def mirror(request, tmp_path):
    repo = repository.Repository(local.LocalBackend(str(tmp_path / 'store')))
    header = repo.create_image('disk', CHUNKS * CHUNK, chunk_size=CHUNK)
    repo.commit(header.id, {i: OLD * CHUNK for i in range(CHUNKS)})
    service, thread = serve(repo, str(tmp_path / 'mnt'),
                            str(tmp_path / 'cache'), request.param)
    source = Source(repo, header.id)
    service.handoff_asker = source.ask
    try:
        yield service, source, header.id
    finally:
        service.unmount()
        thread.join(10)
        if thread.is_alive():
            # A request of this process still in the mount (a failed
            # test): abort the connection, or the process hangs in it.
            service.abort()
            thread.join(30)
        repo.close()


def _pread(path, offset, length):
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.pread(fd, length, offset)
    finally:
        os.close(fd)


def _pwrite(path, offset, data):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, offset)
        os.fsync(fd)
    finally:
        os.close(fd)


def _slot(k):
    """Writer k's offset: chunks 2..5, slots 0, 5 and 17 of each."""
    return (2 + k // 3) * CHUNK + (0, 5, 17)[k % 3] * SLOT


def test_writers_and_readers_racing_the_switch(mirror):
    service, source, image = mirror
    path = service.attach(image, incoming_from='source-host')
    attached = service.get(image)
    # Early reads (the destination QEMU's): the old base, not installed.
    assert _pread(path, CHUNK, CHUNK) == OLD * CHUNK
    assert attached.stats()['present'] == 0
    assert attached.incoming.early_reads >= 1

    done, errors = [], []

    def writer(k):
        try:
            _pwrite(path, _slot(k), bytes([65 + k]) * SLOT)
            done.append(k)
        except Exception as e:              # reported below
            errors.append(e)
    writers = [threading.Thread(target=writer, args=(k,))
               for k in range(WRITERS)]
    for t in writers:
        t.start()
    time.sleep(0.5)
    assert done == [] and errors == []      # all held at the gate
    seen, stop = [], threading.Event()

    def reader():
        try:
            while not stop.is_set():
                seen.append(_pread(path, 2 * CHUNK, 4 * CHUNK))
        except Exception as e:              # reported below
            errors.append(e)
    readers = [threading.Thread(target=reader) for _ in range(3)]
    source.running.clear()                  # the switch
    for t in readers:
        t.start()
    for t in writers:
        t.join(60)
    stop.set()
    for t in readers:
        t.join(60)
    assert errors == [] and sorted(done) == list(range(WRITERS)), \
        (errors, attached.incoming.error)
    assert attached.incoming.done.is_set()
    assert attached.attached_version == source.version
    image_bytes = _pread(path, 0, CHUNKS * CHUNK)
    expected = bytearray(OLD * CHUNK + NEW * 5 * CHUNK + OLD * 2 * CHUNK)
    for k in range(WRITERS):
        expected[_slot(k):_slot(k) + SLOT] = bytes([65 + k]) * SLOT
    assert image_bytes == bytes(expected)
    allowed = set(NEW) | {65 + k for k in range(WRITERS)}
    for got in seen:
        assert set(got) <= allowed, 'a reader saw the old base'
    # From here on, a plain mirror: its checkpoint holds all of it.
    version, _, _ = attached.checkpoint()
    assert attached.wait_persisted(60)
    assert service.repo.read(image, version, 0, CHUNKS * CHUNK) == \
        bytes(expected)
    service.detach(image)
