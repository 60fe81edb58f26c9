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

"""The checkpointing proxy: the guest-facing HTTP endpoint of a host.

A guest POSTs ``/v1/checkpoint`` and gets the version id back as soon as
the snapshot is taken (before it is persisted), then polls
``/v1/checkpoint/<version>`` for pending / stable / failed. Jobs that
checkpoint many VMs together pass a group id and the number of members;
``/v1/group/<id>`` says when every member's version is stable.

A request may name a quiesce mode (none, fsfreeze, suspend); the agent's
default applies otherwise.

Only instances hosted here may use it (see auth.py); bad requests get a
4xx with a JSON message and never commit anything; each instance is rate
limited, checkpoints on a small budget and every other request on a
larger one. A member of a group sees only its counts (groups.guest_view).
Group ids are scoped by the instance's project (``agent.project_of``):
a guest can neither join nor see another project's group.

The same process serves the FUSE disks of every VM, so connections are
bounded: a request must arrive whole within ``request_timeout`` seconds
(else the connection is closed), at most ``max_connections`` are served
at once and ``max_per_source`` from one address; over a cap the
connection gets 503 ``{"error": "busy"}`` from the accepting thread and
no handler thread is started. Bodies need a ``Content-Length`` of at
most six digits; any ``Transfer-Encoding`` is refused (411).

The proxy itself knows nothing of images or hosts: it calls an
``agent`` with ``resolve(instance) -> image or None``,
``project_of(instance) -> project or None``,
``checkpoint(image, group=, members=, quiesce=, project=, creator=) ->
dict``, ``state(image, version) -> str`` and ``group_state(group,
project=) -> dict``.
"""

import http.server
import io
import json
import logging
import math
import re
import socket
import sys
import threading
import time

from blobcr_agent.hypervisor import domains
from blobcr_agent.repository import groups
from blobcr_common import exception

LOG = logging.getLogger(__name__)

_VERSION_PATH = re.compile(r'^/v1/checkpoint/(\d{1,9})$')
_GROUP_PATH = re.compile(r'^/v1/group/([A-Za-z0-9_.-]{1,64})$')
_CONTENT_LENGTH = re.compile(r'[0-9]{1,6}')
_BUSY_BODY = json.dumps({'error': 'busy'}).encode()
_BUSY = (b'HTTP/1.0 503 Service Unavailable\r\n'
         b'Server: blobcr-proxy\r\n'
         b'Content-Type: application/json\r\n'
         b'Content-Length: %d\r\n'
         b'Retry-After: 1\r\n'
         b'Connection: close\r\n\r\n' % len(_BUSY_BODY)) + _BUSY_BODY


class HTTPError(Exception):
    def __init__(self, status, message, retry_after=None):
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


class RateLimiter(object):
    """A token bucket per instance: ``burst`` at once, ``rate`` per s."""

    def __init__(self, rate, burst):
        self.rate, self.burst = rate, burst
        self._buckets = {}
        self._lock = threading.Lock()

    def allow(self, key):
        now = time.monotonic()
        with self._lock:
            tokens, last = self._buckets.get(key, (self.burst, now))
            tokens = min(self.burst, tokens + (now - last) * self.rate)
            if tokens < 1:
                self._buckets[key] = (tokens, now)
                return False
            self._buckets[key] = (tokens - 1, now)
            return True

    def retry_after(self):
        """Whole seconds until the next token, for Retry-After."""
        return max(1, math.ceil(1.0 / self.rate))


class _DeadlineReader(io.RawIOBase):
    """The socket's input with one deadline for a whole request: a
    per-recv timeout alone lets a client sending a byte every few seconds
    hold its thread forever.
    """

    def __init__(self, sock, timeout):
        self.sock, self.timeout = sock, timeout
        self.restart()

    def restart(self):
        self.deadline = time.monotonic() + self.timeout

    def readable(self):
        return True

    def readinto(self, buffer):
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError('request not received within %gs'
                               % self.timeout)
        self.sock.settimeout(left)
        return self.sock.recv_into(buffer)


class _Server(http.server.ThreadingHTTPServer):
    """A thread per connection, within caps checked before the thread
    starts.
    """

    daemon_threads = True
    request_queue_size = 128

    def __init__(self, address, handler, max_connections, max_per_source):
        self.max_per_source = max_per_source
        self._slots = threading.BoundedSemaphore(max_connections)
        self._per_source = {}
        self._lock = threading.Lock()
        self._refused = 0
        self._last_warning = 0.0
        super().__init__(address, handler)

    def _admit(self, source):
        if not self._slots.acquire(blocking=False):
            return False
        with self._lock:
            held = self._per_source.get(source, 0)
            if self.max_per_source and held >= self.max_per_source:
                self._slots.release()
                return False
            self._per_source[source] = held + 1
        return True

    def _release(self, source):
        with self._lock:
            held = self._per_source.pop(source, 1) - 1
            if held > 0:
                self._per_source[source] = held
        self._slots.release()

    def _refuse(self, request, source):
        """503 busy and close, in the accepting thread: never blocks."""
        try:
            request.setblocking(False)
            try:
                # What already arrived, so that close() sends a FIN and
                # the client reads the 503 rather than a reset.
                request.recv(65536)
            except OSError:
                pass
            request.send(_BUSY)
        except OSError:
            pass
        self.shutdown_request(request)
        now = time.monotonic()
        with self._lock:
            self._refused += 1
            if now - self._last_warning < 10:
                return
            refused, self._refused = self._refused, 0
            self._last_warning = now
        LOG.warning('guest endpoint busy: refused %d connection(s), the '
                    'last from %s', refused, source)

    def process_request(self, request, client_address):
        source = client_address[0]
        if not self._admit(source):
            return self._refuse(request, source)
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._release(source)       # the thread did not start
            raise

    def handle_error(self, request, client_address):
        # Not socketserver's traceback on stderr for every client that
        # resets its connection.
        if isinstance(sys.exc_info()[1], OSError):
            LOG.debug('guest endpoint: connection from %s lost',
                      client_address[0], exc_info=True)
        else:
            LOG.exception('guest endpoint: connection from %s',
                          client_address[0])

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release(client_address[0])


class CheckpointProxy(object):

    def __init__(self, authenticator, agent, rate=1.0, burst=5,
                 max_body=4096, get_rate=20.0, get_burst=40,
                 request_timeout=10.0, max_connections=64,
                 max_per_source=16):
        if max_body > 999999:
            raise ValueError('max_body: at most 999999 bytes')
        self.auth = authenticator
        self.agent = agent
        self.limiter = RateLimiter(rate, burst)
        # Everything but checkpoints: state and group polls, mistakes.
        self.get_limiter = RateLimiter(get_rate, get_burst)
        self.max_body = max_body
        self.request_timeout = request_timeout
        self.max_connections = max_connections
        # 0 or None: no cap per address (all guests may come through one
        # metadata proxy).
        self.max_per_source = max_per_source

    def handle(self, method, path, headers, body):
        """One request -> ``(status, JSON-able dict)``; never raises. A
        429's dict carries ``retry_after`` (seconds).
        """
        try:
            return 200, self._route(method, path, headers, body)
        except HTTPError as e:
            reply = {'error': str(e)}
            if e.retry_after is not None:
                reply['retry_after'] = e.retry_after
            return e.status, reply
        except exception.BlobCRError as e:
            LOG.warning('checkpoint request failed: %s', e)
            return 503, {'error': 'the checkpoint could not be taken: %s'
                         % e}
        except Exception:
            LOG.exception('checkpoint proxy failure')
            return 500, {'error': 'internal error'}

    def _route(self, method, path, headers, body):
        instance = self.auth.instance(headers)
        if instance is None:
            raise HTTPError(401, 'unauthenticated: send X-Instance-ID with '
                                 'X-BlobCR-Token or X-Instance-ID-Signature')
        is_checkpoint = method == 'POST' and path == '/v1/checkpoint'
        # Polls are cheap but not free (a lookup, repository reads):
        # a larger budget, spent before anything is looked up.
        if not is_checkpoint and not self.get_limiter.allow(instance):
            raise HTTPError(429, 'too many requests from %s' % instance,
                            self.get_limiter.retry_after())
        image = self.agent.resolve(instance)
        if image is None:
            raise HTTPError(403, 'instance %s is not hosted here' % instance)
        if path == '/v1/checkpoint':
            if method != 'POST':
                raise HTTPError(405, 'POST a checkpoint request')
            try:
                request = self._json(body)
            except HTTPError:
                # A malformed body spends the mistakes' budget: a flood of
                # them is refused like any other (429), before parsing.
                if not self.get_limiter.allow(instance):
                    raise HTTPError(429, 'too many bad requests from %s'
                                    % instance,
                                    self.get_limiter.retry_after())
                raise
            if not self.limiter.allow(instance):
                raise HTTPError(429, 'too many checkpoints from %s'
                                % instance, self.limiter.retry_after())
            return self._checkpoint(instance, image, request)
        match = _VERSION_PATH.match(path)
        if match:
            if method != 'GET':
                raise HTTPError(405, 'GET the state of a version')
            version = int(match.group(1))
            try:
                return {'version': version,
                        'state': self.agent.state(image, version)}
            except exception.BlobCRError:
                raise HTTPError(404, 'no version %d of this instance'
                                % version)
        match = _GROUP_PATH.match(path)
        if match:
            if method != 'GET':
                raise HTTPError(405, 'GET the state of a group')
            return self._group(instance, image, match.group(1))
        raise HTTPError(404, 'no such endpoint: %s' % path[:100])

    @staticmethod
    def _json(body):
        if not body:
            return {}
        try:
            request = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            raise HTTPError(400, 'the body is not JSON')
        except RecursionError:
            # Thousands of "[" in a body within max_body: refused like
            # any bad body, not a 500 with a traceback per request.
            raise HTTPError(400, 'the body nests too deep')
        if not isinstance(request, dict):
            raise HTTPError(400, 'the body must be a JSON object')
        unknown = set(request) - {'group', 'members', 'quiesce'}
        if unknown:
            raise HTTPError(400, 'unknown fields: %s'
                            % ', '.join(sorted(map(str, unknown))[:5]))
        group, members = request.get('group'), request.get('members')
        if (group is None) != (members is None):
            raise HTTPError(400, 'group and members go together')
        try:
            if group is not None:
                groups.check(group, members)
        except exception.InvalidInput as e:
            raise HTTPError(400, str(e))
        quiesce = request.get('quiesce')
        if quiesce is not None and quiesce not in domains.QUIESCE_MODES:
            raise HTTPError(400, 'quiesce: one of %s'
                            % ', '.join(domains.QUIESCE_MODES))
        return request

    def _checkpoint(self, instance, image, request):
        try:
            group = request.get('group')
            result = self.agent.checkpoint(
                image, group=group, members=request.get('members'),
                quiesce=request.get('quiesce'),
                project=self.agent.project_of(instance) if group else None,
                creator='instance %s' % instance)
        except exception.InvalidInput as e:
            raise HTTPError(400, str(e))
        # downtime: request to ack on the agent; held: the guest kept
        # still (quiesce, snapshot, resume).
        reply = {'version': result['version'],
                 'downtime_ms': result.get('downtime_ms'),
                 'held_ms': result.get('held_ms'),
                 'quiesce': result.get('quiesce')}
        if request.get('group'):
            reply['group'] = request['group']
        LOG.info('instance %s: checkpoint -> version %d', instance,
                 result['version'])
        return reply

    def _group(self, instance, image, group):
        # A guest only sees the groups of its project that its own image
        # is a member of, and of them only counts.
        view = groups.guest_view(
            self.agent.group_state(group, self.agent.project_of(instance)),
            image)
        if view is None:
            raise HTTPError(404, 'no group %s with this instance in it'
                            % group)
        return view

    def serve(self, host='127.0.0.1', port=0):
        """Serve HTTP on a thread; returns the server (``server_port``)."""
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            timeout = proxy.request_timeout

            def version_string(self):
                return 'blobcr-proxy'   # not which Python answers

            def setup(self):
                super().setup()
                self.rfile.close()      # the socket stays open
                self._reader = _DeadlineReader(self.connection,
                                               proxy.request_timeout)
                self.rfile = io.BufferedReader(self._reader)

            def _reply(self, status, data, headers=()):
                payload = json.dumps(data).encode()
                # Writing has its own timeout, not what the read left.
                self.connection.settimeout(proxy.request_timeout)
                self.send_response(status)
                self.send_header('Content-Type', 'application/json')
                self.send_header('Content-Length', str(len(payload)))
                for name, value in headers:
                    self.send_header(name, value)
                if self.close_connection:
                    self.send_header('Connection', 'close')
                self.end_headers()
                if self.command != 'HEAD':
                    self.wfile.write(payload)
                self._reader.restart()

            def send_error(self, code, message=None, explain=None):
                # The parser's own refusals (bad request line, headers
                # too long...): JSON like the rest, and close.
                self.close_connection = True
                if code == 501:         # a method nobody handles here
                    code, message = 405, 'method not allowed'
                try:
                    self._reply(code, {'error': message or
                                       self.responses.get(code, ('',))[0]
                                       or 'bad request'})
                except OSError:
                    pass

            def _length(self):
                """The body's length, or an HTTPError."""
                if self.headers.get_all('Transfer-Encoding'):
                    raise HTTPError(411, 'Transfer-Encoding is not '
                                         'accepted: send Content-Length')
                values = self.headers.get_all('Content-Length') or []
                if not values:
                    return 0
                if len(values) > 1 or \
                        not _CONTENT_LENGTH.fullmatch(values[0]):
                    raise HTTPError(400, 'bad Content-Length')
                length = int(values[0])
                if length > proxy.max_body:
                    raise HTTPError(413, 'body over %d bytes'
                                    % proxy.max_body)
                return length

            def _serve(self):
                try:
                    length = self._length()
                except HTTPError as e:
                    # The body's end is unknown: nothing more is read.
                    self.close_connection = True
                    return self._reply(e.status, {'error': str(e)})
                try:
                    body = self.rfile.read(length) if length else b''
                except (TimeoutError, socket.timeout):
                    self.close_connection = True
                    return self._reply(408, {'error': 'the body did not '
                                             'arrive in time'})
                if len(body) != length:
                    self.close_connection = True
                    return             # the client went away
                status, data = proxy.handle(self.command, self.path,
                                            self.headers, body)
                headers = []
                if status == 429:
                    # When the next token is due, for polite clients.
                    headers.append(('Retry-After',
                                    str(data.get('retry_after', 1))))
                self._reply(status, data, headers)

            do_GET = do_POST = do_PUT = do_DELETE = _serve

            def log_message(self, fmt, *args):
                LOG.debug('%s %s', self.address_string(), fmt % args)

        server = _Server((host, port), Handler, self.max_connections,
                         self.max_per_source)
        threading.Thread(target=server.serve_forever, daemon=True,
                         name='blobcr-proxy').start()
        return server
