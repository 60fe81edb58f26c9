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

"""Protection checkpoints bound what a lost host can lose (issue 20,
item 3): a real agent with ``protect_interval = 1`` checkpoints an
attached image written since its last checkpoint by itself; each
protection version is superseded (obsoleted) once a newer one is stable,
while a snapshot (a labelled checkpoint of its own) is kept; the status
reports the exposure window, and it stays bounded under writes.
"""

import random
import time

import pytest


def _versions(agent, image):
    return agent.client.call('list_versions', image=image)['versions']


def _wait(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, 'timed out: %s' % what
        time.sleep(0.2)


@pytest.mark.parametrize('backend_kind', ['local'])
def test_protection_versions_come_by_themselves_and_are_superseded(
        backend_factory, agent_factory):
    agent = agent_factory(backend_factory(), {
        'agent': {'quiesce': 'none', 'protect_interval': 1}})
    image = agent.client.call('create_image', name='p', size=1 << 20)['id']
    path = agent.client.call('attach', image=image)['path']
    rng = random.Random(3)
    windows = []

    def write():
        with open(path, 'r+b', buffering=0) as f:
            f.seek(rng.randrange(16) * 65536)
            data = rng.randbytes(65536)
            f.write(data)
            return data

    def protected():
        return [v for v in _versions(agent, image)
                if v['made_by'] == 'protection' and v['state'] == 'stable']

    write()
    first = _wait(protected, 20, 'a first protection version')[0]
    snapshot = agent.client.call('checkpoint', image=image,
                                 label='cinder')['version']
    # Writes go on: protection versions follow, each superseding the
    # one before; the exposure window stays bounded meanwhile.
    deadline = time.monotonic() + 6
    while time.monotonic() < deadline:
        write()
        windows.append(agent.client.call('status')['attached'][image]
                       ['exposure_s'])
        time.sleep(0.1)
    # Superseded: obsolete, and soon pruned from the header by the GC
    # its obsolete call kicked.
    _wait(lambda: all(v['state'] == 'obsolete'
                      for v in _versions(agent, image)
                      if v['version'] == first['version']), 20,
          'the first protection version superseded')
    versions = {v['version']: v for v in _versions(agent, image)}
    assert versions[snapshot]['state'] == 'stable'
    assert sum(1 for v in versions.values()
               if v['made_by'] == 'protection') >= 2
    protection = agent.client.call('status')['protection']
    print('\nprotection: %s; exposure window max %.1f s, median %.1f s'
          % (protection, max(windows), sorted(windows)[len(windows) // 2]))
    assert protection['taken'] >= 2 and protection['superseded'] >= 1
    # interval 1 s + a persist + a tick: well under 5 s here.
    assert max(windows) < 5, windows
    # Written no more: the window closes once the last one is stable.
    _wait(lambda: agent.client.call('status')['attached'][image]
          ['exposure_s'] == 0, 20, 'the window to close')
    # What the Cinder driver reports (blobcr_max_exposure_s): the age of
    # the newest stable version of the attached image, recent here.
    assert 0 <= agent.client.call('capacity')['max_exposure_s'] < 10
