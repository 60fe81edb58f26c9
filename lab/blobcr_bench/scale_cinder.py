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

"""The operator's global checkpoint in ``blobcr-bench scale --cinder``:
a consistent Cinder group snapshot of M BlobCR volumes attached on the
hosts (the driver's two-phase hold: every member held, then each
checkpointed, then all released).

A Keystone and Cinder of the benchmark's own (blobcr_lab.openstack)
run in this machine's namespace with one BlobCR backend whose storage
agent is the first host's; they reach the hosts' agents over the shared
RabbitMQ. For each M: M volumes (1 GiB, sparse) in one group of a
consistent-snapshot group type, each attached through the attachments
API to VM j's host and written by VM j (one iteration of its work), then
one group snapshot. Measured: request to ``available``, and how long
the driver held the members still (first hold to release, each
member's ``blobcr:group_hold_ms``).
"""

import os
import time
import types
import uuid

from blobcr_bench import cinder as bench_cinder
from blobcr_lab import openstack

GROUP_MICROVERSION = '3.14'


class CinderPath(object):

    def __init__(self, cluster, workdir):
        first = cluster.hosts[0]
        section = {'volume_driver': 'blobcr_cinder.driver.BlobCRDriver',
                   'volume_backend_name': 'blobcr',
                   'blobcr_agent_host': cluster.name(first),
                   'blobcr_rpc_timeout': '60',
                   'blobcr_exchange_dir': os.path.join(first.workdir,
                                                       'exports')}
        self.cluster = cluster
        self.stack = openstack.OpenStackStack(
            os.path.join(workdir, 'openstack'), cluster.url,
            {'blobcr': section})
        self.group_type = None

    def start(self):
        self.stack.start()
        self.group_type = 'scale-cg-%s' % uuid.uuid4().hex[:6]
        admin = self.stack.block_storage('admin')
        made = admin.post('/group_types', microversion='3.11', json={
            'group_type': {'name': self.group_type, 'group_specs': {
                'consistent_group_snapshot_enabled': '<is> True'}}}).json()
        self.group_type = made['group_type']['id']
        # Volumes are left until the stack stops: no quota on them.
        project = self.stack.session('demo').get_project_id()
        admin.put('/os-quota-sets/%s' % project, json={'quota_set': {
            'volumes': -1, 'snapshots': -1, 'gigabytes': -1}})
        admin.put('/os-quota-sets/%s' % project, microversion='3.15',
                  json={'quota_set': {'groups': -1}})
        return self

    def stop(self):
        self.stack.stop()

    def _wait(self, path, key, status, timeout=300):
        api = self.stack.block_storage('demo')
        deadline = time.monotonic() + timeout
        while True:
            got = api.get(path, microversion=GROUP_MICROVERSION).json()[key]
            if got['status'] == status:
                return got
            if got['status'].startswith('error') or \
                    time.monotonic() > deadline:
                raise RuntimeError('%s is %s, not %s' % (
                    path, got['status'], status))
            time.sleep(0.1)

    def measure(self, vms, label, write):
        """One group snapshot of ``vms``' volumes; ``write(vms, paths)``
        runs their work on the attached volumes first.
        """
        api = self.stack.block_storage('demo')
        cloud = types.SimpleNamespace(api=api)
        group = api.post('/groups', microversion=GROUP_MICROVERSION, json={
            'group': {'name': label, 'group_type': self.group_type,
                      'volume_types': ['blobcr']}}).json()['group']['id']
        self._wait('/groups/%s' % group, 'group', 'available')
        # Made in the group (add_volumes takes 255 characters of ids).
        volumes = []
        for vm in vms:
            volumes.append(api.post(
                '/volumes', microversion=GROUP_MICROVERSION,
                json={'volume': {'name': '%s-v%d' % (label, vm.index),
                                 'size': 1, 'volume_type': 'blobcr',
                                 'group_id': group}}).json()['volume']['id'])
        for v in volumes:
            self._wait('/volumes/%s' % v, 'volume', 'available')
        attachments = [bench_cinder.Attachment(
            cloud, v, self.cluster.name(vm.run_host))
            for v, vm in zip(volumes, vms)]
        try:
            write(vms, [a.path for a in attachments])
            started = time.monotonic()
            snap = api.post('/group_snapshots',
                            microversion=GROUP_MICROVERSION,
                            json={'group_snapshot': {
                                'group_id': group,
                                'name': label}}).json()['group_snapshot']
            self._wait('/group_snapshots/%s' % snap['id'], 'group_snapshot',
                       'available')
            seconds = time.monotonic() - started
            holds, acks, served, commits = [], [], [], []
            travel = {'request_ms': [], 'answer_ms': []}
            slowest = None
            for v in volumes:
                snaps = api.get('/snapshots/detail?volume_id=%s' % v).json()[
                    'snapshots']
                for meta in (s['metadata'] for s in snaps):
                    if 'blobcr:group_hold_ms' in meta:
                        holds.append(float(meta['blobcr:group_hold_ms']))
                        acks.append(float(meta['blobcr:ack_ms']))
                        served.append(float(meta['blobcr:served_ms']))
                        commits.append(float(meta['blobcr:downtime_ms']))
                        for key, got in travel.items():
                            if 'blobcr:' + key in meta:
                                got.append(float(meta['blobcr:' + key]))
                        member = _member(meta)
                        # Members of one host share their call (API
                        # 1.14): the slowest is the one its agent took
                        # longest over.
                        if slowest is None or _slowness(member) > \
                                _slowness(slowest):
                            slowest = member
        finally:
            for a in attachments:
                a.detach()
        return {'seconds': round(seconds, 3),
                'group_hold_ms': max(holds) if holds else None,
                # Each member's checkpoint call, request to answer.
                'member_ack_ms': sorted(acks),
                # The agent's part of it (records, hold, COMMIT; the
                # rest is the RPC path), and its COMMIT's part.
                'member_served_ms': sorted(served),
                'member_commit_ms': sorted(commits),
                # The RPC path's two halves: sent to received by the
                # agent, served to answered.
                'member_request_ms': sorted(travel['request_ms']),
                'member_answer_ms': sorted(travel['answer_ms']),
                # The slowest member's call, and where its agent's part
                # went (the driver's blobcr:phases_ms).
                'slowest_member': slowest,
                'members': len(holds)}


def _slowness(member):
    return member['ack_ms'], member.get('member_ms') or 0


def _member(meta):
    """A member snapshot's timing from its blobcr: metadata."""
    phases = {}
    for item in meta.get('blobcr:phases_ms', '').split():
        name, _, value = item.partition('=')
        phases[name] = float(value)
    travel = {k: float(meta['blobcr:' + k])
              for k in ('request_ms', 'answer_ms') if 'blobcr:' + k in meta}
    own = meta.get('blobcr:member_ms')
    return {'ack_ms': float(meta['blobcr:ack_ms']),
            'served_ms': float(meta['blobcr:served_ms']),
            # Its own part of its host's call (API 1.14), else None.
            'member_ms': float(own) if own is not None else None,
            'commit_ms': float(meta['blobcr:downtime_ms']),
            # The rest of the call: the request's travel to the agent
            # and the answer's back (the driver's blobcr:request_ms).
            'travel_ms': travel,
            'host': meta.get('blobcr:host'), 'phases_ms': phases}
