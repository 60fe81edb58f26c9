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

"""A mirror cache from before a host reboot is recovered from its flush
record, or refused (never re-attached) if that record is torn.

The tests cannot reboot the host: they simulate a reboot by writing
another boot id into a cache's meta.json between two runs of a real
blobcr-agent (the kernel's boot id changes at every boot and at nothing
else), and a torn record by overwriting both of its slots. What a real
power loss drops is test_power_cut.py's matter. Caches of the previous
release, which recorded no boot id, are trusted if written during the
current boot (simulated with the file's mtime).
"""

import json
import os
import random
import uuid

import pytest

from blobcr_agent.mirror import cache
from blobcr_agent.repository import repository
from blobcr_common import exception
from tests.functional import test_agent

CHUNK = 64 * 1024
NCHUNKS = 8


@pytest.fixture
def repo(backend_factory):
    repo = repository.Repository(backend_factory(), chunk_size=CHUNK)
    yield repo
    repo.close()


def _image(repo, name, rng):
    base = rng.randbytes(NCHUNKS * CHUNK)
    header = repo.create_image(name, len(base))
    repo.commit(header.id, {i: base[i * CHUNK:(i + 1) * CHUNK]
                            for i in range(NCHUNKS)})
    return header.id


def _write(path, rng, indices):
    with open(path, 'r+b', buffering=0) as f:
        for index in indices:
            f.seek(index * CHUNK)
            f.write(rng.randbytes(CHUNK))
        f.seek(0)
        return f.read()


def _meta_path(agent, image_id):
    return os.path.join(agent.state_path, 'cache', image_id, 'meta.json')


def _meta(agent, image_id):
    with open(_meta_path(agent, image_id)) as f:
        return json.load(f)


def _edit_meta(agent, image_id, **changes):
    path = _meta_path(agent, image_id)
    with open(path) as f:
        meta = json.load(f)
    for key, value in changes.items():
        if value is None:
            meta.pop(key, None)
        else:
            meta[key] = value
    with open(path, 'w') as f:
        json.dump(meta, f)
    return meta


def tear_flush_record(cache_dir):
    """Both slots of a cache's flush record torn (a power loss in the
    middle of writing each, which one flush never does).
    """
    path = os.path.join(cache_dir, 'durable.bin')
    size = os.path.getsize(path)
    with open(path, 'r+b') as f:
        for slot in (0, size // 2):
            f.seek(slot + 20)
            f.write(b'torn')


def _tear_record(agent, image_id):
    tear_flush_record(os.path.dirname(_meta_path(agent, image_id)))


def _log(agent):
    with open(agent.log.name, errors='replace') as f:
        return f.read()


def test_a_cache_from_another_boot_is_refused_until_dropped(
        repo, agent_factory):
    rng = random.Random(7)
    disk, other = _image(repo, 'disk', rng), _image(repo, 'other', rng)
    agent = agent_factory(repo.backend, {'agent': {'quiesce': 'none'}})
    path = agent.client.call('attach', image=disk, instance='vm-1')['path']
    checkpointed = _write(path, rng, [0, 3])
    version = agent.client.call('checkpoint', image=disk)['version']
    assert agent.client.call('wait_stable', image=disk,
                             version=version) == 'stable'
    _write(path, rng, [1, 5])          # after the checkpoint: lost
    other_path = agent.client.call('attach', image=other)['path']
    other_data = _write(other_path, rng, [2])
    meta = _meta(agent, disk)
    assert meta['boot_id'] == cache.boot_id()
    assert agent.stop() == 0

    # The reboot (simulated): the disk's cache is from another boot, and
    # a persist was under way when the host went down.
    pending = repo.begin_commit(disk, parent=version)
    _edit_meta(agent, disk, boot_id=str(uuid.uuid4()),
               persisting=pending.version)
    _tear_record(agent, disk)
    agent.start()
    cache_dir = os.path.dirname(_meta_path(agent, disk))
    # The agent is up and serves the images it can trust.
    status = agent.client.call('status')
    assert list(status['attached']) == [other]
    with open(other_path, 'rb') as f:
        assert f.read() == other_data
    log = _log(agent)
    assert 'not re-attaching %s' % disk in log and cache_dir in log
    with pytest.raises(exception.BlobCRError) as refused:
        agent.client.call('attach', image=disk)
    message = str(refused.value)
    for words in (cache_dir, 'another boot', 'cannot be trusted',
                  'flush record is torn',
                  'blobcr-manage detach --discard %s' % disk,
                  'checkpoint %d' % version,
                  'version %d, being persisted at the reboot'
                  % pending.version):
        assert words in message
    status, out, err = test_agent.manage(agent, 'detach', disk)
    assert status == 1 and 'another boot' in err
    assert os.path.exists(cache_dir)

    status, out, err = test_agent.manage(agent, 'detach', '--discard', disk)
    assert status == 0, err
    assert not os.path.exists(cache_dir)
    assert repo.image(disk).version(pending.version).state == 'failed'
    # Attached again, the disk is its checkpoint.
    path = agent.client.call('attach', image=disk)['path']
    with open(path, 'rb') as f:
        assert f.read() == checkpointed
    assert _meta(agent, disk)['boot_id'] == \
        cache.boot_id()


def _stale_after_a_checkpoint(repo, agent_factory, seed):
    """An image attached, written, checkpointed (stable), the agent
    stopped and its cache made stale; returns what the test needs.
    """
    rng = random.Random(seed)
    disk = _image(repo, 'disk', rng)
    agent = agent_factory(repo.backend, {'agent': {'quiesce': 'none'}})
    path = agent.client.call('attach', image=disk)['path']
    _write(path, rng, [0])
    version = agent.client.call('checkpoint', image=disk)['version']
    assert agent.client.call('wait_stable', image=disk,
                             version=version) == 'stable'
    assert agent.stop() == 0
    _edit_meta(agent, disk, boot_id=str(uuid.uuid4()))
    _tear_record(agent, disk)
    return agent, disk, version, os.path.dirname(_meta_path(agent, disk))


def test_the_last_checkpoint_must_be_in_the_repository_to_drop(
        repo, agent_factory):
    agent, disk, version, cache_dir = _stale_after_a_checkpoint(
        repo, agent_factory, 8)
    # The cache's last checkpoint failed in the repository (as a version
    # whose finish was lost would be): the cache is its only trace.
    failed = repo.begin_commit(disk, parent=version)
    failed.abort('lost')
    _edit_meta(agent, disk, last=failed.version)
    agent.start()
    status, out, err = test_agent.manage(agent, 'detach', '--discard', disk)
    assert status == 1
    assert 'version %d of image %s' % (failed.version, disk) in err
    assert 'failed' in err
    assert os.path.exists(cache_dir)


def test_an_obsolete_last_checkpoint_does_not_keep_the_cache(
        repo, agent_factory):
    agent, disk, version, cache_dir = _stale_after_a_checkpoint(
        repo, agent_factory, 9)
    # A retention policy obsoleted it while the mirror pinned it: still
    # whole in the repository, so the stale cache can go, and its pins.
    repo.obsolete(disk, [version])
    assert repo.image(disk).version(version).pins
    agent.start()
    status, out, err = test_agent.manage(agent, 'detach', '--discard', disk)
    assert status == 0, err
    assert not os.path.exists(cache_dir)
    header = repo.image(disk)
    assert header.version(version).state == 'obsolete'
    assert [v.number for v in header.versions if v.pins] == []
    # Attached again: its newest stable version, the import.
    path = agent.client.call('attach', image=disk)['path']
    with open(path, 'rb') as f:
        assert f.read() == repo.read(disk, 1, 0, NCHUNKS * CHUNK)


def test_a_cache_of_the_previous_release(repo, agent_factory):
    """No boot id recorded: trusted if meta.json was written in this boot
    (an upgrade of the agent without a reboot), refused if before it.
    """
    rng = random.Random(9)
    fresh, old = _image(repo, 'fresh', rng), _image(repo, 'old', rng)
    agent = agent_factory(repo.backend, {'agent': {'quiesce': 'none'}})
    fresh_data = _write(agent.client.call('attach', image=fresh)['path'],
                        rng, [1])
    agent.client.call('attach', image=old)
    assert agent.stop() == 0
    for image_id in (fresh, old):
        _edit_meta(agent, image_id, boot_id=None)
    _tear_record(agent, old)
    before_boot = cache.boot_time() - 3600
    os.utime(_meta_path(agent, old), (before_boot, before_boot))
    agent.start()
    assert list(agent.client.call('status')['attached']) == [fresh]
    with open(os.path.join(agent.mount, 'images', fresh), 'rb') as f:
        assert f.read() == fresh_data
    # Adopted: the current boot is recorded from now on.
    assert _meta(agent, fresh)['boot_id'] == \
        cache.boot_id()
    with pytest.raises(exception.BlobCRError) as refused:
        agent.client.call('attach', image=old)
    assert 'no boot id (older release)' in str(refused.value)
    assert 'before this boot started' in str(refused.value)


def test_a_cache_from_another_boot_is_recovered_from_its_flush_record(
        repo, agent_factory):
    """What the guest flushed comes back after the reboot; the version
    that was being persisted fails; the next checkpoint holds it all.
    """
    rng = random.Random(11)
    disk = _image(repo, 'disk', rng)
    agent = agent_factory(repo.backend, {'agent': {'quiesce': 'none'}})
    path = agent.client.call('attach', image=disk)['path']
    _write(path, rng, [0, 3])
    version = agent.client.call('checkpoint', image=disk)['version']
    assert agent.client.call('wait_stable', image=disk,
                             version=version) == 'stable'
    with open(path, 'r+b', buffering=0) as f:
        f.seek(CHUNK)
        f.write(rng.randbytes(CHUNK))
        os.fsync(f.fileno())           # the guest's flush
        f.seek(0)
        flushed = f.read()
    assert agent.stop() == 0
    pending = repo.begin_commit(disk, parent=version)
    _edit_meta(agent, disk, boot_id=str(uuid.uuid4()),
               persisting=pending.version)
    agent.start()
    assert list(agent.client.call('status')['attached']) == [disk]
    assert 'recovered from its flush record' in _log(agent)
    with open(os.path.join(agent.mount, 'images', disk), 'rb') as f:
        assert f.read() == flushed
    assert repo.image(disk).version(pending.version).state == 'failed'
    assert _meta(agent, disk)['boot_id'] == cache.boot_id()
    # Every kept chunk is dirty: the next version is the disk as read.
    again = agent.client.call('checkpoint', image=disk)['version']
    assert agent.client.call('wait_stable', image=disk,
                             version=again) == 'stable'
    assert repo.read(disk, again, 0, NCHUNKS * CHUNK) == flushed
