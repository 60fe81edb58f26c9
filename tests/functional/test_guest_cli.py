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

"""blobcr-checkpoint as a guest runs it, against the guest endpoint of a
real blobcr-agent process (its mirror, its proxy) over 127.0.0.1: what
was written before the command is in the version it prints, --wait-stable
returns once the version is stable, forged or foreign requests exit
non-zero with the proxy's message and commit nothing, a token the agent
refuses (expired, made for another host or under a retired secret) is
replaced by a fresh one from vendordata.
"""

import glob
import json
import os
import re
import subprocess
import sys
import time

import pytest

from blobcr_agent.repository import groups
from blobcr_agent.repository import repository
from blobcr_common import auth
import blobcr_guest
from blobcr_lab.agent_rpc import committed
from tests.unit.test_nova_vendordata import serve_vendor_data2

CHUNK = 64 * 1024
# The directory holding the guest package (its distribution's).
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(
    blobcr_guest.__file__)))
COMMAND = os.path.join(os.path.dirname(sys.executable), 'blobcr-checkpoint')
HOST = 'host-a'
SETTINGS = {'proxy': {'host_secret': 'host-secret',
                      'metadata_proxy_shared_secret': 'neutron-secret',
                      'rate': '5', 'burst': '10'},
            'agent': {'quiesce': 'none', 'host': HOST}}


@pytest.fixture
def setup(backend_factory, agent_factory):
    repo = repository.Repository(backend_factory(), chunk_size=CHUNK)
    images, paths = {}, {}
    for instance in ('vm-a', 'vm-b'):
        header = repo.create_image(instance, 16 * CHUNK)
        repo.commit(header.id, {0: os.urandom(CHUNK)})
        images[instance] = header.id
    agent = agent_factory(repo.backend, SETTINGS)
    for instance, image in images.items():
        paths[instance] = agent.client.call(
            'attach', image=image, instance=instance)['path']
    yield repo, images, paths, 'http://127.0.0.1:%d' % agent.proxy_port()
    repo.close()


def token(instance, host=HOST, secret='host-secret', lifetime=600):
    """What blobcr-vendordata hands out for ``instance`` on ``host``."""
    return auth.make_token(secret, instance, host,
                           int(time.time()) + lifetime)


def run(args, env=None, command=(COMMAND,), cwd=None):
    """The command with nothing from this machine's configuration."""
    environ = {'PATH': os.environ['PATH'], 'BLOBCR_METADATA_URL': '',
               'BLOBCR_GUEST_CONFIG': '/nonexistent/guest.json'}
    environ.update(env or {})
    return subprocess.run(list(command) + args, env=environ, cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def versions(repo, image):
    return [v.number for v in committed(repo.image(image).versions)]


def test_the_version_holds_what_was_written_and_becomes_stable(setup):
    repo, images, paths, endpoint = setup
    data = os.urandom(3 * CHUNK)
    # Buffered and never fsynced here: the command's sync flushes it.
    with open(paths['vm-a'], 'r+b') as f:
        f.seek(5 * CHUNK + 123)
        f.write(data)
    result = run(['--endpoint', endpoint, '--instance-id', 'vm-a',
                  '--token', token('vm-a'), '--wait-stable', '--timeout',
                  '60', '--json'])
    assert result.returncode == 0, result.stderr
    assert result.stderr == ''
    reply = json.loads(result.stdout)
    version = reply['version']
    assert version == 2 and reply['state'] == 'stable'
    assert reply['downtime_ms'] >= 0
    header = repo.image(images['vm-a'])
    assert header.version(version).state == 'stable'
    assert repo.read(images['vm-a'], version, 5 * CHUNK + 123,
                     len(data)) == data
    assert versions(repo, images['vm-b']) == [1]
    # The plain output, credentials from the JSON file this time.
    conf = os.path.join(os.path.dirname(paths['vm-a']), '..', 'guest.json')
    with open(conf, 'w') as f:
        json.dump({'endpoint': endpoint, 'instance_id': 'vm-a',
                   'token': token('vm-a')}, f)
    result = run(['--quiesce', 'none'], env={'BLOBCR_GUEST_CONFIG': conf})
    assert result.returncode == 0, result.stderr
    assert re.match(r'^3 downtime_ms=[0-9.]+\n$', result.stdout)
    # Version 3 wrote nothing: pending, it looks like the mirror's
    # reservation of the next version, which committed() leaves out.
    deadline = time.monotonic() + 60
    while repo.image(images['vm-a']).version(3).state == 'pending':
        assert time.monotonic() < deadline, 'version 3 still pending'
        time.sleep(0.1)
    assert versions(repo, images['vm-a']) == [1, 2, 3]


def test_forged_and_foreign_requests_exit_non_zero_and_commit_nothing(
        setup):
    repo, images, _, endpoint = setup
    before = {i: versions(repo, i) for i in images.values()}
    cases = [
        (['--instance-id', 'vm-a', '--token', 'f' * 64],
         'unauthenticated: send X-Instance-ID with X-BlobCR-Token or '
         'X-Instance-ID-Signature (HTTP 401)'),
        (['--instance-id', 'vm-a', '--token', token('vm-b')],
         'unauthenticated: send X-Instance-ID with X-BlobCR-Token or '
         'X-Instance-ID-Signature (HTTP 401)'),
        (['--instance-id', 'vm-elsewhere', '--token',
          token('vm-elsewhere')],
         'instance vm-elsewhere is not hosted here (HTTP 403)')]
    for args, message in cases:
        result = run(['--endpoint', endpoint, '--wait-stable'] + args)
        assert result.returncode == 3, result
        assert result.stdout == ''
        assert result.stderr == 'blobcr-checkpoint: error: %s\n' % message
    assert {i: versions(repo, i) for i in images.values()} == before


@pytest.mark.parametrize('how', ['--token', 'BLOBCR_TOKEN', 'file'])
def test_a_refused_token_is_replaced_from_vendordata(setup, tmp_path, how):
    """Finding 6 of issue 54: tokens now expire and are bound to a host,
    so a guest's token goes stale (its lifetime, a migration, a secret
    rotated). Refused (401), the command reads vendor_data2.json again
    and retries once with the fresh token; a stale token that is
    expired by its own date is replaced before it is even sent.
    """
    repo, images, _, endpoint = setup
    document = {'blobcr': {'endpoint': endpoint, 'instance_id': 'vm-a',
                           'token': token('vm-a')}}
    metadata = serve_vendor_data2(document)
    url = 'http://127.0.0.1:%d/openstack/latest/vendor_data2.json' % \
        metadata.server_port
    try:
        stale = [token('vm-a', lifetime=-60),               # expired
                 token('vm-a', host='host-b'),              # migrated
                 token('vm-a', secret='retired-secret'),    # rotated
                 auth.sign('host-secret', 'vm-a')]          # old form
        for number, old in enumerate(stale, start=2):
            env = {'BLOBCR_METADATA_URL': url}
            args = ['--endpoint', endpoint, '--instance-id', 'vm-a',
                    '--json']
            if how == '--token':
                args += ['--token', old]
            elif how == 'BLOBCR_TOKEN':
                env['BLOBCR_TOKEN'] = old
            else:
                conf = str(tmp_path / 'guest.json')
                with open(conf, 'w') as f:
                    json.dump({'endpoint': endpoint, 'instance_id': 'vm-a',
                               'token': old}, f)
                env['BLOBCR_GUEST_CONFIG'] = conf
                args = ['--json']
            asked = len(metadata.asked)
            result = run(args, env=env)
            assert result.returncode == 0, (old, result.stderr)
            assert json.loads(result.stdout)['version'] == number
            assert len(metadata.asked) == asked + 1
        # Vendordata has nothing better: refused, once, with the
        # agent's message.
        document['blobcr']['token'] = stale[2]
        asked = len(metadata.asked)
        result = run(['--endpoint', endpoint, '--instance-id', 'vm-a',
                      '--token', stale[2]], env={'BLOBCR_METADATA_URL': url})
        assert result.returncode == 3, result
        assert 'HTTP 401' in result.stderr
        assert len(metadata.asked) == asked + 1
        # Vendordata's token is another instance's: not taken.
        document['blobcr'].update(instance_id='vm-b', token=token('vm-b'))
        result = run(['--endpoint', endpoint, '--instance-id', 'vm-a',
                      '--token', stale[2]], env={'BLOBCR_METADATA_URL': url})
        assert result.returncode == 3, result
    finally:
        metadata.shutdown()
        metadata.server_close()
    # The refused requests committed nothing (the last version may
    # still be on its way to stable).
    deadline = time.monotonic() + 60
    while versions(repo, images['vm-a']) != [1, 2, 3, 4, 5]:
        assert time.monotonic() < deadline, versions(repo, images['vm-a'])
        time.sleep(0.1)
    assert versions(repo, images['vm-b']) == [1]


def test_a_group_checkpoint_of_two_vms(setup):
    repo, images, _, endpoint = setup
    for instance in ('vm-a', 'vm-b'):
        args = ['--endpoint', endpoint, '--instance-id', instance,
                '--token', token(instance), '--group', 'job-7',
                '--members', '2', '--json', '--timeout', '60']
        if instance == 'vm-b':
            args.append('--wait-group')
        result = run(args)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)['group'] == 'job-7'
    assert json.loads(result.stdout)['group_complete'] is True
    state = groups.state(repo, 'job-7')
    # Keyed by instance, or by image id with the instance as "name".
    assert state['complete'] and {
        v.get('name', k) for k, v in state['versions'].items()} == {
            'vm-a', 'vm-b'}


def pythons():
    """The system python3 and the oldest one here (a guest may have 3.6)."""
    found = ['/usr/bin/python3']
    for minor in (6, 7, 8):
        old = sorted(glob.glob('/root/.pyenv/versions/3.%d.*/bin/python3'
                               % minor))
        if old:
            found.append(old[-1])
            break
    else:
        found.append('python3.6 (none here)')
    return found


@pytest.mark.parametrize('python', pythons())
def test_stdlib_only_under_the_system_python(setup, python):
    """The package alone, as a guest has it: no venv, no site-packages."""
    repo, images, _, endpoint = setup
    if not os.path.exists(python):
        pytest.skip('no %s' % python)
    result = run(['-S', '-m', 'blobcr_guest', 'checkpoint', '--wait-stable',
                  '--timeout', '60'], command=(python,), cwd=ROOT,
                 env={'BLOBCR_ENDPOINT': endpoint,
                      'BLOBCR_INSTANCE_ID': 'vm-b',
                      'BLOBCR_TOKEN': token('vm-b')})
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith('2 downtime_ms=')
    assert result.stdout.rstrip().endswith(' state=stable')
    assert repo.image(images['vm-b']).version(2).state == 'stable'
