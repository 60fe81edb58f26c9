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

"""Bad input and faults on the real Cinder stack (issue 9): a full
backend, an agent killed in the middle of an operation, and Keystone
tokens that are garbage, revoked or expired.

The backend is the session's ``small`` one (blobcr_lab/cinder_hosts.py): a
local store on a tmpfs of 256 MiB with its own storage agent and one
compute agent, which no other test uses, so that these tests may fill
it and kill its agents. The ``openstack`` CLI does what a user does;
volumes are attached as Nova attaches them (blobcr_lab/nova_attach.py).

Each case checks that the user sees a clear error (a status and a user
message, or the CLI's error text, never a traceback), that nothing
written before is lost (read back byte for byte), that the image's
chain keeps no pending version behind, and that the next operation
works.
"""

import datetime
import os
import random
import signal
import time
import uuid

import pytest

from blobcr_common.rpc import api as rpc_api
from blobcr_lab import agent_rpc
from blobcr_lab import nova_attach
from blobcr_lab.nova_attach import Attachment
# the file system to its last page (the filler's path)
from tests.integration.test_backend_full import _fill as fill

MiB = 1 << 20
TRANSIENT = ('creating', 'extending', 'deleting', 'downloading',
             'maintenance', 'reserved', 'attaching', 'detaching')


@pytest.fixture
def small(openstack_cloud, cinder_hosts):
    return openstack_cloud, cinder_hosts['small']


@pytest.fixture
def agent_api(rabbitmq_url):
    api = rpc_api.AgentAPI(transport_url=rabbitmq_url, timeout=60)
    yield api
    api.cleanup()


def name(prefix):
    return '%s-%s' % (prefix, uuid.uuid4().hex[:6])


def create_volume(stack, hosts, label, *args):
    made = stack.openstack('volume', 'create', '--type', hosts.volume_type,
                           '--size', '1', *args, name(label))
    return stack.wait_status('volume', made['id'], 'available', timeout=120)


def snapshot_request(stack, volume_id):
    """Start a snapshot through the API (as the CLI does, without its
    seconds of start-up): its id.
    """
    made = stack.block_storage().post(
        '/snapshots', microversion='3.66',
        json={'snapshot': {'volume_id': volume_id,
                           'name': name('snap')}}).json()
    return made['snapshot']['id']


def create_snapshot(stack, volume_id, timeout=180):
    made = stack.openstack('--os-volume-api-version', '3.66', 'volume',
                           'snapshot', 'create', '--volume', volume_id,
                           name('snap'))
    return stack.wait_status('snapshot', made['id'], 'available',
                             timeout=timeout)


def wait_settled(stack, kind, resource_id, timeout=180):
    """Wait until a volume or snapshot is no longer in a transient
    status (creating, extending, deleting...); return it.
    """
    path = {'volume': '/volumes/%s', 'snapshot': '/snapshots/%s'}[kind]
    api = stack.block_storage('admin')
    deadline = time.monotonic() + timeout
    while True:
        got = api.get(path % resource_id, raise_exc=False)
        if got.status_code == 404:
            return None
        resource = got.json()[kind]
        if resource['status'] not in TRANSIENT:
            return resource
        assert time.monotonic() < deadline, (
            '%s %s still %s after %d s' % (kind, resource_id,
                                           resource['status'], timeout))
        time.sleep(0.25)


def user_messages(stack, resource_id):
    """The user-message API's messages about a resource (as its user)."""
    got = stack.block_storage().get('/messages', microversion='3.3').json()
    return [m['user_message'] for m in got['messages']
            if m['resource_uuid'] == resource_id]


def wait_message(stack, resource_id, text, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        found = user_messages(stack, resource_id)
        if any(text in m for m in found):
            return found
        assert time.monotonic() < deadline, found
        time.sleep(0.5)


def delete(stack, kind, resource_id):
    args = ('volume', 'snapshot', 'delete') if kind == 'snapshot' else (
        'volume', 'delete')
    stack.openstack(*args, resource_id, json=False)
    stack.wait_status(kind, resource_id, 'deleted', timeout=120)


def write(path, offset, data):
    with open(path, 'r+b', buffering=0) as f:
        f.seek(offset)
        f.write(data)
        os.fsync(f.fileno())


def read(path, offset, length):
    with open(path, 'rb') as f:
        f.seek(offset)
        return f.read(length)


def image_of(stack, volume_id):
    return stack.openstack('volume', 'show', volume_id,
                           user='admin')['provider_id']


def chain(api, hosts, image):
    """(number, state, error) of the image's versions, the mirror's
    reservation of the next one left out.
    """
    listed = api.list_versions(hosts.storage, image)['versions']
    return [(v['version'], v['state'], v['error'] or '')
            for v in agent_rpc.committed(listed)]


def assert_nothing_pending(versions):
    assert all(state != 'pending' for _, state, _ in versions), versions


def content_of(stack, hosts, snapshot_id, length):
    """The first ``length`` bytes of a new volume made from a snapshot,
    attached on the compute host; the volume is deleted afterwards.
    """
    vol = create_volume(stack, hosts, 'from', '--snapshot', snapshot_id)
    att = Attachment(stack, vol['id'], hosts.compute[0])
    try:
        return read(att.path, 0, length)
    finally:
        att.detach()
        stack.wait_status('volume', vol['id'], 'available')
        delete(stack, 'volume', vol['id'])


# -- a full backend ----------------------------------------------------------

def pool_of(stack, hosts):
    pools = stack.block_storage('admin').get(
        '/scheduler-stats/get_pools?detail=True').json()['pools']
    return next(p['capabilities'] for p in pools
                if p['name'].split('@')[1].startswith(hosts.section + '#'))


def test_full_backend(small, agent_api):
    """With not a page left on the store: a snapshot (of an attached
    volume), a create, a volume from a snapshot and an extend each end
    in error with a user message, the reason (the store is full) is in
    cinder-volume's log, the scheduler sees the free space gone, and
    once space is back every one of them works, with every byte written
    before read back.
    """
    stack, hosts = small
    if hosts.mount is None:
        pytest.skip('no tmpfs for the small store (mount refused)')
    rng = random.Random(91)
    total_gb = round(os.statvfs(hosts.mount).f_blocks *
                     os.statvfs(hosts.mount).f_frsize / (1 << 30), 2)
    before = pool_of(stack, hosts)
    assert before['total_capacity_gb'] == total_gb, before
    assert before['free_capacity_gb'] > total_gb / 2, before

    vol = create_volume(stack, hosts, 'full-a')
    image = image_of(stack, vol['id'])
    other = create_volume(stack, hosts, 'full-b')
    att = Attachment(stack, vol['id'], hosts.compute[0])
    first = rng.randbytes(4 * MiB)
    write(att.path, 0, first)
    snap1 = create_snapshot(stack, vol['id'])
    second = rng.randbytes(2 * MiB)
    write(att.path, 4 * MiB, second)

    filler = fill(hosts.mount)
    failed = []
    try:
        # A snapshot: the checkpoint is taken, its persist fails.
        snap = snapshot_request(stack, vol['id'])
        assert wait_settled(stack, 'snapshot', snap)['status'] == 'error'
        wait_message(stack, snap, 'Snapshot failed to create')
        failed.append(('snapshot', snap))
        # A new volume, and one from the snapshot taken before.
        for label, args in (('new', ()), ('from', ('--snapshot',
                                                   snap1['id']))):
            made = stack.openstack('volume', 'create', '--type',
                                   hosts.volume_type, '--size', '1', *args,
                                   name(label))
            failed.append(('volume', made['id']))
            assert wait_settled(stack, 'volume', made['id'])['status'] == \
                'error'
            # The driver fails, cinder-volume reschedules it, and after
            # scheduler_max_attempts the scheduler says it found no
            # backend.
            wait_message(stack, made['id'], 'Could not find any available')
        # An extend of a detached volume.
        stack.openstack('volume', 'set', '--size', '2', other['id'],
                        json=False)
        extended = wait_settled(stack, 'volume', other['id'])
        assert (extended['status'], extended['size']) == (
            'error_extending', 1)
        wait_message(stack, other['id'], 'failed to extend')
        log = stack.log('cinder-volume', 2000)
        assert log.count('the local store %s is full'
                         % hosts.backend.root) >= 4
        for kind, resource_id in failed:
            assert 'Traceback' not in str(user_messages(stack, resource_id))

        # The scheduler sees it: free capacity falls to nothing (its own
        # estimate subtracts what it placed: wait for the reported one).
        deadline = time.monotonic() + 150
        while True:
            now = pool_of(stack, hosts)
            if 0 <= now['free_capacity_gb'] <= 0.01:
                break
            assert time.monotonic() < deadline, now
            time.sleep(1)
        listed = stack.openstack('volume', 'backend', 'pool', 'list',
                                 '--long', user='admin')
        row = next(p for p in listed if p['Name'].split('@')[1].startswith(
            hosts.section + '#'))
        shown = row['Capabilities']
        assert shown['free_capacity_gb'] == now['free_capacity_gb'], row
        assert shown['total_capacity_gb'] == total_gb, row
    finally:
        os.unlink(filler)

    # Nothing half-made: the failed creates left no image, the chain has
    # the failed version (with its reason) and nothing pending.
    for kind, resource_id in failed:
        if kind == 'volume':
            with pytest.raises(Exception, match='does not exist'):
                agent_api.list_versions(hosts.storage,
                                        'volume-%s' % resource_id)
        delete(stack, kind, resource_id)
    assert_nothing_pending(chain(agent_api, hosts, image))

    # Space back: each operation works, nothing written was lost.
    snap2 = create_snapshot(stack, vol['id'])
    assert content_of(stack, hosts, snap2['id'], 6 * MiB) == first + second
    assert content_of(stack, hosts, snap1['id'], 6 * MiB) == \
        first + bytes(2 * MiB)
    stack.openstack('volume', 'set', '--state', 'available', other['id'],
                    user='admin', json=False)
    stack.openstack('volume', 'set', '--size', '2', other['id'], json=False)
    assert stack.wait_status('volume', other['id'], 'available')['size'] \
        == 2
    att.detach()
    stack.wait_status('volume', vol['id'], 'available')
    assert_nothing_pending(chain(agent_api, hosts, image))
    for snap in (snap1, snap2):
        delete(stack, 'snapshot', snap['id'])
    for volume in (vol, other):
        delete(stack, 'volume', volume['id'])
    agent_rpc.collect_garbage(agent_api, hosts.storage)


# -- an agent killed mid-operation -------------------------------------------

def restart(api, hosts, role):
    """SIGKILL one of the small backend's agents and start it again."""
    agent = hosts.agents[role]
    agent.kill()
    agent.start()
    host = hosts.storage if role == 'storage' else hosts.compute[0]
    agent_rpc.wait_rpc(api, host)


def test_compute_agent_killed_while_a_snapshot_persists(small, agent_api):
    """The compute agent holding an attached volume is SIGKILLed while
    the version of a snapshot is being persisted, then restarted: its
    recovery finishes (or fails) the version, the snapshot ends
    available or in error (not 'creating' until blobcr_snapshot_timeout),
    the data reads back and the next snapshot works.
    """
    stack, hosts = small
    rng = random.Random(92)
    vol = create_volume(stack, hosts, 'kill-c')
    image = image_of(stack, vol['id'])
    att = Attachment(stack, vol['id'], hosts.compute[0])
    # Compressible and unique (hex of random bytes): slow to compress
    # at the compute agent's zstd level, so the persist lasts seconds.
    data = rng.randbytes(24 * MiB).hex().encode()
    write(att.path, 0, data)

    snap = snapshot_request(stack, vol['id'])
    deadline = time.monotonic() + 60
    while True:
        attached = agent_api.status(hosts.compute[0])['attached'][image]
        if attached['in_flight']:
            break
        assert time.monotonic() < deadline, attached
        time.sleep(0.02)
    restart(agent_api, hosts, 'compute-a')

    done = wait_settled(stack, 'snapshot', snap, timeout=150)
    assert done['status'] in ('available', 'error'), done
    if done['status'] == 'error':
        wait_message(stack, snap, 'Snapshot failed to create')
        delete(stack, 'snapshot', snap)
        snap = None
    assert_nothing_pending(chain(agent_api, hosts, image))
    # The mirror is back after the restart, with every byte (opened
    # again, as by Nova's hard reboot).
    assert nova_attach.wait_reopenable(att.path)
    assert read(att.path, 0, len(data)) == data
    again = create_snapshot(stack, vol['id'])
    assert content_of(stack, hosts, again['id'], len(data)) == data
    att.detach()
    stack.wait_status('volume', vol['id'], 'available')
    for snap_id in (snap, again['id']):
        if snap_id:
            delete(stack, 'snapshot', snap_id)
    delete(stack, 'volume', vol['id'])


def test_storage_agent_killed_under_clone_and_delete(small, agent_api):
    """The storage agent is stopped (SIGSTOP) while a clone and a
    snapshot delete are asked for, so that both are in its hands when
    it is SIGKILLed and restarted. Each ends done or in error, never
    stuck; retried, it works; the source keeps its data.
    """
    stack, hosts = small
    agent = hosts.agents['storage']
    vol = create_volume(stack, hosts, 'kill-s')
    image = image_of(stack, vol['id'])
    att = Attachment(stack, vol['id'], hosts.compute[0])
    data = random.Random(93).randbytes(2 * MiB)
    write(att.path, 0, data)
    snap = create_snapshot(stack, vol['id'])
    att.detach()
    stack.wait_status('volume', vol['id'], 'available')
    doomed = create_snapshot(stack, vol['id'])

    os.kill(agent.proc.pid, signal.SIGSTOP)
    try:
        clone = stack.block_storage().post('/volumes', json={'volume': {
            'size': 1, 'name': name('clone'), 'snapshot_id': snap['id'],
            'volume_type': hosts.volume_type}}).json()['volume']
        stack.block_storage().delete('/snapshots/%s' % doomed['id'])
        time.sleep(2)           # both calls reach the stopped agent
    finally:
        restart(agent_api, hosts, 'storage')

    made = wait_settled(stack, 'volume', clone['id'], timeout=120)
    assert made['status'] in ('available', 'error'), made
    if made['status'] == 'error':
        found = user_messages(stack, clone['id'])
        assert found and 'Traceback' not in str(found), found
        delete(stack, 'volume', clone['id'])
        made = create_volume(stack, hosts, 'clone', '--snapshot',
                             snap['id'])
    gone = wait_settled(stack, 'snapshot', doomed['id'], timeout=120)
    if gone is not None:
        assert gone['status'] == 'error_deleting', gone
        stack.openstack('volume', 'snapshot', 'set', '--state', 'available',
                        doomed['id'], user='admin', json=False)
        delete(stack, 'snapshot', doomed['id'])
    assert_nothing_pending(chain(agent_api, hosts, image))
    att = Attachment(stack, made['id'], hosts.compute[0])
    assert read(att.path, 0, len(data)) == data
    att.detach()
    stack.wait_status('volume', made['id'], 'available')
    assert content_of(stack, hosts, snap['id'], len(data)) == data
    delete(stack, 'volume', made['id'])
    delete(stack, 'snapshot', snap['id'])
    delete(stack, 'volume', vol['id'])


# -- Keystone tokens ---------------------------------------------------------

def with_token(stack, token, *args):
    """``openstack`` as a user holding only ``token``: (status, stderr)
    against Keystone (the token plugin rescopes it) and against Cinder
    directly (the token sent as it is to cinder-api).
    """
    import subprocess
    env = {k: v for k, v in stack.env().items()
           if k not in ('OS_USERNAME', 'OS_PASSWORD', 'OS_USER_DOMAIN_NAME',
                        'OS_AUTH_TYPE')}
    project = stack.session('demo').get_project_id()
    runs = {
        'keystone': dict(env, OS_AUTH_TYPE='token', OS_TOKEN=token),
        'cinder': dict({k: v for k, v in env.items() if k not in (
            'OS_PROJECT_NAME', 'OS_PROJECT_DOMAIN_NAME', 'OS_AUTH_URL')},
            OS_AUTH_TYPE='admin_token', OS_TOKEN=token,
            OS_ENDPOINT='%s/v3/%s' % (stack.cinder_url, project),
            OS_VOLUME_API_VERSION='3'),
    }
    result = {}
    for where, run_env in runs.items():
        proc = subprocess.run(
            [os.path.join(os.path.dirname(os.path.abspath(
                __import__('sys').executable)), 'openstack')] + list(args),
            env=run_env, capture_output=True, text=True, timeout=120,
            stdin=subprocess.DEVNULL)
        result[where] = (proc.returncode, proc.stdout + proc.stderr)
    return result


def assert_refused(stack, token, label):
    volume = name(label)
    result = with_token(stack, token, 'volume', 'create', '--size', '1',
                        '--type', 'harness-fake', volume)
    for where, (code, out) in result.items():
        assert code != 0, (where, out)
        assert 'Traceback' not in out, (where, out)
    # Keystone will not rescope it: 401, or 404 for a token it cannot
    # find ("Could not recognize Fernet token", "Failed to validate").
    code, out = result['keystone']
    assert 'HTTP 401' in out or 'HTTP 404' in out, out
    # Cinder (keystonemiddleware) will not take it: 401.
    code, out = result['cinder']
    assert '401' in out and 'requires authentication' in out, out
    listed = stack.openstack('volume', 'list', '--all-projects',
                             user='admin')
    assert volume not in [v['Name'] for v in listed]
    return {where: out for where, (_, out) in result.items()}


def test_wrong_revoked_and_expired_tokens(openstack_cloud):
    stack = openstack_cloud
    # Garbage.
    assert_refused(stack, 'gAAAAAB' + uuid.uuid4().hex * 3, 'garbage')

    # Revoked by its user before it was used.
    token = stack.openstack('token', 'issue')['id']
    stack.openstack('token', 'revoke', token, json=False)
    assert_refused(stack, token, 'revoked')

    # Expired: Keystone caps a token's life at that of the application
    # credential it was issued from (keystone/token/provider.py), so a
    # credential that expires in seconds gives a token that does too.
    expires = datetime.datetime.utcnow() + datetime.timedelta(seconds=12)
    cred = stack.openstack('application', 'credential', 'create',
                           '--expiration',
                           expires.strftime('%Y-%m-%dT%H:%M:%S'),
                           name('short'))
    try:
        env = {k: v for k, v in stack.env().items()
               if k not in ('OS_USERNAME', 'OS_PASSWORD',
                            'OS_USER_DOMAIN_NAME', 'OS_PROJECT_NAME',
                            'OS_PROJECT_DOMAIN_NAME')}
        import json
        import subprocess
        issued = json.loads(subprocess.run(
            [os.path.join(os.path.dirname(os.path.abspath(
                __import__('sys').executable)), 'openstack'),
             'token', 'issue', '-f', 'json'],
            env=dict(env, OS_AUTH_TYPE='v3applicationcredential',
                     OS_APPLICATION_CREDENTIAL_ID=cred['ID'],
                     OS_APPLICATION_CREDENTIAL_SECRET=cred['Secret']),
            capture_output=True, text=True, check=True,
            timeout=120).stdout)
        ends = datetime.datetime.fromisoformat(
            issued['expires'].replace('Z', '+00:00')).replace(tzinfo=None)
        assert ends <= expires, issued
        time.sleep(max(0, (ends - datetime.datetime.utcnow())
                       .total_seconds()) + 1)
        assert_refused(stack, issued['id'], 'expired')
    finally:
        stack.openstack('application', 'credential', 'delete', cred['ID'],
                        json=False)
