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
limited. The proxy itself knows nothing of images or hosts: it calls an
``agent`` with ``resolve(instance) -> image or None``,
``checkpoint(image, group=, members=, quiesce=) -> dict``,
``state(image, version) -> str`` and ``group_state(group) -> dict``.
"""

import http.server
import json
import logging
import math
import re
import threading
import time

from blobcr_agent import exception
from blobcr_agent.hypervisor import domains
from blobcr_agent.repository import groups

LOG = logging.getLogger(__name__)

_VERSION_PATH = re.compile(r'^/v1/checkpoint/(\d{1,9})$')
_GROUP_PATH = re.compile(r'^/v1/group/([A-Za-z0-9_.-]{1,64})$')


class HTTPError(Exception):
    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


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


class CheckpointProxy(object):

    def __init__(self, authenticator, agent, rate=1.0, burst=5,
                 max_body=4096):
        self.auth = authenticator
        self.agent = agent
        self.limiter = RateLimiter(rate, burst)
        self.max_body = max_body

    def handle(self, method, path, headers, body):
        """One request -> ``(status, JSON-able dict)``; never raises."""
        try:
            return 200, self._route(method, path, headers, body)
        except HTTPError as e:
            return e.status, {'error': str(e)}
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
        image = self.agent.resolve(instance)
        if image is None:
            raise HTTPError(403, 'instance %s is not hosted here' % instance)
        if path == '/v1/checkpoint':
            if method != 'POST':
                raise HTTPError(405, 'POST a checkpoint request')
            request = self._json(body)
            # Only checkpoints cost the host anything worth limiting.
            if not self.limiter.allow(instance):
                raise HTTPError(429, 'too many checkpoints from %s'
                                % instance)
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
            return self._group(image, match.group(1))
        raise HTTPError(404, 'no such endpoint: %s' % path[:100])

    @staticmethod
    def _json(body):
        if not body:
            return {}
        try:
            request = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            raise HTTPError(400, 'the body is not JSON')
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
            result = self.agent.checkpoint(
                image, group=request.get('group'),
                members=request.get('members'),
                quiesce=request.get('quiesce'))
        except exception.InvalidInput as e:
            raise HTTPError(400, str(e))
        reply = {'version': result['version'],
                 'downtime_ms': result.get('downtime_ms')}
        if request.get('group'):
            reply['group'] = request['group']
        LOG.info('instance %s: checkpoint -> version %d', instance,
                 result['version'])
        return reply

    def _group(self, image, group):
        found = self.agent.group_state(group)
        # A guest only sees the groups its own image is a member of.
        if not any(v['image'] == image
                   for v in found['versions'].values()):
            raise HTTPError(404, 'no group %s with this instance in it'
                            % group)
        return found

    def serve(self, host='127.0.0.1', port=0):
        """Serve HTTP on a thread; returns the server (``server_port``)."""
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            server_version = 'blobcr-proxy'

            def _reply(self, status, data):
                payload = json.dumps(data).encode()
                self.send_response(status)
                self.send_header('Content-Type', 'application/json')
                self.send_header('Content-Length', str(len(payload)))
                if status == 429:
                    # When the next token is due, for polite clients.
                    self.send_header('Retry-After', str(
                        max(1, math.ceil(1.0 / proxy.limiter.rate))))
                self.end_headers()
                self.wfile.write(payload)

            def _serve(self):
                try:
                    length = int(self.headers.get('Content-Length') or 0)
                except ValueError:
                    return self._reply(400, {'error': 'bad Content-Length'})
                if length < 0 or length > proxy.max_body:
                    self.close_connection = True
                    return self._reply(413, {'error': 'body over %d bytes'
                                             % proxy.max_body})
                body = self.rfile.read(length) if length else b''
                self._reply(*proxy.handle(self.command, self.path,
                                          self.headers, body))

            do_GET = do_POST = do_PUT = do_DELETE = _serve

            def log_message(self, fmt, *args):
                LOG.debug('%s %s', self.address_string(), fmt % args)

        server = http.server.ThreadingHTTPServer((host, port), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True,
                         name='blobcr-proxy').start()
        return server
