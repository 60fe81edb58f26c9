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

"""Power cuts: the agent's cache directory on a file system that loses
what was not synced (lab/blobcr_lab/lazyfs.py), a guest-like writer
(powercut_child.py) writing, flushing and checkpointing at random, and
the power cut at a random moment: after a random delay, or at one of
the agent's crash points (meta.json written, a persist journal line, a
header compare-and-set: inside a checkpoint or a persist). Half the cuts
drop every unsynced page; the others keep each with probability 1/2, as
a disk's write-back might have.

After each cut the reboot is simulated (a new boot id in the cache's
meta.json: the host cannot reboot here) and the image attached again
as the agent does at its start, from what the cut left. Then:

* every write the writer had flushed is there: each block holds the
  last flushed write to it, or a later one, never an older one or a mix;
* every stable version is exactly the image after one checkpoint's
  write (a consistent cut);
* a checkpoint after the recovery persists exactly what the mirror
  reads.

The repository (local store) is on a real disk: a host's power cut does
not reach the store. Replay one cut or run many (a soak):

    BLOBCR_POWER_CUT_SEED=S BLOBCR_POWER_CUTS=N pytest -s \\
        tests/functional/test_power_cut.py
"""

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid

from blobcr_agent.mirror import image as image_mod
from blobcr_agent.repository import image as repo_image
from tests.functional import powercut_child as child

CUTS = int(os.environ.get('BLOBCR_POWER_CUTS', '8'))
SEED = int(os.environ.get('BLOBCR_POWER_CUT_SEED',
                          str(random.randrange(2**31))))
SIZE = child.NCHUNKS * child.CHUNK


def _wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError('timed out waiting for %s' % what)
        time.sleep(0.02)


def _mount(backing, mnt, keep, seed):
    os.makedirs(backing, exist_ok=True)
    os.makedirs(mnt, exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, '-m', 'blobcr_lab.lazyfs', backing, mnt,
         '--keep', str(keep), '--seed', str(seed)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    _wait_for(lambda: os.path.ismount(mnt) or proc.poll() is not None, 20,
              'lazyfs at %s' % mnt)
    assert proc.poll() is None, proc.stdout.read()
    return proc


def _cut_power(proc, mnt):
    proc.send_signal(signal.SIGUSR1)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if os.path.ismount(mnt):
        subprocess.run(['fusermount3', '-u', '-z', mnt], check=False)


def _read_log(directory):
    """What the writer logged: its last flushed write, its versions
    (version -> last write in it), the write of a checkpoint asked for
    and not answered, and how many copies it had spilled.
    """
    flushed, taken, asked, spilled = -1, {}, None, 0
    try:
        with open(os.path.join(directory, 'log')) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        lines = []
    for line in lines:
        word = line.split()
        if word[0] == 'F':
            flushed = int(word[1])
        elif word[0] == 'c':
            asked = int(word[1])
        elif word[0] == 'C':
            taken[int(word[1])] = int(word[2])
            asked = None
        elif word[0] == 'B':
            asked = None
        elif word[0] == 'S':
            spilled = int(word[1])
    return flushed, taken, asked, spilled


class Model(object):
    """The writer's plan replayed: who wrote what, and when."""

    def __init__(self, seed):
        self.seed = seed
        self.writes = []                # i -> (first, count)
        self._plan = child.plan(seed)

    def upto(self, i):
        while len(self.writes) <= i:
            _, first, count, _ = next(self._plan)
            self.writes.append((first, count))

    def image_after(self, i):
        """Block contents after write i (-1: the base)."""
        self.upto(i)
        blocks = [(-1, b) for b in range(child.NBLOCKS)]
        for k in range(i + 1):
            first, count = self.writes[k]
            for b in range(first, first + count):
                blocks[b] = (k, b)
        return [child.block_data(self.seed, k, b) for k, b in blocks]

    def last_flushed(self, flushed):
        self.upto(flushed)
        last = {}
        for k in range(flushed + 1):
            first, count = self.writes[k]
            for b in range(first, first + count):
                last[b] = k
        return last

    def wrote(self, i, block):
        self.upto(i)
        first, count = self.writes[i]
        return first <= block < first + count


def _check_mirror(model, data, flushed, where):
    last = model.last_flushed(flushed)
    for b in range(child.NBLOCKS):
        got = data[b * child.BLOCK:(b + 1) * child.BLOCK]
        i, named = child.who_wrote(got)
        ok = named == b and got == child.block_data(model.seed, i, b) and (
            i == -1 or (i >= 0 and model.wrote(i, b)))
        assert ok, '%s: block %d holds no write of the plan' % (where, b)
        assert i >= last.get(b, -1), (
            '%s: block %d holds write %d, older than write %d, flushed '
            'before the cut' % (where, b, i, last[b]))


def _check_versions(model, repo, image_id, taken, asked, where):
    header = repo.image(image_id)
    stable = [v.number for v in header.versions
              if v.state == repo_image.STABLE and v.number != 1]
    for number in stable:
        i = taken.get(number, asked)
        assert i is not None, '%s: version %d is stable, but no checkpoint ' \
            'was asked for it' % (where, number)
        expected = b''.join(model.image_after(i))
        assert repo.read(image_id, number, 0, SIZE) == expected, (
            '%s: version %d is not the image after write %d (its '
            'checkpoint)' % (where, number, i))
    return len(stable)


def _one_cut(base, k, seed, rng, tally):
    directory = os.path.join(base, 'cut%d' % k)
    backing, mnt = (os.path.join(directory, 'backing'),
                    os.path.join(directory, 'mnt'))
    os.makedirs(directory)
    repo = child.repo_at(directory)
    header = repo.create_image('disk', SIZE)
    image_id = header.id
    repo.commit(image_id, {c: b''.join(
        child.block_data(seed, -1, b)
        for b in range(c * child.CHUNK // child.BLOCK,
                       (c + 1) * child.CHUNK // child.BLOCK))
        for c in range(child.NCHUNKS)})
    keep = rng.choice((0.0, 0.5))
    env = dict(os.environ)
    crash = None
    if rng.random() < 0.4:
        crash = '%s:%d' % (rng.choice(('meta', 'taken', 'journal', 'header')),
                           rng.randint(1, 40))
        env['BLOBCR_CRASH_AT'] = crash
    delay = rng.uniform(0.8, 3.0)
    where = 'cut %d (seed %d: keep %.1f, %s)' % (
        k, seed, keep, 'crash point %s' % crash if crash
        else 'after %.1f s' % delay)
    lazy = _mount(backing, mnt, keep, seed)
    writer = None
    try:
        writer = subprocess.Popen(
            [sys.executable, '-m', 'tests.functional.powercut_child',
             directory, os.path.join(mnt, 'cache'), image_id, str(seed)],
            env=env, stderr=subprocess.PIPE, text=True)
        try:
            writer.wait(delay)
        except subprocess.TimeoutExpired:
            writer.kill()
        writer.wait()
    finally:
        if writer is not None and writer.poll() is None:
            writer.kill()
            writer.wait()
        _cut_power(lazy, mnt)
    assert writer.returncode == -signal.SIGKILL, (
        '%s: the writer failed: %s' % (where, writer.stderr.read()))

    flushed, taken, asked, spilled = _read_log(directory)
    tally['spilled copies'] += spilled
    model = Model(seed)
    cache_dir = os.path.join(backing, 'cache')
    meta_path = os.path.join(cache_dir, 'meta.json')
    recovered = None
    if os.path.exists(meta_path):
        # The reboot: the cache is from another boot now.
        with open(meta_path) as f:
            meta = json.load(f)
        meta['boot_id'] = str(uuid.uuid4())
        with open(meta_path, 'w') as f:
            json.dump(meta, f)
        recovered = image_mod.AttachedImage(repo, image_id, None, cache_dir,
                                            prefetch=False)
    else:
        assert flushed == -1, '%s: meta.json lost after a flush' % where
    try:
        versions = _check_versions(model, repo, image_id, taken, asked,
                                   where)
        if recovered is not None:
            assert recovered.wait_persisted(60), where
            data = recovered.read(0, SIZE)
            _check_mirror(model, data, flushed, where)
            version = recovered.checkpoint()[0]
            assert recovered.wait_persisted(60), where
            assert repo.read(image_id, version, 0, SIZE) == data, (
                '%s: the checkpoint after recovery is not what the mirror '
                'reads' % where)
    finally:
        if recovered is not None:
            recovered.close()
        repo.close()
    tally['cuts'] += 1
    tally['flushed writes'] += flushed + 1
    tally['stable versions'] += versions
    print('%s: %d writes flushed, %d versions stable, cache %s'
          % (where, flushed + 1, versions,
             'recovered' if recovered is not None else 'never written'))


def test_power_cuts_lose_no_flushed_write(tmp_path):
    print('\npower cuts: BLOBCR_POWER_CUT_SEED=%d BLOBCR_POWER_CUTS=%d'
          % (SEED, CUTS))
    rng = random.Random(SEED)
    tally = {'cuts': 0, 'flushed writes': 0, 'stable versions': 0,
             'spilled copies': 0}
    for k in range(CUTS):
        _one_cut(str(tmp_path), k, rng.randrange(2**31), rng, tally)
    print('power cuts: %s' % tally)
    # The writer has one copy-on-write slot in memory: its other copies
    # were in the spill file when the power went.
    assert tally['spilled copies'] > 0, tally
