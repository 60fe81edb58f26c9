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

"""A child process for test_crash_points: attaches an image on the local
store, writes ROUNDS rounds, each followed by a checkpoint that is not
waited for (versions in flight together, copy-on-write of chunks the
next round rewrites), then waits for the persists. Each checkpoint is
labelled with its round and tagged in a group (marks()), as Cinder's
group snapshots are: a version registered ahead gets both when it turns
stable, from the cache's metadata after a crash. Run with
BLOBCR_CRASH_AT=SITE:N it SIGKILLs itself there (blobcr_agent/
crashpoint.py). Each round's number is appended to DIR/rounds once its
writes are done.

    python -m tests.functional.crashpoint_child DIR IMAGE_ID
"""

import os
import sys
import time

from blobcr_agent.mirror import image as image_mod
from blobcr_agent.repository.backends import local
from blobcr_agent.repository import repository as repo_mod

PAGE = 4096
CHUNK = 4 * PAGE
NCHUNKS = 8
ROUNDS = 3
GROUP = {'id': 'crash-sweep', 'members': 1, 'project': None}
UPLOAD_AHEAD = 0.005
PACK_BYTES = (0, 9000)


def marks(r):
    """Round r's checkpoint's label and group tag (Version.made_by,
    Version.group).
    """
    return {'made_by': 'round-%d' % r, 'group': GROUP}


def plan(r):
    """Round r's writes (0: the base version): {chunk: content}. After
    the base, a round changes one page of a chunk: from the second
    checkpoint on the persister stores deltas (repository/deltas.py;
    the first learns the chunks whole).
    """
    if r == 0:
        return {c: bytes([c + 1]) * CHUNK for c in range(NCHUNKS)}
    before = cuts(r - 1)[-1]
    out = {}
    for c in range(NCHUNKS):
        if (c + r) % 3:
            page = (c + r) % 4
            out[c] = (before[c][:page * PAGE] +
                      bytes([(16 * r + c) % 251 + 1]) * PAGE +
                      before[c][(page + 1) * PAGE:])
    return out


def cuts(last=ROUNDS):
    """The image after round 0, 1, ... last, chunk by chunk."""
    image = [None] * NCHUNKS
    out = []
    for r in range(last + 1):
        for c, data in plan(r).items():
            image[c] = data
        out.append(list(image))
    return out


def repo_at(directory):
    return repo_mod.Repository(
        local.LocalBackend(os.path.join(directory, 'store')),
        chunk_size=CHUNK, fanout=4, gc_grace=0)


def cache_of(directory):
    return os.path.join(directory, 'cache')


def main(directory, image_id):
    repo = repo_at(directory)
    image = image_mod.AttachedImage(repo, image_id, None,
                                    cache_of(directory), prefetch=False,
                                    upload_ahead=UPLOAD_AHEAD)
    with open(os.path.join(directory, 'rounds'), 'a') as done:
        for r in range(1, ROUNDS + 1):
            for c, data in plan(r).items():
                image.write(c * CHUNK, data)
            done.write('%d\n' % r)
            done.flush()
            # Rounds of upload-ahead (mirror/upload_ahead.py) before the
            # checkpoint: its persist links what went ahead (round 1:
            # later rounds' one-page changes are left to deltas).
            time.sleep(6 * UPLOAD_AHEAD)
            # Deltas in packs of about two (several per version, put
            # while the journal grows), or alone with links.
            repo.delta_pack_max_bytes = PACK_BYTES[r % 2]
            image.checkpoint(wait=30, **marks(r))
    image.wait_persisted(60)
    # For the sweep: whether a persist linked chunks sent ahead.
    print('ahead_used %d' % image.stats()['ahead_used'])
    if not image.close(60):
        sys.exit('persists did not end')


if __name__ == '__main__':
    main(*sys.argv[1:])
