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

"""SIGKILL of the committing process at random points.

A child process COMMITs in a loop and is killed at a random moment,
several times over the same image. After each kill: every version that
was stable verifies and holds exactly what it must, the interrupted
version is not stable, and GC (seeing its writer dead) marks it failed
and reclaims its orphans: the chunk objects left are exactly those of the
stable versions.
"""

import hashlib
import json
import random
import subprocess
import sys

from blobcr_agent.repository.backends import base
from blobcr_agent.repository import gc
from blobcr_agent.repository import repository
from blobcr_agent.repository import scrub
from tests.functional import crash_writer as writer

KILLS = 6


def _spec(backend):
    if backend.name == 'local':
        return {'kind': 'local', 'path': backend.root}
    return {'kind': 'rados', 'conffile': backend.conffile,
            'namespace': backend.namespace}


def _expected(header, contents):
    """Fill ``contents`` with what each stable version must hold."""
    for v in header.versions:
        if v.state != 'stable' or v.number in contents:
            continue
        content = bytearray(contents[v.parent] if v.parent
                            else bytes(writer.CHUNK * writer.NCHUNKS))
        for index, data in writer.changes(v.number).items():
            content[index * writer.CHUNK:(index + 1) * writer.CHUNK] = data
        contents[v.number] = bytes(content)
    return contents


def _digests(content):
    return {hashlib.sha256(content[i:i + writer.CHUNK]).hexdigest()
            for i in range(0, len(content), writer.CHUNK)
            if any(content[i:i + writer.CHUNK])}


def test_sigkill_during_commit_loses_nothing(backend_factory):
    repo = repository.Repository(backend_factory(), chunk_size=writer.CHUNK,
                                 gc_grace=0)
    image = repo.create_image('crash', writer.CHUNK * writer.NCHUNKS).id
    rng = random.Random(1234)
    interrupted = 0
    contents, digests = {}, {}
    for _ in range(KILLS):
        child = subprocess.Popen(
            [sys.executable, '-m', 'tests.functional.crash_writer',
             json.dumps(_spec(repo.backend)), image],
            stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline().strip() == 'ready'
        try:
            child.wait(timeout=rng.uniform(0.05, 1.5))
        except subprocess.TimeoutExpired:
            child.kill()
        child.wait()
        assert child.returncode == -9, 'the writer died on its own'

        header = repo.image(image)
        pending = [v.number for v in header.versions if v.state == 'pending']
        assert len(pending) <= 1
        interrupted += len(pending)
        for number, content in _expected(header, contents).items():
            if number not in digests:
                _check(repo, header, number, content)
                digests[number] = _digests(content)

        # The writer is dead, so no write can race with this GC: a
        # cut-off in the future (RADOS mtimes are whole seconds) is safe.
        report = gc.collect(repo, grace=-2)
        header = repo.image(image)
        for number in pending:
            assert header.version(number).state == 'failed'
        live = set().union(*digests.values())
        assert set(repo.backend.list(base.CHUNK)) == live, report
    assert interrupted, 'no kill landed inside a COMMIT'
    # GC ran six times meanwhile: every stable version is still whole.
    header = repo.image(image)
    for number, content in contents.items():
        _check(repo, header, number, content)


def _check(repo, header, number, content):
    assert scrub.verify(repo, header.id, number).ok
    got = bytearray(len(content))
    for index, data in repo.fetch(header, number):
        got[index * writer.CHUNK:(index + 1) * writer.CHUNK] = data
    assert got == content, 'version %d differs' % number
