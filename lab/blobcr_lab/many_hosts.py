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

"""Many compute hosts on one real RabbitMQ, as ``[blobcr_bus]
host_vhosts`` lays them out: a virtual host per simulated host, and a
caller (cinder-volume's or the Nova listener's AgentAPI) that calls
them all (issue 56 item 6).

* :class:`HostVhosts`: the vhosts, a user the servers share and the
  caller's user, with permissions on every vhost (one
  ``rabbitmqctl import_definitions`` for all of them);
* :class:`Servers`: a process serving a slice of the hosts, each host
  an oslo.messaging RPC server made as the agent makes its own
  (``blobcr_agent.rpc.server``) with the agent's real control endpoint
  over a manager that answers ``status`` only (no store);
* :func:`make_caller` and :func:`call_hosts`: the caller and its
  rounds (every host in turn, each called twice in a row: the second
  finds its transport open), timed by whether the call opened a
  transport;
* :func:`caller_connections`: the AMQP connections the caller holds, as
  the broker lists them (``rabbitmqctl list_connections``), not as the
  caller counts them.

``python -m blobcr_lab.many_hosts serve`` (JSON on stdin) is a server
process; ``... call`` runs the caller in a process of its own (its RSS
is its own), pausing where the parent samples the broker.
"""

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.parse

from oslo_config import cfg

from blobcr_common.rpc import api as rpc_api
from blobcr_common.rpc import bus

ALL = ('.*', '.*', '.*')


class HostVhosts(object):
    """``count`` host vhosts on ``broker`` (a RabbitMQBroker we
    started), their names under ``prefix``.
    """

    def __init__(self, broker, prefix, count):
        self.broker = broker
        self.prefix = prefix
        self.vhost_format = '%s-%%(host)s' % prefix
        self.hosts = ['host-%04d' % n for n in range(count)]
        base = urllib.parse.urlsplit(broker.url)
        self._address = '%s:%d' % (base.hostname, base.port)
        self.caller_user = '%s-caller' % prefix
        self.server_user = '%s-agents' % prefix
        self._passwords = {}
        for user in (self.caller_user, self.server_user):
            self._passwords[user] = os.urandom(12).hex()
            broker.ctl('add_user', user, self._passwords[user])
        vhosts = [self.vhost(h) for h in self.hosts]
        definitions = {
            'vhosts': [{'name': v} for v in vhosts],
            'permissions': [
                dict(zip(('configure', 'write', 'read'), ALL),
                     user=user, vhost=v)
                for v in vhosts
                for user in (self.caller_user, self.server_user)]}
        with tempfile.NamedTemporaryFile('w', suffix='.json') as f:
            json.dump(definitions, f)
            f.flush()
            broker.ctl('import_definitions', f.name, timeout=300)

    def vhost(self, host):
        return self.vhost_format % {'host': host}

    def url(self, user, vhost='/'):
        return 'rabbit://%s:%s@%s/%s' % (
            user, self._passwords[user], self._address,
            urllib.parse.quote(vhost, ''))

    @property
    def caller_url(self):
        """The caller's URL; its vhost replaced per host (bus.host_url)."""
        return self.url(self.caller_user)

    def server_urls(self, hosts=None):
        return {h: self.url(self.server_user, self.vhost(h))
                for h in (hosts or self.hosts)}

    def cleanup(self):
        # One rabbitmqctl for every vhost (each run of it starts an
        # Erlang VM).
        names = ','.join('<<"%s">>' % self.vhost(h) for h in self.hosts)
        self.broker.ctl(
            'eval', '[rabbit_vhost:delete(V, <<"blobcr-lab">>) '
                    '|| V <- [%s]], ok.' % names, timeout=300)
        for user in (self.caller_user, self.server_user):
            self.broker.ctl('delete_user', user)


def caller_connections(broker, user):
    """The vhosts of the AMQP connections ``user`` holds on ``broker``,
    one entry a connection, as the broker lists them.
    """
    out = broker.ctl('list_connections', 'user', 'vhost', '-q',
                     '--no-table-headers')
    held = []
    for line in out.splitlines():
        fields = line.split('\t')
        if len(fields) == 2 and fields[0] == user:
            held.append(fields[1])
    return held


def queue_count(broker):
    """How many queues ``broker`` holds, over every vhost (the reply
    queues of closed transports stay until they expire:
    oslo.messaging's rabbit_transient_queues_ttl).
    """
    return int(broker.ctl('eval', 'length(rabbit_amqqueue:list()).')
               .strip())


def make_caller(transport_url, vhost_format, max_hosts, idle_timeout,
                timeout=30):
    """An AgentAPI that reaches each host on its vhost, keeping at most
    ``max_hosts`` transports, closing one idle for ``idle_timeout`` s
    (0: never).
    """
    # On the global CONF, where oslo.messaging registers some of its
    # options (tracing): the client reads these once, as it is made, and
    # the overrides go again at once (as bus_split.caller).
    conf = cfg.CONF
    bus.register(conf)
    overrides = (('host_vhosts', True), ('host_vhost_format', vhost_format),
                 ('max_host_transports', max_hosts),
                 ('host_transport_idle_timeout', idle_timeout))
    for option, value in overrides:
        conf.set_override(option, value, group=bus.GROUP)
    try:
        return rpc_api.AgentAPI(conf, transport_url=transport_url,
                                timeout=timeout)
    finally:
        for option, _ in overrides:
            conf.clear_override(option, group=bus.GROUP)


def process_figures():
    """This process's resident memory (KiB) and threads."""
    figures = {}
    with open('/proc/self/status') as f:
        for line in f:
            key, _, value = line.partition(':')
            if key == 'VmRSS':
                figures['rss_kib'] = int(value.split()[0])
            elif key == 'Threads':
                figures['threads'] = int(value)
    return figures


def call_hosts(api, hosts, rounds, pause_every):
    """Call ``status`` on every host in turn, ``rounds`` times, each
    twice in a row. Yields after every ``pause_every`` hosts and at each
    round's end what happened since: call latencies in ms by whether the
    call opened a transport (``opened``) or found it open (``cached``),
    the calls that failed (an exception, or an answer for another
    host), and the transports the caller keeps and is closing.
    """
    opened = []
    make = api._transport

    def counting(url):
        opened.append(url)
        return make(url)
    api._transport = counting
    for n in range(rounds):
        part = _part()
        for i, host in enumerate(hosts):
            for _ in range(2):
                before = len(opened)
                start = time.perf_counter()
                try:
                    answer = api.status(host)
                    error = None if answer.get('host') == host else \
                        'answered %r' % (answer,)
                except Exception as e:
                    error = repr(e)
                ms = (time.perf_counter() - start) * 1e3
                part['opened' if len(opened) > before else 'cached'].append(
                    ms)
                if error:
                    part['errors'].append('%s: %s' % (host, error))
            if (i + 1) % pause_every == 0 or i + 1 == len(hosts):
                # The caller's own count of what it keeps and closes, for
                # context: what it holds is the broker's to say.
                part.update(round=n + 1, called=i + 1, kept=len(api._hosts),
                            closing=api._hosts.closing)
                yield part
                part = _part()


def _part():
    return {'opened': [], 'cached': [], 'errors': []}


class _Manager(object):
    """What the control endpoint calls: ``status`` only."""

    def __init__(self, host):
        self.host = host

    def status(self):
        return {'host': self.host, 'images': 0}


def serve(urls):
    """An RPC server per host of ``urls`` (host: transport URL), started;
    the agent's own server and control endpoint.
    """
    import oslo_messaging as messaging

    from blobcr_agent.rpc import server
    from blobcr_common import rpc

    servers = []
    for host, url in sorted(urls.items()):
        transport = messaging.get_rpc_transport(cfg.CONF, url=url)
        endpoint = server.ControlEndpoint(_Manager(host))
        servers.append(server._server(transport, rpc.TOPIC, host, endpoint))
        servers[-1].start()
    return servers


class Servers(object):
    """A process serving ``urls`` (host: URL) until stopped."""

    def __init__(self, urls, timeout=600):
        self.proc = subprocess.Popen(
            [sys.executable, '-m', 'blobcr_lab.many_hosts', 'serve'],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.proc.stdin.write(json.dumps(urls) + '\n')
        self.proc.stdin.flush()
        # The first line says the servers listen (or the process died).
        line = self.proc.stdout.readline()
        if line.strip() != 'ready %d' % len(urls):
            self.stop()
            raise RuntimeError('RPC servers did not start: %r' % line)

    def stop(self, timeout=60):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Caller(object):
    """:func:`call_hosts` in a process of its own; :meth:`events` are its
    pauses, each resumed by :meth:`resume`.
    """

    def __init__(self, **settings):
        self.proc = subprocess.Popen(
            [sys.executable, '-m', 'blobcr_lab.many_hosts', 'call'],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self._send(settings)

    def _send(self, message):
        self.proc.stdin.write(json.dumps(message) + '\n')
        self.proc.stdin.flush()

    def events(self):
        for line in self.proc.stdout:
            yield json.loads(line)
        if self.proc.wait() != 0:
            raise RuntimeError('the caller exited with %d'
                               % self.proc.returncode)

    def resume(self):
        self._send({'go': True})

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _run_caller(settings, wait):
    """The caller process: its pauses as JSON lines; each waits for
    ``wait()``. After the rounds, one pause at once, one after
    ``idle_wait`` seconds without calls.
    """
    def pause(event):
        event.update(process_figures())
        print(json.dumps(event), flush=True)
        wait()
    pause({'phase': 'start'})
    api = make_caller(settings['url'], settings['vhost_format'],
                      settings['max_hosts'], settings['idle_timeout'])
    for part in call_hosts(api, settings['hosts'], settings['rounds'],
                           settings['pause_every']):
        part['phase'] = 'calls'
        pause(part)
    if settings.get('idle_wait'):
        time.sleep(settings['idle_wait'])
        pause({'phase': 'idle', 'waited': settings['idle_wait']})
    api.cleanup()


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    settings = json.loads(sys.stdin.readline())
    if argv == ['serve']:
        servers = serve(settings)
        print('ready %d' % len(servers), flush=True)
        sys.stdin.read()
        # No graceful stop (each server's takes up to a poll timeout):
        # the broker drops the connections of a process that exits.
        os._exit(0)
    elif argv == ['call']:
        _run_caller(settings, sys.stdin.readline)
    else:
        sys.exit('usage: python -m blobcr_lab.many_hosts serve|call')


if __name__ == '__main__':
    main()
