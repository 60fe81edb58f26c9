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

"""A SIGKILL after every durable-state write of the agent, one by one
(blobcr_agent/crashpoint.py: meta.json, the persist journal, delta
packs, image header compare-and-sets), in a mirror taking pipelined checkpoints
(tests/functional/crashpoint_child.py). After each, the image is
attached again (recovery resumes, adopts or gives up what was in
flight) and:

* every stable version is exactly the image at one of the COMMITs
  (round boundaries), never a mix, and in the order they were taken,
  with the label and group tag its checkpoint asked for;
* the mirror still holds every acknowledged write: each chunk is the
  last finished round's, or the one being written at the kill;
* a checkpoint then persists exactly that content;
* the only pins the mirror holds are the ones it knows of, which its
  detach releases.

The rounds after the first change one page per chunk, so their
versions are persisted as sub-chunk deltas (journal lines with an
anchor): alone with links in one round, in several packs in another
(a journal line then names a pack entry, durable once its pack is).
The native core's own state writes are swept by
tests/native (make crash). The local store, real files, no FUSE.
"""

import json
import os
import subprocess
import sys

from blobcr_agent import crashpoint
from blobcr_agent.mirror import image as image_mod
from blobcr_agent.repository.backends import base
from blobcr_agent.repository import chunkpacks
from blobcr_agent.repository import deltas
from blobcr_agent.repository import image as repo_image
from tests.functional import crashpoint_child as child

CHUNK = child.CHUNK


def _run_child(directory, image_id, env):
    return subprocess.run(
        [sys.executable, '-m', 'tests.functional.crashpoint_child',
         directory, image_id], env=dict(os.environ, **env),
        capture_output=True, text=True, timeout=120)


def _prepare(directory):
    os.makedirs(directory)
    repo = child.repo_at(directory)
    header = repo.create_image('disk', child.NCHUNKS * CHUNK)
    repo.commit(header.id, child.plan(0))
    repo.close()
    return header.id


def _round_of(chunks, cuts):
    """The round whose cut the chunks are, or None: a mix."""
    for r, cut in enumerate(cuts):
        if chunks == cut:
            return r
    return None


def _check(directory, image_id, where):
    cuts = child.cuts()
    try:
        with open(os.path.join(directory, 'rounds')) as f:
            finished = len(f.read().split())
    except FileNotFoundError:
        finished = 0            # killed before its first round
    repo = child.repo_at(directory)
    a = image_mod.AttachedImage(repo, image_id, None,
                                child.cache_of(directory), prefetch=False)
    try:
        assert a.wait_persisted(60), where
        header = repo.image(image_id)
        stable = sorted((v for v in header.versions
                         if v.state == repo_image.STABLE),
                        key=lambda v: (v.seq, v.number))
        rounds = []
        for v in stable:
            data = repo.read(image_id, v.number, 0, child.NCHUNKS * CHUNK)
            got = [data[c * CHUNK:(c + 1) * CHUNK]
                   for c in range(child.NCHUNKS)]
            r = _round_of(got, cuts)
            assert r is not None, '%s: version %d is no cut: %s' % (
                where, v.number, [g[0] for g in got])
            if r:
                marks = child.marks(r)
                assert (v.made_by, v.group) == (
                    marks['made_by'], marks['group']), (where, v)
            rounds.append(r)
        assert rounds == sorted(set(rounds)), (where, rounds)
        assert rounds[-1] <= finished, (where, rounds, finished)
        now = a.read(0, child.NCHUNKS * CHUNK)
        after = cuts[min(finished + 1, child.ROUNDS)]
        for c in range(child.NCHUNKS):
            assert now[c * CHUNK:(c + 1) * CHUNK] in (
                cuts[finished][c], after[c]), '%s: chunk %d lost' % (where, c)
        version, _, _ = a.checkpoint(wait=30)
        assert a.wait_persisted(60)
        assert repo.read(image_id, version, 0, len(now)) == now, where
        # Every pin this mirror holds is one it knows of (what a detach
        # releases): a pin it forgot would keep its version for good.
        held = {v.number for v in repo.image(image_id).versions
                for p in v.pins if p['holder'] == a.holder}
        assert held <= {a.attached_version, a.meta['last']}, (
            where, held, a.attached_version, a.meta['last'])
        return rounds
    finally:
        a.close(60)
        repo.close()


def test_a_kill_after_any_durable_write_leaves_consistent_cuts(tmp_path):
    counts_file = str(tmp_path / 'counts.json')
    directory = str(tmp_path / 'count')
    image_id = _prepare(directory)
    done = _run_child(directory, image_id,
                      {'BLOBCR_CRASH_COUNTS': counts_file})
    assert done.returncode == 0, done.stderr[-2000:]
    # The rounds after the first are persisted as deltas: the journal
    # lines and recovery paths of deltas are swept too.
    repo = child.repo_at(directory)
    names = list(repo.backend.list(base.CHUNK))
    repo.close()
    assert [n for n in names if deltas.parse_link(n)], \
        'no delta was persisted alone'
    assert len([n for n in names if chunkpacks.NAME.match(n)]) >= 2, \
        'no version had several delta packs'
    # Chunks sent ahead of a checkpoint (upload_ahead.py) were linked by
    # its persist: the sweep crosses that path too.
    assert 'ahead_used 0' not in done.stdout and 'ahead_used' in \
        done.stdout, done.stdout
    with open(counts_file) as f:
        counts = json.load(f)
    # The mirror service's own site (a detached cache removed) is past
    # this scenario: test_detach_in_background.py crashes there; the
    # write log's, test_host_loss.py (it needs RADOS).
    sites = set(crashpoint.SITES) - {'cache-removed'} - set(
        crashpoint.LOG_SITES)
    assert set(counts) == sites, counts
    killed = missed = 0
    for site in sorted(sites):
        for n in range(1, counts[site] + 1):
            where = 'crash at %s:%d' % (site, n)
            directory = str(tmp_path / ('%s-%d' % (site, n)))
            image_id = _prepare(directory)
            done = _run_child(directory, image_id,
                              {'BLOBCR_CRASH_AT': '%s:%d' % (site, n)})
            if done.returncode == 0:
                missed += 1     # threads passed the points another way
            else:
                assert done.returncode == -9, (where, done.stderr[-2000:])
                killed += 1
            _check(directory, image_id, where)
    print('crash points: %s; %d killed, %d not reached in that run'
          % (counts, killed, missed))
    assert killed >= sum(counts.values()) * 3 // 4
