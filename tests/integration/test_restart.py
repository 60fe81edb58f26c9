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

"""blobcr-restart (python-blobcrclient/blobcrclient/restart.py) on the
real stack.

The Cinder half runs with the session's OpenStack stack: a volume group
of two BlobCR volumes, two group checkpoints of different content, and
the restart's plan (--dry-run) and volumes (--no-boot) from the newest.
The Nova half (servers booted from them) needs the real Nova stack:
tests/integration/test_nova_real.py, BLOBCR_REAL_NOVA=1.
"""

import json
import os
import subprocess
import sys
import uuid

import pytest

from blobcr_lab import nova as nova_stack
from blobcr_lab.nova_attach import Attachment
from blobcr_lab.openstack import StackError
from blobcrclient import restart
from tests.integration.test_cinder_driver import add_to_group
from tests.integration.test_cinder_driver import wait_group

MARK = 4096


def write_at(path, text):
    with open(path, 'r+b') as f:
        f.write(text.encode().ljust(MARK, b'\0'))
        f.flush()
        os.fsync(f.fileno())


def write_mark(stack, volume_id, host, text):
    attachment = Attachment(stack, volume_id, host)
    try:
        write_at(attachment.path, text)
    finally:
        attachment.detach()
    stack.wait_status('volume', volume_id, 'available')


def read_mark(stack, volume_id, host):
    attachment = Attachment(stack, volume_id, host)
    try:
        with open(attachment.path, 'rb') as f:
            return f.read(MARK).rstrip(b'\0').decode()
    finally:
        attachment.detach()


def volume_ids(stack):
    return {v['id'] for v in stack.block_storage().get('/volumes').json()[
        'volumes']}


def run_restart(stack, *args, user='demo', env=None):
    proc = subprocess.run(
        [sys.executable, '-m', 'blobcrclient.restart'] + list(args),
        env=env or stack.env(user), capture_output=True, text=True,
        timeout=900)
    return proc


def token_env(stack, user='demo'):
    """The user's token and project instead of a password, as the
    Horizon panel passes its user's to blobcr-restart.
    """
    session = stack.session(user)
    env = {k: v for k, v in stack.env(user).items()
           if k not in ('OS_PASSWORD', 'OS_USERNAME', 'OS_PROJECT_NAME')}
    env.update(OS_TOKEN=session.get_token(),
               OS_PROJECT_ID=session.get_project_id())
    return env


class Job(object):
    """A volume group of ``size`` BlobCR volumes (as demo)."""

    def __init__(self, stack, hosts, size=2):
        self.stack, self.hosts = stack, hosts
        self.suffix = uuid.uuid4().hex[:6]
        self.group_type = 'job-%s' % self.suffix
        self.group = None
        self.volumes = []
        self.size = size

    def __enter__(self):
        stack = self.stack
        stack.openstack('--os-volume-api-version', '3.11', 'volume', 'group',
                        'type', 'create', self.group_type, user='admin')
        stack.openstack('--os-volume-api-version', '3.11', 'volume', 'group',
                        'type', 'set', '--property',
                        'consistent_group_snapshot_enabled=<is> True',
                        self.group_type, user='admin', json=False)
        self.group = stack.openstack(
            '--os-volume-api-version', '3.13', 'volume', 'group', 'create',
            '--volume-group-type', self.group_type, '--volume-type',
            self.hosts.volume_type, '--name', 'job-%s' % self.suffix)['ID']
        wait_group(stack, self.group, 'available')
        for k in range(self.size):
            made = stack.openstack('volume', 'create', '--type',
                                   self.hosts.volume_type, '--size', '1',
                                   'job-%s-%d' % (self.suffix, k))
            self.volumes.append(made['id'])
        for volume in self.volumes:
            stack.wait_status('volume', volume, 'available', timeout=120)
        add_to_group(stack, self.group, self.volumes)
        return self

    def checkpoint(self, name):
        made = self.stack.openstack(
            '--os-volume-api-version', '3.14', 'volume', 'group', 'snapshot',
            'create', '--name', name, self.group)
        api = self.stack.block_storage()
        import time
        deadline = time.monotonic() + 300
        while True:
            got = api.get('/group_snapshots/%s' % made['ID'],
                          microversion='3.14').json()['group_snapshot']
            if got['status'] == 'available':
                return got['id']
            assert got['status'] != 'error', got
            assert time.monotonic() < deadline, got
            time.sleep(0.5)

    def __exit__(self, *exc):
        stack = self.stack
        if self.group:
            api = stack.block_storage()
            for gs in api.get('/group_snapshots?group_id=%s' % self.group,
                              microversion='3.14').json()['group_snapshots']:
                stack.openstack('--os-volume-api-version', '3.14', 'volume',
                                'group', 'snapshot', 'delete', gs['id'],
                                json=False)
            import time
            deadline = time.monotonic() + 120
            while api.get('/group_snapshots?group_id=%s' % self.group,
                          microversion='3.14').json()['group_snapshots']:
                assert time.monotonic() < deadline
                time.sleep(0.5)
            stack.openstack('--os-volume-api-version', '3.13', 'volume',
                            'group', 'delete', '--force', self.group,
                            json=False)
            wait_group(stack, self.group, 'deleted')
        stack.openstack('--os-volume-api-version', '3.11', 'volume', 'group',
                        'type', 'delete', self.group_type, user='admin',
                        json=False)


def test_complete_rules():
    available = {'status': 'available'}
    snap = {'id': 's', 'status': 'available',
            'metadata': {'blobcr:group': 'cinder-x'}}
    assert restart.complete(available, [snap, dict(snap, id='t')]) is None
    assert restart.complete({'status': 'creating'}, [snap]) == \
        'status creating'
    assert restart.complete(available, []) == 'no member snapshot'
    assert 'not available: t' in restart.complete(
        available, [snap, dict(snap, id='t', status='creating')])
    assert 'different BlobCR groups' in restart.complete(
        available, [snap, dict(snap, metadata={'blobcr:group': 'cinder-y'})])


def test_restart_plan_and_volumes_from_newest_checkpoint(openstack_cloud,
                                                         cinder_hosts):
    stack, hosts = openstack_cloud, cinder_hosts['local']
    host = hosts.compute[0]
    made = []
    with Job(stack, hosts) as job:
        for k, volume in enumerate(job.volumes):
            write_mark(stack, volume, host, 'first-%d' % k)
        first = job.checkpoint('cp1-%s' % job.suffix)
        # The second while the members are attached to two hosts, as a
        # running job's are: one BlobCR group checkpoint across them.
        attachments = [Attachment(stack, volume, compute) for volume, compute
                       in zip(job.volumes, hosts.compute)]
        try:
            for k, attachment in enumerate(attachments):
                write_at(attachment.path, 'second-%d' % k)
            second = job.checkpoint('cp2-%s' % job.suffix)
        finally:
            for attachment in attachments:
                attachment.detach()
        for volume in job.volumes:
            stack.wait_status('volume', volume, 'available')
        for k, volume in enumerate(job.volumes):
            write_mark(stack, volume, host, 'after-%d' % k)

        before = volume_ids(stack)
        proc = run_restart(stack, '--group', job.group, '--dry-run')
        assert proc.returncode == 0, proc.stderr
        the_plan = json.loads(proc.stdout)
        assert the_plan['group_snapshot'] == second != first
        assert sorted(m['source_volume'] for m in the_plan['members']) == \
            sorted(job.volumes)
        assert {m['blobcr_group'] for m in the_plan['members']} == \
            {'cinder-%s' % second}
        # Not a terminal: one JSON event a line.
        events = [json.loads(line) for line in proc.stderr.splitlines()]
        assert events[-1]['group_snapshot'] == second
        # Nothing made by a dry run.
        assert volume_ids(stack) == before
        # The same plan through the openstack CLI (its own session).
        rows = stack.openstack('blobcr', 'group', 'restart', job.group,
                               '--dry-run')
        assert sorted((r['Snapshot'], r['Source Volume']) for r in rows) == \
            sorted((m['snapshot'], m['source_volume'])
                   for m in the_plan['members'])
        assert all(r['Volume'] is None and r['Server'] is None
                   for r in rows)
        assert volume_ids(stack) == before
        # The older one on request, on a token's credentials.
        proc = run_restart(stack, '--group', job.group, '--dry-run',
                           '--group-snapshot', first,
                           env=token_env(stack))
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)['group_snapshot'] == first
        proc = run_restart(stack, '--group', job.group, '--dry-run',
                           '--group-snapshot', str(uuid.uuid4()))
        assert proc.returncode == 1
        assert 'has no group snapshot' in proc.stderr

        proc = run_restart(stack, '--group', job.group, '--no-boot',
                           '--name-prefix', 'restart-%s' % job.suffix)
        assert proc.returncode == 0, proc.stderr
        result = json.loads(proc.stdout)
        made = [m['volume'] for m in result['members']]
        steps = [(e['step'], e['done'], e['total'])
                 for e in map(json.loads, proc.stderr.splitlines())
                 if e['event'] == 'progress']
        assert ('volumes available', 2, 2) in steps
        by_source = {}
        for volume in made:
            shown = stack.block_storage().get(
                '/volumes/%s' % volume).json()['volume']
            assert shown['status'] == 'available'
            assert shown['bootable'] == 'true'
            by_source[shown['metadata']['blobcr:restart_of']] = volume
        for k, volume in enumerate(job.volumes):
            assert read_mark(stack, by_source[volume], host) == \
                'second-%d' % k
        for volume in made:
            stack.openstack('volume', 'delete', volume, json=False)
        for volume in made:
            stack.wait_status('volume', volume, 'deleted')


def test_restart_without_checkpoint_fails_clearly(openstack_cloud,
                                                  cinder_hosts):
    stack, hosts = openstack_cloud, cinder_hosts['local']
    with Job(stack, hosts, size=1) as job:
        proc = run_restart(stack, '--group', job.group, '--dry-run')
        assert proc.returncode == 1
        assert 'has no complete group checkpoint' in proc.stderr
        with pytest.raises(StackError) as ei:
            stack.openstack('blobcr', 'restart', '--group', job.group,
                            '--flavor', 'any')
        assert 'has no complete group checkpoint' in str(ei.value)
    proc = run_restart(stack, '--group', str(uuid.uuid4()), '--dry-run')
    assert proc.returncode == 1 and 'no volume group' in proc.stderr


@pytest.mark.skipif(not os.environ.get('BLOBCR_REAL_NOVA'),
                    reason='slow real Nova stack: set BLOBCR_REAL_NOVA=1')
def test_restart_boots_servers_with_real_nova(nova_cloud, tmp_path):
    """Two guests' boot disks in a group, a group checkpoint, then
    blobcr-restart boots one server per member; each guest boots from
    its restored disk and prints its member's mark.
    """
    from tests.integration import test_nova_real as real
    if nova_stack.missing_boot_tools():
        pytest.skip('no dosfstools, mtools or syslinux')
    stack, nova, hosts = nova_cloud
    with Job(stack, hosts) as job:
        for k, volume in enumerate(job.volumes):
            disk = real.guest_disk(str(tmp_path / ('%d.img' % k)),
                                   '#!/bin/sh\necho BLOBCR-MEMBER-%d\n'
                                   'while true; do sleep 5; done\n' % k)
            real.write_disk(stack, volume, nova.compute_host, disk)
        job.checkpoint('cp-%s' % job.suffix)
        proc = run_restart(stack, '--group', job.group, '--flavor',
                           nova_stack.FLAVOR)
        assert proc.returncode == 0, (proc.stderr, nova.log('nova-compute'))
        result = json.loads(proc.stdout)
        members = result['members']
        compute = nova.compute('demo')
        try:
            for member in members:
                assert real.server_status(compute, member['server']) == \
                    'ACTIVE'
                shown = stack.block_storage().get(
                    '/volumes/%s' % member['volume']).json()['volume']
                k = job.volumes.index(shown['metadata']['blobcr:restart_of'])
                line = real.wait_console(
                    real.console_log(nova, member['server']),
                    'BLOBCR-MEMBER-', member['server'], compute)
                assert line == 'BLOBCR-MEMBER-%d' % k
        finally:
            # Without Neutron the delete fails in nova-compute (its
            # _shutdown_instance asks Neutron for the network info:
            # EndpointNotFound) and the volumes stay in-use; the session's
            # stack goes away with them.
            for member in members:
                compute.delete('/servers/%s' % member['server'])


def test_progress_on_a_terminal_and_in_logs():
    import io
    out = io.StringIO()
    progress = restart.Progress(out, tty=True)
    progress.start('volumes available', 2)
    progress.advance('a')
    progress.advance('b')
    lines = out.getvalue().split('\r')
    assert lines[-1].startswith('volumes available')
    assert '[' + '#' * 24 + '] 2/2' in lines[-1] and lines[-1].endswith(
        ' s\n')
    assert '[' + '#' * 12 + '.' * 12 + '] 1/2' in lines[-2]
    out = io.StringIO()
    progress = restart.Progress(out, tty=False)
    progress.start('servers active', 1)
    progress.advance('s1', status='ACTIVE')
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(e['step'], e['done'], e['item']) for e in events] == [
        ('servers active', 0, None), ('servers active', 1, 's1')]
    assert events[-1]['status'] == 'ACTIVE'
