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
bounded, and what a client holds before it is authenticated is little:
one thread reads the request line and headers of every connection (no
thread each), which must arrive within ``header_timeout`` seconds (then
408 and close; past ``max_waiting`` connections, the oldest of the
address that has most is cut). Only a whole head gets a handler thread
(at most ``max_connections``, ``max_per_source`` of one address until
authenticated), which authenticates first: a request no instance signed
gets 401 with its body unread; an instance has ``max_per_instance``
requests served at once, each of which must arrive whole within
``request_timeout`` of its connection. Over a cap: 503 ``{"error":
"busy"}`` without a thread. Every authenticated request spends a budget
of its instance, framing errors and late bodies included. Bodies need a
``Content-Length`` of at most six digits; any ``Transfer-Encoding`` is
refused (411).

The proxy itself knows nothing of images or hosts: it calls an
``agent`` with ``resolve(instance) -> image or None``,
``project_of(instance) -> project or None``,
``checkpoint(image, group=, members=, quiesce=, project=, creator=) ->
dict``, ``state(image, version) -> str`` and ``group_state(group,
project=) -> dict``.
"""

import collections
import http.server
import io
import json
import logging
import math
import re
import selectors
import socket
import socketserver
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
# A request line and headers longer than this get 431 from the head
# reader (the parser's own limits are per line and per count).
_MAX_HEAD = 65536
# After an early refusal (the body left unread), how long and how much
# input the head reader waits for and drops before it closes: a close
# with input unread sends a reset, which may reach the client before it
# reads the reply.
_LINGER = 1.0
_MAX_LINGER_BYTES = 1 << 20
_UNAUTHENTICATED = ('unauthenticated: send X-Instance-ID with '
                    'X-BlobCR-Token or X-Instance-ID-Signature')
_BUSY_BODY = json.dumps({'error': 'busy'}).encode()
_BUSY = (b'HTTP/1.0 503 Service Unavailable\r\n'
         b'Server: blobcr-proxy\r\n'
         b'Content-Type: application/json\r\n'
         b'Content-Length: %d\r\n'
         b'Retry-After: 1\r\n'
         b'Connection: close\r\n\r\n' % len(_BUSY_BODY)) + _BUSY_BODY


class HTTPError(Exception):
    def __init__(self, status, message, retry_after=None, **extra):
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after
        self.extra = extra          # more of the reply's fields


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
    """A connection's input: first what the head reader already took off
    the socket, then the socket, all by one deadline (not per read: a
    client sending a byte every few seconds would hold its thread
    forever).
    """

    def __init__(self, sock, prefix, deadline):
        self.sock, self.prefix, self.deadline = sock, prefix, deadline

    def readable(self):
        return True

    def readinto(self, buffer):
        if self.prefix:
            n = min(len(buffer), len(self.prefix))
            buffer[:n] = self.prefix[:n]
            del self.prefix[:n]
            return n
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError('request not received in time')
        self.sock.settimeout(left)
        return self.sock.recv_into(buffer)


class _Connection(object):
    """A guest connection from accept to close."""

    __slots__ = ('sock', 'address', 'source', 'started', 'deadline',
                 'buffer', 'first', 'scanned', 'instance', 'linger',
                 'dropped')

    def __init__(self, sock, address, head_timeout):
        self.sock, self.address, self.source = sock, address, address[0]
        self.started = time.monotonic()
        # The head's deadline; then, lingering, the close's.
        self.deadline = self.started + head_timeout
        self.buffer = bytearray()
        self.first = -1                 # where the request line ends
        self.scanned = 0
        self.instance = None            # once authenticated
        # Whether input may be left unread at the end (a refusal before
        # the body): then the close waits for the client's, so that it
        # reads the reply rather than a reset.
        self.linger = True
        self.dropped = 0                # bytes read while lingering

    def head_complete(self):
        """Whether the request line and the headers up to their blank
        line have arrived (each byte looked at once or twice).
        """
        buf = self.buffer
        if self.first < 0:
            self.first = buf.find(b'\n', self.scanned)
            if self.first < 0:
                self.scanned = len(buf)
                return False
            self.scanned = self.first
        at = self.scanned
        self.scanned = max(self.first, len(buf) - 2)
        return buf.find(b'\n\r\n', at) >= 0 or buf.find(b'\n\n', at) >= 0


class _Server(http.server.ThreadingHTTPServer):
    """Connections wait for their head (request line and headers) in one
    thread, with no thread of their own; a handler thread is started once
    the head is whole, and authentication is the first thing it does.
    Caps: handler threads (``max_connections``), handler threads not yet
    authenticated per source (``max_per_source``), handler threads per
    instance once authenticated (``max_per_instance``), connections
    waiting for their head (``max_waiting``: over it the oldest of the
    source that has most waits is cut).
    """

    daemon_threads = True
    request_queue_size = 128

    def __init__(self, address, handler, proxy):
        self.proxy = proxy
        self._slots = threading.BoundedSemaphore(proxy.max_connections)
        self._lock = threading.Lock()
        self._unauthenticated = {}      # source -> handler threads
        self._per_instance = {}         # instance -> handler threads
        self._handled = {}              # socket -> _Connection
        self._incoming = collections.deque()   # accepted
        self._to_linger = collections.deque()  # replied, from handlers
        self._waiting = collections.OrderedDict()  # by deadline
        self._sources = {}              # source -> OrderedDict of waiting
        self._lingering = collections.OrderedDict()
        self._counts = collections.Counter()   # logged every 10 s
        self._last_warning = 0.0
        self._closing = threading.Event()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._heads = None
        super().__init__(address, handler)   # on failure, server_close()
        self._heads = threading.Thread(target=self._read_heads, daemon=True,
                                       name='blobcr-proxy-heads')
        self._heads.start()

    # -- the accepting thread ------------------------------------------------

    def process_request(self, request, client_address):
        if self._closing.is_set():
            return self._close(request)
        request.setblocking(False)
        self._incoming.append(_Connection(
            request, client_address,
            min(self.proxy.header_timeout, self.proxy.request_timeout)))
        self._wake()

    def _wake(self):
        try:
            self._wake_w.send(b'x')
        except (BlockingIOError, OSError):
            pass                        # awake already, or closing

    # -- the head reader's thread --------------------------------------------

    def _read_heads(self):
        while not self._closing.is_set():
            try:
                self._read_heads_once()
            except Exception:
                LOG.exception('guest endpoint: the head reader failed')
                time.sleep(0.1)
        for conn in list(self._waiting.values()) + \
                list(self._lingering.values()):
            self._drop(conn)
        for queue in (self._incoming, self._to_linger):
            while queue:
                self._close(queue.popleft().sock)
        self._selector.close()

    def _read_heads_once(self):
        first = [q[next(iter(q))].deadline
                 for q in (self._waiting, self._lingering) if q]
        timeout = 0.5 if not first else \
            min(0.5, max(0.0, min(first) - time.monotonic()))
        for key, _ in self._selector.select(timeout):
            conn = key.data
            if conn is None:
                try:
                    while self._wake_r.recv(4096):
                        pass
                except (BlockingIOError, OSError):
                    pass
            elif conn.sock in self._lingering:
                self._drain(conn)
            elif conn.sock in self._waiting:
                self._receive(conn)
        while self._incoming:
            self._add(self._incoming.popleft())
        while self._to_linger:
            conn = self._to_linger.popleft()
            self._lingering[conn.sock] = conn
            self._register(conn)
        now = time.monotonic()
        while self._waiting:
            conn = next(iter(self._waiting.values()))
            if conn.deadline > now:
                break
            self._forget(conn)
            self.count('no whole request within the header deadline',
                       conn.source)
            self._send_now(conn.sock, 408, 'the request did not arrive in '
                                           'time')
            self._close(conn.sock)
        while self._lingering:
            conn = next(iter(self._lingering.values()))
            if conn.deadline > now:
                break
            self._drop(conn)

    def _register(self, conn):
        try:
            self._selector.register(conn.sock, selectors.EVENT_READ, conn)
        except (ValueError, OSError):
            self._lingering.pop(conn.sock, None)
            self._forget(conn)
            self._close(conn.sock)

    def _add(self, conn):
        if len(self._waiting) >= self.proxy.max_waiting:
            # The source that has most connections waiting loses its
            # oldest: a flood from one address cuts its own.
            source = max(self._sources, key=lambda s: len(self._sources[s]))
            oldest = self._waiting[next(iter(self._sources[source]))]
            self._forget(oldest)
            self.count('cut while waiting for their request (too many '
                       'waiting)', source)
            self._refuse(oldest.sock, source)
        self._waiting[conn.sock] = conn
        self._sources.setdefault(conn.source, collections.OrderedDict())[
            conn.sock] = None
        self._register(conn)

    def _forget(self, conn):
        """Take a waiting ``conn`` out of the selector and the tables."""
        if self._waiting.pop(conn.sock, None) is None:
            return
        mine = self._sources.get(conn.source)
        if mine is not None:
            mine.pop(conn.sock, None)
            if not mine:
                del self._sources[conn.source]
        try:
            self._selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass

    def _receive(self, conn):
        try:
            # Never more than one byte over the cap: the rest (a body)
            # stays in the socket for the handler.
            data = conn.sock.recv(_MAX_HEAD + 1 - len(conn.buffer))
        except BlockingIOError:
            return
        except OSError:
            data = None                 # reset
        if not data:
            self._forget(conn)
            if data is None or not conn.buffer:
                return self._close(conn.sock)
            # The client's end: what it sent is parsed as it is.
            return self._dispatch(conn)
        conn.buffer += data
        if conn.head_complete():
            self._forget(conn)
            return self._dispatch(conn)
        if len(conn.buffer) > _MAX_HEAD:
            self._forget(conn)
            self.count('headers too large', conn.source)
            self._send_now(conn.sock, 431, 'request header fields too large')
            self._close(conn.sock)

    def _dispatch(self, conn):
        """A handler thread for ``conn``, whose head is here; 503 if a
        cap is reached.
        """
        source, cap = conn.source, self.proxy.max_per_source
        with self._lock:
            admitted = self._slots.acquire(blocking=False)
            if admitted:
                held = self._unauthenticated.get(source, 0)
                if cap and held >= cap:
                    self._slots.release()
                    admitted = False
                else:
                    self._unauthenticated[source] = held + 1
                    self._handled[conn.sock] = conn
        if not admitted:
            self.count('busy', source)
            return self._refuse(conn.sock, source)
        try:
            socketserver.ThreadingMixIn.process_request(self, conn.sock,
                                                        conn.address)
        except BaseException:
            self._release(conn.sock)    # the thread did not start
            self._close(conn.sock)
            raise

    def _drain(self, conn):
        """A lingering connection: input read and dropped until the
        client closes.
        """
        try:
            data = conn.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b''
        conn.dropped += len(data)
        if not data or conn.dropped > _MAX_LINGER_BYTES:
            self._drop(conn)

    def _drop(self, conn):
        self._forget(conn)
        if self._lingering.pop(conn.sock, None) is not None:
            try:
                self._selector.unregister(conn.sock)
            except (KeyError, ValueError):
                pass
        self._close(conn.sock)

    @staticmethod
    def _send_now(sock, status, message):
        """A JSON error if the socket takes it at once; never blocks."""
        body = json.dumps({'error': message}).encode()
        try:
            sock.send(b'HTTP/1.0 %d %s\r\nServer: blobcr-proxy\r\n'
                      b'Content-Type: application/json\r\n'
                      b'Content-Length: %d\r\nConnection: close\r\n\r\n'
                      % (status, http.server.BaseHTTPRequestHandler.responses[
                          status][0].encode(), len(body)) + body)
        except OSError:
            pass

    def _close(self, sock):
        try:
            sock.close()
        except OSError:
            pass

    def _refuse(self, request, source):
        """503 busy and close: never blocks."""
        try:
            try:
                # What already arrived, so that close() sends a FIN and
                # the client reads the 503 rather than a reset.
                request.recv(65536)
            except OSError:
                pass
            request.send(_BUSY)
        except OSError:
            pass
        self._close(request)

    def count(self, what, source):
        """Count a refusal or a cut; a warning with the counts at most
        every 10 s.
        """
        now = time.monotonic()
        with self._lock:
            self._counts[what] += 1
            if now - self._last_warning < 10:
                return
            counts, self._counts = self._counts, collections.Counter()
            self._last_warning = now
        LOG.warning('guest endpoint: %s; the last from %s',
                    ', '.join('%d %s' % (n, what)
                              for what, n in sorted(counts.items())), source)

    # -- handler threads -----------------------------------------------------

    def connection(self, sock):
        with self._lock:
            return self._handled[sock]

    def authenticated(self, sock, instance):
        """``sock``'s request is ``instance``'s: its thread counts for the
        instance, no more for its source. False over the instance's cap.
        """
        cap = self.proxy.max_per_instance
        with self._lock:
            conn = self._handled[sock]
            held = self._per_instance.get(instance, 0)
            if cap and held >= cap:
                return False
            self._per_instance[instance] = held + 1
            self._unauthenticated[conn.source] -= 1
            if not self._unauthenticated[conn.source]:
                del self._unauthenticated[conn.source]
            conn.instance = instance
        return True

    def _release(self, sock):
        with self._lock:
            conn = self._handled.pop(sock)
            counts, key = ((self._unauthenticated, conn.source)
                           if conn.instance is None
                           else (self._per_instance, conn.instance))
            counts[key] -= 1
            if not counts[key]:
                del counts[key]
        self._slots.release()
        return conn

    def process_request_thread(self, request, client_address):
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            conn = self._release(request)
        if not conn.linger or self._closing.is_set() or \
                len(self._lingering) >= self.proxy.max_waiting:
            return self.shutdown_request(request)
        # The reply is sent: the end of the input is waited for by the
        # head reader, not by this thread.
        try:
            request.shutdown(socket.SHUT_WR)
        except OSError:
            return self._close(request)
        request.setblocking(False)
        conn.deadline = time.monotonic() + _LINGER
        self._to_linger.append(conn)
        self._wake()

    def handle_error(self, request, client_address):
        # Not socketserver's traceback on stderr for every client that
        # resets its connection.
        if isinstance(sys.exc_info()[1], OSError):
            LOG.debug('guest endpoint: connection from %s lost',
                      client_address[0], exc_info=True)
        else:
            LOG.exception('guest endpoint: connection from %s',
                          client_address[0])

    def shutdown(self):
        super().shutdown()
        self._stop_heads()

    def server_close(self):
        super().server_close()
        self._stop_heads()

    def _stop_heads(self):
        self._closing.set()
        self._wake()
        if self._heads is None:         # never started
            self._selector.close()
        elif self._heads is not threading.current_thread():
            self._heads.join(5)
        for sock in (self._wake_r, self._wake_w):
            self._close(sock)


class CheckpointProxy(object):

    def __init__(self, authenticator, agent, rate=1.0, burst=5,
                 max_body=4096, get_rate=20.0, get_burst=40,
                 request_timeout=10.0, max_connections=64,
                 max_per_source=16, header_timeout=5.0, max_per_instance=4,
                 max_waiting=256):
        if max_body > 999999:
            raise ValueError('max_body: at most 999999 bytes')
        self.auth = authenticator
        self.agent = agent
        self.limiter = RateLimiter(rate, burst)
        # Everything but checkpoints: state and group polls, mistakes.
        self.get_limiter = RateLimiter(get_rate, get_burst)
        self.max_body = max_body
        # The request line and headers within header_timeout of the
        # connection, the whole request within request_timeout.
        self.header_timeout = header_timeout
        self.request_timeout = request_timeout
        self.max_connections = max_connections
        # Handler threads of one address before their request is
        # authenticated (0 or None: no cap), and of one instance after.
        self.max_per_source = max_per_source
        self.max_per_instance = max_per_instance
        # Connections waiting for their request line and headers (no
        # thread each).
        self.max_waiting = max_waiting

    def handle(self, method, path, headers, body, instance=None):
        """One request -> ``(status, JSON-able dict)``; never raises. A
        429's dict carries ``retry_after`` (seconds). ``instance``: the
        caller authenticated it already.
        """
        try:
            return 200, self._route(method, path, headers, body, instance)
        except HTTPError as e:
            reply = dict(e.extra, error=str(e))
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

    def _route(self, method, path, headers, body, instance=None):
        if instance is None:
            instance = self.auth.instance(headers)
        if instance is None:
            raise HTTPError(401, _UNAUTHENTICATED)
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

    def _project(self, instance, group):
        """The instance's project: a group's scope, and whose budget a
        checkpoint spends. One libvirt cannot tell refuses a group (503,
        never the scope of callers without a project); a plain
        checkpoint then spends its image's budget only.
        """
        try:
            return self.agent.project_of(instance)
        except exception.BackendUnavailable as e:
            if group:
                raise
            LOG.warning('project of %s unknown (%s): its checkpoint '
                        'counts for its image\'s budget only', instance, e)
            return None

    def _checkpoint(self, instance, image, request):
        try:
            group = request.get('group')
            result = self.agent.checkpoint(
                image, group=group, members=request.get('members'),
                quiesce=request.get('quiesce'),
                project=self._project(instance, group),
                creator='instance %s' % instance)
        except exception.OverBudget as e:
            # Insufficient Storage: the store keeps no more of this
            # guest's (or its project's) checkpoints until some go.
            LOG.info('instance %s: checkpoint refused: %s', instance, e)
            raise HTTPError(507, str(e), budget={
                'scope': e.scope, 'usage': e.usage, 'limits': e.limits})
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
                self.conn = self.server.connection(self.connection)
                # What the head reader took off the socket, then the
                # socket, by the head's deadline.
                self._reader = _DeadlineReader(
                    self.connection, self.conn.buffer, self.conn.deadline)
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

            def _refused(self, instance, status, message):
                """An authenticated request refused before its body is
                read: it spends the instance's budget of mistakes, and
                once that is gone gets 429.
                """
                data, headers = {'error': message}, []
                if not proxy.get_limiter.allow(instance):
                    status = 429
                    data = {'error': 'too many bad requests from %s'
                            % instance,
                            'retry_after': proxy.get_limiter.retry_after()}
                    headers.append(('Retry-After',
                                    str(data['retry_after'])))
                self._reply(status, data, headers)

            def _serve(self):
                # One request per connection (HTTP/1.0).
                self.close_connection = True
                # Who asks, before anything else is read: the body of
                # a request no instance signed never is.
                instance = proxy.auth.instance(self.headers)
                if instance is None:
                    self.server.count('unauthenticated',
                                      self.conn.source)
                    return self._reply(401, {'error': _UNAUTHENTICATED})
                if not self.server.authenticated(self.connection,
                                                 instance):
                    self.server.count('busy (per instance)', instance)
                    return self._reply(503, {'error': 'busy'},
                                       [('Retry-After', '1')])
                self._reader.deadline = \
                    self.conn.started + proxy.request_timeout
                try:
                    length = self._length()
                except HTTPError as e:
                    # The body's end is unknown: nothing more is read.
                    return self._refused(instance, e.status, str(e))
                try:
                    body = self.rfile.read(length) if length else b''
                except (TimeoutError, socket.timeout):
                    return self._refused(instance, 408, 'the body did not '
                                         'arrive in time')
                if len(body) != length:
                    return             # the client went away
                self.conn.linger = False
                status, data = proxy.handle(self.command, self.path,
                                            self.headers, body, instance)
                headers = []
                if status == 429:
                    # When the next token is due, for polite clients.
                    headers.append(('Retry-After',
                                    str(data.get('retry_after', 1))))
                self._reply(status, data, headers)

            do_GET = do_POST = do_PUT = do_DELETE = _serve

            def log_message(self, fmt, *args):
                LOG.debug('%s %s', self.address_string(), fmt % args)

        server = _Server((host, port), Handler, self)
        threading.Thread(target=server.serve_forever, daemon=True,
                         name='blobcr-proxy').start()
        return server
