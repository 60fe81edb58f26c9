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

"""A real live migration of a running guest between two agents' mirrors.

Two hosts on this machine: two blobcr-agents (RPC over the session's
RabbitMQ, one local store) and two session libvirtds, the second with a
host UUID of its own (libvirt refuses to migrate to its own host). A
TCG guest runs on agent A's mirror file and writes numbered 4 KiB
records with O_DIRECT, one every 50 ms, before, during and after the
migration. Agent B attaches the image *incoming* from A (RPC 1.6
``attach(migrate_from=A)``, what the Cinder driver asks when Nova
connects the volume on the destination), then libvirt live-migrates the
domain to B (``migrate3``, the call Nova's libvirt driver makes). B's
mirror answers the destination QEMU's early reads from the old base and
makes the guest's first request wait for A's handoff (A's guest stopped,
its last writes committed). The guest then reads every record back with
O_DIRECT on B: each one, written on A or on B, must be there. Without
the handoff, B would read the records A wrote after B's attach as
zeros (B's base is the image's newest stable version at its attach).

libvirt 9.0 refuses this migration unless told VIR_MIGRATE_UNSAFE ("Migration
without shared storage is unsafe": it knows no FUSE file system but
GlusterFS's as shared); the flag is passed here (doc/source/nova.rst,
"Live migration").
"""

import errno
import os
import socket
import time
import uuid

import libvirt
import pytest

from blobcr_agent.repository.backends import local
from blobcr_agent.repository import repository
from blobcr_common.rpc import api as rpc_api
from blobcr_lab import agent_rpc
from blobcr_lab import agents as lab_agents
from blobcr_lab import guest_vm
from tests.lab_fixtures import guest_image  # noqa: F401 (fixture)
from tests.lab_fixtures import session_libvirt  # noqa: F401 (fixture)

MiB = 1 << 20
RECORDS = 240
STRIDE = 64 * 1024          # 4 records per 256 KiB chunk
INSTANCE = 'vm-migrate-1'

WRITER = r"""
import mmap, os, sys, time
N, STRIDE = int(sys.argv[1]), int(sys.argv[2])
fd = os.open('/dev/vda', os.O_RDWR | os.O_DIRECT)
buf = mmap.mmap(-1, 4096)


def rec(i):
    return ('rec-%06d\n' % i).encode().ljust(4096, b'.')


for i in range(1, N + 1):
    buf.seek(0)
    buf.write(rec(i))
    os.pwrite(fd, buf, i * STRIDE)
    print('REC', i, flush=True)
    time.sleep(0.05)
bad = 0
for i in range(1, N + 1):
    os.preadv(fd, [buf], i * STRIDE)
    if bytes(buf[:4096]) != rec(i):
        bad += 1
        print('BAD', i, bytes(buf[:11]), flush=True)
print('VERIFY bad=%d' % bad, flush=True)
"""

SCENARIO = """python3 /mig_writer.py %d %d
""" % (RECORDS, STRIDE)


def _free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def _console(path):
    try:
        with open(path, errors='replace') as f:
            return f.read()
    except FileNotFoundError:
        return ''


def _wait_console(path, text, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in _console(path):
            return
        time.sleep(0.2)
    raise AssertionError('no %r on %s after %d s:\n%s'
                         % (text, path, timeout, _console(path)[-3000:]))


@pytest.fixture
def two_hosts(rabbitmq_url, session_libvirt, tmp_path):  # noqa: F811
    backend = local.LocalBackend(str(tmp_path / 'store'))
    repo = repository.Repository(backend)
    api = rpc_api.AgentAPI(transport_url=rabbitmq_url, timeout=120)
    dest_lv = guest_vm.SessionLibvirt(host_uuid=str(uuid.uuid4()))
    agents = {}
    try:
        dest_lv.start()
        for label, lv in (('a', session_libvirt), ('b', dest_lv)):
            host = agent_rpc.host_name('mig-' + label)
            workdir = tmp_path / ('agent-' + label)
            workdir.mkdir()
            agents[host] = lab_agents.AgentProcess(
                str(workdir), backend, agent_rpc.rpc_settings(
                    rabbitmq_url, host, libvirt_uri=lv.uri,
                    handoff_timeout='60')).start()
        for host in agents:
            agent_rpc.wait_rpc(api, host)
        yield api, repo, list(agents), (session_libvirt, dest_lv)
    finally:
        for lv in (session_libvirt, dest_lv):
            try:
                conn = libvirt.open(lv.uri)
            except libvirt.libvirtError:
                continue
            for dom in conn.listAllDomains():
                if dom.name() == INSTANCE[:16]:
                    try:
                        dom.destroy()
                    except libvirt.libvirtError:
                        pass
                    try:
                        dom.undefine()
                    except libvirt.libvirtError:
                        pass
            conn.close()
        api.cleanup()
        for agent in agents.values():
            agent.stop()
        dest_lv.stop()
        repo.close()


def test_live_migration_hands_the_image_off(two_hosts, tmp_path):
    api, repo, (source, dest), (source_lv, dest_lv) = two_hosts
    image = api.create_image(source, 'migrating', 64 * MiB)['id']
    path_a = api.attach(source, image, instance=INSTANCE)['path']
    (tmp_path / 'guest').mkdir()
    vm = guest_vm.GuestVM(INSTANCE[:16], path_a, source_lv.uri,
                          workdir=str(tmp_path / 'guest'),
                          files={'/scenario.sh': SCENARIO,
                                 '/mig_writer.py': WRITER})
    try:
        vm.start()
        vm.wait_for('REC 40', timeout=240)
        # Nova's pre_live_migration: the destination's Cinder connection.
        attached = api.attach(dest, image, instance=INSTANCE,
                              migrate_from=source)
        path_b = attached['path']
        base = attached['version']
        console_b = str(tmp_path / 'console-b.log')
        xml = vm.domain.XMLDesc(libvirt.VIR_DOMAIN_XML_MIGRATABLE)
        assert path_a in xml and vm.console_log in xml
        xml = xml.replace(path_a, path_b).replace(vm.console_log, console_b)
        dconn = libvirt.open(dest_lv.uri)
        started = time.monotonic()
        vm.domain.migrate3(dconn, {
            libvirt.VIR_MIGRATE_PARAM_URI:
                'tcp://127.0.0.1:%d' % _free_port(),
            libvirt.VIR_MIGRATE_PARAM_DEST_XML: xml,
        }, libvirt.VIR_MIGRATE_LIVE | libvirt.VIR_MIGRATE_UNSAFE)
        migrate_s = time.monotonic() - started
        moved = dconn.lookupByName(vm.name)
        assert moved.state()[0] == libvirt.VIR_DOMAIN_RUNNING
        _wait_console(console_b, 'VERIFY', timeout=300)
        text = _console(console_b)
        assert 'VERIFY bad=0' in text, text[-3000:]
        # Records the guest wrote on B, after the switch.
        written_on_b = [int(line.split()[1]) for line in text.splitlines()
                        if line.startswith('REC ')]
        assert written_on_b and written_on_b[-1] == RECORDS
        last_on_a = max(int(line.split()[1]) for line in
                        vm.console().splitlines() if line.startswith('REC '))
        assert 40 <= last_on_a < RECORDS
    finally:
        vm.destroy()
    stats = api.status(dest)['attached'][image]
    incoming = stats['incoming']
    assert incoming['done'] and incoming['version'] > (base or 0), incoming
    assert image not in api.status(source)['attached']
    # What B holds, committed, is every record, whoever wrote it.
    version = api.checkpoint(dest, image)['version']
    api.wait_stable(dest, image, version)
    for i in range(1, RECORDS + 1):
        got = repo.read(image, version, i * STRIDE, 11)
        assert got == ('rec-%06d\n' % i).encode(), (i, got)
    handed = repo.image(image).version(incoming['version'])
    print('\nMIGRATION migrate_s=%.2f handoff_waited_ms=%.1f early_reads=%d '
          'records_on_a=%d handoff_version=%d made_by=%s'
          % (migrate_s, incoming['waited_ms'], incoming['early_reads'],
             last_on_a, incoming['version'], handed.made_by))
    assert handed.made_by == 'migrate'
    api.detach(dest, image, force=True)


@pytest.fixture
def two_agents(rabbitmq_url, tmp_path):
    """Two agents on one store, on libvirt's test driver (no domain uses
    their images: the source's guest counts as stopped), and a short
    [agent] handoff_timeout.
    """
    backend = local.LocalBackend(str(tmp_path / 'store'))
    repo = repository.Repository(backend)
    api = rpc_api.AgentAPI(transport_url=rabbitmq_url, timeout=60)
    agents = []
    try:
        for label in ('a', 'b'):
            host = agent_rpc.host_name('mig-' + label)
            workdir = tmp_path / ('agent-' + label)
            workdir.mkdir()
            agents.append((host, lab_agents.AgentProcess(
                str(workdir), backend, agent_rpc.rpc_settings(
                    rabbitmq_url, host, libvirt_uri='test:///default',
                    handoff_timeout='3')).start()))
        for host, _ in agents:
            agent_rpc.wait_rpc(api, host)
        yield api, repo, agents
    finally:
        api.cleanup()
        for _, agent in agents:
            agent.stop()
        repo.close()


def _read(path, offset, length):
    with open(path, 'rb', buffering=0) as f:
        f.seek(offset)
        return f.read(length)


def test_dead_source_fails_the_wait_and_loses_nothing(two_agents):
    """The source's agent is SIGKILLed after the destination attached
    incoming, with writes it never committed; the destination restarts
    too. The guest's first read there fails with EIO after
    handoff_timeout (nothing stale is read); once the source's agent is
    back (its mirror re-attached from its cache), the next read gets
    the handoff and every byte the source wrote.
    """
    api, repo, [(source, agent_a), (dest, agent_b)] = two_agents
    image = api.create_image(source, 'faulty', 16 * MiB)['id']
    path_a = api.attach(source, image, instance='vm-f')['path']
    data = os.urandom(3 * MiB)
    with open(path_a, 'r+b') as f:
        f.seek(MiB)
        f.write(data)
        os.fsync(f.fileno())
    path_b = api.attach(dest, image, instance='vm-f',
                        migrate_from=source)['path']
    # Refused: from itself, or a version with a migration.
    with pytest.raises(Exception, match='another host'):
        api.attach(source, image, migrate_from=source)
    with pytest.raises(Exception, match='another host'):
        api.handoff(source, image, source)
    agent_a.kill()
    agent_b.kill()
    agent_b.start()
    agent_rpc.wait_rpc(api, dest)
    incoming = api.status(dest)['attached'][image]['incoming']
    assert incoming == dict(incoming, source=source, done=False)
    started = time.monotonic()
    with pytest.raises(OSError) as ei:
        _read(path_b, MiB, len(data))
    assert ei.value.errno == errno.EIO
    # [agent] handoff_timeout (3 s), not an RPC timeout per ask.
    assert 3 <= time.monotonic() - started < 15
    agent_a.start()
    agent_rpc.wait_rpc(api, source)
    assert _read(path_b, MiB, len(data)) == data
    assert image not in api.status(source)['attached']
    incoming = api.status(dest)['attached'][image]['incoming']
    assert incoming['done'] and \
        repo.image(image).version(incoming['version']).made_by == 'migrate'
    # The destination goes on as a plain mirror: writes and checkpoints.
    with open(path_b, 'r+b') as f:
        f.write(b'after')
        os.fsync(f.fileno())
    version = api.checkpoint(dest, image)['version']
    api.wait_stable(dest, image, version)
    assert repo.read(image, version, 0, 5) == b'after'
    assert repo.read(image, version, MiB, len(data)) == data
    api.detach(dest, image)
