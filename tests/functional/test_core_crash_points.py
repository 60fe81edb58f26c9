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

"""Crash points of the mirror core (issue 19), through the Python
binding the agent uses.

With BLOBCR_CORE_CRASH_AT=k in its environment, a process SIGKILLs itself at
the k-th durable-state write of the core. For every k of a pipelined
checkpoint (core_crash_child), a restart recovers as
blobcr_agent/mirror/recovery.py does (the child journaled nothing: every
snapshot chunk is requeued) and checks that the oldest version in
flight is given up or persists exactly the image at its COMMIT, never
data written after it, and that the next checkpoint carries what the
guest reads, which holds every acknowledged write. The sweep of the
whole protocol in every mode is tests/native/crash_core.c
(make -C tests/native crash).
"""

import collections
import os
import signal
import subprocess
import sys

from blobcr_agent import _native
from tests.functional import core_crash_child as child

TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
ZERO = bytes(child.CHUNK)


def run_child(directory, crash_at):
    directory.mkdir()
    env = dict(os.environ, BLOBCR_CORE_CRASH_AT=str(crash_at))
    return subprocess.run(
        [sys.executable, '-m', 'tests.functional.core_crash_child',
         str(directory)], cwd=TOP, env=env, capture_output=True, text=True,
        timeout=60)


def image_before(step):
    """The image the guest wrote before ``step``."""
    image = [ZERO] * child.NCHUNKS
    for s, (what, first, last) in enumerate(child.STEPS[:step]):
        if what == 'write':
            for index in range(first, last + 1):
                image[index] = child.content(s, index)
    return image


def persist(mirror, base):
    """Take the oldest snapshot to the end: its version's image, on
    ``base``.
    """
    image = list(base)
    for index, data in iter(mirror.take, None):
        image[index] = data
    mirror.snapshot_done(True)
    return image


def recover(mirror, commits):
    """The core's side of recovery.recover() after a crash with the
    COMMITs of steps ``commits`` in flight: what became of the oldest,
    and the image of the last stable version.
    """
    if not commits:
        return 'nothing in flight', image_before(0)
    state = mirror.recovery(oldest=True)
    if (state['lost'] or not state['snapshot'] or
            mirror.requeue(mirror.snapshot_chunks())):
        mirror.snapshot_done(False)
        return 'given up', image_before(0)
    mirror.resume()
    return 'resumed', persist(mirror, image_before(0))


def stamps(image):
    """One byte per chunk (its fill), None for a mixed chunk."""
    return [data[0] if data == data[:1] * len(data) else None
            for data in image]


def read_all(mirror):
    chunks = []
    for index in range(child.NCHUNKS):
        data = mirror.read(index * child.CHUNK, child.CHUNK)
        chunks.append(ZERO if isinstance(data, list) else data)
    return chunks


def acknowledged(step, index, data):
    """True if chunk ``index`` holds every write acknowledged before a
    crash in ``step`` (the write cut by it: either content).
    """
    what, first, last = child.STEPS[step]
    cut_short = what == 'write' and first <= index <= last
    return data == image_before(step)[index] or (
        cut_short and data == child.content(step, index))


def check_crash_point(directory, k):
    run = run_child(directory, k)
    assert run.returncode == -signal.SIGKILL, (k, run.stdout, run.stderr)
    assert 'crash point %d:' % k in run.stderr
    if not run.stdout.split():
        # Killed while the new cache wrote its first flush record,
        # before any step: it opens again, as new.
        mirror = child.open_mirror(str(directory))
        try:
            assert read_all(mirror) == [ZERO] * child.NCHUNKS
            assert mirror.stats()['generations'] == 0
        finally:
            mirror.close()
        return 'opening'
    step = int(run.stdout.split()[-1])
    commits = [s for s in range(step + 1) if child.STEPS[s][0] == 'commit']
    mirror = child.open_mirror(str(directory))
    try:
        outcome, base = recover(mirror, commits)
        mirror.commit()
        last = persist(mirror, base)
        now = read_all(mirror)
    finally:
        mirror.close()
    where = 'crash point %d, in step %d' % (k, step)
    if outcome == 'resumed':
        assert stamps(base) == stamps(image_before(commits[0])), (
            '%s: the resumed version is not the image at its COMMIT'
            % where)
    assert stamps(last) == stamps(now), (
        '%s: a written chunk that no checkpoint carries' % where)
    for index, data in enumerate(now):
        assert acknowledged(step, index, data), (
            '%s: chunk %d lost an acknowledged write' % (where, index))
    return outcome


def test_unarmed_counts_nothing():
    _native.crash_point('test')
    assert _native.crash_points() == 0


def test_every_crash_point_of_a_pipelined_checkpoint(tmp_path):
    counted = run_child(tmp_path / 'count', 0)
    assert counted.returncode == 0, counted.stderr
    points = int(counted.stdout.split()[-1])
    assert points > 20
    outcomes = collections.Counter(
        check_crash_point(tmp_path / str(k), k)
        for k in range(1, points + 1))
    print('%d crash points swept: %s' % (points, dict(outcomes)))
    assert outcomes['resumed'] and outcomes['given up']
