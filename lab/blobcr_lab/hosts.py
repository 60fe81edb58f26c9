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

"""Many hosts on one machine: network namespaces on a bridge.

``HostNetwork(count, workdir, ports)`` makes:

* a hub namespace holding a bridge, and ``count`` host namespaces, each
  with a veth on that bridge and an address of its own (SUBNET.10,
  .11, ...): what the hosts say to each other goes over the bridge,
  and nothing leaves this machine (no namespace has a route out);
* one forwarder (netns_forward.py) that puts the shared services (the
  micro Ceph cluster's mon and OSDs, RabbitMQ: ``ports`` on 127.0.0.1)
  on every host's own loopback.

Each ``Host`` runs its processes in its network namespace (its
blobcr-agent, its FUSE mount and state in a directory of its own, its
VMs). ``stop()`` stops the forwarder by its pid and deletes the
namespaces; stop the hosts' processes first.

``service_ports(ceph_conf, rabbit_url)`` lists the ports to forward.
"""

import json
import os
import subprocess
import sys
import time
import urllib.parse
import uuid

SUBNET = '10.213.0.'
FIRST = 10
# Each LinkedNamespace takes the first 10.213.N.0/30 (N from 1) that no
# address of this namespace is in: a link an earlier run left behind
# (killed before its teardown) would otherwise catch the new link's route.
LINK_NETWORK = '10.213.'


def _ip(*args):
    proc = subprocess.run(['ip'] + list(args), capture_output=True,
                          text=True)
    if proc.returncode:
        raise RuntimeError('ip %s: %s' % (' '.join(args),
                                          proc.stderr.strip()))
    return proc.stdout


def _ports_of(addrs):
    for a in (addrs or {}).get('addrvec', []):
        host, _, port = a.get('addr', '').rpartition(':')
        if host == '127.0.0.1' and port.isdigit():
            yield int(port)


def service_ports(ceph_conf=None, rabbit_url=None):
    """The loopback ports the hosts need: every mon and OSD public
    address of the cluster ``ceph_conf`` names, RabbitMQ's port.
    """
    ports = set()
    if ceph_conf:
        for what, key in (('mon', 'mons'), ('osd', 'osds')):
            out = subprocess.run(
                ['ceph', '-c', ceph_conf, '--connect-timeout', '10', what,
                 'dump', '-f', 'json'], capture_output=True, text=True,
                timeout=60, check=True).stdout
            for entry in json.loads(out)[key]:
                ports.update(_ports_of(entry.get('public_addrs')))
    if rabbit_url:
        port = urllib.parse.urlsplit(rabbit_url).port
        if port:
            ports.add(port)
    return sorted(ports)


class Host(object):

    def __init__(self, network, index):
        self.index = index
        self.name = 'host-%d' % index
        self.netns = '%s-h%d' % (network.prefix, index)
        self.address = SUBNET + str(FIRST + index)
        self.workdir = os.path.join(network.workdir, self.name)
        self.veth = 'v%s%d' % (network.tag, index)

    def command(self, argv):
        """``argv`` run inside this host's network namespace. Not ``ip
        netns exec``: that also gives the process a mount namespace of
        its own, where the agent's FUSE mount would be out of its VMs'
        sight.
        """
        return ['nsenter', '--net=/run/netns/' + self.netns, '--'] + \
            list(argv)

    def python(self, module, *args):
        return self.command([sys.executable, '-m', module] + list(args))


class HostNetwork(object):

    def __init__(self, count, workdir, ports):
        if not 1 <= count <= 200:
            raise ValueError('1 to 200 hosts')
        self.tag = uuid.uuid4().hex[:5]
        self.prefix = 'blobcr-%s' % self.tag
        self.hub = self.prefix + '-hub'
        self.workdir = os.path.abspath(workdir)
        self.ports = list(ports)
        self.hosts = [Host(self, i) for i in range(count)]
        self.stats_path = os.path.join(self.workdir, 'forwarded.json')
        self.forwarder = None
        self._made = []

    def start(self, timeout=60):
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _netns(self, name):
        _ip('netns', 'add', name)
        self._made.append(name)
        _ip('-n', name, 'link', 'set', 'lo', 'up')

    def _start(self, timeout):
        os.makedirs(self.workdir, exist_ok=True)
        self._netns(self.hub)
        _ip('-n', self.hub, 'link', 'add', 'br0', 'type', 'bridge')
        _ip('-n', self.hub, 'link', 'set', 'br0', 'up')
        for host in self.hosts:
            os.makedirs(host.workdir, exist_ok=True)
            self._netns(host.netns)
            _ip('-n', self.hub, 'link', 'add', host.veth, 'type', 'veth',
                'peer', 'name', 'eth0', 'netns', host.netns)
            _ip('-n', self.hub, 'link', 'set', host.veth, 'master', 'br0',
                'up')
            _ip('-n', host.netns, 'addr', 'add', host.address + '/24',
                'dev', 'eth0')
            _ip('-n', host.netns, 'link', 'set', 'eth0', 'up')
        if self.ports:
            self._start_forwarder(timeout)

    def _start_forwarder(self, timeout):
        ready = os.path.join(self.workdir, 'forwarder.ready')
        if os.path.exists(ready):
            os.unlink(ready)
        args = [sys.executable, '-m', 'blobcr_lab.netns_forward',
                '--stats', self.stats_path, '--ready', ready]
        for host in self.hosts:
            args += ['--netns', host.netns]
        for port in self.ports:
            args += ['--port', str(port)]
        log = open(os.path.join(self.workdir, 'forwarder.log'), 'ab')
        self.forwarder = subprocess.Popen(args, stdout=log, stderr=log)
        deadline = time.monotonic() + timeout
        while not os.path.exists(ready):
            if self.forwarder.poll() is not None or \
                    time.monotonic() > deadline:
                raise RuntimeError('the service forwarder did not start: '
                                   'see %s' % log.name)
            time.sleep(0.05)

    def forwarded(self):
        """Bytes relayed to and from the services, per host name."""
        try:
            with open(self.stats_path) as f:
                data = json.load(f)['bytes']
        except (OSError, ValueError, KeyError):
            return {}
        return {h.name: data.get(h.netns, {'to': 0, 'from': 0})
                for h in self.hosts}

    def reachable(self, source, dest, port):
        """True if ``source`` host connects to ``dest``'s address:port."""
        probe = ('import socket,sys;'
                 's=socket.create_connection((sys.argv[1],int(sys.argv[2])),'
                 '5);s.close()')
        proc = subprocess.run(source.command(
            [sys.executable, '-c', probe, dest.address, str(port)]),
            capture_output=True)
        return proc.returncode == 0

    def stop(self):
        if self.forwarder is not None and self.forwarder.poll() is None:
            self.forwarder.terminate()
            try:
                self.forwarder.wait(10)
            except subprocess.TimeoutExpired:
                self.forwarder.kill()
                self.forwarder.wait()
        for name in reversed(self._made):
            subprocess.run(['ip', 'netns', 'del', name], capture_output=True)
        self._made = []


def with_hostname(name, argv):
    """``argv`` run in a UTS namespace of its own, where the host name
    is ``name``: a service that takes its host's name from
    gethostname() (libvirtd's getHostname(), Nova's node name; os-brick's
    connector, which Cinder's backup and migration use) is another host.
    """
    return ['unshare', '--uts', sys.executable, '-c',
            'import os, socket, sys; socket.sethostname(sys.argv[1]); '
            'os.execvp(sys.argv[2], sys.argv[2:])', name] + list(argv)


def free_link_subnet():
    """The first LINK_NETWORK.N. (a /30 at .0) none of this namespace's
    IPv4 addresses is in.
    """
    used = set()
    for line in _ip('-o', '-4', 'addr', 'show').splitlines():
        address = line.split()[3].split('/')[0]
        if address.startswith(LINK_NETWORK):
            used.add(address.split('.')[2])
    for n in range(1, 255):
        if str(n) not in used:
            return '%s%d.' % (LINK_NETWORK, n)
    raise RuntimeError('no free %s0.0/16 link subnet' % LINK_NETWORK)


class LinkedNamespace(object):
    """One network namespace joined to this machine's own by a veth pair
    on a /30 of its own (free_link_subnet: .1 here, .2 there), nothing routed
    any further: a second "host" that processes of the root namespace
    reach at ``address`` (a live migration's incoming QEMU listens there,
    since libvirt refuses 127.0.0.1 as a migration address).
    """

    def __init__(self, tag=None):
        self.tag = tag or uuid.uuid4().hex[:6]
        self.netns = 'blobcr-%s-link' % self.tag
        self.veth = 'vl%s' % self.tag
        self.local = self.address = None
        self._made = False

    def start(self):
        subnet = free_link_subnet()
        self.local, self.address = subnet + '1', subnet + '2'
        _ip('netns', 'add', self.netns)
        self._made = True
        try:
            _ip('-n', self.netns, 'link', 'set', 'lo', 'up')
            _ip('link', 'add', self.veth, 'type', 'veth', 'peer', 'name',
                'eth0', 'netns', self.netns)
            _ip('addr', 'add', self.local + '/30', 'dev', self.veth)
            _ip('link', 'set', self.veth, 'up')
            _ip('-n', self.netns, 'addr', 'add', self.address + '/30', 'dev',
                'eth0')
            _ip('-n', self.netns, 'link', 'set', 'eth0', 'up')
        except BaseException:
            self.stop()
            raise
        return self

    def command(self, argv):
        """``argv`` in the namespace, in this mount namespace still (see
        Host.command).
        """
        return ['nsenter', '--net=/run/netns/' + self.netns, '--'] + \
            list(argv)

    def stop(self):
        """Delete the namespace (and the veth pair with it)."""
        if self._made:
            subprocess.run(['ip', 'netns', 'del', self.netns],
                           capture_output=True)
            self._made = False
