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

"""``blobcr-bench cinder`` on a cloud of its own, started here:

* a micro Ceph cluster (tools/ceph-cluster.sh start DIR) with an ``rbd``
  pool;
* RabbitMQ on 127.0.0.1 (blobcr_lab.rabbitmq);
* two blobcr-agents on a RADOS namespace of that cluster, one beside
  cinder-volume and one "compute" host on which the BlobCR volume is
  attached (blobcr_lab.cinder_hosts);
* Keystone, cinder-api, cinder-scheduler and cinder-volume
  (blobcr_lab.openstack) with two backends: ``blobcr`` (the BlobCR
  driver) and ``rbd`` (Cinder's RBD driver, pool ``rbd`` of the same
  cluster, its images' data in an erasure-coded pool shaped like
  BlobCR's: cinder.rbd_data_pool_conf), one volume type each;

then runs ``blobcr-bench cinder --json`` as the demo user, with any
arguments given after ``--`` (``--runs N``, ``--plot FILE.png``...), and
prints its JSON. Everything it started is stopped by PID and the Ceph
directory is removed. Exits with the benchmark's status.

    .venv/bin/python -m blobcr_bench.cinder_stack -- --runs 7 --plot cinder.png
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import uuid

from blobcr_agent.repository.backends import rados
from blobcr_bench import cinder as bench_cinder
from blobcr_bench import rbd_common as bench_rbd
from blobcr_common.rpc import api as rpc_api
from blobcr_lab import agent_rpc
from blobcr_lab import agents
from blobcr_lab import ceph as ceph_mod
from blobcr_lab import cinder_hosts
from blobcr_lab import openstack as openstack_stack
from blobcr_lab import rabbitmq

RBD_POOL = 'rbd'


def say(text):
    print('bench-cinder: %s' % text, file=sys.stderr, flush=True)


class _Ceph(ceph_mod.MicroCephCluster):
    """The bench's own cluster: its directory goes with it."""

    def stop(self):
        try:
            super().stop()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.split('\n')[0],
        usage='%(prog)s [options] [-- blobcr-bench cinder arguments]')
    parser.add_argument('--workdir', default=None,
                        help='services\' directory (default: a new one '
                             'under /var/tmp, removed at the end)')
    parser.add_argument('--ceph-dir', default=None,
                        help='the cluster\'s directory (default: a new one '
                             'under /var/tmp; always stopped and removed)')
    parser.add_argument('--keep', action='store_true',
                        help='keep the work directory (logs)')
    argv = sys.argv[1:]
    extra = []
    if '--' in argv:
        extra = argv[argv.index('--') + 1:]
        argv = argv[:argv.index('--')]
    args = parser.parse_args(argv)
    workdir = args.workdir or tempfile.mkdtemp(prefix='blobcr-bench-cinder-',
                                               dir='/var/tmp')
    made_workdir = not args.workdir
    os.makedirs(workdir, exist_ok=True)
    ceph_dir = args.ceph_dir or tempfile.mkdtemp(
        prefix='blobcr-bench-ceph-', dir='/var/tmp')
    started = []
    backend = None
    status = 1
    try:
        say('starting a micro Ceph cluster in %s' % ceph_dir)
        ceph = _Ceph(ceph_dir)
        started.append(ceph)
        ceph.start()
        bench_rbd.ensure_rbd_pool(ceph.conffile, RBD_POOL)

        say('starting RabbitMQ')
        broker = rabbitmq.RabbitMQBroker(os.path.join(workdir, 'rabbitmq'))
        started.append(broker)
        broker.start()

        say('starting two blobcr-agents on RADOS')
        backend = rados.RadosBackend(
            ceph.conffile, 'blobcr-data', 'blobcr-meta',
            namespace='bench-cinder-' + uuid.uuid4().hex,
            connect_timeout=10, op_timeout=60)
        exchange = os.path.join(workdir, 'exchange')
        suffix = uuid.uuid4().hex[:6]
        hosts = cinder_hosts.Hosts('rados', 'bench-storage-' + suffix,
                                   ['bench-compute-' + suffix], exchange,
                                   backend)
        api = rpc_api.AgentAPI(transport_url=broker.url, timeout=60)
        for host in (hosts.storage, hosts.compute[0]):
            directory = os.path.join(workdir, host)
            os.makedirs(directory, exist_ok=True)
            agent = agents.AgentProcess(directory, backend,
                                        agent_rpc.rpc_settings(
                                            broker.url, host,
                                            export_dir=exchange))
            started.append(agent)
            agent.start()
            agent_rpc.wait_rpc(api, host)
        api.cleanup()

        say('starting Keystone and Cinder (backends blobcr, rbd)')
        blobcr_section = cinder_hosts.backend_section(hosts)
        blobcr_section['volume_backend_name'] = 'blobcr'
        stack = openstack_stack.OpenStackStack(
            os.path.join(workdir, 'openstack'), broker.url,
            {'blobcr': blobcr_section,
             'rbd': bench_cinder.rbd_backend_section(
                 bench_cinder.rbd_data_pool_conf(ceph.conffile, workdir),
                 RBD_POOL)})
        started.append(stack)
        stack.start()

        command = [os.path.join(os.path.dirname(sys.executable),
                                'blobcr-bench'), 'cinder', '--json',
                   '--blobcr-type', 'blobcr', '--baseline-type', 'rbd',
                   '--compute-host', hosts.compute[0],
                   '--ceph-conf', ceph.conffile, '--rbd-pool', RBD_POOL,
                   '--workdir', workdir] + extra
        say('$ %s' % ' '.join(command))
        status = subprocess.run(command, env=stack.env('demo'),
                                stdin=subprocess.DEVNULL).returncode
    finally:
        for thing in reversed(started):
            try:
                thing.stop()
            except Exception as exc:  # stop the rest anyway
                say('stopping %s: %s' % (type(thing).__name__, exc))
        if backend is not None:
            backend.close()
        if made_workdir and not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        elif args.keep:
            say('work directory kept: %s' % workdir)
    return status


if __name__ == '__main__':
    sys.exit(main())
