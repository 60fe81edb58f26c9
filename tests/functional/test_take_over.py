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

"""Evacuate: a lost host's volume attached elsewhere, and that host
fenced (issue 20, item 4).

Real agents on one store (the hosts of a cloud; on this machine they
differ by their state directories, not their host names):

* host A attaches a volume, checkpoints it (stable), writes more, and is
  SIGKILLed and not restarted;
* host B takes the volume over (what the Cinder driver's force detach
  does when A's agent does not answer) and attaches it: it reads the
  newest stable version; what is lost is exactly what A wrote after it
  (the protection window bounds it);
* A restarted refuses its cache (fenced), publishes nothing, and
  ``blobcr-manage detach --discard`` drops it;
* an A that is still alive (a partition, not a crash) can register or
  finish no version after the take-over.
"""

import os
import random
import time

import pytest

from tests.functional import test_agent

MiB = 1024 * 1024


def _write(path, data, offset=0):
    with open(path, 'r+b', buffering=0) as f:
        f.seek(offset)
        f.write(data)


def _read(path):
    with open(path, 'rb') as f:
        return f.read()


def _stable_checkpoint(agent, image):
    version = agent.client.call('checkpoint', image=image)['version']
    assert agent.client.call('wait_stable', image=image,
                             version=version) == 'stable'
    return version


def _two_hosts_and_a_volume(backend_factory, agent_factory, seed):
    """Agents A and B on one store, and a volume attached on A, written
    whole and checkpointed: (a, b, image, A's path, the data, version).
    """
    store = backend_factory()
    settings = {'agent': {'quiesce': 'none'}}
    a = agent_factory(store, settings)
    b = agent_factory(store, settings)
    rng = random.Random(seed)
    image = a.client.call('create_image', name='v%d' % seed,
                          size=MiB)['id']
    path = a.client.call('attach', image=image)['path']
    data = rng.randbytes(MiB)
    _write(path, data)
    return a, b, image, path, data, _stable_checkpoint(a, image)


def _stable(agent, image):
    return [v['version'] for v in agent.client.call(
        'list_versions', image=image)['versions'] if v['state'] == 'stable']


@pytest.mark.parametrize('backend_kind', ['local'])
def test_a_lost_host_is_fenced_and_its_volume_attached_elsewhere(
        backend_factory, agent_factory):
    a, b, image, path, kept, version = _two_hosts_and_a_volume(
        backend_factory, agent_factory, 4)
    rng = random.Random(40)
    _write(path, rng.randbytes(4096), 8192)     # after it: lost with A
    a.kill()

    taken = b.client.call('take_over', image=image,
                          why='host A is lost (test)')
    assert taken['version'] == version and taken['epoch'] == 1
    assert taken['pins_released'] >= 1
    path_b = b.client.call('attach', image=image)['path']
    assert _read(path_b) == kept
    newer = rng.randbytes(4096)
    _write(path_b, newer)
    on_b = _stable_checkpoint(b, image)

    # A comes back: its cache is fenced, not served, and publishes
    # nothing; the operator drops it.
    a.start()
    assert image not in a.client.call('status')['attached']
    with open(a.log.name, errors='replace') as f:
        assert 'is fenced' in f.read()
    status, out, err = test_agent.manage(a, 'detach', '--discard', image)
    assert status == 0, err
    assert not os.path.exists(os.path.join(a.state_path, 'cache', image))
    assert max(_stable(b, image)) == on_b
    assert _read(path_b)[:4096] == newer
    b.client.call('checkpoint', image=image)
    b.client.call('detach', image=image)


@pytest.mark.parametrize('backend_kind', ['local'])
def test_a_live_but_cut_off_host_publishes_nothing_after_a_take_over(
        backend_factory, agent_factory):
    a, b, image, path, _, version = _two_hosts_and_a_volume(
        backend_factory, agent_factory, 5)
    rng = random.Random(50)
    b.client.call('take_over', image=image, why='test')
    _write(path, rng.randbytes(4096))
    try:
        late = a.client.call('checkpoint', image=image)['version']
    except Exception as e:          # refused at once: fenced
        assert 'taken over' in str(e), e
    else:
        deadline = time.monotonic() + 30
        while a.client.call('state', image=image, version=late) == \
                'pending':
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert a.client.call('state', image=image, version=late) == \
            'failed'
    assert max(_stable(b, image)) == version
