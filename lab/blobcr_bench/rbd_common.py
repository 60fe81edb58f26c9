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
backend, the test stack's RBD pool, fio's rbd engine in ``flush`` and
``guest-io``): the pools they write to, the images fio writes with each
librbd setting, and librbd's asynchronous writes, as QEMU's rbd driver
issues them.
"""

import json
import os
import threading
import time

from blobcr_bench import peers_common

EC_PROFILE = 'blobcr_k2m1'
# librbd's settings per RBD target ([client.admin] of its ceph.conf).
RBD_SETTINGS = {
    'rbd': {'rbd_cache': 'false'},
    'rbd-ec': {'rbd_cache': 'false'},
    'rbd-writeback': {'rbd_cache': 'true', 'rbd_cache_policy': 'writeback',
                      'rbd_cache_writethrough_until_flush': 'false'},
}


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


def fio_conf(args, name):
    """A ceph.conf of ``--ceph-conf``'s cluster with the target's librbd
    settings for client.admin (fio's rbd engine reads $CEPH_CONF).
    """
    path = os.path.join(args.workdir, 'ceph-%s.conf' % name)
    with open(args.ceph_conf) as f:
        text = f.read()
    with open(path, 'w') as f:
        f.write(text + '\n[client.admin]\n' + ''.join(
            '%s = %s\n' % kv for kv in sorted(RBD_SETTINGS[name].items())))
    return path


def fio_targets(args, size, names, checks, cleanups):
    """RBD images for fio's rbd engine, one per kind of pool, filled
    with data that does not dedup: ``{name: target}`` (``kind`` 'rbd',
    ``pool``, ``image``, ``conf``: a ceph.conf with the name's librbd
    settings) and what each is, as read back; ``cleanups`` gets their
    removal. ``args``: ``ceph_conf``, ``rbd_pool``, ``rbd_ec_pool``,
    ``data_pool`` (the shape of the erasure-coded one), ``workdir``.
    """
    import rados
    import rbd
    ensure_rbd_pool(args.ceph_conf, args.rbd_pool)
    shape = None
    if 'rbd-ec' in names:
        refused, shape = ensure_ec_data_pool(
            args.ceph_conf, args.rbd_ec_pool, like=args.data_pool)
        if refused:
            raise RuntimeError('cannot have the erasure-coded data pool '
                               '%s: %s' % (args.rbd_ec_pool, refused))
    cluster = rados.Rados(conffile=args.ceph_conf)
    cluster.connect(timeout=10)
    ioctx = cluster.open_ioctx(args.rbd_pool)
    made = []

    def remove():
        for image in made:
            try:
                rbd.RBD().remove(ioctx, image)
            except Exception:       # not over the error that got here
                pass
        ioctx.close()
        cluster.shutdown()
    cleanups.append(remove)
    stem = 'blobcr-flush-%d-%d' % (os.getpid(), int(time.time()))
    images = {}
    # rbd and rbd-writeback take turns on one image (another client's
    # settings); rbd-ec has its own, its data in the erasure-coded pool.
    for name in names:
        data_pool = args.rbd_ec_pool if name == 'rbd-ec' else None
        if data_pool not in images:
            image = stem + ('-ec' if data_pool else '')
            rbd.RBD().create(ioctx, image, size, old_format=False,
                             features=rbd.RBD_FEATURE_LAYERING |
                             rbd.RBD_FEATURE_EXCLUSIVE_LOCK,
                             data_pool=data_pool)
            made.append(image)
            with rbd.Image(ioctx, image) as img:
                block = os.urandom(1 << 20)
                for offset in range(0, size, len(block)):
                    img.write(block, offset)
                img.flush()
            images[data_pool] = image
    targets, described = {}, {}
    for name in names:
        conf = fio_conf(args, name)
        # As librbd will read it: the setting measured, not the one asked.
        probe = rados.Rados(conffile=conf, rados_id='admin')
        read = {k: probe.conf_get(k) for k in RBD_SETTINGS[name]}
        probe.shutdown()
        checks.require_true(
            '%s: librbd settings as read' % name,
            read == RBD_SETTINGS[name],
            'the target must run with the cache it claims', value=read)
        data_pool = args.rbd_ec_pool if name == 'rbd-ec' else None
        targets[name] = {'name': name, 'kind': 'rbd', 'pool': args.rbd_pool,
                         'image': images[data_pool], 'conf': conf}
        described[name] = {'pool': args.rbd_pool, 'data_pool': data_pool,
                           'librbd': read}
    if shape:
        described['rbd-ec']['data_pool_shape'] = shape
    return targets, described
