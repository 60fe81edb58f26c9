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

"""The Cinder path, end to end, as a user meets it (blobcr-cinder-demo, or
bash tools/demo.sh --cinder): a real Keystone, cinder-api,
cinder-scheduler and cinder-volume with the BlobCR driver, the project's
RabbitMQ, and two real blobcr-agents on the embedded local store (one
beside cinder-volume, one "compute" host). Every step is an
``openstack`` command, printed with its result; the volume is attached
as Nova attaches it (Nova itself is issue 10) and written to while
``openstack volume snapshot create`` takes a live checkpoint. The
snapshot is then read back through a volume made from it and checked to
be exactly a prefix of the writes. Exits 1 at the first failed check;
everything it started is stopped by PID.
"""

import argparse
import os
import shutil
import sys
import time

from blobcr_agent.repository.backends import local
from blobcr_common.rpc import api as rpc_api
from blobcr_lab import agent_rpc
from blobcr_lab import agents
from blobcr_lab import cinder_hosts
from blobcr_lab.nova_attach import Attachment
from blobcr_lab import openstack as openstack_stack
from blobcr_lab import rabbitmq
from blobcr_lab import seq_writer

BLOCKS = 128


def step(text):
    print('\n== %s' % text, flush=True)


def run(stack, *args, **kwargs):
    print('$ openstack %s' % ' '.join(args), flush=True)
    out = stack.openstack(*args, **kwargs)
    if isinstance(out, (dict, list)):
        import json
        print(json.dumps(out, indent=1, default=str)[:1500], flush=True)
    elif out:
        print(out.rstrip(), flush=True)
    return out


def demo(workdir):
    started = []
    try:
        step('RabbitMQ on 127.0.0.1')
        broker = rabbitmq.RabbitMQBroker(os.path.join(workdir, 'rabbitmq'))
        broker.start()
        started.append(broker)
        url = broker.url

        step('two blobcr-agents on the local store')
        backend = local.LocalBackend(os.path.join(workdir, 'store'))
        exchange = os.path.join(workdir, 'exchange')
        hosts = cinder_hosts.Hosts('local', 'demo-storage',
                                   ['demo-compute'], exchange, backend)
        api = rpc_api.AgentAPI(transport_url=url, timeout=60)
        for host in (hosts.storage, hosts.compute[0]):
            directory = os.path.join(workdir, host)
            os.makedirs(directory, exist_ok=True)
            agent = agents.AgentProcess(directory, backend,
                                        agent_rpc.rpc_settings(
                                            url, host, export_dir=exchange))
            started.append(agent.start())
            agent_rpc.wait_rpc(api, host)
            print('agent %s up (%s)' % (host, directory))

        step('Keystone and Cinder (BlobCR backend %s)' % hosts.section)
        stack = openstack_stack.OpenStackStack(
            os.path.join(workdir, 'openstack'), url,
            {hosts.section: cinder_hosts.backend_section(hosts)})
        stack.start()
        started.append(stack)

        step('a volume, attached to %s and written to' % hosts.compute[0])
        vol = run(stack, 'volume', 'create', '--size', '1', 'demo-vol')
        stack.wait_status('volume', vol['id'], 'available', timeout=120)
        att = Attachment(stack, vol['id'], hosts.compute[0])
        print('attached: %s' % att.path)
        writer = seq_writer.SeqWriter(att.path, BLOCKS, seed=1).start()
        while writer.synced < 100:
            time.sleep(0.01)

        step('a live snapshot while the writer runs')
        before = writer.synced
        began = time.monotonic()
        snap = run(stack, '--os-volume-api-version', '3.66', 'volume',
                   'snapshot', 'create', '--volume', vol['id'], 'demo-snap')
        stack.wait_status('snapshot', snap['id'], 'available', timeout=300)
        print('available after %.1f s; the writer kept writing (%d writes '
              'synced before the request, %d now)'
              % (time.monotonic() - began, before, writer.synced))
        writer.stop()
        run(stack, 'volume', 'snapshot', 'show', snap['id'])

        step('a volume from the snapshot, read back and checked')
        copy = run(stack, 'volume', 'create', '--size', '1', '--snapshot',
                   snap['id'], 'demo-restored')
        stack.wait_status('volume', copy['id'], 'available', timeout=120)
        att_copy = Attachment(stack, copy['id'], hosts.compute[0])
        region = BLOCKS * seq_writer.BLOCK
        with open(att_copy.path, 'rb') as f:
            data = f.read(region)
        cut = writer.check_snapshot(data, bytes(region), before)
        print('OK: the snapshot holds exactly the first %d of %d writes '
              '(every write synced before the request is in it)'
              % (cut, writer.synced))

        step('the chain')
        run(stack, 'blobcr', 'checkpoint', 'tree', vol['id'], json=False)

        step('clean up')
        att_copy.detach()
        att.detach()
        for volume_id in (copy['id'], vol['id']):
            stack.wait_status('volume', volume_id, 'available')
        run(stack, 'volume', 'delete', copy['id'], json=False)
        run(stack, 'volume', 'snapshot', 'delete', snap['id'], json=False)
        stack.wait_status('snapshot', snap['id'], 'deleted')
        run(stack, 'volume', 'delete', vol['id'], json=False)
        stack.wait_status('volume', vol['id'], 'deleted')
        api.cleanup()
        print('\ndemo: all checks passed')
        return 0
    except (AssertionError, openstack_stack.StackError) as e:
        print('\ndemo: FAILED: %s' % e, file=sys.stderr)
        return 1
    finally:
        for thing in reversed(started):
            thing.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--workdir', default='/var/tmp/blobcr-cinder-demo')
    parser.add_argument('--keep', action='store_true',
                        help='keep the work directory (logs, store)')
    args = parser.parse_args()
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    status = demo(args.workdir)
    if not args.keep and status == 0:
        shutil.rmtree(args.workdir, ignore_errors=True)
    else:
        print('work directory kept: %s' % args.workdir)
    return status


if __name__ == '__main__':
    sys.exit(main())
