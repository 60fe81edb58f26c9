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

"""A writer killed inside COMMIT leaves a pending version that nobody
will finish (found by the Cinder model walk: an agent SIGKILLed between
registering a checkpoint's version and recording it in flight). Deleting
the image must not be refused for it: its writer, a process of this
host, is provably gone. A live writer still blocks the delete.
"""

import signal
import subprocess
import sys

import pytest

from blobcr_agent import exception
from blobcr_agent.repository.backends import local
from blobcr_agent.repository import image as image_mod
from blobcr_agent.repository import repository

WRITER = r'''
import sys
from blobcr_agent.repository.backends import local
from blobcr_agent.repository import repository
repo = repository.Repository(local.LocalBackend(sys.argv[1]),
                             chunk_size=4096)
pending = repo.begin_commit(sys.argv[2])
pending.put(0, b'x' * 4096)
print(pending.version, flush=True)
sys.stdin.read()            # killed here, inside COMMIT
'''


def _pending_of_a_killed_writer(store, image_id):
    writer = subprocess.Popen([sys.executable, '-c', WRITER, store,
                               image_id], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    number = int(writer.stdout.readline())
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    return number


def test_delete_is_not_blocked_by_a_dead_writers_version(tmp_path):
    store = str(tmp_path / 'store')
    repo = repository.Repository(local.LocalBackend(store), chunk_size=4096)
    header = repo.create_image('vol', 1 << 20)
    repo.commit(header.id, {1: b'y' * 4096})
    number = _pending_of_a_killed_writer(store, header.id)
    assert repo.image(header.id).version(number).state == image_mod.PENDING
    repo.delete_image(header.id)
    deleted = repo.images(include_deleted=True)[0]
    assert deleted.deleted
    v = deleted.version(number)
    assert v.state == image_mod.OBSOLETE and 'gone' in v.error, v
    assert all(x.state == image_mod.OBSOLETE for x in deleted.versions)


def test_a_live_writer_still_blocks_the_delete(tmp_path):
    repo = repository.Repository(local.LocalBackend(str(tmp_path / 's')),
                                 chunk_size=4096)
    header = repo.create_image('vol', 1 << 20)
    pending = repo.begin_commit(header.id)
    with pytest.raises(exception.InvalidInput, match='being written'):
        repo.delete_image(header.id)
    pending.abort('test over')
    repo.delete_image(header.id)
