"""The blobcr-agent daemon for real: blobcr-manage over its admin socket,
SIGTERM and SIGKILL with persists in flight and the restart that picks
everything up, and quiescing through libvirt.

libvirt here is the test driver loaded from a file that describes a
domain whose disk is the agent's mirror file: a real libvirt connection
and API, with an in-memory hypervisor (the QEMU guest is in
tests/integration/test_guest_vm_checkpoint.py).
"""

import http.client
import json
import os
import random
import stat
import subprocess
import sys
import uuid

import pytest

from blobcr_agent.bench import harness
from blobcr_agent.proxy import auth
from blobcr_agent.repository import repository
from blobcr_agent.repository import scrub

CHUNK = 64 * 1024
NCHUNKS = 128


def manage(agent, *args):
    """Run blobcr-manage against ``agent``; (exit status, stdout, stderr)."""
    done = subprocess.run(
        [sys.executable, '-m', 'blobcr_agent.cmd.manage', '--config-file',
         agent.conffile] + list(args), capture_output=True, text=True,
        timeout=300)
    return done.returncode, done.stdout, done.stderr


def fill(path, rng, chunks):
    data = {}
    with open(path, 'r+b', buffering=0) as f:
        for index in chunks:
            data[index] = rng.randbytes(CHUNK)
            f.seek(index * CHUNK)
            f.write(data[index])
        os.fsync(f.fileno())
    return data


def expected(base, writes):
    image = bytearray(base)
    for index, data in writes.items():
        image[index * CHUNK:(index + 1) * CHUNK] = data
    return bytes(image)


@pytest.fixture
def image(backend_factory):
    repo = repository.Repository(backend_factory(), chunk_size=CHUNK)
    base = os.urandom(NCHUNKS * CHUNK)
    header = repo.create_image('disk', len(base))
    repo.commit(header.id, {i: base[i * CHUNK:(i + 1) * CHUNK]
                            for i in range(NCHUNKS)})
    yield repo, header.id, base
    repo.close()


def test_manage_commands_drive_the_agent(image, agent_factory, tmp_path):
    repo, image_id, base = image
    agent = agent_factory(repo.backend, {'agent': {'quiesce': 'none'}})
    assert stat.S_IMODE(os.stat(agent.control).st_mode) & 0o077 == 0
    status, out, err = manage(agent, 'attach', 'disk')
    assert status == 0, err
    path = out.strip()
    assert path == os.path.join(agent.mount, 'images', image_id)
    with open(path, 'rb') as f:
        assert f.read() == base
    rng = random.Random(1)
    writes = fill(path, rng, range(0, NCHUNKS, 3))
    status, out, err = manage(agent, 'checkpoint', 'disk', '--wait-stable',
                              '--json')
    assert status == 0, err
    result = json.loads(out)
    assert result['version'] == 2 and result['state'] == 'stable'
    assert result['chunks'] == len(writes) and result['downtime_ms'] > 0
    exported = str(tmp_path / 'v2.raw')
    status, out, err = manage(agent, 'export', 'disk@2', exported)
    assert status == 0, err
    with open(exported, 'rb') as f:
        assert f.read() == expected(base, writes)
    assert scrub.verify(repo, image_id, 2).ok

    # Detach refuses to drop writes made since the checkpoint.
    fill(path, rng, [5])
    status, out, err = manage(agent, 'detach', 'disk')
    assert status == 1 and 'checkpoint it first' in err
    assert image_id in agent.client.call('status')['attached']
    status, out, err = manage(agent, 'detach', 'disk', '--discard')
    assert status == 0, err
    assert agent.client.call('status')['attached'] == {}
    # Clear one-line errors, exit 1.
    for args, message in ((['attach', 'nope'], 'does not exist'),
                          (['checkpoint', 'disk'], 'not attached'),
                          (['attach', 'disk@9'], 'no version 9')):
        status, out, err = manage(agent, *args)
        assert status == 1 and message in err, (args, err)
        assert err.startswith('blobcr-manage: error:')
    assert [v.number for v in repo.image(image_id).versions] == [1, 2]


def test_sigterm_drains_persists_and_restart_picks_up(image, agent_factory):
    repo, image_id, base = image
    settings = {'agent': {'quiesce': 'none'},
                'proxy': {'host_secret': 'hs'}}
    agent = agent_factory(repo.backend, settings)
    path = agent.client.call('attach', image=image_id,
                             instance='vm-1')['path']
    writes = fill(path, random.Random(2), range(NCHUNKS))
    version = agent.client.call('checkpoint', image=image_id)['version']
    # SIGTERM at once: the persist is under way and must finish first.
    assert agent.stop() == 0
    assert repo.image(image_id).version(version).state == 'stable'
    assert repo.read(image_id, version, 0, len(base)) == \
        expected(base, writes)
    assert not os.path.ismount(os.path.join(agent.mount, 'images'))

    agent.start()                       # same state directory
    attached = agent.client.call('status')['attached']
    assert list(attached) == [image_id]
    assert attached[image_id]['instances'] == ['vm-1']
    with open(path, 'rb') as f:
        assert f.read() == expected(base, writes)
    # The instance table survived: the guest endpoint still knows vm-1.
    port = agent.proxy_port()
    conn = http.client.HTTPConnection('127.0.0.1', port, timeout=30)
    conn.request('POST', '/v1/checkpoint', headers={
        'X-Instance-ID': 'vm-1', 'X-BlobCR-Token': auth.sign('hs', 'vm-1')})
    reply = conn.getresponse()
    assert reply.status == 200 and json.loads(reply.read())['version'] == 3


def test_sigkill_with_a_persist_in_flight(image, agent_factory):
    repo, image_id, base = image
    agent = agent_factory(repo.backend, {'agent': {'quiesce': 'none'}})
    path = agent.client.call('attach', image=image_id)['path']
    writes = fill(path, random.Random(3), range(NCHUNKS))
    version = agent.client.call('checkpoint', image=image_id)['version']
    agent.kill()
    agent.start()
    state = agent.client.call('wait_stable', image=image_id,
                              version=version)
    # Nothing was written after the COMMIT: the persist must resume.
    assert state == 'stable'
    assert repo.read(image_id, version, 0, len(base)) == \
        expected(base, writes)
    assert scrub.verify(repo, image_id, version).ok


def _libvirt_node(path, domain_uuid):
    # A libvirt test-driver node with one running domain using ``path``.
    return ('<node><domain type="test"><name>vm-libvirt</name>'
            '<uuid>%s</uuid><memory>65536</memory><os><type>hvm</type>'
            '</os><devices><disk type="file" device="disk">'
            '<source file="%s"/><target dev="vda"/></disk></devices>'
            '</domain></node>' % (domain_uuid, path))


def test_quiesce_and_instance_lookup_through_libvirt(image, tmp_path):
    pytest.importorskip('libvirt')
    repo, image_id, base = image
    workdir = tmp_path / 'agent'
    workdir.mkdir()
    instance = str(uuid.uuid4())
    node = tmp_path / 'libvirt-node.xml'
    node.write_text(_libvirt_node(
        os.path.join(str(workdir), 'mnt', 'images', image_id), instance))
    agent = harness.AgentProcess(str(workdir), repo.backend, {
        'agent': {'libvirt_uri': 'test://%s' % node, 'quiesce': 'suspend'},
        'proxy': {'metadata_proxy_shared_secret': 'ns'}})
    agent.start()
    try:
        # No instance given: the guest endpoint finds it by domain UUID.
        agent.client.call('attach', image=image_id)
        result = agent.client.call('checkpoint', image=image_id)
        assert result['quiesce'] == 'suspend'
        result = agent.client.call('checkpoint', image=image_id,
                                   quiesce='fsfreeze')
        assert result['quiesce'] == 'fsfreeze'
        conn = http.client.HTTPConnection('127.0.0.1', agent.proxy_port(),
                                          timeout=30)
        for who, status in ((instance, 200), (str(uuid.uuid4()), 403)):
            conn.request('POST', '/v1/checkpoint', body='{"quiesce": "none"}',
                         headers={'X-Instance-ID': who,
                                  'X-Instance-ID-Signature':
                                  auth.sign('ns', who)})
            reply = conn.getresponse()
            body = json.loads(reply.read())
            assert reply.status == status, body
        assert body['error'].endswith('is not hosted here')
        assert len(repo.image(image_id).versions) == 4
    finally:
        agent.stop()
