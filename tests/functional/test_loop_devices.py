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

"""Loop devices over mirror files (manager/loopdevs.py), what stock Nova
opens for a 'local' connection, on a real agent, its FUSE mount and the
kernel's loop driver:

* attach sets one up with direct I/O; O_DIRECT writes through it and a
  flush reach the mirror (its flush count moves), and a checkpoint holds
  them;
* a connection names it by the agent's link (devices/<image>), never by
  its number;
* detach releases it and removes the link;
* an agent SIGKILLed with one set up: the next agent releases it at
  start (its FUSE connection died with the agent before), and once the
  mirror is back sets up a new one behind the same link, which reads the
  volume; the number a guest still holds is not handed out again;
* a recorded device that another process took (another backing file):
  the detach says so and leaves that device alone.
"""

import mmap
import os
import random
import subprocess
import time

import pytest

from blobcr_agent.manager import loopdevs
from blobcr_agent.privileged import loop as privileged_loop
from blobcr_agent.repository import repository
from blobcr_common import exception

CHUNK = 64 * 1024
SIZE = 16 * CHUNK

pytestmark = pytest.mark.skipif(not os.path.exists('/dev/loop-control'),
                                reason='no loop devices here')


@pytest.fixture
def agent(agent_place, agent_factory):
    # As root, and as its own user with the devices set up and released
    # by its privileged daemon.
    a = agent_place.local_agent(agent_factory, {
        'agent': {'quiesce': 'none'},
        'repository': {'chunk_size': str(CHUNK)}})
    yield a
    # A test that failed with an agent down leaves its devices: the lab
    # releases them at the stop (by the record the agent keeps), never
    # another process's.
    a.stop()


def _attach(agent):
    call = agent.client.call
    image = call('create_image', name='vol', size=SIZE)['id']
    attached = call('attach', image=image, block_device=True)
    return image, attached


def _device(attached):
    """The loop device behind the link an attach answers."""
    link = attached['device']
    assert os.path.islink(link) and \
        os.path.basename(link) == os.path.basename(attached['path'])
    return os.path.realpath(link)


def _direct_write(device, offset, data):
    buf = mmap.mmap(-1, len(data))          # page-aligned, for O_DIRECT
    buf.write(data)
    fd = os.open(device, os.O_RDWR | os.O_DIRECT)
    try:
        assert os.pwrite(fd, buf, offset) == len(data)
        os.fsync(fd)
    finally:
        os.close(fd)
        buf.close()


def _has_sys_resource(pid):
    with open('/proc/%d/status' % pid) as f:
        caps = next(line for line in f if line.startswith('CapEff:'))
    return bool(int(caps.split()[1], 16) & (1 << 24))


def _dio(device):
    out = subprocess.run(['losetup', '--list', '--noheadings', '--output',
                          'DIO', device], capture_output=True, text=True,
                         check=True).stdout
    return out.strip()


def test_writes_and_flushes_through_the_device_reach_the_mirror(agent):
    call = agent.client.call
    image, attached = _attach(agent)
    device = _device(attached)
    assert loopdevs.backing_file(device) == attached['path']
    assert _dio(device) == '1'
    # Serving writeback, the agent must not wait on it under memory
    # pressure: PR_SET_IO_FLUSHER, wherever it has CAP_SYS_RESOURCE
    # (this machine's container may not give it).
    assert call('status')['loop_devices']['io_flusher'] is \
        _has_sys_resource(agent.pid)
    flushes = call('status')['attached'][image]['flushes']
    data = random.Random(33).randbytes(3 * CHUNK)
    _direct_write(device, CHUNK, data)
    assert call('status')['attached'][image]['flushes'] > flushes
    with open(attached['path'], 'rb') as f:
        f.seek(CHUNK)
        assert f.read(len(data)) == data
    version = call('checkpoint', image=image)['version']
    assert call('wait_stable', image=image, version=version) == 'stable'
    repo = repository.Repository(agent.backend)
    try:
        assert repo.read(image, version, CHUNK, len(data)) == data
    finally:
        repo.close()
    assert call('status')['loop_devices']['devices'][image]['device'] == \
        device
    call('detach', image=image)
    assert loopdevs.backing_file(device) is None
    assert not os.path.lexists(attached['device'])
    assert call('status')['loop_devices']['devices'] == {}


def test_after_a_kill_the_link_names_a_new_device_over_the_volume(agent):
    call = agent.client.call
    image, attached = _attach(agent)
    link, device = attached['device'], _device(attached)
    data = random.Random(7).randbytes(2 * CHUNK)
    _direct_write(link, 0, data)
    version = call('checkpoint', image=image)['version']
    assert call('wait_stable', image=image, version=version) == 'stable'
    # A guest that keeps the device open across the agent's death.
    held = os.open(device, os.O_RDONLY)
    try:
        agent.kill()
        # Still set up, over a file of the dead mount.
        assert privileged_loop.identity(device) is not None
        agent.start()
        # Restored once the mount serves, beside the other requests.
        deadline = time.monotonic() + 30
        while True:
            status = agent.client.call('status')
            if status['loop_devices']['restored_at_start'] or \
                    time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert status['loop_devices']['released_at_start'] == 1
        assert status['loop_devices']['restored_at_start'] == 1
        assert image in status['attached']          # the mirror is back
        # The same link, a new device: the held number is not reused.
        renewed = os.path.realpath(link)
        assert renewed != device
        assert loopdevs.backing_file(renewed) == attached['path']
        with open(link, 'rb') as f:
            assert f.read(len(data)) == data
        # The dead device serves nothing: an error, never other data.
        with pytest.raises(OSError):
            os.pread(held, CHUNK, 0)
    finally:
        os.close(held)
    # Freed once its last user closed it.
    assert privileged_loop.identity(device) is None


def test_a_device_another_process_took_is_left_alone(agent, tmp_path):
    call = agent.client.call
    image, attached = _attach(agent)
    device = _device(attached)
    other = tmp_path / 'other.raw'
    other.write_bytes(bytes(SIZE))
    subprocess.run(['losetup', '--detach', device], check=True)
    subprocess.run(['losetup', device, str(other)], check=True)
    try:
        with pytest.raises(exception.BlobCRError,
                           match='another process took it'):
            call('detach', image=image)
        assert loopdevs.backing_file(device) == str(other)
    finally:
        subprocess.run(['losetup', '--detach', device], check=False)
