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

"""Space comes back without an operator (issue 20, item 5).

* The store's ``gc`` lease lets one process collect at a time, on the
  local store (an flock) and on Ceph (a RADOS lock), and a dead holder's
  lease ends (with its process; on Ceph with its duration).
* A real agent collects by itself after it deletes volumes: 20 volumes
  created, written, checkpointed and deleted, and the store's bytes come
  back to within 5% of where they started, within gc_interval + grace.
* Deleted behind the agent's back (``blobcr-manage delete``, no kick),
  the periodic collection frees the space all the same.
"""

import os
import random
import subprocess
import sys
import time

import pytest

from blobcr_agent.repository.backends import local
from blobcr_agent.repository import gc
from blobcr_agent.repository import repository

MiB = 1024 * 1024


def _same_store(backend):
    if backend.name == 'local':
        return local.LocalBackend(backend.root)
    from blobcr_agent.repository.backends import rados
    return rados.RadosBackend(backend.conffile, backend.data_pool,
                              backend.meta_pool, namespace=backend.namespace)


_HOLD = '''
import sys, time
from tests.functional.test_gc_by_itself import _reopen
b = _reopen(sys.argv[1:])
assert b.try_lease('gc', 'child', 2)
print('held', flush=True)
time.sleep(600)
'''


def _reopen(argv):
    """A backend opened from _store_args' words (in a child process)."""
    if argv[0] == 'local':
        return local.LocalBackend(argv[1])
    from blobcr_agent.repository.backends import rados
    return rados.RadosBackend(argv[1], argv[2], argv[3], namespace=argv[4])


def _store_args(backend):
    if backend.name == 'local':
        return ['local', backend.root]
    return ['rados', backend.conffile, backend.data_pool, backend.meta_pool,
            backend.namespace]


def test_one_lease_holder_at_a_time_and_a_dead_ones_lease_ends(
        backend_factory):
    first = backend_factory()
    second = _same_store(first)
    try:
        assert first.lease_holder('gc') is None
        assert first.try_lease('gc', 'one', 30)
        assert first.try_lease('gc', 'one', 30)        # a renewal
        assert not second.try_lease('gc', 'two', 30)
        assert second.lease_holder('gc') == 'one'
        first.release_lease('gc', 'one')
        assert second.try_lease('gc', 'two', 30)
        assert not first.try_lease('gc', 'one', 30)
        second.release_lease('gc', 'two')

        # A holder SIGKILLed: its lease ends (local: with it; RADOS: when
        # its 2 s pass unrenewed), and no sooner on RADOS.
        child = subprocess.Popen(
            [sys.executable, '-c', _HOLD] + _store_args(first),
            stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout.readline().strip() == 'held'
            assert not first.try_lease('gc', 'one', 30)
            child.kill()
            child.wait()
            deadline = time.monotonic() + 30
            while not first.try_lease('gc', 'one', 30):
                assert time.monotonic() < deadline, 'the lease never ended'
                time.sleep(0.2)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        first.release_lease('gc', 'one')
    finally:
        second.close()


def _store_bytes(root):
    total = 0
    for sub in ('chunk', 'node', 'header'):
        for dirpath, _, files in os.walk(os.path.join(root, sub)):
            for name in files:
                try:
                    total += os.lstat(os.path.join(dirpath, name)).st_size
                except FileNotFoundError:
                    pass
    return total


def _wait_for_bytes(root, at_most, timeout):
    deadline = time.monotonic() + timeout
    while True:
        now = _store_bytes(root)
        if now <= at_most or time.monotonic() > deadline:
            return now
        time.sleep(0.5)


@pytest.mark.parametrize('backend_kind', ['local'])
def test_an_agent_frees_the_space_of_deleted_volumes_by_itself(
        backend_factory, agent_factory):
    backend = backend_factory()
    interval, grace = 5, 1
    agent = agent_factory(backend, {
        'agent': {'quiesce': 'none'},
        'repository': {'gc_interval': interval, 'gc_grace': grace}})
    rng = random.Random(20)
    # A volume that stays: the store's bytes at the start are its.
    keep = agent.client.call('create_image', name='keep', size=4 * MiB)
    path = agent.client.call('attach', image=keep['id'])['path']
    with open(path, 'r+b', buffering=0) as f:
        f.write(rng.randbytes(4 * MiB))
    version = agent.client.call('checkpoint', image=keep['id'])['version']
    assert agent.client.call('wait_stable', image=keep['id'],
                             version=version) == 'stable'
    agent.client.call('detach', image=keep['id'])
    start = _store_bytes(backend.root)
    peak = start
    for k in range(20):
        image = agent.client.call('create_image', name='v%d' % k,
                                  size=2 * MiB)['id']
        path = agent.client.call('attach', image=image)['path']
        with open(path, 'r+b', buffering=0) as f:
            f.write(rng.randbytes(2 * MiB))
        version = agent.client.call('checkpoint', image=image)['version']
        assert agent.client.call('wait_stable', image=image,
                                 version=version) == 'stable'
        agent.client.call('detach', image=image)
        peak = max(peak, _store_bytes(backend.root))
        agent.client.call('delete_image', image=image)
    assert peak > 2 * start, 'the volumes never took space: %d' % peak
    deleted = time.monotonic()
    end = _wait_for_bytes(backend.root, start * 1.05, interval + grace + 20)
    print('\nstore bytes: %d at the start, %d at the peak, %d %.1f s after '
          'the last delete' % (start, peak, end, time.monotonic() - deleted))
    assert end <= start * 1.05, (start, peak, end)
    status = agent.client.call('status')['gc']
    assert status['runs'] >= 1 and status['last']['bytes_freed'] >= 0


def test_the_periodic_collection_frees_what_was_deleted_behind_it(
        tmp_path):
    from blobcr_agent.manager import collector
    repo = repository.Repository(local.LocalBackend(str(tmp_path / 's')),
                                 chunk_size=64 * 1024, gc_grace=0)
    rng = random.Random(21)
    header = repo.create_image('gone', MiB)
    repo.commit(header.id, {i: rng.randbytes(64 * 1024) for i in range(16)})
    full = _store_bytes(repo.backend.root)
    c = collector.Collector(repo, interval=1)
    c.start()
    try:
        repo.delete_image(header.id)        # nobody kicks the collector
        end = _wait_for_bytes(repo.backend.root, full // 10, 20)
        assert end <= full // 10, (full, end)
        # The run counts once it ends, which may be after its deletes
        # freed the bytes (a loaded machine showed it).
        deadline = time.monotonic() + 20
        while c.runs < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert c.runs >= 1
        # An explicit collection while another process holds the lease
        # is refused, not run twice.
        other = local.LocalBackend(repo.backend.root)
        try:
            assert other.try_lease(gc.LEASE, 'someone', 30)
            with pytest.raises(Exception, match='running in someone'):
                c.run_once()
        finally:
            other.close()
    finally:
        c.stop()
        repo.close()
