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

"""Erasure-coded data pool with one of its three OSDs down.

The pool is k=2 m=1 (checked below, so the test cannot pass on a
replicated pool by accident). With OSD 1 stopped, COMMITs and reads of old
and new versions still work and verify; once it is back the cluster goes
active+clean and everything still verifies.
"""

import json
import os
import subprocess

from blobcr_agent.repository.backends import rados
from blobcr_agent.repository import repository
from blobcr_agent.repository import scrub

CHUNK = 64 * 1024


def _ceph_json(cluster, *args):
    out = subprocess.run(['ceph', '-c', cluster.conffile, '--format', 'json']
                         + list(args), check=True, capture_output=True,
                         text=True, timeout=60).stdout
    return json.loads(out)


def test_data_pool_is_erasure_coded_2_plus_1(ceph_cluster):
    profile = _ceph_json(ceph_cluster, 'osd', 'pool', 'get', 'blobcr-data',
                         'erasure_code_profile')['erasure_code_profile']
    detail = _ceph_json(ceph_cluster, 'osd', 'erasure-code-profile', 'get',
                        profile)
    assert (detail['k'], detail['m']) == ('2', '1')
    assert detail['crush-failure-domain'] == 'osd'


def test_commit_and_read_with_one_osd_down(ceph_cluster):
    backend = rados.RadosBackend(ceph_cluster.conffile, 'blobcr-data',
                                 'blobcr-meta',
                                 namespace='fault-%s' % os.urandom(4).hex())
    repo = repository.Repository(backend, chunk_size=CHUNK)
    image = repo.create_image('fault', 64 * CHUNK).id
    before = {i: os.urandom(CHUNK) for i in range(64)}
    v1 = repo.commit(image, before)
    ceph_cluster.stop_osd(1)
    try:
        after = {i: os.urandom(CHUNK) for i in range(0, 64, 3)}
        v2 = repo.commit(image, after)
        clone = repo.clone(image, v1, 'fault-clone').id
        repo.commit(clone, {5: os.urandom(CHUNK)})
        for number in (v1, v2):
            assert scrub.verify(repo, image, number).ok
        expected = {**before, **after}
        assert repo.read(image, v2, 0, 64 * CHUNK) == b''.join(
            expected[i] for i in range(64))
    finally:
        ceph_cluster.start_osd(1)
    ceph_cluster.wait_clean(timeout=180)
    for number in (v1, v2):
        assert scrub.verify(repo, image, number).ok
    assert scrub.verify(repo, clone, 2).ok
    repo.close()


def test_a_cluster_flush_waits_for_osds_and_never_lies(ceph_cluster,
                                                       tmp_path):
    """Issue 53: a `cluster` volume's flush with OSDs down. One of three
    down: the replicated log pool (size 3, min_size 2) still takes the
    append, the flush returns. Two down: its placement groups are
    inactive, the flush waits (it never returns for a block not in the
    log); once they are back it returns, and a host lost afterwards
    loses nothing it covered.
    """
    import threading

    from blobcr_agent.mirror import image as image_mod
    namespace = 'flush-fault-%s' % os.urandom(4).hex()

    def connect():
        return repository.Repository(rados.RadosBackend(
            ceph_cluster.conffile, 'blobcr-data', 'blobcr-meta',
            namespace=namespace), chunk_size=CHUNK)

    repo = connect()
    image = repo.create_image('flush-fault', 8 * CHUNK).id
    repo.commit(image, {i: bytes(CHUNK) for i in range(8)})
    attached = image_mod.AttachedImage(
        repo, image, None, str(tmp_path / 'cache'), durability='cluster',
        reserve=False, prefetch=False)
    expected = bytearray(8 * CHUNK)

    def write(offset):
        data = os.urandom(4096)
        attached.write(offset, data)
        expected[offset:offset + 4096] = data

    write(0)
    attached.flush()
    outcome = []
    ceph_cluster.stop_osd(1)
    try:
        write(CHUNK)
        attached.flush()                        # min_size 2: goes on
        ceph_cluster.stop_osd(2)
        try:
            write(2 * CHUNK)
            waiter = threading.Thread(
                target=lambda: outcome.append(attached.flush()),
                daemon=True)
            waiter.start()
            waiter.join(8)
            assert waiter.is_alive() and not outcome, outcome
        finally:
            ceph_cluster.start_osd(2)
    finally:
        ceph_cluster.start_osd(1)
    waiter.join(180)
    assert outcome == [None]
    ceph_cluster.wait_clean(timeout=180)
    attached.close(timeout=30)
    other = connect()
    taken = other.take_over(image, 'test')
    assert taken['replayed']['writes'] >= 3, taken
    assert other.read(image, None, 0, 8 * CHUNK) == bytes(expected)
    other.close()
    repo.close()
