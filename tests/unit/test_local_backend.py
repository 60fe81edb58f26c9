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

"""Local store: header compare-and-set and race-safe conditional delete,
also when GC is killed in the middle of one.
"""

import errno
import os
import signal
import subprocess
import sys
import time

import pytest

from blobcr_agent.repository.backends import local
from blobcr_agent.repository import chunks
from blobcr_agent.repository import repository
from blobcr_common import exception


@pytest.fixture
def backend(tmp_path):
    b = local.LocalBackend(str(tmp_path / 'store'))
    yield b
    b.close()


def test_header_compare_and_set(backend):
    t1 = backend.write_header('h', b'one', None)
    with pytest.raises(exception.Conflict):
        backend.write_header('h', b'again', None)
    t2 = backend.write_header('h', b'two', t1)
    with pytest.raises(exception.Conflict):
        backend.write_header('h', b'stale', t1)
    assert backend.read_header('h') == (b'two', t2)
    backend.delete_header('h', t2)
    assert backend.read_header('h') is None


def test_delete_if_older_keeps_recent_and_rewritten(backend):
    b = backend.batch()
    b.put('chunk', 'ab' * 32, b'x')
    b.wait()
    assert backend.delete_if_older('chunk', 'ab' * 32, time.time() - 10) == 0
    path = backend._path('chunk', 'ab' * 32)
    os.utime(path, (1, 1))
    # a put of the same object refreshes it, so it is kept
    b = backend.batch()
    b.put('chunk', 'ab' * 32, b'x')
    b.wait()
    assert backend.delete_if_older('chunk', 'ab' * 32, time.time() - 10) == 0
    os.utime(path, (1, 1))
    assert backend.delete_if_older('chunk', 'ab' * 32, time.time() - 10) == 1
    with pytest.raises(exception.ObjectNotFound):
        backend.get('chunk', 'ab' * 32)


@pytest.mark.parametrize('name', ['../x', '', '.hidden', 'a/b', 'x' * 200])
def test_names_cannot_escape_the_store(backend, name):
    with pytest.raises(exception.InvalidInput):
        backend.batch().put('chunk', name, b'x')


def test_unusable_path_is_a_clear_error(tmp_path):
    blocker = tmp_path / 'file'
    blocker.write_bytes(b'')
    with pytest.raises(exception.BackendUnavailable, match='local store'):
        local.LocalBackend(str(blocker / 'store'))


# GC in a child process, SIGKILLed as soon as it has moved the object
# named by argv[2] aside.
_KILLED_GC = '''
import os, signal, sys
from blobcr_agent.repository.backends import local
from blobcr_agent.repository import gc, repository

rename = os.rename

def rename_then_die(src, dst):
    rename(src, dst)
    if os.path.basename(src) == sys.argv[2]:
        os.kill(os.getpid(), signal.SIGKILL)

os.rename = rename_then_die
repo = repository.Repository(local.LocalBackend(sys.argv[1]),
                             chunk_size=4096, gc_grace=0)
gc.collect(repo)
'''


def test_gc_killed_with_an_object_aside_loses_nothing(tmp_path):
    """SIGKILL of GC after it moved a chunk aside that a concurrent
    COMMIT had just written again: whoever opens the store next puts it
    back.
    """
    store = str(tmp_path / 'store')
    repo = repository.Repository(local.LocalBackend(store), chunk_size=4096,
                                 gc_grace=0)
    image = repo.create_image('img', 2 * 4096).id
    data = os.urandom(4096)
    repo.obsolete(image, [repo.commit(image, {0: data})])
    name = chunks.object_name(chunks.digest(data))
    os.utime(repo.backend._path('chunk', name), (1, 1))    # long ago
    pending = repo.begin_commit(image)
    pending.put(0, data)            # the same chunk: refreshed, not written
    pending._batch.wait()
    child = subprocess.run([sys.executable, '-c', _KILLED_GC, store, name])
    assert child.returncode == -signal.SIGKILL
    number = pending.finish()
    repo.close()

    repo = repository.Repository(local.LocalBackend(store), chunk_size=4096)
    assert repo.read(image, number, 0, 4096) == data
    assert not os.listdir(os.path.join(store, 'grave'))
    repo.close()


def test_garbage_put_back_by_recovery_goes_at_the_next_gc(backend,
                                                          monkeypatch):
    class Killed(Exception):
        pass
    rename = os.rename

    def rename_then_die(src, dst):
        rename(src, dst)
        raise Killed()
    b = backend.batch()
    b.put('chunk', 'cd' * 32, b'x')
    b.wait()
    os.utime(backend._path('chunk', 'cd' * 32), (1, 1))
    monkeypatch.setattr(os, 'rename', rename_then_die)
    with pytest.raises(Killed):
        backend.delete_if_older('chunk', 'cd' * 32, time.time())
    monkeypatch.setattr(os, 'rename', rename)
    assert list(backend.list('chunk')) == []
    assert backend.recover() == 1
    assert list(backend.list('chunk')) == ['cd' * 32]
    assert backend.delete_if_older('chunk', 'cd' * 32, time.time()) == 1
    assert list(backend.list('chunk')) == []


def test_refresh_racing_with_delete_is_never_lost(backend, monkeypatch):
    """utime() finds the file, GC moves it aside, sees the old time and
    deletes it, and only then does utime() set the new time (on the
    deleted file): the put must notice and write the object again.
    """
    b = backend.batch()
    b.put('chunk', 'ef' * 32, b'y')
    b.wait()
    path = backend._path('chunk', 'ef' * 32)
    os.utime(path, (1, 1))
    real_utime = os.utime

    def racing_utime(target, *args, **kwargs):
        fd = os.open(target, os.O_RDONLY)       # the path is resolved
        try:
            monkeypatch.setattr(os, 'utime', real_utime)
            assert backend.delete_if_older('chunk', 'ef' * 32,
                                           time.time()) == 1
            real_utime(fd, *args, **kwargs)     # the time is set, too late
        finally:
            os.close(fd)
    monkeypatch.setattr(os, 'utime', racing_utime)
    b = backend.batch()
    b.put('chunk', 'ef' * 32, b'y')
    b.wait()
    assert backend.get('chunk', 'ef' * 32) == b'y'


@pytest.fixture
def full_fs(tmp_path):
    """A real file system with no free page: a 1 MiB tmpfs, filled."""
    mnt = tmp_path / 'tiny'
    mnt.mkdir()
    done = subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=1m', 'tiny',
                           str(mnt)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip('cannot mount a tmpfs here: %s' % done.stderr.strip())
    try:
        yield mnt
    finally:
        subprocess.run(['umount', '-l', str(mnt)], check=False)


def fill(path):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b'\xff' * 4096)
    except OSError as e:
        assert e.errno == errno.ENOSPC, e
    finally:
        os.close(fd)


def test_the_gc_lease_is_taken_and_given_back_on_a_full_store(full_fs):
    """A collection is what frees a full store: its lease must not need a
    free page (the holder's name is not written then) and must not stay
    held by nobody. Before, the name's write failed with ENOSPC after
    the flock: the lease stayed locked for the agent's life, every later
    collection was Busy ("running in ?") and space never came back.
    """
    store = local.LocalBackend(str(full_fs / 'store'))
    other = local.LocalBackend(str(full_fs / 'store'))
    try:
        fill(str(full_fs / 'filler'))
        assert store.try_lease('gc', 'agent-a:1', 300)
        assert not other.try_lease('gc', 'agent-b:2', 300)
        store.release_lease('gc', 'agent-a:1')
        assert other.try_lease('gc', 'agent-b:2', 300)
        other.release_lease('gc', 'agent-b:2')
    finally:
        store.close()
        other.close()
