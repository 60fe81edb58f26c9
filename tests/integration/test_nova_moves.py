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

"""A server booted from a BlobCR volume moves between two real
nova-computes, as Nova moves it, with stock Nova and os-brick (the
default 'local' connection) and a guest that writes all along
(test_nova_flows.SCENARIO: numbered, fsynced 4 KiB records):

* live migration (``os-migrateLive``): the guest goes on writing on the
  destination without a reboot; a snapshot taken there holds every
  record announced before it, written on either host; the source's
  agent keeps nothing of the server attached;
* cold migration (``migrate``, then ``confirmResize``): the guest boots
  on the other host and finds every record it announced;
* evacuate: the server's host dies (its nova-compute and BlobCR agent
  SIGKILLed, its guest destroyed, the service forced down), Nova rebuilds
  the server on the other host. The volume is `cluster` (the default on
  RADOS, where these hosts' agents are): a lost host loses nothing its
  guest flushed (doc/source/cinder.rst, "What is durable when"), and
  every record is fsynced before it is announced, so the guest finds
  every record it announced, and nothing it never wrote. The dead host
  then comes back (agent, nova-compute, service up) holding nothing of
  the server.

The two hosts (tests/nova_fixtures.py ``nova_pair``) are this machine
twice: two BlobCR agents on one store, two session libvirtds (the second
in a UTS namespace with its own host name, Nova's node name, and its own
host UUID), two nova-computes. Nova's [libvirt] live_migration_uri
reaches the destination's libvirtd by its host name (a link to its
socket); incoming migrations listen on 127.0.0.1.

It runs in CI with the other real-Nova flows (BLOBCR_REAL_NOVA=0 leaves
it out).
"""

import os
import time
import uuid

import libvirt
import pytest

from blobcr_common.rpc import api as rpc_api
from blobcr_lab import agent_rpc
from tests.integration import test_nova_flows as flows
from tests.integration import test_nova_real as real

pytestmark = pytest.mark.skipif(
    os.environ.get('BLOBCR_REAL_NOVA') == '0',
    reason='BLOBCR_REAL_NOVA=0: no real Nova stack')

# Live migration with a target host and block_migration 'auto' (2.30),
# migrate with a host (2.56), services by id with forced_down (2.53).
MICROVERSION = '2.56'


def _server(admin, server_id):
    return admin.get('/servers/%s' % server_id).json()['server']


def _wait_on(admin, server_id, status, host, nova, timeout=300):
    shown = flows.wait_server(admin, server_id, status, timeout, nova)
    deadline = time.monotonic() + 60
    while shown['OS-EXT-SRV-ATTR:host'] != host:
        assert time.monotonic() < deadline, (
            'server %s is on %s, not %s' % (
                server_id, shown['OS-EXT-SRV-ATTR:host'], host))
        time.sleep(1)
        shown = _server(admin, server_id)
    return shown


def _held_on(api, host, server_id):
    """The images ``host``'s agent has attached for the server."""
    attached = api.status(host)['attached']
    return [image for image, a in attached.items()
            if server_id in (a.get('instances') or ())]


def _snapshot_holds(stack, nova, guest, volume_id, name):
    """A snapshot of the volume while the guest writes: the records it
    holds, checked against those announced around the request.
    """
    before = guest.wrote()
    snap = stack.openstack('--os-volume-api-version', '3.66', 'volume',
                           'snapshot', 'create', '--volume', volume_id,
                           name)
    snap = stack.wait_status('snapshot', snap['id'], 'available',
                             timeout=300)
    after = guest.wrote()
    copy = stack.openstack('volume', 'create', '--snapshot', snap['id'],
                           '--size', '1', name + '-copy')
    stack.wait_status('volume', copy['id'], 'available', timeout=120)
    held = flows.records_in(stack, copy['id'], nova.compute_host)
    assert before + 1 <= held <= after + 2, (name, before, held, after)
    return before, held, after, copy['id']


def _service_id(admin, host):
    return admin.get('/os-services?binary=nova-compute&host=%s'
                     % host).json()['services'][0]['id']


def _lose_host(nova, admin, server, host):
    """``host`` dies with the server on it: nova-compute and the agent
    SIGKILLed, the guest gone with them; Nova told it is down (an
    operator or a fencing agent forces the service down, as Nova's
    evacuate documentation asks).
    """
    lab_host = nova.lab_hosts[host]
    nova.kill_compute(host)
    conn = libvirt.open(lab_host.libvirtd.uri)
    try:
        conn.lookupByName(server['OS-EXT-SRV-ATTR:instance_name']).destroy()
    finally:
        conn.close()
    lab_host.agent.kill()
    admin.put('/os-services/%s' % _service_id(admin, host),
              json={'forced_down': True})


def _revive_host(nova, admin, api, host):
    """The lost host back: its agent (which finds its cache fenced),
    nova-compute (which cleans up the evacuated server), then the
    service no longer forced down (Nova refuses that until the restarted
    compute has completed its evacuations).
    """
    nova.lab_hosts[host].agent.start()
    agent_rpc.wait_rpc(api, host)
    nova.start_compute(host)
    service = _service_id(admin, host)
    deadline = time.monotonic() + 180
    while admin.put('/os-services/%s' % service, raise_exc=False,
                    json={'forced_down': False}).status_code == 400:
        assert time.monotonic() < deadline, nova.log(
            nova.compute_service(host), 40)
        time.sleep(2)
    nova.wait_compute(host)


class Moves(object):
    """One server, moved by Nova as an admin moves it; ``host`` is where
    it runs, ``boot`` the guest's boots so far.
    """

    def __init__(self, stack, nova, second, api, server, volume_id):
        self.stack = stack
        self.nova = nova
        self.api = api
        self.server = server
        self.volume_id = volume_id
        self.hosts = (nova.compute_host, second)
        self.admin = nova.compute('admin', MICROVERSION)
        self.guest = flows.Guest(nova, server)
        self.host = _server(self.admin, server)['OS-EXT-SRV-ATTR:host']
        self.boot = 1
        self.copies = []

    def other(self, host=None):
        return [h for h in self.hosts if h != (host or self.host)][0]

    def _moved(self, status='ACTIVE', timeout=300):
        source, self.host = self.host, self.other()
        _wait_on(self.admin, self.server, status, self.host, self.nova,
                 timeout)
        return source

    def snapshot(self, name):
        before, held, after, copy = _snapshot_holds(
            self.stack, self.nova, self.guest, self.volume_id, name)
        self.copies.append(copy)
        return before, held, after

    def live_migrate(self, suffix):
        """To the other host, the guest writing; it goes on writing there
        without a reboot, a snapshot there holds what it announced, the
        source holds nothing.
        """
        announced = self.guest.wait_writes(2)
        began = time.monotonic()
        flows.action(self.admin, self.server, {'os-migrateLive': {
            'host': self.other(), 'block_migration': 'auto'}})
        source = self._moved()
        took = time.monotonic() - began
        assert _held_on(self.api, source, self.server) == [], \
            'the source still holds the server\'s volume'
        assert _held_on(self.api, self.host, self.server)
        self.guest.wait_writes(3)
        assert 'BLOBCR-BOOT %d' % (self.boot + 1) not in self.guest.text()
        before, held, after = self.snapshot('moves-live-%s' % suffix)
        print('live migration %s -> %s in %.1f s: records 0..%d announced '
              'before it; a snapshot on %s held %d (%d..%d announced '
              'around it); %s' % (source, self.host, took, announced,
                                  self.host, held, before, after,
                                  self._handoff_line()))

    def _handoff_line(self):
        """The destination agent's last HANDOFF log line (what the
        guest's first request there waited: mirror/handoff.py).
        """
        with open(self.nova.lab_hosts[self.host].agent.log.name,
                  errors='replace') as f:
            lines = [line for line in f if 'HANDOFF image=' in line]
        assert lines, 'no handoff on %s' % self.host
        return lines[-1].split('HANDOFF ', 1)[1].strip()

    def cold_migrate(self):
        """To the other host (migrate, confirmResize): the guest boots
        there and finds every record it announced.
        """
        announced = self.guest.wait_writes(2)
        flows.action(self.admin, self.server,
                     {'migrate': {'host': self.other()}})
        flows.wait_server(self.admin, self.server, 'VERIFY_RESIZE',
                          nova=self.nova)
        flows.action(self.admin, self.server, {'confirmResize': None})
        source = self._moved()
        self.boot += 1
        found = self.guest.booted(self.boot)
        assert found >= announced + 1, ('cold migration', announced, found)
        assert _held_on(self.api, source, self.server) == []
        print('cold migration %s -> %s: records 0..%d announced before it, '
              '%d found at boot %d' % (source, self.host, announced, found,
                                       self.boot))

    def evacuate(self, suffix):
        """Its host dies after a snapshot and two more records; Nova
        rebuilds it on the other host: every record announced is there,
        none never written. The dead host comes back holding nothing of
        it.
        """
        self.guest.wait_writes(1)
        _, held, _ = self.snapshot('moves-evac-%s' % suffix)
        last = self.guest.wait_writes(2)
        _lose_host(self.nova, self.admin,
                   _server(self.admin, self.server), self.host)
        flows.action(self.admin, self.server,
                     {'evacuate': {'host': self.other()}})
        lost = self._moved(timeout=420)
        self.boot += 1
        found = self.guest.booted(self.boot)
        # Every record announced (fsynced first) is there; one more may
        # have been in flight when the host died.
        assert last + 1 <= found <= last + 2, ('evacuate', held, found,
                                               last)
        print('evacuate from %s to %s: the snapshot held records 0..%d, '
              '%d announced (fsynced) when the host died, %d found at '
              'boot %d: none lost with the host'
              % (lost, self.host, held - 1, last + 1, found, self.boot))
        _revive_host(self.nova, self.admin, self.api, lost)
        assert _held_on(self.api, lost, self.server) == []
        self.guest.wait_writes(1)


def test_live_and_cold_migration_and_evacuate_lose_no_write(
        nova_pair, rabbitmq_url, tmp_path):
    """Live migration goes into the second host (its libvirtd listens
    for migrations in a network namespace of its own; the first host's,
    on this machine's loopback, cannot): a server Nova booted there is
    cold-migrated away first.
    """
    real.skip_without_boot_tools()
    stack, nova, hosts, second = nova_pair
    assert nova.neutron, 'no Neutron venv: run tools/install-neutron.sh'
    suffix = uuid.uuid4().hex[:6]
    volume = real.boot_volume((stack, nova, hosts), str(tmp_path / 'boot.img'),
                              flows.SCENARIO, 'moves-%s' % suffix)
    compute = nova.compute('demo')
    api = rpc_api.AgentAPI(transport_url=rabbitmq_url, timeout=60)
    moves = None
    server = None
    try:
        server = real.boot(nova, volume['id'], 'moves-%s' % suffix)['id']
        moves = Moves(stack, nova, second, api, server, volume['id'])
        assert moves.guest.booted(1) == 0
        if moves.host == second:
            moves.cold_migrate()
            moves.live_migrate(suffix)
        else:
            moves.live_migrate(suffix)
            moves.cold_migrate()
        moves.evacuate(suffix)
    finally:
        if server is not None:
            compute.delete('/servers/%s' % server, raise_exc=False)
        api.cleanup()
    for volume_id in [volume['id']] + (moves.copies if moves else []):
        stack.wait_status('volume', volume_id, 'available', timeout=300)
