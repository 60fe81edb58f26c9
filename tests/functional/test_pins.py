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

"""Pins: the version a mirror reads untouched chunks from stays whole.

A mirror attached at version v fetches every chunk the guest has not
written from v, lazily, for as long as it is attached (after restarts
too). Marking v obsolete must not let GC take those chunks: the mirror
pins v at attach and releases the pin at detach.
"""

import json
import os
import subprocess
import sys

import pytest

from blobcr_agent.repository.backends import local
from blobcr_agent.repository import gc
from blobcr_agent.repository import repository
from blobcr_common import exception

CHUNK = 64 * 1024
NCHUNKS = 32


def _chunk(version, index):
    return bytes([version]) * 7 + index.to_bytes(4, 'big') + \
        os.urandom(CHUNK - 11)


def test_attached_version_survives_obsolete_gc_and_restart(
        backend_factory, mirror_factory):
    repo = repository.Repository(backend_factory(), chunk_size=CHUNK,
                                 gc_grace=0)
    header = repo.create_image('pinned', NCHUNKS * CHUNK)
    v1 = {i: _chunk(1, i) for i in range(NCHUNKS)}
    one = repo.commit(header.id, v1)
    # Version 2 rewrites half the chunks: their version-1 content is
    # referenced by version 1 alone, the rest is shared with version 2.
    v2 = dict(v1)
    v2.update({i: _chunk(2, i) for i in range(0, NCHUNKS, 2)})
    two = repo.commit(header.id, {i: v2[i] for i in range(0, NCHUNKS, 2)})
    mirror = mirror_factory(repo.backend)
    path = mirror.client.call('attach', image=header.id, version=one,
                              prefetch=False)
    with open(path, 'rb') as f:
        assert f.read(CHUNK) == v1[0]           # one chunk fetched

    repo.obsolete(header.id, [one])             # deferred: it is pinned
    # Nothing writes meanwhile: a cut-off in the future is safe (RADOS
    # mtimes are whole seconds).
    gc.collect(repo, grace=-2)
    mirror.stop()
    mirror.start()                              # re-attaches from its cache
    with open(path, 'rb') as f:
        for index in range(NCHUNKS):
            assert f.read(CHUNK) == v1[index], 'chunk %d' % index
    assert repo.read(header.id, two, 0, NCHUNKS * CHUNK) == \
        b''.join(v2[i] for i in range(NCHUNKS))

    # Detach releases the pin: the next GC frees version 1's own chunks.
    stored = set(repo.backend.list('chunk'))
    mirror.client.call('detach', image=header.id)
    assert not [p for p in repo.pins() if p['image'] == header.id]
    gc.collect(repo, grace=-2)
    freed = stored - set(repo.backend.list('chunk'))
    assert len(freed) == NCHUNKS // 2
    repo.close()


def _image(repo, nchunks=4):
    header = repo.create_image('img', nchunks * 4096)
    data = {i: os.urandom(4096) for i in range(nchunks)}
    return header.id, repo.commit(header.id, data), data


def _content(data):
    return b''.join(data[i] for i in sorted(data))


def test_pin_rules(repo, tmp_path):
    image, one, data = _image(repo)
    holder = str(tmp_path / 'holder')
    os.mkdir(holder)
    assert repo.pin(image, None, holder) == one         # newest stable
    assert repo.pin(image, one, holder) == one          # again: refreshed
    assert len(repo.image(image).version(one).pins) == 1
    assert repo.obsolete(image, [one]) == [one]         # deferred
    # Obsolete for everyone but the pin holder, who still reads it.
    with pytest.raises(exception.VersionNotStable):
        repo.read(image, one, 0, 10)
    with pytest.raises(exception.VersionNotStable):
        repo.clone(image, one)
    header = repo.image(image)
    assert dict(repo.fetch(header, one)) == data
    # Its holder re-pins it after a restart; nobody else can.
    assert repo.pin(image, one, holder) == one
    with pytest.raises(exception.VersionNotStable):
        repo.pin(image, one, holder + '-other')
    with pytest.raises(exception.InvalidInput, match='detach it first'):
        repo.delete_image(image)

    gc.collect(repo, grace=-2)
    assert dict(repo.fetch(repo.image(image), one)) == data
    [pin] = repo.pins()
    assert (pin['image'], pin['version'], pin['state'], pin['holder']) == \
        (image, one, 'obsolete', holder)

    assert repo.unpin(image, one, holder) == 1
    assert repo.unpin(image, one, holder) == 0
    report = gc.collect(repo, grace=-2)
    assert report.chunks_deleted == len(data)
    assert list(repo.backend.list('chunk')) == []
    repo.delete_image(image)


def test_stale_pins_are_released(repo, tmp_path, monkeypatch):
    image, one, data = _image(repo)
    gone = str(tmp_path / 'gone')
    here = str(tmp_path / 'here')
    os.mkdir(gone)
    os.mkdir(here)
    for holder in (gone, here, str(tmp_path / 'rebooted'), 'relative'):
        repo.pin(image, one, holder)
    os.rmdir(gone)

    def rebooted(header):
        for p in header.version(one).pins:
            if p['holder'].endswith('rebooted'):
                p['boot'] = 'an-earlier-boot'
            if p['holder'] == 'relative':
                p['host'] = 'another-host'
    repo.update_header(image, rebooted)
    repo.obsolete(image, [one])

    report = gc.collect(repo, grace=-2)
    assert report.pins_released == 2
    assert sorted(p['holder'] for p in repo.pins()) == sorted(['relative',
                                                              here])
    assert dict(repo.fetch(repo.image(image), one)) == data
    # A host gone for good: the operator releases its pins.
    assert [p['holder'] for p in repo.release_pins('another-host')] == \
        ['relative']
    repo.unpin(image, one, here)
    gc.collect(repo, grace=-2)
    assert list(repo.backend.list('chunk')) == []


def test_the_last_checkpoint_stays_a_base_when_obsoleted(
        backend_factory, mirror_factory):
    # An operator's retention policy obsoletes the newest checkpoint of
    # an attached image: the next checkpoint is still built on it (the
    # mirror pins its last checkpoint), and GC takes nothing it needs.
    repo = repository.Repository(backend_factory(), chunk_size=CHUNK,
                                 gc_grace=0)
    header = repo.create_image('retained', NCHUNKS * CHUNK)
    v1 = {i: _chunk(1, i) for i in range(NCHUNKS)}
    one = repo.commit(header.id, v1)
    mirror = mirror_factory(repo.backend)
    path = mirror.client.call('attach', image=header.id, version=one,
                              prefetch=False)
    with open(path, 'r+b') as f:
        f.seek(3 * CHUNK)
        f.write(b'a' * CHUNK)
    two = mirror.client.call('checkpoint', image=header.id)['version']
    assert mirror.client.call('wait_stable', image=header.id,
                              version=two) == 'stable'
    repo.obsolete(header.id, [one, two])
    gc.collect(repo, grace=-2)
    with open(path, 'r+b') as f:
        f.seek(5 * CHUNK)
        f.write(b'b' * CHUNK)
    three = mirror.client.call('checkpoint', image=header.id)['version']
    assert mirror.client.call('wait_stable', image=header.id,
                              version=three) == 'stable'
    expected = [v1[i] for i in range(NCHUNKS)]
    expected[3], expected[5] = b'a' * CHUNK, b'b' * CHUNK
    assert repo.read(header.id, three, 0, NCHUNKS * CHUNK) == \
        b''.join(expected)
    # Version 2's pin moved to version 3; detach releases the rest.
    held = {p['version'] for p in repo.pins() if p['image'] == header.id}
    assert held == {one, three}
    mirror.client.call('detach', image=header.id)
    assert not [p for p in repo.pins() if p['image'] == header.id]
    repo.close()


def test_manage_lists_and_releases_a_hosts_pins(tmp_path):
    store = str(tmp_path / 'store')
    repo = repository.Repository(local.LocalBackend(store), chunk_size=4096)
    image, one, _ = _image(repo)
    holder = str(tmp_path / 'holder')
    os.mkdir(holder)
    repo.pin(image, one, holder)
    host = repo.pins()[0]['host']

    def manage(*args):
        done = subprocess.run(
            [sys.executable, '-m', 'blobcr_agent.cmd.manage'] + list(args) +
            ['--backend', 'local', '--store', store, '--json'],
            capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)
    assert [(p['image'], p['version'], p['holder'])
            for p in manage('pins')] == [(image, one, holder)]
    assert manage('pins', '--host', 'elsewhere') == []
    assert len(manage('release-pins', '--host', host)) == 1
    assert repo.pins() == []
    repo.close()
