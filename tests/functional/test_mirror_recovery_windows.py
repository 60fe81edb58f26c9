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

"""Windows where a crash or a failure of the agent used to lose or
corrupt a version, each checked on the local store (the logic is the
backend's alike): SIGKILL between a version turning stable and the
cache's metadata saying so; a journal that names chunks whose writes
were lost; a version failed and pruned by GC while the agent was down;
a checkpoint refused while another version is being persisted; the
cache's metadata saved from two threads.

These images register no version ahead (``reserve=False``); a SIGKILL
with a reservation outstanding is in test_mirror_reserve.py.
"""

import errno
import os
import subprocess
import sys
import threading
import time

import pytest

from blobcr_agent.mirror import image as image_mod
from blobcr_agent.repository import gc
from blobcr_agent.repository import repository as repo_mod
from blobcr_agent.repository import scrub
from tests.functional import recovery_child as child

CHUNK = child.CHUNK
NCHUNKS = child.NCHUNKS
ALL = b''.join(child.content(k) for k in range(NCHUNKS))


def _run_child(scenario, directory, image_id):
    done = subprocess.run(
        [sys.executable, '-m', 'tests.functional.recovery_child', scenario,
         str(directory), image_id], capture_output=True, text=True,
        timeout=120,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__)))))
    assert done.returncode == -9, done.stderr


@pytest.fixture
def store(tmp_path):
    repo = child.repo_at(str(tmp_path))
    header = repo.create_image('disk', NCHUNKS * CHUNK)
    repo.commit(header.id, {0: b'\x01' * CHUNK})
    yield tmp_path, repo, header.id
    repo.close()


def _attach(tmp_path, repo, image_id):
    return image_mod.AttachedImage(repo, image_id, None,
                                   str(tmp_path / 'cache'), prefetch=False,
                                   reserve=False)


def test_a_version_stable_before_the_metadata_is_adopted(store):
    tmp_path, repo, image_id = store
    _run_child('stable-before-metadata', tmp_path, image_id)
    assert [(v.number, v.state) for v in repo.image(image_id).versions] == \
        [(1, 'stable'), (2, 'stable')]
    a = _attach(tmp_path, repo, image_id)
    try:
        assert a.meta['last'] == 2 and a.meta['persisting'] is None
        assert a.version_state(2) == 'stable'
        a.write(5 * CHUNK, b'\x33' * CHUNK)
        three, count, _ = a.checkpoint()
        assert count == 1                   # version 2's chunks are clean
        assert a.wait_persisted(30)
        assert repo.image(image_id).version(three).parent == 2
        expected = bytearray(ALL)
        expected[5 * CHUNK:6 * CHUNK] = b'\x33' * CHUNK
        assert repo.read(image_id, three, 0, NCHUNKS * CHUNK) == expected
        assert {p['version'] for p in repo.pins()} == {1, three}
    finally:
        a.close(timeout=10)


def test_a_journal_entry_is_trusted_only_for_an_object_written_since(store):
    tmp_path, repo, image_id = store
    # Garbage with the same content as the chunks about to be written:
    # older than the resumed version, so GC may delete it any time.
    garbage = repo.create_image('garbage', NCHUNKS * CHUNK)
    repo.commit(garbage.id, {k: child.content(k) for k in range(NCHUNKS)})
    repo.delete_image(garbage.id)
    time.sleep(1.1)                 # older than the version, by its mtime
    _run_child('journal-before-durable', tmp_path, image_id)
    # GC lists the headers (the resumed version pending) before the
    # resumed version finishes.
    real_finish = repo_mod.Commit.finish

    def finish(self, *args, **kwargs):
        gc.collect(repo, grace=0)
        return real_finish(self, *args, **kwargs)
    repo_mod.Commit.finish = finish
    try:
        a = _attach(tmp_path, repo, image_id)
        assert a.wait_persisted(30)
    finally:
        repo_mod.Commit.finish = real_finish
    try:
        assert a.version_state(2) == 'stable'
        assert scrub.verify(repo, image_id, 2).ok
        assert repo.read(image_id, 2, 0, NCHUNKS * CHUNK) == ALL
    finally:
        a.close(timeout=10)


def test_an_in_flight_version_pruned_while_the_agent_was_down(store):
    tmp_path, repo, image_id = store
    _run_child('killed-in-persist', tmp_path, image_id)
    # Down for longer than pending_timeout: GC fails and prunes it.
    report = gc.collect(repo, grace=0, pending_timeout=0)
    assert report.versions_failed == 1
    assert 2 not in [v.number for v in repo.image(image_id).versions]
    a = _attach(tmp_path, repo, image_id)
    try:
        assert a.stats()['dirty'] == NCHUNKS     # nothing lost
        version, count, _ = a.checkpoint()
        assert count == NCHUNKS and version == 3
        assert a.wait_persisted(30)
        assert repo.read(image_id, version, 0, NCHUNKS * CHUNK) == ALL
    finally:
        a.close(timeout=10)


def test_a_refused_checkpoint_leaves_the_version_in_flight_whole(
        store, monkeypatch):
    tmp_path, repo, image_id = store
    a = _attach(tmp_path, repo, image_id)
    try:
        for k in range(NCHUNKS):
            a.write(k * CHUNK, child.content(k))
        release = threading.Event()
        real_put = repo_mod.Commit.put

        def slow_put(self, index, data):
            release.wait(30)
            return real_put(self, index, data)
        monkeypatch.setattr(repo_mod.Commit, 'put', slow_put)
        two, _, _ = a.checkpoint()
        a.write(0, b'\xee' * CHUNK)
        real_record = image_mod.AttachedImage._set_in_flight

        def full(self, versions, **more):
            if threading.current_thread() is threading.main_thread():
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real_record(self, versions, **more)
        monkeypatch.setattr(image_mod.AttachedImage, '_set_in_flight',
                            full)
        with pytest.raises(OSError):
            a.checkpoint(wait=5)
        monkeypatch.setattr(image_mod.AttachedImage, '_set_in_flight',
                            real_record)
        release.set()
        assert a.wait_persisted(30)
        assert a.version_state(two) == 'stable'
        assert repo.read(image_id, two, 0, NCHUNKS * CHUNK) == ALL
        later, count, _ = a.checkpoint()
        assert count == 1 and a.wait_persisted(30)
        assert repo.read(image_id, later, 0, CHUNK) == b'\xee' * CHUNK
    finally:
        a.close(timeout=10)


def test_metadata_saved_from_two_threads_stays_whole(store, monkeypatch):
    tmp_path, repo, image_id = store
    a = _attach(tmp_path, repo, image_id)
    try:
        real_replace = os.replace
        persister_saving = threading.Event()

        def slow_replace(src, dst):
            if threading.current_thread().name.startswith('blobcr-persist'):
                persister_saving.set()
                time.sleep(0.3)         # a slow disk: the other thread runs
            return real_replace(src, dst)
        monkeypatch.setattr(image_mod.os, 'replace', slow_replace)
        a.write(0, b'\x22' * CHUNK)
        a.checkpoint()
        persister_saving.wait(10)
        a.write(CHUNK, b'\x33' * CHUNK)
        three, _, _ = a.checkpoint()
        assert a.wait_persisted(30)
        assert a.version_state(three) == 'stable'
        assert a.meta['last'] == three and a.meta['persisting'] is None
    finally:
        a.close(timeout=10)


def test_a_version_recorded_but_never_committed_is_failed(store):
    tmp_path, repo, image_id = store
    _run_child('recorded-before-commit', tmp_path, image_id)
    a = _attach(tmp_path, repo, image_id)
    try:
        # Not published as a copy of version 1: failed, the writes dirty.
        assert repo.image(image_id).version(2).state == 'failed'
        assert a.stats()['dirty'] == NCHUNKS
        version, count, _ = a.checkpoint()
        assert count == NCHUNKS and a.wait_persisted(30)
        assert repo.read(image_id, version, 0, NCHUNKS * CHUNK) == ALL
    finally:
        a.close(timeout=10)


# Children for the crashes with several versions in flight (as
# recovery_child: attach, write, checkpoint, SIGKILL itself).
_SEVERAL_IN_FLIGHT = r'''
import os, sys, threading
from blobcr_agent.mirror import image as image_mod
from blobcr_agent.repository import repository as repo_mod
from tests.functional import recovery_child as child

scenario, directory, image_id = sys.argv[1:4]
repo = child.repo_at(directory)
gate = threading.Event()
real_put = repo_mod.Commit.put


def put(self, index, data):
    gate.wait()
    return real_put(self, index, data)


repo_mod.Commit.put = put
if scenario == 'stable-with-followers':
    # Killed once version 2 is stable and its snapshot ended, before the
    # metadata says so, with version 3 queued behind it.
    image_mod.AttachedImage._persisted = lambda self, version: child.die()
image = image_mod.AttachedImage(repo, image_id, None,
                                os.path.join(directory, 'cache'),
                                prefetch=False, reserve=False)
first = 8 if scenario == 'stable-with-followers' else 4
for k in range(first):
    image.write(k * child.CHUNK, child.content(k))
image.checkpoint()                  # version 2: its persist waits
if scenario == 'stable-with-followers':
    for k in range(4):              # chunks version 2 holds too
        image.write(k * child.CHUNK, bytes([0x61 + k]) * child.CHUNK)
else:
    for k in range(4, 8):           # chunks version 2 does not hold
        image.write(k * child.CHUNK, child.content(k))
image.checkpoint()                  # version 3, behind it
if scenario == 'stable-with-followers':
    gate.set()
    image.wait_persisted()
child.die()
'''


def _run_several(scenario, directory, image_id):
    done = subprocess.run(
        [sys.executable, '-c', _SEVERAL_IN_FLIGHT, scenario, str(directory),
         image_id], capture_output=True, text=True, timeout=120,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__)))))
    assert done.returncode == -9, done.stderr


def test_several_in_flight_the_oldest_resumes_when_whole(store):
    """Killed with version 2 being persisted and version 3 behind it,
    on chunks version 2 does not hold: version 2's snapshot is all in
    the mirror file, so it resumes and turns stable; version 3 fails
    and its chunks go to the next checkpoint.
    """
    tmp_path, repo, image_id = store
    _run_several('oldest-whole', tmp_path, image_id)
    a = _attach(tmp_path, repo, image_id)
    try:
        assert a.wait_persisted(30)
        assert a.version_state(2) == 'stable'
        assert a.version_state(3) == 'failed'
        expected = bytearray(ALL)
        expected[4 * CHUNK:] = repo.read(image_id, 1, 4 * CHUNK,
                                         4 * CHUNK)
        assert repo.read(image_id, 2, 0, NCHUNKS * CHUNK) == expected
        assert a.stats()['dirty'] == 4
        version, count, _ = a.checkpoint()
        assert count == 4
        assert a.wait_persisted(30)
        assert repo.image(image_id).version(version).parent == 2
        assert repo.read(image_id, version, 0, NCHUNKS * CHUNK) == ALL
    finally:
        a.close(timeout=10)


def test_stable_before_the_metadata_with_a_version_behind_it(store):
    """Killed after version 2 turned stable and its snapshot ended, with
    version 3 (chunks 0-3 rewritten) behind it: version 2 is adopted,
    version 3 failed, and chunks 0-3 are dirty again (before, version
    3's snapshot was ended as if it were version 2's: its chunks clean,
    its writes missing from the next version).
    """
    tmp_path, repo, image_id = store
    _run_several('stable-with-followers', tmp_path, image_id)
    a = _attach(tmp_path, repo, image_id)
    try:
        assert a.meta['last'] == 2 and a.meta['persisting'] is None
        assert a.version_state(2) == 'stable'
        assert a.version_state(3) == 'failed'
        assert repo.read(image_id, 2, 0, NCHUNKS * CHUNK) == ALL
        version, count, _ = a.checkpoint()
        assert count >= 4
        assert a.wait_persisted(30)
        expected = bytearray(ALL)
        for k in range(4):
            expected[k * CHUNK:(k + 1) * CHUNK] = bytes([0x61 + k]) * CHUNK
        assert repo.read(image_id, version, 0, NCHUNKS * CHUNK) == expected
    finally:
        a.close(timeout=10)
