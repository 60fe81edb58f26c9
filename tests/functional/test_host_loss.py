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

"""A host lost for good loses nothing its guest flushed (issue 53):
`cluster` volumes on the real micro Ceph cluster.

* A randomized walk of a mirror (writes, flushes, checkpoints, persists,
  host losses) against a model: after each loss, the volume taken over
  and attached on a new "host" holds, per 4 KiB block, the write flushed
  last or a later one, never an older one. The lost host is not stopped:
  its threads go on, and everything it does after the take-over must be
  refused (fenced). Seeds are replayable: BLOBCR_WALK_SEED=N.
* Real agents: a writer makes O_DIRECT 4 KiB writes with an fsync after
  every 16 through the FUSE file; its host is lost mid-run (agent and
  writer SIGKILLed, cache directory deleted); another agent takes the
  volume over: every write an fsync acknowledged is there.
* A host cut off but alive: its guest's fsyncs fail (EIO) from the
  take-over on; nothing it writes then reaches the volume.
* `host` durability is what it says: the same loss loses what was
  flushed since the last stable version, and `cluster` is refused on the
  local store.
"""

import errno
import json
import os
import random
import shutil
import subprocess
import sys
import time

import pytest

from blobcr_agent import crashpoint
from blobcr_agent.mirror import image as image_mod
from blobcr_agent.repository.backends import rados
from blobcr_agent.repository import repository
from blobcr_agent.repository import writelog
from blobcr_common import exception
from blobcr_lab import flush_writer

BLOCK = 4096
CHUNK = 64 * 1024
SIZE = 16 * CHUNK
NBLOCKS = SIZE // BLOCK


def _seeds():
    seed = os.environ.get('BLOBCR_WALK_SEED')
    return [int(seed)] if seed else [1, 2, 3]


class Volume(object):
    """What the guest wrote, per block: every value in order, and how
    many of them the last flush covered.
    """

    def __init__(self, base):
        self.history = [[base[b * BLOCK:(b + 1) * BLOCK]]
                        for b in range(NBLOCKS)]
        self.flushed = [1] * NBLOCKS

    def write(self, offset, data):
        for b in range(offset // BLOCK, (offset + len(data) - 1) // BLOCK + 1):
            current = bytearray(self.history[b][-1])
            s = max(offset, b * BLOCK)
            e = min(offset + len(data), (b + 1) * BLOCK)
            current[s - b * BLOCK:e - b * BLOCK] = data[s - offset:e - offset]
            self.history[b].append(bytes(current))

    def flush(self):
        self.flushed = [len(h) for h in self.history]

    def check(self, content, why):
        for b in range(NBLOCKS):
            block = content[b * BLOCK:(b + 1) * BLOCK]
            allowed = self.history[b][self.flushed[b] - 1:]
            assert block in allowed, (
                '%s: block %d holds %s (flushed value %s)' % (
                    why, b, 'an older write' if block in self.history[b]
                    else 'a value never written',
                    'differs' if block != allowed[0] else 'same'))
        # What it holds now is the guest's from here on.
        for b in range(NBLOCKS):
            block = content[b * BLOCK:(b + 1) * BLOCK]
            self.history[b] = [block]
            self.flushed[b] = 1


@pytest.mark.parametrize('backend_kind', ['rados'])
@pytest.mark.parametrize('seed', _seeds())
def test_walk_with_host_losses(backend_factory, tmp_path, seed,
                               monkeypatch):
    # Segments fill up after a few entries: rolled ones follow
    # (writelog.py), as a guest that flushes much between checkpoints
    # makes them past the OSDs' object size limit.
    monkeypatch.setattr(writelog, 'MAX_SEGMENT', 48 * 1024)
    rng = random.Random(seed)
    store = backend_factory()
    repo = repository.Repository(store, chunk_size=CHUNK)
    base = rng.randbytes(SIZE)
    header = repo.create_image('walk-%d' % seed, SIZE)
    repo.commit(header.id, {i: base[i * CHUNK:(i + 1) * CHUNK]
                            for i in range(SIZE // CHUNK)})
    model = Volume(base)
    hosts = 0
    connections = []

    def connect():
        # Each host has its own connection to the cluster.
        connections.append(rados.RadosBackend(
            store.conffile, store.data_pool, store.meta_pool,
            namespace=store.namespace))
        return repository.Repository(connections[-1], chunk_size=CHUNK)

    def attach():
        nonlocal hosts
        hosts += 1
        host_repo = connect()
        return image_mod.AttachedImage(
            host_repo, header.id, None, str(tmp_path / ('host-%d' % hosts)),
            durability='cluster')

    lost = []
    image = attach()
    try:
        for step in range(80):
            kind = rng.choice(['write'] * 5 + ['flush'] * 3 +
                              ['checkpoint', 'persisted', 'lose'])
            if kind == 'write':
                off = rng.randrange(0, SIZE - 1)
                data = rng.randbytes(rng.choice(
                    [1, 512, BLOCK, 3 * BLOCK + 7, CHUNK + 100]))[:SIZE - off]
                image.write(off, data)
                model.write(off, data)
            elif kind == 'flush':
                image.flush()
                model.flush()
            elif kind == 'checkpoint':
                try:
                    image.checkpoint()
                except exception.Busy:
                    pass
            elif kind == 'persisted':
                image.wait_persisted(60)
            else:
                # Lost for good: its cache goes, its threads go on.
                shutil.rmtree(image.cache_dir, ignore_errors=True)
                lost.append(image)
                connect().take_over(header.id, 'walk step %d' % step)
                image = attach()
                model.check(image.read(0, SIZE), 'seed %d step %d' % (
                    seed, step))
                # The lost host's guest is still there: fenced.
                with pytest.raises(OSError) as caught:
                    lost[-1].write(0, b'late')
                    lost[-1].flush()
                assert caught.value.errno == errno.EIO
        image.flush()
        model.flush()
        shutil.rmtree(image.cache_dir, ignore_errors=True)
        lost.append(image)
        repo.take_over(header.id, 'the end of the walk')
        model.check(repo.read(header.id, None, 0, SIZE),
                    'seed %d at the end' % seed)
    finally:
        for old in lost:
            old.close(timeout=5)
        for connection in connections:
            connection.close()


def _promised(journal, blocks):
    return flush_writer.promised(journal, blocks)


def _check_promises(volume, base, floor, later):
    kept = flush_writer.check(volume, base, floor, later)
    assert not kept['bad'], (
        'blocks holding neither their last flushed write nor a later one: '
        '%s' % kept['bad'][:20])
    return kept['flushed_blocks']


def _start_writer(path, journal, every=16):
    writer = subprocess.Popen(
        [sys.executable, '-m', 'blobcr_lab.flush_writer', str(NBLOCKS),
         str(every), journal, 'file', path], stdout=subprocess.PIPE,
        text=True)
    assert writer.stdout.readline().strip() == 'ready'
    return writer


@pytest.mark.parametrize('backend_kind', ['rados'])
@pytest.mark.parametrize('via', ['file', 'loop'])
def test_a_lost_host_loses_no_fsynced_write(backend_factory, agent_factory,
                                            tmp_path, via):
    """Issue 53's reproduction, through real agents: O_DIRECT writes with
    an fsync after every 16, on the FUSE file or on the loop device over
    it (what stock Nova opens: its flush is the kernel's REQ_PREFLUSH,
    an fsync of the file), the host lost 4 s in (agent and writer
    SIGKILLed, cache directory deleted), the volume taken over and
    attached on another agent.
    """
    store = backend_factory()
    settings = {'agent': {'quiesce': 'none'}}
    a = agent_factory(store, settings)
    b = agent_factory(store, settings)
    image = a.client.call('create_image', name='lost', size=SIZE)['id']
    attached = a.client.call('attach', image=image,
                             block_device=via == 'loop')
    path = attached['device' if via == 'loop' else 'path']
    base = bytes(SIZE)
    journal = str(tmp_path / 'journal')
    writer = _start_writer(path, journal)
    # A checkpoint under way too: the log is trimmed and rolled.
    time.sleep(2)
    a.client.call('checkpoint', image=image)
    time.sleep(2)
    writer.kill()
    writer.wait()
    a.kill()
    shutil.rmtree(os.path.join(a.state_path, 'cache', image))
    floor, later, flushed, failed = _promised(journal, NBLOCKS)
    assert flushed >= 32 and not failed, (flushed, failed)

    # A cacheless attach before the take-over would lose them: refused.
    with pytest.raises(Exception) as refused:
        b.client.call('attach', image=image)
    assert 'take-over' in str(refused.value)
    taken = b.client.call('take_over', image=image, why='host A is lost')
    assert taken['replayed']['writes'] > 0, taken
    path_b = b.client.call('attach', image=image)['path']
    with open(path_b, 'rb') as f:
        content = f.read()
    kept = _check_promises(content, base, floor, later)
    assert kept > 0
    b.client.call('detach', image=image, discard=True)


@pytest.mark.parametrize('backend_kind', ['rados'])
def test_a_cut_off_host_fails_its_guests_flushes(backend_factory,
                                                 agent_factory, tmp_path):
    """A host partitioned but alive: from the take-over on, its guest's
    fsyncs fail (EIO), and nothing it writes reaches the volume.
    """
    store = backend_factory()
    settings = {'agent': {'quiesce': 'none'}}
    a = agent_factory(store, settings)
    b = agent_factory(store, settings)
    image = a.client.call('create_image', name='cut', size=SIZE)['id']
    path = a.client.call('attach', image=image)['path']
    journal = str(tmp_path / 'journal')
    writer = _start_writer(path, journal, every=4)
    time.sleep(1.5)
    b.client.call('take_over', image=image, why='host A is cut off')
    taken_at = os.path.getsize(journal)
    time.sleep(1.5)
    writer.kill()
    writer.wait()
    floor, later, flushed, failed = _promised(journal, NBLOCKS)
    with open(journal) as f:
        f.seek(taken_at)
        after = f.read().split('\n')
    # The writer went on; its flushes since the take-over all failed.
    assert failed and all(code == errno.EIO for _, code in failed)
    # (One fsync may have been appended just before the seal and have
    # returned just after.)
    assert sum(line.startswith('F ') for line in after) <= 1, after[:5]
    path_b = b.client.call('attach', image=image)['path']
    with open(path_b, 'rb') as f:
        content = f.read()
    _check_promises(content, bytes(SIZE), floor, later)
    b.client.call('detach', image=image, discard=True)
    a.client.call('detach', image=image, discard=True)


def _child(mode, spec, image_id, *args, env=None):
    return subprocess.run(
        [sys.executable, '-m', 'tests.functional.log_crash_child', mode,
         json.dumps(spec), image_id] + list(args), capture_output=True,
        text=True, timeout=120, env=dict(os.environ, **(env or {})))


@pytest.mark.parametrize('backend_kind', ['rados'])
def test_a_kill_at_any_write_log_point_loses_no_flushed_write(
        backend_factory, tmp_path):
    """The crash-point sweep of the flush path: a SIGKILL right after
    each append (before the flush returns), after each trim, after the
    take-over's seal and after its fold; then the host is lost and the
    volume taken over (again): every write a returned flush covered is
    there.
    """
    from tests.functional import log_crash_child as child
    store = backend_factory()
    spec = {'conffile': store.conffile, 'namespace': store.namespace}
    repo = repository.Repository(store, chunk_size=child.CHUNK)
    size = child.BLOCKS * BLOCK
    runs = [0]

    def run(env=None, takeover_env=None):
        runs[0] += 1
        image_id = repo.create_image('sweep-%d' % runs[0], size).id
        cache = str(tmp_path / ('cache-%d' % runs[0]))
        journal = str(tmp_path / ('journal-%d' % runs[0]))
        done = _child('write', spec, image_id, cache, journal, env=env)
        outcomes = [done]
        if takeover_env is not None:
            outcomes.append(_child('take-over', spec, image_id,
                                   env=takeover_env))
        repo.take_over(image_id, 'after the crash')
        floor, later, _, failed = _promised(journal, child.BLOCKS)
        assert not failed
        _check_promises(repo.read(image_id, None, 0, size), bytes(size),
                        floor, later)
        return outcomes

    counts_file = str(tmp_path / 'counts.json')
    done, took = run({'BLOBCR_CRASH_COUNTS': counts_file},
                     {'BLOBCR_CRASH_COUNTS': counts_file + '.take'})
    assert done.returncode == 0 and took.returncode == 0, (
        done.stderr[-2000:], took.stderr[-2000:])
    with open(counts_file) as f:
        counts = json.load(f)
    with open(counts_file + '.take') as f:
        counts.update(json.load(f))
    assert set(counts) >= set(crashpoint.LOG_SITES), counts
    killed = 0
    for site in ('log-appended', 'log-dropped'):
        for n in range(1, counts[site] + 1):
            done, = run({'BLOBCR_CRASH_AT': '%s:%d' % (site, n)})
            assert done.returncode == -9, (site, n, done.stderr[-2000:])
            killed += 1
    for site in ('log-sealed', 'log-folded'):
        done, took = run({'BLOBCR_CRASH_AT': 'log-appended:%d'
                          % counts['log-appended']},
                         {'BLOBCR_CRASH_AT': '%s:1' % site})
        assert took.returncode == -9, (site, took.stderr[-2000:])
        killed += 1
    print('write-log crash points: %s; %d killed' % (counts, killed))


@pytest.mark.parametrize('backend_kind', ['rados'])
def test_the_log_is_trimmed_emptied_at_detach_and_collected(
        backend_factory, agent_factory, tmp_path):
    """Stable versions trim the log, a detach empties it (another host
    attaches without a take-over), and GC deletes a deleted image's log,
    the segments a take-over sealed included.
    """
    from blobcr_agent.repository import gc
    store = backend_factory()
    settings = {'agent': {'quiesce': 'none'}}
    a = agent_factory(store, settings)
    b = agent_factory(store, settings)
    image = a.client.call('create_image', name='trim', size=SIZE)['id']
    path = a.client.call('attach', image=image)['path']
    journal = str(tmp_path / 'journal')
    writer = _start_writer(path, journal, every=4)
    for _ in range(3):
        time.sleep(0.7)
        version = a.client.call('checkpoint', image=image)['version']
        assert a.client.call('wait_stable', image=image,
                             version=version) == 'stable'
    writer.kill()
    writer.wait()
    _, segments = store.log_state(image)
    # The newest stable version covers all but the last one or two.
    assert 1 <= len(segments) <= 2, segments
    a.client.call('checkpoint', image=image)
    a.client.call('detach', image=image)
    assert store.log_state(image)[1] == {}
    b.client.call('attach', image=image)         # no take-over needed
    with open(b.client.call('attach', image=image)['path'], 'r+b',
              buffering=0) as f:
        f.write(b'b' * BLOCK)
        os.fsync(f.fileno())
    b.kill()
    taken = a.client.call('take_over', image=image, why='test')
    assert taken['replayed']['writes'] == 1
    a.client.call('delete_image', image=image)
    gc.collect(repository.Repository(store, chunk_size=CHUNK), grace=0)
    left = [o.key for o in store._meta.list_objects()
            if o.key.startswith('wlog.%s' % image)]
    assert left == []
