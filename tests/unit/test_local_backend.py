"""Local store: header compare-and-set and race-safe conditional delete."""

import os
import time

import pytest

from blobcr_agent import exception
from blobcr_agent.repository.backends import local


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
