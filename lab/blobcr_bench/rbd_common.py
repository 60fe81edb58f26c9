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

"""RADOS and librbd plumbing that the RBD baselines share
(``blobcr-bench peers``' RBD peers, ``blobcr-bench cinder``'s RBD
backend, the test stack's RBD pool): the pools they write to and
librbd's asynchronous writes, as QEMU's rbd driver issues them.
"""

import json
import threading

from blobcr_bench import peers_common

EC_PROFILE = 'blobcr_k2m1'


def mon(cluster, **command):
    ret, out, err = cluster.mon_command(json.dumps(command), b'', timeout=30)
    if ret:
        raise RuntimeError('ceph %s: %s (%d)' % (command['prefix'], err, ret))
    return out


def pool_get(cluster, pool, var):
    return json.loads(mon(cluster, prefix='osd pool get', pool=pool,
                          var=var, format='json'))[var]


def ensure_ec_data_pool(conffile, pool, like=None, profile=EC_PROFILE,
                        pg_num=8):
    """An erasure-coded pool that RBD can keep data in (overwrites on),
    shaped ``like`` BlobCR's data pool where it exists (its erasure-code
    profile and number of placement groups); returns ``(None, shape)``,
    or ``(why it cannot be had, None)``.
    """
    import rados
    cluster = rados.Rados(conffile=conffile)
    cluster.connect(timeout=10)
    try:
        if like and cluster.pool_exists(like):
            profile = pool_get(cluster, like, 'erasure_code_profile')
            pg_num = pool_get(cluster, like, 'pg_num')
        if not cluster.pool_exists(pool):
            mon(cluster, prefix='osd pool create', pool=pool,
                pg_num=pg_num, pgp_num=pg_num, pool_type='erasure',
                erasure_code_profile=profile)
            mon(cluster, prefix='osd pool application enable', pool=pool,
                app='rbd')
        elif pool_get(cluster, pool, 'pg_num') != pg_num:
            for var in ('pg_num', 'pgp_num'):
                mon(cluster, prefix='osd pool set', pool=pool, var=var,
                    val=str(pg_num))
        mon(cluster, prefix='osd pool set', pool=pool,
            var='allow_ec_overwrites', val='true')
        return None, {'erasure_code_profile': pool_get(
            cluster, pool, 'erasure_code_profile'),
            'pg_num': pool_get(cluster, pool, 'pg_num'),
            'like': like}
    except Exception as e:
        return str(e), None
    finally:
        cluster.shutdown()


def ensure_rbd_pool(conffile, pool='rbd', pg_num=8, rados_id=None):
    """Create a replicated pool for RBD images if it is missing, tagged
    with the ``rbd`` application; return True if it was created.
    """
    import rados
    cluster = rados.Rados(conffile=conffile, rados_id=rados_id)
    cluster.connect(timeout=10)
    try:
        if cluster.pool_exists(pool):
            return False
        for command in (
                {'prefix': 'osd pool create', 'pool': pool,
                 'pg_num': pg_num, 'pgp_num': pg_num,
                 'pool_type': 'replicated'},
                {'prefix': 'osd pool application enable', 'pool': pool,
                 'app': 'rbd'}):
            ret, _, err = cluster.mon_command(json.dumps(command), b'',
                                              timeout=30)
            if ret:
                raise RuntimeError('ceph %s: %s (%d)' % (command['prefix'],
                                                         err, ret))
        return True
    finally:
        cluster.shutdown()


class AioWrites(peers_common.QueuedWrites):
    """librbd's own asynchronous writes, ``depth`` in flight, as QEMU's
    rbd driver issues them.
    """

    def __init__(self, image, depth):
        self.image = image
        self.depth = depth
        self.slots = threading.Semaphore(depth)
        self.error = None

    def submit(self, offset, data, done):
        self.take_slot()

        def completed(completion):
            result = completion.get_return_value()
            if result < 0:
                self.error = OSError(-result, 'rbd aio_write at %d failed'
                                     % offset)
            done()
            self.slots.release()
        self.image.aio_write(bytes(data), offset, completed)

    def close(self):
        self.drain()
