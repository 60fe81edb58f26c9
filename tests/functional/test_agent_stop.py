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

"""Stopping the agent under load: a VM still has its disk open, and a
persist is still running when ``shutdown_timeout`` runs out.

SIGTERM must end the agent in bounded time in both cases: the open disk
is cut off (its process sees I/O errors, as a VM would), the running
persist is parked and resumes from its journal at the next start. No
write that reached the mirror is lost.
"""

import os
import random
import subprocess
import sys
import time

from blobcr_agent.repository.backends import local
from blobcr_agent.repository import repository

CHUNK = 256 * 1024

# Holds the image open like a VM, then reports what a read returns once
# the agent is gone.
HOLDER = r"""
import os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
os.pread(fd, 4096, 0)
print('open', flush=True)
sys.stdin.readline()
try:
    os.pread(fd, 4096, 0)
    print('read ok', flush=True)
except OSError as e:
    print('read failed errno %d' % e.errno, flush=True)
"""


def _image(tmp_path, nchunks):
    repo = repository.Repository(local.LocalBackend(str(tmp_path / 'store')),
                                 chunk_size=CHUNK)
    header = repo.create_image('disk', nchunks * CHUNK)
    return repo, header.id


def _write(path, data):
    with open(path, 'r+b', buffering=0) as f:
        f.write(data)
        os.fsync(f.fileno())


def test_sigterm_with_a_vm_holding_its_disk(tmp_path, agent_factory):
    repo, image_id = _image(tmp_path, 64)
    agent = agent_factory(repo.backend, {'agent': {'quiesce': 'none'}})
    path = agent.client.call('attach', image=image_id)['path']
    data = random.Random(1).randbytes(64 * CHUNK)
    _write(path, data)
    version = agent.client.call('checkpoint', image=image_id)['version']
    holder = subprocess.Popen([sys.executable, '-c', HOLDER, path],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline() == 'open\n'
        t0 = time.monotonic()
        assert agent.stop(timeout=60) == 0
        assert time.monotonic() - t0 < 30
        holder.stdin.write('\n')
        holder.stdin.flush()
        assert holder.stdout.readline().startswith('read failed')
    finally:
        holder.kill()
        holder.wait()
    assert repo.image(image_id).version(version).state == 'stable'
    with open(agent.log.name) as f:
        assert 'aborting the mount' in f.read()

    agent.start()                          # the disk is back
    assert agent.client.call('attach', image=image_id)['path'] == path
    with open(path, 'rb') as f:
        assert f.read() == data


def test_sigterm_parks_a_running_persist(tmp_path, agent_factory):
    nchunks = 1024                         # 256 MiB: persisting takes s
    repo, image_id = _image(tmp_path, nchunks)
    agent = agent_factory(repo.backend, {'agent': {
        'quiesce': 'none', 'shutdown_timeout': '0'}})
    path = agent.client.call('attach', image=image_id)['path']
    data = os.urandom(nchunks * CHUNK)
    _write(path, data)
    version = agent.client.call('checkpoint', image=image_id)['version']
    t0 = time.monotonic()
    assert agent.stop(timeout=60) == 0
    stopped_in = time.monotonic() - t0
    assert repo.image(image_id).version(version).state == 'pending', (
        'the persist finished before the stop: this test needs a slower '
        'persist to show parking')
    with open(agent.log.name) as f:
        assert 'parked' in f.read()

    agent.start()                          # resumes from the journal
    assert agent.client.call('wait_stable', image=image_id,
                             version=version) == 'stable'
    assert repo.read(image_id, version, 0, len(data)) == data
    assert stopped_in < 20
