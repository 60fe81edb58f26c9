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

"""Space comes back by itself through Cinder (issue 20, item 5).

Twenty volumes are created through cinder-api, attached as Nova attaches
them, written, detached and deleted. Nobody runs ``blobcr-manage gc``:
the storage agent collects after the driver's deletes (and every
``gc_interval`` anyway), under the store's lease. The store's used bytes
(the capacity the driver reports as free_capacity_gb, from the same
agent call) must rise by what was written, then come back to within 5%
of the start (plus 5% of what was written: the store may start near
empty, and deleted images leave a few bytes of records) within
gc_interval + gc_grace (the small store's agents: SMALL_GC in
blobcr_lab/cinder_hosts.py). That the scheduler follows the
driver's free capacity is shown by test_cinder_faults.test_full_backend.
"""

import concurrent.futures
import random
import time
import uuid

from blobcr_lab.cinder_hosts import SMALL_GC
from blobcr_lab.nova_attach import Attachment
from tests.integration.test_cinder_faults import agent_api  # noqa: F401
from tests.integration.test_cinder_faults import small  # noqa: F401
from tests.integration.test_cinder_faults import write

MiB = 1 << 20
VOLUMES = 20
WRITTEN = 1 * MiB           # each: incompressible, so stored as written


def used(api, hosts):
    room = api.capacity(hosts.storage)
    return room['total_bytes'] - room['free_bytes']


def wait_used(api, hosts, test, what, timeout):
    deadline = time.monotonic() + timeout
    while True:
        now = used(api, hosts)
        if test(now):
            return now
        assert time.monotonic() < deadline, '%s: %d bytes used after %d s' \
            % (what, now, timeout)
        time.sleep(1)


def test_twenty_volumes_written_and_deleted_give_their_space_back(
        small, agent_api):  # noqa: F811
    stack, hosts = small
    api = stack.block_storage()
    seed = random.randrange(1 << 32)
    print('seed %d' % seed)
    rng = random.Random(seed)
    data = [rng.randbytes(WRITTEN) for _ in range(VOLUMES)]
    offsets = [rng.randrange(64) * MiB for _ in range(VOLUMES)]
    start = used(agent_api, hosts)
    # More volumes than a project's default quota (10), as an operator
    # allows.
    project = stack.session('demo').get_project_id()
    stack.block_storage('admin').put(
        '/os-quota-sets/%s' % project,
        json={'quota_set': {'volumes': 4 * VOLUMES}})

    ids = [api.post('/volumes', json={'volume': {
        'size': 1, 'volume_type': hosts.volume_type,
        'name': 'gc-%s' % uuid.uuid4().hex[:6]}}).json()['volume']['id']
        for _ in range(VOLUMES)]
    for volume_id in ids:
        stack.wait_status('volume', volume_id, 'available', timeout=120)

    def fill(i):
        att = Attachment(stack, ids[i], hosts.compute[i % 2])
        write(att.path, offsets[i], data[i])
        att.detach()
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(fill, range(VOLUMES)))
    for volume_id in ids:
        stack.wait_status('volume', volume_id, 'available', timeout=120)
    written = VOLUMES * WRITTEN
    peak = wait_used(agent_api, hosts,
                     lambda n: n - start >= 0.9 * written,
                     'the detached volumes\' versions stored', 120)

    for volume_id in ids:
        api.delete('/volumes/%s' % volume_id)
    deleted_at = time.monotonic()
    for volume_id in ids:
        stack.wait_status('volume', volume_id, 'deleted', timeout=120)
    bound = int(SMALL_GC['gc_interval']) + int(SMALL_GC['gc_grace'])
    end = wait_used(agent_api, hosts,
                    lambda n: n <= start * 1.05 + 0.05 * written,
                    'space back',
                    timeout=bound - (time.monotonic() - deleted_at))
    took = time.monotonic() - deleted_at
    print('store used: %d bytes at the start, %d with %d volumes written, '
          '%d %.0f s after their deletes (bound %d s)'
          % (start, peak, VOLUMES, end, took, bound))
    runs = agent_api.status(hosts.storage)['gc']['runs']
    assert runs >= 1
