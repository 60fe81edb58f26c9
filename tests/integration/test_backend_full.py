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

"""Full backends: a clear error at once, earlier versions intact.

* RADOS: a dedicated pool pair in the session's Ceph cluster (an
  erasure-coded data pool with the cluster's k=2 m=1 profile and a
  replicated meta pool) gets a quota. librados holds a write to a full
  pool until ``rados_osd_op_timeout`` (60 s here, as in production)
  unless the write carries FULL_TRY; with it the OSD answers EDQUOT at
  once. The commit must fail in seconds with BackendFull naming the pool,
  the stable versions must read back and verify, GC must still delete on
  the full pool, and once the quota is raised commits work again.
* Local store: a 48 MiB tmpfs filled to the last page: BackendFull, no tmp
  files left, earlier versions intact, and commits work once space is
  freed.
* A real blobcr-agent on the full local store, driven through the guest
  endpoint (POST /v1/checkpoint) and blobcr-manage.
"""

import errno
import http.client
import json
import os
import random
import subprocess
import sys
import time
import uuid

import pytest

from blobcr_agent.repository.backends import base
from blobcr_agent.repository.backends import local
from blobcr_agent.repository import gc
from blobcr_agent.repository import repository
from blobcr_agent.repository import scrub
from blobcr_common import auth
from blobcr_common import exception
from blobcr_lab.agent_rpc import committed

CHUNK = 64 * 1024
# librados' own limit is rados_osd_op_timeout = 60 s; a full pool must
# be reported well before it.
FAST = 15
# Left free on the tmpfs: room for the header of a new version and for 8
# chunk objects (65 537 bytes: 17 pages each), never for a 9th. What no
# chunk can use stays free for the header write that marks it failed,
# once the writes in flight are over.
ROOM = 600 * 1024


# -- RADOS -----------------------------------------------------------------

def _ceph(cluster, *args):
    return subprocess.run(['ceph', '-c', cluster.conffile,
                           '--connect-timeout', '10'] + list(args),
                          check=True, capture_output=True, text=True,
                          timeout=60).stdout


def _ceph_json(cluster, *args):
    return json.loads(_ceph(cluster, '--format', 'json', *args))


def _pool_flags(cluster, pool):
    for p in _ceph_json(cluster, 'osd', 'dump')['pools']:
        if p['pool_name'] == pool:
            return set(p['flags_names'].split(','))
    raise AssertionError('no pool %s' % pool)


def _set_quota(cluster, pool, max_bytes, timeout=120):
    """Set a byte quota (0: none) and wait until the mon has (un)flagged
    the pool full: quotas are applied from the PG stats, seconds later.
    """
    _ceph(cluster, 'osd', 'pool', 'set-quota', pool, 'max_bytes',
          str(max_bytes))
    want_full = max_bytes != 0
    deadline = time.monotonic() + timeout
    while ('full' in _pool_flags(cluster, pool)) != want_full:
        assert time.monotonic() < deadline, (
            'pool %s not %s after %d s' % (
                pool, 'full' if want_full else 'free', timeout))
        time.sleep(0.5)


@pytest.fixture
def full_pools(ceph_cluster):
    """A fresh (data, meta) pool pair, removed afterwards."""
    tag = uuid.uuid4().hex[:6]
    data, meta = 'blobcr-full-data-' + tag, 'blobcr-full-meta-' + tag
    profile = _ceph_json(ceph_cluster, 'osd', 'pool', 'get', 'blobcr-data',
                         'erasure_code_profile')['erasure_code_profile']
    try:
        _ceph(ceph_cluster, 'osd', 'pool', 'create', data, '8', '8',
              'erasure', profile)
        _ceph(ceph_cluster, 'osd', 'pool', 'create', meta, '8', '8',
              'replicated')
        for pool in (data, meta):
            _ceph(ceph_cluster, 'osd', 'pool', 'application', 'enable',
                  pool, 'blobcr')
        yield data, meta
    finally:
        for pool in (data, meta):
            subprocess.run(['ceph', '-c', ceph_cluster.conffile, 'osd',
                            'pool', 'rm', pool, pool,
                            '--yes-i-really-really-mean-it'],
                           capture_output=True, timeout=60)


def _chunks(rng, indices):
    return {i: rng.randbytes(CHUNK) for i in indices}


def _image_bytes(nchunks, *layers):
    image = {}
    for layer in layers:
        image.update(layer)
    return b''.join(image.get(i, bytes(CHUNK)) for i in range(nchunks))


def _assert_intact(repo, image_id, expected):
    for number, data in expected.items():
        assert repo.read(image_id, number, 0, len(data)) == data, number
        report = scrub.verify(repo, image_id, number)
        assert report.ok, report.problems


def _without_ioctx_full_try(backend):
    """Make ``backend`` write chunks as write ops with the FULL_TRY flag,
    as it does with a binding that cannot set it on the ioctx.
    """
    for ioctx in backend._all_ioctxs:
        ioctx.unset_osdmap_full_try()
    backend._ioctx_full_try = False
    return backend


def _timed_failure(call):
    started = time.monotonic()
    with pytest.raises(exception.BackendFull) as ei:
        call()
    return ei.value, time.monotonic() - started


def test_rados_pool_over_quota_fails_at_once(ceph_cluster, full_pools):
    from blobcr_agent.repository.backends import rados
    data_pool, meta_pool = full_pools
    backend = rados.RadosBackend(ceph_cluster.conffile, data_pool, meta_pool,
                                 namespace='full-' + uuid.uuid4().hex[:8],
                                 connect_timeout=10, op_timeout=60)
    repo = repository.Repository(backend, chunk_size=CHUNK, gc_grace=0)
    rng = random.Random(11)
    n = 64
    image = repo.create_image('full', n * CHUNK).id
    base_chunks = _chunks(rng, range(32))
    v1 = repo.commit(image, base_chunks)
    over = _chunks(rng, range(16))      # v2 replaces chunks 0..15
    v2 = repo.commit(image, over)
    expected = {v1: _image_bytes(n, base_chunks),
                v2: _image_bytes(n, base_chunks, over)}
    try:
        # 3 MiB stored, quota 1 MiB: the data pool is full.
        _set_quota(ceph_cluster, data_pool, 1 << 20)
        more = _chunks(rng, range(32, 64))
        error, elapsed = _timed_failure(lambda: repo.commit(image, more))
        assert elapsed < FAST, elapsed
        message = str(error)
        assert 'the Ceph pool %s' % data_pool in message
        assert 'full' in message and 'EDQUOT' in message
        # The meta pool has room: the version is recorded as failed.
        versions = repo.image(image).versions
        assert [(v.number, v.state) for v in versions] == [
            (1, 'stable'), (2, 'stable'), (3, 'failed')]
        assert data_pool in versions[2].error
        _assert_intact(repo, image, expected)

        # The same without FULL_TRY on the ioctx: chunks go as write ops.
        fallback = _without_ioctx_full_try(rados.RadosBackend(
            ceph_cluster.conffile, data_pool, meta_pool,
            namespace=backend.namespace, op_timeout=60))
        try:
            batch = fallback.batch()
            batch.put(base.CHUNK, 'probe-chunk', rng.randbytes(CHUNK))
            error, elapsed = _timed_failure(batch.wait)
            assert elapsed < FAST, elapsed
            assert 'the Ceph pool %s' % data_pool in str(error)
        finally:
            fallback.close()

        # Deletes must not be held back on a full pool: GC frees what
        # only the obsolete v1 used (chunks 0..15 of the base).
        repo.obsolete(image, [v1])
        started = time.monotonic()
        report = gc.collect(repo, grace=0)
        assert time.monotonic() - started < FAST
        assert report.chunks_deleted >= 16, report.as_dict()
        del expected[v1]
        _assert_intact(repo, image, expected)
    finally:
        _set_quota(ceph_cluster, data_pool, 0)
    v4 = repo.commit(image, more)
    expected[v4] = _image_bytes(n, base_chunks, over, more)
    _assert_intact(repo, image, expected)

    # The meta pool full: the version is refused at once (this used to
    # wait for the 60 s timeout).  Which write meets the quota first, a
    # tree node or the header, depends on when the OSDs see the flag.
    try:
        _set_quota(ceph_cluster, meta_pool, 1)
        error, elapsed = _timed_failure(
            lambda: repo.commit(image, _chunks(rng, [7])))
        assert elapsed < FAST, elapsed
        assert 'the Ceph pool %s' % meta_pool in str(error)
        assert 'header' in str(error) or 'node' in str(error), error
        # If the header took the version before the flag reached the
        # OSDs, a node then failed and so did marking it failed (the
        # header is refused too): it stays pending, never stable, until
        # GC sees its writer gone.
        # (Version 1, obsolete and collected, had its entry pruned.)
        versions = repo.image(image).versions
        assert [v.number for v in versions][:3] == [2, 3, 4]
        assert [v.number for v in versions][3:] in ([], [5]), versions
        assert all(v.state != 'stable' for v in versions[3:]), versions
        _assert_intact(repo, image, expected)
    finally:
        _set_quota(ceph_cluster, meta_pool, 0)
    last = _chunks(rng, [7])
    v5 = repo.commit(image, last)
    expected[v5] = _image_bytes(n, base_chunks, over, more, last)
    _assert_intact(repo, image, expected)
    repo.close()


@pytest.mark.parametrize('ioctx_full_try', [True, False])
def test_rados_writes_are_dated_now(ceph_cluster, ioctx_full_try):
    # Write ops dated 1970 (the binding's default mtime) would look like
    # garbage to GC's grace period.
    from blobcr_agent.repository.backends import rados
    backend = rados.RadosBackend(ceph_cluster.conffile, 'blobcr-data',
                                 'blobcr-meta',
                                 namespace='mtime-' + uuid.uuid4().hex[:8])
    assert backend._ioctx_full_try
    if not ioctx_full_try:
        _without_ioctx_full_try(backend)
    try:
        batch = backend.batch()
        batch.put(base.CHUNK, 'c0', b'chunk')
        batch.put(base.NODE, 'n0', b'node')
        batch.wait()
        backend.write_header('h0', b'{}', None)
        now = time.time()
        for kind, name in ((base.CHUNK, 'c0'), (base.NODE, 'n0'),
                           (base.HEADER, 'h0')):
            _, mtime = backend.stat(kind, name)
            assert now - 5 < mtime < now + 5, (kind, mtime, now)
        assert backend.delete_if_older(base.CHUNK, 'c0', now - 60) == 0
    finally:
        backend.close()


def test_rados_full_errnos_become_backend_full():
    rados_mod = pytest.importorskip('rados')
    from blobcr_agent.repository.backends import rados
    backend = object.__new__(rados.RadosBackend)
    backend.data_pool, backend.meta_pool = 'dpool', 'mpool'
    backend.namespace = ''
    nospace = rados_mod.NoSpace('no space', errno=errno.ENOSPC)
    quota = rados_mod.OSError('quota', errno=errno.EDQUOT)
    e = backend._error(base.CHUNK, 'c1', nospace)
    assert isinstance(e, exception.BackendFull)
    assert 'dpool is full' in str(e) and 'ENOSPC' in str(e)
    e = backend._error(base.NODE, 'n1', quota)
    assert isinstance(e, exception.BackendFull)
    assert 'mpool is full' in str(e) and 'EDQUOT' in str(e)
    other = backend._error(base.CHUNK, 'c1',
                           rados_mod.OSError('io', errno=errno.EIO))
    assert type(other) is exception.BackendUnavailable


# -- local store on a small tmpfs --------------------------------------------

@pytest.fixture
def tmpfs(tmp_path):
    mnt = tmp_path / 'tmpfs'
    mnt.mkdir()
    done = subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=48m',
                           'tmpfs', str(mnt)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip('cannot mount a tmpfs: %s' % done.stderr.strip())
    try:
        yield str(mnt)
    finally:
        if subprocess.run(['umount', str(mnt)],
                          capture_output=True).returncode != 0:
            subprocess.run(['umount', '-l', str(mnt)], check=True)


def _free(path):
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def _fill(mnt, leave=0):
    """Fill the file system to the last page, then free ``leave`` bytes."""
    path = os.path.join(mnt, 'filler')
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for block in (1 << 20, 4096):
            while True:
                try:
                    os.write(fd, b'\xa5' * block)
                except OSError as e:
                    assert e.errno == errno.ENOSPC
                    break
    finally:
        os.close(fd)
    if leave:
        os.truncate(path, os.path.getsize(path) - leave)
    assert _free(mnt) == leave
    return path


def _no_tmp_files(backend):
    return os.listdir(os.path.join(backend.root, 'tmp')) == []


def test_local_store_full(tmpfs):
    backend = local.LocalBackend(os.path.join(tmpfs, 'store'))
    repo = repository.Repository(backend, chunk_size=CHUNK, gc_grace=0)
    rng = random.Random(12)
    n = 128
    image = repo.create_image('full', n * CHUNK).id
    base_chunks = _chunks(rng, range(64))
    v1 = repo.commit(image, base_chunks)
    over = _chunks(rng, range(16))
    v2 = repo.commit(image, over)
    expected = {v1: _image_bytes(n, base_chunks),
                v2: _image_bytes(n, base_chunks, over)}
    more = _chunks(rng, range(64, 128))         # 4 MiB

    # Room for the header and a few chunks, not for 4 MiB.
    filler = _fill(tmpfs, leave=ROOM)
    error, elapsed = _timed_failure(lambda: repo.commit(image, more))
    assert elapsed < FAST
    assert 'the local store %s is full' % backend.root in str(error)
    assert 'No space left on device' in str(error)
    assert _no_tmp_files(backend)
    versions = repo.image(image).versions
    assert [(v.number, v.state) for v in versions] == [
        (1, 'stable'), (2, 'stable'), (3, 'failed')]
    assert 'is full' in versions[2].error
    _assert_intact(repo, image, expected)

    # Not a page left: even the header that registers a version is
    # refused, and no version appears.
    os.unlink(filler)
    filler = _fill(tmpfs)
    error, _ = _timed_failure(lambda: repo.commit(image, more))
    assert 'is full' in str(error) and 'header' in str(error)
    assert [v.number for v in repo.image(image).versions] == [1, 2, 3]
    assert _no_tmp_files(backend)
    _assert_intact(repo, image, expected)

    os.unlink(filler)
    v4 = repo.commit(image, more)
    assert v4 == 4
    expected[v4] = _image_bytes(n, base_chunks, over, more)
    _assert_intact(repo, image, expected)
    repo.close()


# -- the agent, the guest endpoint and blobcr-manage -------------------------

def _manage(agent, *args):
    done = subprocess.run(
        [sys.executable, '-m', 'blobcr_agent.cmd.manage', '--config-file',
         agent.conffile] + list(args), capture_output=True, text=True,
        timeout=300)
    return done.returncode, done.stdout, done.stderr


def _guest(agent, method, path):
    """One guest-endpoint request as instance vm-1: (status, JSON)."""
    conn = http.client.HTTPConnection('127.0.0.1', agent.proxy_port(),
                                      timeout=60)
    try:
        conn.request(method, path, headers={
            'X-Instance-ID': 'vm-1',
            'X-BlobCR-Token': auth.Authenticator(
                'hs', host='host-1').token_for('vm-1')})
        reply = conn.getresponse()
        return reply.status, json.loads(reply.read())
    finally:
        conn.close()


def _settled(agent, version, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        status, body = _guest(agent, 'GET', '/v1/checkpoint/%d' % version)
        assert status == 200, body
        if body['state'] != 'pending' or time.monotonic() > deadline:
            return body['state']
        time.sleep(0.1)


def test_agent_checkpoint_on_a_full_store(tmpfs, agent_factory,
                                          monkeypatch):
    # Registering each version in the checkpoint (no reservation ahead):
    # with not a page left, that registration is what refuses at once.
    # With a version registered ahead the snapshot is taken and its
    # persist fails, as the first full-store case below shows.
    monkeypatch.setenv('BLOBCR_RESERVE_AHEAD', '0')
    backend = local.LocalBackend(os.path.join(tmpfs, 'store'))
    repo = repository.Repository(backend, chunk_size=CHUNK)
    n = 64
    rng = random.Random(13)
    base_chunks = _chunks(rng, range(n))
    image = repo.create_image('disk', n * CHUNK).id
    v1 = repo.commit(image, base_chunks)
    expected = {v1: _image_bytes(n, base_chunks)}
    agent = agent_factory(backend, {'agent': {'quiesce': 'none',
                                              'host': 'host-1'},
                                    'proxy': {'host_secret': 'hs'}})
    path = agent.client.call('attach', image=image, instance='vm-1')['path']
    writes = _chunks(rng, range(n))             # the guest rewrites 4 MiB
    with open(path, 'r+b', buffering=0) as f:
        for index, data in writes.items():
            f.seek(index * CHUNK)
            f.write(data)
        os.fsync(f.fileno())

    # Room for the version's header, not for its chunks: the snapshot
    # is taken (200, version 2), its persist fails in the background.
    filler = _fill(tmpfs, leave=ROOM)
    status, body = _guest(agent, 'POST', '/v1/checkpoint')
    assert status == 200 and body['version'] == 2, body
    assert _settled(agent, 2) == 'failed'
    assert agent.client.call('state', image=image, version=2) == 'failed'
    listed = committed(agent.client.call('list_versions',
                                         image=image)['versions'])
    assert [(v['version'], v['state']) for v in listed] == [
        (1, 'stable'), (2, 'failed')]
    assert 'persist failed: the local store %s is full' % backend.root \
        in listed[1]['error']
    assert _no_tmp_files(backend)
    code, out, err = _manage(agent, 'tree', 'disk')
    assert code == 0, err
    line = [x for x in out.splitlines() if 'v2 ' in x]
    assert len(line) == 1 and 'failed' in line[0], out
    assert 'the local store %s is full' % backend.root in line[0]

    # Not a page left: refused before any snapshot, with the reason,
    # both on the guest endpoint and from blobcr-manage.
    os.unlink(filler)
    filler = _fill(tmpfs)
    status, body = _guest(agent, 'POST', '/v1/checkpoint')
    assert status == 503, body
    assert 'could not be taken' in body['error']
    assert 'is full' in body['error']
    code, out, err = _manage(agent, 'checkpoint', 'disk', '--wait-stable')
    assert code == 1 and 'is full' in err, (out, err)
    assert err.startswith('blobcr-manage: error:')
    assert len(repo.image(image).versions) == 2
    _assert_intact(repo, image, expected)

    # Space back: the next checkpoint carries what the failed one held.
    os.unlink(filler)
    status, body = _guest(agent, 'POST', '/v1/checkpoint')
    assert status == 200 and body['version'] == 3, body
    assert _settled(agent, 3) == 'stable'
    expected[3] = _image_bytes(n, base_chunks, writes)
    _assert_intact(repo, image, expected)
    code, out, err = _manage(agent, 'list', '--json')
    assert code == 0, err
    assert [s['newest_stable'] for s in json.loads(out)] == [3]
    repo.close()


def _wait_refused(backend, timeout=60):
    """Until the OSDs refuse a write to the metadata pool: they see the
    mon's full flag a moment after it is set.
    """
    import rados
    deadline = time.monotonic() + timeout
    while True:
        try:
            backend._meta.append('full-probe', b'probe')
        except rados.Error as e:
            if getattr(e, 'errno', None) in (errno.EDQUOT, errno.ENOSPC):
                return
            raise
        assert time.monotonic() < deadline, 'the pool never refused'
        time.sleep(0.2)


def test_a_cluster_flush_on_a_full_pool_waits_and_never_lies(
        ceph_cluster, full_pools, tmp_path):
    """Issue 53: a `cluster` volume's flush when the metadata pool (its
    write log's) is full: with ``flush_timeout`` it fails (ETIMEDOUT)
    after it; without, it waits until there is room, then returns. It
    never returns success for a block that is not in the log: after the
    host is lost, every write a returned flush covered is there.
    """
    import threading

    from blobcr_agent.mirror import image as image_mod
    from blobcr_agent.repository.backends import rados
    data_pool, meta_pool = full_pools

    def connect():
        return repository.Repository(rados.RadosBackend(
            ceph_cluster.conffile, data_pool, meta_pool), chunk_size=CHUNK)

    repo = connect()
    rng = random.Random(53)
    size = 8 * CHUNK
    image = repo.create_image('full-log', size).id
    repo.commit(image, {i: bytes(CHUNK) for i in range(8)})
    attached = image_mod.AttachedImage(
        repo, image, None, str(tmp_path / 'cache'), durability='cluster',
        flush_timeout=3, reserve=False, prefetch=False)
    expected = bytearray(size)

    def write(offset):
        data = rng.randbytes(4096)
        attached.write(offset, data)
        expected[offset:offset + 4096] = data

    write(0)
    attached.flush()
    try:
        _set_quota(ceph_cluster, meta_pool, 1)
        _wait_refused(repo.backend)
        write(CHUNK)
        started = time.monotonic()
        with pytest.raises(OSError) as caught:
            attached.flush()
        assert caught.value.errno == errno.ETIMEDOUT
        assert 3 <= time.monotonic() - started < FAST
        # Waits for ever now, as RBD's I/O does.
        attached.flushlog.timeout = 0
        write(2 * CHUNK)
        outcome = []
        waiter = threading.Thread(
            target=lambda: outcome.append(attached.flush()), daemon=True)
        waiter.start()
        waiter.join(5)
        assert waiter.is_alive() and not outcome, outcome
    finally:
        _set_quota(ceph_cluster, meta_pool, 0)
    waiter.join(60)
    assert outcome == [None]
    assert attached.flushlog.stats()['retries'] > 0
    # The host is lost: what the flushes covered (the timed-out one's
    # blocks too: owed to the next, which returned) is in the volume.
    attached.close(timeout=10)
    other = connect()
    taken = other.take_over(image, 'test')
    assert taken['replayed']['writes'] >= 3, taken
    assert other.read(image, None, 0, size) == bytes(expected)
    other.close()
    repo.close()
