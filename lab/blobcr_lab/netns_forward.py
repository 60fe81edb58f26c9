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

"""Shared services on every simulated host's loopback: a TCP forwarder.

The micro Ceph cluster and RabbitMQ listen on 127.0.0.1 of this
machine's own network namespace, and Ceph's maps name those addresses.
A host namespace (hosts.py) has a loopback of its own, so this process
listens on 127.0.0.1:PORT *inside* each host namespace (a socket belongs
to the namespace of the thread that made it: setns(2) in a short-lived
thread) and relays each connection to 127.0.0.1:PORT here. The daemons
and their maps stay as they are; every host sees them where a host with
local services would.

Bytes relayed per namespace are written to ``--stats`` every second
(what the hosts moved to and from the shared services).

    python -m blobcr_lab.netns_forward --stats FILE \\
        --netns NS1 --netns NS2 --port 6789 --port 6800 ...
"""

import argparse
import ctypes
import json
import os
import signal
import socket
import sys
import threading

CLONE_NEWNET = 0x40000000
BUFFER = 256 * 1024
SWITCH_INTERVAL = 0.0005

_libc = ctypes.CDLL(None, use_errno=True)


def _setns(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, 'setns %s: %s' % (path, os.strerror(err)))
    finally:
        os.close(fd)


def listen_in(netns, port):
    """A socket listening on 127.0.0.1:``port`` of namespace ``netns``."""
    result = {}

    def make():
        try:
            # This thread only; it ends right after.
            _setns(os.path.join('/run/netns', netns))
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(('127.0.0.1', port))
            s.listen(128)
            result['socket'] = s
        except OSError as e:
            result['error'] = e
    thread = threading.Thread(target=make)
    thread.start()
    thread.join()
    if 'error' in result:
        raise result['error']
    return result['socket']


class Counters(object):

    def __init__(self):
        self.lock = threading.Lock()
        self.bytes = {}             # netns -> {'to': n, 'from': n}
        self.connections = {}

    def add(self, netns, direction, n):
        with self.lock:
            entry = self.bytes.setdefault(netns, {'to': 0, 'from': 0})
            entry[direction] += n

    def connected(self, netns):
        with self.lock:
            self.connections[netns] = self.connections.get(netns, 0) + 1

    def dump(self, path):
        with self.lock:
            data = {'bytes': self.bytes, 'connections': self.connections}
        tmp = path + '.tmp'
        with open(tmp, 'w') as f:
            json.dump(data, f)
        os.replace(tmp, path)


def _pipe(src, dst, count):
    try:
        while True:
            data = src.recv(BUFFER)
            if not data:
                break
            dst.sendall(data)
            count(len(data))
    except OSError:
        pass
    finally:
        for s, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
            try:
                s.shutdown(how)
            except OSError:
                pass


def _relay(client, port, netns, counters):
    try:
        upstream = socket.create_connection(('127.0.0.1', port))
    except OSError:
        client.close()
        return
    counters.connected(netns)
    for s in (client, upstream):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    out = threading.Thread(
        target=_pipe, daemon=True,
        args=(client, upstream, lambda n: counters.add(netns, 'to', n)))
    out.start()
    _pipe(upstream, client, lambda n: counters.add(netns, 'from', n))
    out.join()
    client.close()
    upstream.close()


def _serve(listener, port, netns, counters):
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=_relay, daemon=True,
                         args=(client, port, netns, counters)).start()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--netns', action='append', required=True)
    parser.add_argument('--port', action='append', type=int, required=True)
    parser.add_argument('--stats', required=True)
    parser.add_argument('--ready', help='file written once listening')
    args = parser.parse_args(argv)
    # Every host's Ceph and broker traffic share this one interpreter: a
    # small RPC message waited up to 5 ms (the default switch interval)
    # for the lock behind each bulk relay thread, at every hop. A real
    # network has no such wait.
    sys.setswitchinterval(SWITCH_INTERVAL)
    counters = Counters()
    for netns in args.netns:
        for port in args.port:
            listener = listen_in(netns, port)
            threading.Thread(target=_serve, daemon=True,
                             args=(listener, port, netns,
                                   counters)).start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: stop.set())
    counters.dump(args.stats)
    if args.ready:
        with open(args.ready, 'w') as f:
            f.write('%d\n' % os.getpid())
    while not stop.wait(1.0):
        counters.dump(args.stats)
    counters.dump(args.stats)
    return 0


if __name__ == '__main__':
    sys.exit(main())
