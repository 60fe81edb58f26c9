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

"""``blobcr-bench cinder``: a Cinder snapshot of a BlobCR volume against
the same operation on Cinder's RBD driver, on an existing cloud.

It drives the cloud as an operator would, through Keystone (the usual
``OS_*`` variables or the ``--os-*`` options) and Cinder's v3 API:

* three volumes of ``--size-gb`` (default: room for the largest dirty
  size), one of ``--blobcr-type`` (the BlobCR backend) and two of
  ``--baseline-type`` (``cinder.volume.drivers.rbd.RBDDriver`` on the
  same Ceph cluster);
* the BlobCR volume is attached to ``--compute-host`` (a host whose
  blobcr-agent runs on this machine: the benchmark writes into the file
  the connection info names) through Cinder's attachments API, as Nova
  attaches a volume; one RBD volume (``rbd-attached``) is attached the
  same way (in-use, its snapshot taken as a running guest's would be),
  the other (``rbd``) stays detached; both are written through librbd
  (``--ceph-conf``, ``--rbd-pool``, ``--rbd-user``). The in-use one's
  image stays open in this process for the whole run, as a running
  guest's QEMU keeps it: its writer owns the image's exclusive lock, so
  the RBD driver's snapshot is a request to the lock's owner, which
  librbd proxies here. The detached one's image is closed again after
  each write;
* each run writes the same ``--write-mib`` of fresh data (one random
  pattern, a new window of it per run, made before any timing) to both
  volumes, each write made durable (fsync on the mirror file, which
  reaches the mirror's own flush; librbd flush), RBD's as QEMU writes a
  disk in Nova's cache mode none (librbd's cache off, 8 asynchronous
  writes in flight), then takes a snapshot of each; the backends take
  turns, the first rotating from run to run. Where the RBD image's
  data is (``rbd_pool``: its pool, data pool, erasure-coded or not) is
  reported beside. Each snapshot is deleted once measured (and the deletion
  waited for, timed apart): one snapshot per volume at a time, so any
  ``--runs`` fits Cinder's default quota of 10 snapshots a project.
  ``--write-mib 64,1024,4096`` measures each dirty size in turn,
  ``--runs`` snapshots of each, smallest first (``by_write_mib`` in the
  JSON).

A snapshot is timed from the create request to the first poll that
sees it ``available`` (``--poll-interval``), the create being
``POST /snapshots`` at microversion 3.66 (what ``openstack
--os-volume-api-version 3.66 volume snapshot create`` sends) or, with
``--client cli``, the real ``openstack`` command itself (its start-up,
seconds of Python imports, included). Cinder's own record of the same
interval (``created_at`` to ``updated_at``: the status goes
``available`` in the last update) is reported too, free of the client
and of the polling. For BlobCR the agent's acknowledgment of the live
checkpoint and the time it held writes come from the snapshot's
metadata: ``blobcr:ack_ms`` (the driver's checkpoint RPC, request to
acknowledgment, as cinder-volume sees it), ``blobcr:downtime_ms`` (the
same inside the mirror) and ``blobcr:held_ms`` (writes held for the
snapshot).

The path is proven to have run, each count against what it must be:
every BlobCR snapshot carries an ack and a ``blobcr:bytes_written`` of
at least the data written before it, every RBD snapshot is in the pool
(librbd lists it on the volume's image), and the in-use RBD image's
writer owned its exclusive lock before and after every snapshot; any
count short fails the benchmark (status 3). Volumes, snapshots and the
attachment it made are deleted at the end, whatever happened.
"""

import argparse
import contextlib
import datetime
import json
import os
import shutil
import subprocess
import sys
import time
import uuid

from blobcr_bench import common
from blobcr_bench import rbd_common

MIB = 1 << 20
BLOCK = MIB
SNAPSHOT_MICROVERSION = '3.66'      # in-use volumes without --force
ATTACHMENT_MICROVERSION = '3.44'
BACKENDS = ('blobcr', 'rbd', 'rbd-attached')
RBD_BACKENDS = ('rbd', 'rbd-attached')
# Fresh data for up to this many snapshots per backend (common.Pattern).
PATTERN_WINDOWS = 60


# -- what tools and tests share ---------------------------------------------

def rbd_backend_section(conffile, pool='rbd', user=None,
                        backend_name='rbd'):
    """A cinder.conf backend section for Cinder's RBD driver on the
    cluster of ``conffile`` (no libvirt secret: nothing attaches it
    through libvirt here).
    """
    section = {'volume_driver': 'cinder.volume.drivers.rbd.RBDDriver',
               'volume_backend_name': backend_name,
               'rbd_pool': pool, 'rbd_ceph_conf': conffile,
               'rados_connect_timeout': '10'}
    if user:
        section['rbd_user'] = user
    return section


RBD_DATA_POOL = 'cinder-rbd-ec'


def rbd_data_pool_conf(conffile, directory, data_pool=RBD_DATA_POOL,
                       like='blobcr-data'):
    """The path of a ceph.conf (written in ``directory``) for Cinder's
    RBD driver whose images keep their data in ``data_pool``, an
    erasure-coded pool shaped like BlobCR's ``like`` (made if missing):
    both backends then write to the same kind of pool. librbd reads
    ``rbd_default_data_pool`` when Cinder creates an image.
    """
    why, _ = rbd_common.ensure_ec_data_pool(conffile, data_pool, like=like)
    if why:
        raise RuntimeError('cannot make the RBD data pool %s: %s'
                           % (data_pool, why))
    with open(conffile) as f:
        text = f.read()
    path = os.path.join(directory, 'ceph-rbd.conf')
    with open(path, 'w') as f:
        f.write(text + '\n[client.admin]\nrbd_default_data_pool = %s\n'
                % data_pool)
    return path


# -- arguments ----------------------------------------------------------------

def _mib_list(text):
    try:
        sizes = sorted({int(v) for v in text.split(',') if v.strip()})
    except ValueError:
        sizes = []
    if not sizes or sizes[0] <= 0:
        raise argparse.ArgumentTypeError(
            'a comma-separated list of positive MiB counts, not %r' % text)
    return sizes


def add_arguments(p):
    env = os.environ.get
    auth = p.add_argument_group(
        'cloud', 'Keystone v3 password authentication (default: the '
        'OS_* variable of each option\'s name)')
    for name, var in (('auth-url', 'OS_AUTH_URL'),
                      ('username', 'OS_USERNAME'),
                      ('password', 'OS_PASSWORD'),
                      ('project-name', 'OS_PROJECT_NAME'),
                      ('user-domain-name', 'OS_USER_DOMAIN_NAME'),
                      ('project-domain-name', 'OS_PROJECT_DOMAIN_NAME'),
                      ('region-name', 'OS_REGION_NAME'),
                      ('interface', 'OS_INTERFACE')):
        default = env(var)
        if default is None and name.endswith('domain-name'):
            default = 'Default'
        if default is None and name == 'interface':
            default = 'public'
        auth.add_argument('--os-' + name, default=default,
                          help='default: $%s' % var)
    p.add_argument('--blobcr-type', required=True,
                   help='volume type of the BlobCR backend')
    p.add_argument('--baseline-type', required=True,
                   help='volume type of the Cinder RBD backend')
    p.add_argument('--compute-host', required=True,
                   help='host whose blobcr-agent (on this machine) the '
                        'BlobCR volume is attached to')
    p.add_argument('--rbd-pool', default='rbd',
                   help='the RBD backend\'s rbd_pool (default rbd)')
    p.add_argument('--rbd-user', default=None,
                   help='RADOS user for librbd (default: the conf\'s)')
    p.add_argument('--runs', type=int, default=5,
                   help='snapshots per backend (default 5)')
    p.add_argument('--write-mib', type=_mib_list, default=[64],
                   help='fresh data written to each volume before each '
                        'snapshot: the dirty size. A comma-separated '
                        'list (64,1024,4096) runs --runs snapshots of '
                        'each, smallest first (default 64)')
    p.add_argument('--size-gb', type=int, default=None,
                   help='volume size (default: the largest --write-mib '
                        'rounded up to GiB, plus 1)')
    p.add_argument('--client', choices=['api', 'cli'], default='api',
                   help='create snapshots with POST /snapshots (api) or '
                        'the openstack CLI (cli)')
    p.add_argument('--poll-interval', type=float, default=0.1)
    p.add_argument('--timeout', type=float, default=600,
                   help='seconds a volume or snapshot may take to become '
                        'available or to go away')
    p.add_argument('--plot', help='write a PNG of the results here')


# -- the cloud ----------------------------------------------------------------

class CloudError(RuntimeError):
    pass


class Cloud(object):
    """Cinder's v3 API for the benchmark's user."""

    def __init__(self, args):
        from keystoneauth1 import adapter
        from keystoneauth1.identity import v3
        from keystoneauth1 import session
        missing = [n for n in ('auth_url', 'username', 'password',
                               'project_name')
                   if not getattr(args, 'os_' + n)]
        if missing:
            raise SystemExit('blobcr-bench cinder: no %s (set OS_* or pass '
                             '--os-*)' % ', '.join(
                                 'os-' + m.replace('_', '-')
                                 for m in missing))
        self.args = args
        self.session = session.Session(auth=v3.Password(
            auth_url=args.os_auth_url, username=args.os_username,
            password=args.os_password, project_name=args.os_project_name,
            user_domain_name=args.os_user_domain_name,
            project_domain_name=args.os_project_domain_name))
        self.api = adapter.Adapter(
            self.session, service_type='block-storage',
            interface=args.os_interface, region_name=args.os_region_name)

    def env(self):
        """The environment of an ``openstack`` CLI run as this user."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith('OS_')}
        a = self.args
        env.update(OS_AUTH_TYPE='password', OS_AUTH_URL=a.os_auth_url,
                   OS_IDENTITY_API_VERSION='3', OS_USERNAME=a.os_username,
                   OS_PASSWORD=a.os_password,
                   OS_PROJECT_NAME=a.os_project_name,
                   OS_USER_DOMAIN_NAME=a.os_user_domain_name,
                   OS_PROJECT_DOMAIN_NAME=a.os_project_domain_name,
                   OS_INTERFACE=a.os_interface)
        if a.os_region_name:
            env['OS_REGION_NAME'] = a.os_region_name
        return env

    def get(self, kind, resource_id):
        """The resource, or None once it is gone."""
        r = self.api.get('/%ss/%s' % (kind, resource_id), raise_exc=False,
                         microversion=SNAPSHOT_MICROVERSION)
        if r.status_code == 404:
            return None
        r.raise_for_status()
        return r.json()[kind]

    def wait(self, kind, resource_id, status, timeout, interval=0.25):
        """Poll until ``status`` (``deleted``: gone); return the resource
        and the monotonic time it was first seen so.
        """
        deadline = time.monotonic() + timeout
        while True:
            resource = self.get(kind, resource_id)
            seen = time.monotonic()
            if resource is None:
                if status == 'deleted':
                    return None, seen
                raise CloudError('%s %s vanished' % (kind, resource_id))
            if resource['status'] == status:
                return resource, seen
            if resource['status'].startswith('error'):
                raise CloudError('%s %s is %s (waiting for %s)' % (
                    kind, resource_id, resource['status'], status))
            if seen > deadline:
                raise CloudError('%s %s still %s after %s s' % (
                    kind, resource_id, resource['status'], timeout))
            time.sleep(interval)

    def create_volume(self, name, volume_type, size):
        return self.api.post('/volumes', json={'volume': {
            'name': name, 'size': size, 'volume_type': volume_type}}).json()[
                'volume']['id']

    def create_snapshot(self, volume_id, name):
        if self.args.client == 'cli':
            return self._create_snapshot_cli(volume_id, name)
        return self.api.post('/snapshots', json={'snapshot': {
            'volume_id': volume_id, 'name': name}},
            microversion=SNAPSHOT_MICROVERSION).json()['snapshot']['id']

    def _create_snapshot_cli(self, volume_id, name):
        tool = os.path.join(os.path.dirname(sys.executable), 'openstack')
        if not os.path.exists(tool):
            tool = shutil.which('openstack') or 'openstack'
        proc = subprocess.run(
            [tool, '--os-volume-api-version', SNAPSHOT_MICROVERSION,
             'volume', 'snapshot', 'create', '--volume', volume_id, name,
             '-f', 'json'], env=self.env(), stdin=subprocess.DEVNULL,
            capture_output=True, text=True, timeout=300, check=False)
        if proc.returncode:
            raise CloudError('openstack volume snapshot create exited with '
                             '%d:\n%s' % (proc.returncode, proc.stderr))
        return json.loads(proc.stdout)['id']

    def delete(self, kind, resource_id, **params):
        r = self.api.delete('/%ss/%s' % (kind, resource_id), params=params,
                            raise_exc=False)
        if r.status_code not in (202, 204, 404):
            r.raise_for_status()


class Attachment(object):
    """The volume attached to ``host`` through Cinder's attachments API,
    as Nova attaches it: reserve with the compute host's connector,
    then complete. No instance is named (there may be no Nova), which
    also lets the user delete the connected attachment without a
    service token.
    """

    def __init__(self, cloud, volume_id, host):
        self.cloud = cloud
        body = {'attachment': {
            'volume_uuid': volume_id,
            'connector': {'host': host, 'platform': 'x86_64',
                          'os_type': 'linux', 'multipath': False,
                          'mountpoint': '/dev/vdb', 'initiator': None}}}
        made = cloud.api.post('/attachments', json=body,
                              microversion=ATTACHMENT_MICROVERSION).json()
        self.id = made['attachment']['id']
        info = made['attachment']['connection_info']
        # The driver's connection data (Cinder stores its "data" part):
        # BlobCR's names the mirror's file, RBD's pool/image, which the
        # guest's QEMU would open through librbd.
        self.path = info.get('device_path')
        self.rbd_name = info.get('name')
        cloud.api.post('/attachments/%s/action' % self.id,
                       json={'os-complete': None},
                       microversion=ATTACHMENT_MICROVERSION)

    def detach(self):
        self.cloud.api.delete('/attachments/%s' % self.id,
                              microversion=ATTACHMENT_MICROVERSION)


def _timestamp(text):
    text = text.rstrip('Z')
    for fmt in ('%Y-%m-%dT%H:%M:%S.%f', '%Y-%m-%dT%H:%M:%S'):
        try:
            return datetime.datetime.strptime(text, fmt)
        except ValueError:
            pass
    return None


def _float(metadata, key):
    try:
        return float(metadata[key])
    except (KeyError, TypeError, ValueError):
        return None


# -- the benchmark ------------------------------------------------------------

class _Volumes(object):
    """What the run made, for the cleanup."""

    def __init__(self):
        self.volumes = []
        self.snapshots = []
        self.attachments = []


class _RBDImage(object):
    """The RBD volumes' images, through librbd, written as QEMU writes a
    disk in Nova's default cache mode (none): librbd's cache off,
    ``QUEUE_DEPTH`` asynchronous writes in flight, then a flush.

    An image ``hold``-ed stays open between writes, as a running guest's
    QEMU keeps it: its first write takes the image's exclusive lock and
    this process keeps it, so Cinder's snapshot of it is a request to
    the lock's owner (librbd proxies it here), as for an in-use volume
    under Nova. Other images are opened for each write and closed.
    """

    QUEUE_DEPTH = 8

    def __init__(self, args):
        import rados
        self.cluster = rados.Rados(conffile=args.ceph_conf,
                                   rados_id=args.rbd_user,
                                   conf={'rbd_cache': 'false'})
        self.cluster.connect(timeout=10)
        self.ioctx = self.cluster.open_ioctx(args.rbd_pool)
        self.held = {}

    def hold(self, name):
        import rbd
        self.held[name] = rbd.Image(self.ioctx, name)

    def write(self, name, chunks):
        import rbd

        image = self.held.get(name)
        with contextlib.nullcontext(image) if image is not None \
                else rbd.Image(self.ioctx, name) as image:
            writes = rbd_common.AioWrites(image, self.QUEUE_DEPTH)
            for offset, data in chunks:
                writes.submit(offset, data, lambda: None)
            writes.drain()
            image.flush()

    def lock_owned(self, name):
        """Whether this process owns the held image's exclusive lock
        (None for an image not held).
        """
        image = self.held.get(name)
        return None if image is None else image.is_exclusive_lock_owner()

    def pool_kind(self, name):
        """Where the image's data is: ``{'pool', 'data_pool',
        'erasure_coded'}``.
        """
        import rbd
        with rbd.Image(self.ioctx, name, read_only=True) as image:
            data_pool_id = image.data_pool_id()
        pool = self.cluster.pool_reverse_lookup(data_pool_id) \
            if data_pool_id >= 0 else None
        kind = json.loads(self.cluster.mon_command(json.dumps({
            'prefix': 'osd pool get', 'pool': pool or self.ioctx.name,
            'var': 'erasure_code_profile', 'format': 'json'}), b'',
            timeout=30)[1] or b'{}')
        return {'pool': self.ioctx.name, 'data_pool': pool,
                'erasure_coded': bool(kind.get('erasure_code_profile'))}

    def snaps(self, name):
        import rbd
        with rbd.Image(self.ioctx, name, read_only=True) as image:
            return {s['name'] for s in image.list_snaps()}

    def release(self):
        """Close the held images (the guest gone), before their volumes
        are deleted: an open image has a watcher, and RBD refuses to
        remove it.
        """
        while self.held:
            self.held.popitem()[1].close()

    def close(self):
        self.release()
        self.ioctx.close()
        self.cluster.shutdown()


def _write_file(path, chunks):
    fd = os.open(path, os.O_WRONLY)
    try:
        for offset, data in chunks:
            view = memoryview(data)
            while view:
                done = os.pwrite(fd, view, offset)
                view = view[done:]
                offset += done
        os.fsync(fd)
    finally:
        os.close(fd)


def run(args, log):
    cloud = Cloud(args)
    made = _Volumes()
    tag = 'blobcr-bench-%s' % uuid.uuid4().hex[:8]
    sizes = args.write_mib
    largest = sizes[-1] * MIB
    if args.size_gb is None:
        args.size_gb = -(-largest // (1 << 30)) + 1
    size = args.size_gb << 30
    if largest > size:
        raise SystemExit('blobcr-bench cinder: --write-mib %d does not fit '
                         'in --size-gb %d' % (sizes[-1], args.size_gb))
    epochs = len(sizes) * args.runs
    if epochs > PATTERN_WINDOWS:
        raise SystemExit('blobcr-bench cinder: at most %d snapshots per '
                         'backend (sizes x --runs), not %d'
                         % (PATTERN_WINDOWS, epochs))
    log.event('pattern', mib=sizes[-1])
    pattern = common.Pattern(largest, windows=PATTERN_WINDOWS)
    rbd_image = _RBDImage(args)
    samples = {b: [] for b in BACKENDS}
    began = time.monotonic()
    try:
        volumes = {}
        for backend in BACKENDS:
            volumes[backend] = cloud.create_volume(
                '%s-%s' % (tag, backend), args.blobcr_type
                if backend == 'blobcr' else args.baseline_type, args.size_gb)
            made.volumes.append(volumes[backend])
        for backend, volume_id in volumes.items():
            cloud.wait('volume', volume_id, 'available', args.timeout)
        attached = {}
        for backend in ('blobcr', 'rbd-attached'):
            attached[backend] = Attachment(cloud, volumes[backend],
                                           args.compute_host)
            made.attachments.append(attached[backend])
            cloud.wait('volume', volumes[backend], 'in-use', args.timeout)
        rbd_names = {b: 'volume-%s' % volumes[b] for b in RBD_BACKENDS}
        named = attached['rbd-attached'].rbd_name
        if named != '%s/%s' % (args.rbd_pool, rbd_names['rbd-attached']):
            raise CloudError('the attached RBD volume is %r, not in pool %s'
                             % (named, args.rbd_pool))
        rbd_image.hold(rbd_names['rbd-attached'])
        log.event('ready', mirror=attached['blobcr'].path, rbd_attached=named,
                  **volumes)
        rbd_pool = rbd_image.pool_kind(rbd_names['rbd'])
        log.event('rbd pool', **rbd_pool)

        epoch = 0
        for mib in sizes:
            write_bytes = mib * MIB
            for i in range(args.runs):
                base = (i * write_bytes) % (size - write_bytes + 1)
                base -= base % BLOCK
                chunks = [(base + off, pattern.block(off, BLOCK, epoch))
                          for off in range(0, write_bytes, BLOCK)]
                k = epoch % len(BACKENDS)
                epoch += 1
                for backend in BACKENDS[k:] + BACKENDS[:k]:
                    sample = _measure(cloud, args, made, rbd_image, backend,
                                      volumes[backend], attached, rbd_names,
                                      chunks, '%s-%s-%d-%d'
                                      % (tag, backend, mib, i))
                    sample.update(run=i, write_mib=mib)
                    samples[backend].append(sample)
                    log.event('snapshot', backend=backend, write_mib=mib,
                              run=i, available_s=sample['available_s'],
                              server_s=sample['server_s'],
                              ack_ms=sample.get('ack_ms'),
                              delete_s=sample['delete_s'])
    finally:
        rbd_image.release()
        _cleanup(cloud, made, args, log)
        rbd_image.close()
    result = _result(args, samples)
    result['rbd_pool'] = rbd_pool
    result['rbd_write'] = {'cache': 'off',
                           'queue_depth': _RBDImage.QUEUE_DEPTH,
                           'rbd-attached': 'held open by its writer '
                                           '(exclusive lock owner)'}
    result['seconds'] = round(time.monotonic() - began, 1)
    if args.plot:
        plot(result, args.plot)
    return result


def _measure(cloud, args, made, rbd_image, backend, volume_id, attached,
             rbd_names, chunks, name):
    """Write ``chunks`` to one backend's volume, then snapshot it, then
    delete the snapshot (timed apart): one snapshot per volume at a
    time, so any --runs fits the default quota (10 a project) and every
    run starts from the same state.
    """
    t0 = time.monotonic()
    if backend == 'blobcr':
        _write_file(attached['blobcr'].path, chunks)
    else:
        rbd_image.write(rbd_names[backend], chunks)
    write_s = time.monotonic() - t0
    lock_owned = rbd_image.lock_owned(rbd_names.get(backend))
    sample = _snapshot(cloud, args, made, volume_id, name)
    sample['write_s'] = round(write_s, 4)
    if backend in RBD_BACKENDS:
        sample['in_pool'] = ('snapshot-%s' % sample['id']
                             in rbd_image.snaps(rbd_names[backend]))
    if lock_owned is not None:
        sample['lock_owned'] = lock_owned
        sample['lock_owned_after'] = rbd_image.lock_owned(
            rbd_names[backend])
    t0 = time.monotonic()
    cloud.delete('snapshot', sample['id'])
    cloud.wait('snapshot', sample['id'], 'deleted', args.timeout,
               args.poll_interval)
    made.snapshots.remove(sample['id'])
    sample['delete_s'] = round(time.monotonic() - t0, 4)
    return sample


def _snapshot(cloud, args, made, volume_id, name):
    t0 = time.monotonic()
    snapshot_id = cloud.create_snapshot(volume_id, name)
    made.snapshots.append(snapshot_id)
    requested = time.monotonic() - t0
    snap, seen = cloud.wait('snapshot', snapshot_id, 'available',
                            args.timeout, args.poll_interval)
    created, updated = (_timestamp(snap.get('created_at') or ''),
                        _timestamp(snap.get('updated_at') or ''))
    sample = {'id': snapshot_id,
              'available_s': round(seen - t0, 4),
              'request_s': round(requested, 4),
              'server_s': (round((updated - created).total_seconds(), 4)
                           if created and updated else None)}
    metadata = snap.get('metadata') or {}
    for key in ('ack_ms', 'downtime_ms', 'held_ms', 'bytes_written',
                'chunks_written'):
        value = _float(metadata, 'blobcr:' + key)
        if value is not None:
            sample[key] = value
    return sample


def _cleanup(cloud, made, args, log):
    errors = []

    def attempt(what, func, *a, **kw):
        try:
            return func(*a, **kw)
        except Exception as exc:  # keep cleaning up the rest
            errors.append('%s: %s' % (what, exc))

    for attachment in made.attachments:
        attempt('detach', attachment.detach)
    for volume_id in made.volumes:
        attempt('volume %s' % volume_id, cloud.wait, 'volume', volume_id,
                'available', args.timeout)
    for snapshot_id in made.snapshots:
        attempt('snapshot %s' % snapshot_id, cloud.delete, 'snapshot',
                snapshot_id)
    for snapshot_id in made.snapshots:
        attempt('snapshot %s' % snapshot_id, cloud.wait, 'snapshot',
                snapshot_id, 'deleted', args.timeout)
    for volume_id in made.volumes:
        attempt('volume %s' % volume_id, cloud.delete, 'volume', volume_id,
                cascade='true')
    for volume_id in made.volumes:
        attempt('volume %s' % volume_id, cloud.wait, 'volume', volume_id,
                'deleted', args.timeout)
    log.event('cleanup', volumes=len(made.volumes),
              snapshots=len(made.snapshots), errors=len(errors))
    for error in errors:
        log('cleanup: %s' % error)


def _summaries(samples):
    """Per backend medians and spreads of one dirty size's samples, and
    BlobCR's ratios to each RBD volume (medians, tails, per run).
    """
    def summary(backend, key):
        return common.summary([s.get(key) for s in samples[backend]])
    result = {}
    for backend in BACKENDS:
        keys = ['available_s', 'server_s', 'request_s', 'write_s',
                'delete_s']
        if backend == 'blobcr':
            keys += ['ack_ms', 'downtime_ms', 'held_ms', 'bytes_written']
        result[backend] = {k: summary(backend, k) for k in keys}
        result[backend]['write_plus_available_s'] = common.summary(
            [s['write_s'] + s['available_s'] for s in samples[backend]])
    for baseline in RBD_BACKENDS:
        ratios = {}
        for key in ('available_s', 'server_s', 'write_plus_available_s'):
            a, b = result['blobcr'][key], result[baseline][key]
            if a and b:
                ratios[key] = {'median': common.ratio(a['median'],
                                                      b['median']),
                               'p99': common.ratio(a['p99'], b['p99'])}
        per_run = [common.ratio(x['available_s'], y['available_s'])
                   for x, y in zip(samples['blobcr'], samples[baseline])]
        ratios['available_s_per_run'] = common.summary(per_run)
        result['ratios_blobcr_over_%s' % baseline.replace('-', '_')] = \
            ratios
    return result


def _result(args, samples):
    sizes = args.write_mib
    result = {'client': args.client, 'runs': args.runs,
              'write_mib': sizes, 'size_gb': args.size_gb,
              'volume_types': {'blobcr': args.blobcr_type,
                               'rbd': args.baseline_type,
                               'rbd-attached': args.baseline_type},
              'attached': ['blobcr', 'rbd-attached'],
              'poll_interval_s': args.poll_interval,
              'load_average': [round(v, 2) for v in os.getloadavg()],
              'samples': samples,
              'by_write_mib': [
                  dict(_summaries({b: [s for s in samples[b]
                                       if s.get('write_mib', mib) == mib]
                                   for b in BACKENDS}), write_mib=mib)
                  for mib in sizes]}
    # The checks expect exact counts, and a checkpoint's bytes at least
    # the data written before it (the whole dirty set reached the store).
    blobcr = samples['blobcr']
    acked = sum(1 for s in blobcr if s.get('ack_ms') is not None
                and (s.get('bytes_written') or 0)
                >= s.get('write_mib', sizes[0]) * MIB)
    in_pool = {b: sum(1 for s in samples[b] if s.get('in_pool'))
               for b in RBD_BACKENDS}
    locked = sum(1 for s in samples['rbd-attached']
                 if s.get('lock_owned') and s.get('lock_owned_after'))
    result['counts'] = {'blobcr_snapshots': len(blobcr),
                        'blobcr_acked_with_bytes': acked,
                        'rbd_snapshots': len(samples['rbd']),
                        'rbd_snapshots_in_pool': in_pool['rbd'],
                        'rbd_attached_snapshots': len(
                            samples['rbd-attached']),
                        'rbd_attached_snapshots_in_pool':
                            in_pool['rbd-attached'],
                        'rbd_attached_lock_held': locked}
    checks = common.Checks()
    checks.require_true(
        'blobcr_acked_with_bytes', blobcr and acked == len(blobcr),
        'every BlobCR snapshot\'s metadata carries the agent\'s '
        'checkpoint ack (blobcr:ack_ms) and at least the bytes written '
        'before it (blobcr:bytes_written): a live checkpoint of the whole '
        'dirty set ran', value=acked)
    for baseline in RBD_BACKENDS:
        n = len(samples[baseline])
        checks.require_true(
            '%s_snapshots_in_pool' % baseline.replace('-', '_'),
            n and in_pool[baseline] == n,
            'every RBD snapshot is listed by librbd on the %s volume\'s '
            'image in pool %s: the RBD driver really took them'
            % (baseline, args.rbd_pool), value=in_pool[baseline])
    n = len(samples['rbd-attached'])
    checks.require_true(
        'rbd_attached_lock_held', n and locked == n,
        'the in-use RBD volume\'s writer owned its image\'s exclusive '
        'lock before and after every snapshot, as a running guest\'s QEMU '
        'does', value=locked)
    result['checks'] = checks.as_list()
    return result


def plot(result, path):
    """Left: snapshot create to available against the dirty size, per
    backend (median, p10-p90 bars, every run a dot). Right: BlobCR's
    live checkpoint, from each snapshot's metadata.
    """
    import matplotlib
    matplotlib.use('Agg')
    from matplotlib import pyplot
    fig, (left, right) = pyplot.subplots(1, 2, figsize=(10, 4.2))
    colors = {'blobcr': 'tab:blue', 'rbd': 'tab:orange',
              'rbd-attached': 'tab:green'}
    labels = {'blobcr': 'BlobCR (in-use)', 'rbd': 'RBD (detached)',
              'rbd-attached': 'RBD (in-use, lock held by its writer)'}
    for backend in BACKENDS:
        rows = [(r['write_mib'], r[backend]['available_s'])
                for r in result['by_write_mib'] if r[backend]['available_s']]
        xs = [mib for mib, _ in rows]
        med = [v['median'] for _, v in rows]
        left.errorbar(xs, med, yerr=[[m - v['p10'] for m, (_, v) in
                                      zip(med, rows)],
                                     [v['p90'] - m for m, (_, v) in
                                      zip(med, rows)]],
                      color=colors[backend], marker='o', capsize=3,
                      label=labels[backend])
        dots = result['samples'][backend]
        left.scatter([s['write_mib'] for s in dots],
                     [s['available_s'] for s in dots], s=8,
                     color=colors[backend], alpha=0.4)
    left.set_xscale('log', base=2)
    left.set_yscale('log')
    left.set_xlabel('dirty data before the snapshot (MiB)')
    left.set_ylabel('snapshot create to available (s)')
    left.set_title('%d runs per size (%s)'
                   % (result['runs'], 'POST /snapshots'
                      if result['client'] == 'api' else 'openstack CLI'))
    left.legend(fontsize='small')
    samples = result['samples']['blobcr']
    xs = range(len(samples))
    for key, marker, label in (
            ('ack_ms', 'o', 'ack (driver: checkpoint RPC)'),
            ('downtime_ms', 's', 'ack (the mirror\'s own)'),
            ('held_ms', 'x', 'writes held')):
        right.plot(xs, [s.get(key) for s in samples], marker=marker,
                   label=label)
    right.set_xticks(list(xs))
    right.set_xticklabels([str(s.get('write_mib')) for s in samples],
                          fontsize='x-small')
    right.set_xlabel('snapshot (its dirty MiB)')
    right.set_ylabel('ms (BlobCR snapshot metadata)')
    right.set_yscale('log')
    top = max([s.get('ack_ms') or 1 for s in samples] or [1])
    right.set_ylim(top=top * 30)     # room for the legend above the data
    right.set_title('BlobCR live checkpoint (snapshot metadata)')
    right.legend(loc='upper right', fontsize='small', ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    pyplot.close(fig)
