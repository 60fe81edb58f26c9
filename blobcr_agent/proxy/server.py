"""The checkpointing proxy: the guest-facing HTTP endpoint of a host.

A guest POSTs ``/v1/checkpoint`` and gets the version id back as soon as
the snapshot is taken (before it is persisted), then polls
``/v1/checkpoint/<version>`` for pending / stable / failed. Jobs that
checkpoint many VMs together pass a group id and the number of members;
``/v1/group/<id>`` says when every member's version is stable.

Only instances hosted here may use it (see auth.py); bad requests get a
4xx with a JSON message and never commit anything; each instance is rate
limited. The proxy itself knows nothing of images: it is given
``resolve(instance id) -> image or None``, ``checkpoint(image) -> dict``
and ``state(image, version) -> str`` by the agent.
"""

import http.server
import json
import logging
import re
import threading
import time

from blobcr_agent import exception

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

    def __init__(self, authenticator, resolve, checkpoint, state, rate=1.0,
                 burst=5, max_body=4096):
        self.auth = authenticator
        self.resolve = resolve
        self.checkpoint = checkpoint
        self.state = state
        self.limiter = RateLimiter(rate, burst)
        self.max_body = max_body
        self._groups = {}            # id -> {'members': n, 'versions': {}}
        self._lock = threading.Lock()

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
        image = self.resolve(instance)
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
                        'state': self.state(image, version)}
            except exception.BlobCRError:
                raise HTTPError(404, 'no version %d of this instance'
                                % version)
        match = _GROUP_PATH.match(path)
        if match:
            if method != 'GET':
                raise HTTPError(405, 'GET the state of a group')
            return self._group(match.group(1))
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
        unknown = set(request) - {'group', 'members'}
        if unknown:
            raise HTTPError(400, 'unknown fields: %s'
                            % ', '.join(sorted(map(str, unknown))[:5]))
        group, members = request.get('group'), request.get('members')
        if group is not None and (not isinstance(group, str) or
                                  not re.match(r'^[A-Za-z0-9_.-]{1,64}$',
                                               group)):
            raise HTTPError(400, 'group: 1-64 letters, digits, . _ -')
        if (group is None) != (members is None):
            raise HTTPError(400, 'group and members go together')
        if members is not None and (type(members) is not int or
                                    not 1 <= members <= 100000):
            raise HTTPError(400, 'members: a number from 1 to 100000')
        return request

    def _checkpoint(self, instance, image, request):
        group = request.get('group')
        if group:
            with self._lock:
                known = self._groups.get(group)
                if known and known['members'] != request['members']:
                    raise HTTPError(400, 'group %s has %d members, not %d'
                                    % (group, known['members'],
                                       request['members']))
        result = self.checkpoint(image)
        reply = {'version': result['version'],
                 'downtime_ms': result.get('downtime_ms')}
        if group:
            with self._lock:
                entry = self._groups.setdefault(
                    group, {'members': request['members'], 'versions': {}})
                entry['versions'][instance] = (image, result['version'])
            reply['group'] = group
        LOG.info('instance %s: checkpoint -> version %d', instance,
                 result['version'])
        return reply

    def _group(self, group):
        with self._lock:
            entry = self._groups.get(group)
            if entry is None:
                raise HTTPError(404, 'no group %s' % group)
            members, versions = entry['members'], dict(entry['versions'])
        states = {i: self.state(image, v)
                  for i, (image, v) in versions.items()}
        return {'group': group, 'members': members,
                'versions': {i: {'version': versions[i][1], 'state': s}
                             for i, s in states.items()},
                'complete': len(states) == members and
                all(s == 'stable' for s in states.values())}

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
