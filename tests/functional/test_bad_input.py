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

"""Damage and bad requests: clear errors, nothing lost.

Chunks and tree nodes are damaged behind the repository's back, straight
in the backend (a file of the local store, an object of the Ceph pool).
"""

import os
import subprocess
import sys

import pytest

from blobcr_agent.repository.backends import base
from blobcr_agent.repository.backends import local
from blobcr_agent.repository import chunks
from blobcr_agent.repository import scrub
from blobcr_agent.repository import tree
from blobcr_common import exception


def _overwrite(backend, kind, name, data):
    if backend.name == 'local':
        with open(backend._path(kind, name), 'wb') as f:
            f.write(data)
    else:
        ioctx = backend._data if kind == base.CHUNK else backend._meta
        ioctx.write_full(backend._oid(kind, name), data)


def _remove(backend, kind, name):
    if backend.name == 'local':
        os.unlink(backend._path(kind, name))
    else:
        ioctx = backend._data if kind == base.CHUNK else backend._meta
        ioctx.remove_object(backend._oid(kind, name))


@pytest.fixture
def two_versions(repo):
    header = repo.create_image('victim', 16 * 4096)
    v1 = repo.commit(header.id, {i: os.urandom(4096) for i in range(16)})
    only_v2 = os.urandom(4096)
    v2 = repo.commit(header.id, {3: only_v2})
    return header.id, v1, v2, chunks.object_name(chunks.digest(only_v2))


def test_verify_reports_a_corrupt_chunk_and_only_it(repo, two_versions):
    image, v1, v2, name = two_versions
    assert scrub.verify(repo, image, v2).ok
    _overwrite(repo.backend, base.CHUNK, name, b'\x00' + os.urandom(4096))
    report = scrub.verify(repo, image, v2)
    assert [(p.kind, p.name, p.chunks) for p in report.problems] == [
        ('chunk', name, '3')]
    assert 'does not match its hash' in report.problems[0].error
    assert scrub.verify(repo, image, v1).ok      # v1 never had that chunk
    with pytest.raises(exception.CorruptObject):
        repo.read(image, v2, 3 * 4096, 10)


def test_verify_reports_a_missing_chunk(repo, two_versions):
    image, _, v2, name = two_versions
    _remove(repo.backend, base.CHUNK, name)
    report = scrub.verify(repo, image, v2)
    assert len(report.problems) == 1
    assert 'missing' in report.problems[0].error


def test_verify_reports_a_corrupt_tree_node(repo, two_versions):
    image, v1, v2, _ = two_versions
    root = repo.image(image).version(v2).root_ref
    pack = tree.pack_name(root)
    data = bytearray(repo.backend.get(base.NODE, pack))
    data[-1] ^= 0x55           # the root is the last node of its pack
    _overwrite(repo.backend, base.NODE, pack, bytes(data))
    repo.nodes.clear()
    report = scrub.verify(repo, image, v2)
    assert report.problems and report.problems[0].kind == 'node'
    assert 'checksum' in report.problems[0].error


def test_unknown_names_and_wrong_sizes_are_clear_errors(repo, two_versions):
    image, v1, v2, _ = two_versions
    with pytest.raises(exception.ImageNotFound, match='nope'):
        repo.image('nope')
    with pytest.raises(exception.VersionNotFound):
        repo.read(image, 99, 0, 1)
    with pytest.raises(exception.InvalidInput, match='outside'):
        repo.read(image, v1, 16 * 4096 - 1, 2)
    with pytest.raises(exception.InvalidInput, match='must be 4096 bytes'):
        repo.commit(image, {0: b'short'})
    with pytest.raises(exception.InvalidInput, match='outside'):
        repo.commit(image, {16: bytes(4096)})
    with pytest.raises(exception.InvalidInput):
        repo.create_image('', 4096)
    with pytest.raises(exception.InvalidInput):
        repo.create_image('x', -1)
    header = repo.image(image)
    # The refused commits left failed versions, never stable ones...
    failed = [v for v in header.versions if v.state == 'failed']
    assert len(failed) == 2 and 'must be 4096 bytes' in failed[0].error
    with pytest.raises(exception.VersionNotStable):
        repo.read(image, failed[0].number, 0, 1)
    # ...and the newest stable version is still v2, intact.
    assert header.stable_version().number == v2
    assert scrub.verify(repo, image, v2).ok


def test_cli_exit_codes_and_messages(tmp_path):
    store = str(tmp_path / 'store')
    manage = [sys.executable, '-m', 'blobcr_agent.cmd.manage']
    raw = tmp_path / 'disk.raw'
    raw.write_bytes(os.urandom(300000))
    run = subprocess.run(manage + ['import', str(raw), 'disk',
                                   '--store', store],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    for args, message in (
            (['export', 'nope@1', str(tmp_path / 'x')], "image 'nope'"),
            (['export', 'disk@7', str(tmp_path / 'x')], 'no version 7'),
            (['obsolete', 'disk', '9'], 'no version 9')):
        run = subprocess.run(manage + args + ['--store', store],
                             capture_output=True, text=True)
        assert run.returncode == 1
        assert message in run.stderr
    backend = local.LocalBackend(store)
    name = next(iter(backend.list(base.CHUNK)))
    _overwrite(backend, base.CHUNK, name, b'\x00garbage')
    backend.close()
    run = subprocess.run(manage + ['verify', 'disk@1', '--store', store],
                         capture_output=True, text=True)
    assert run.returncode == 1 and 'PROBLEMS' in run.stdout
    assert name in run.stdout


def test_unreachable_ceph_is_a_clear_error(tmp_path):
    from blobcr_agent.repository.backends import rados as rados_backend
    conf = tmp_path / 'ceph.conf'
    # Nothing listens on this loopback port.
    conf.write_text('[global]\nmon_host = 127.0.0.1:9\n'
                    'auth_client_required = none\n')
    with pytest.raises(exception.BackendUnavailable,
                       match='cannot reach the Ceph cluster'):
        rados_backend.RadosBackend(str(conf), 'blobcr-data', 'blobcr-meta',
                                   connect_timeout=2)
