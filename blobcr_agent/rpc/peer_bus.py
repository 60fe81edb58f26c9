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

"""The authenticated peer side (``[blobcr_bus] authenticated_peers``):
what agents ask each other, with the calling host known from what the
broker checked.

oslo.messaging's RabbitMQ driver neither sets AMQP's ``user_id`` nor
hands a message's properties to the endpoint, so this is a small
request/reply of its own, with kombu, on the peer vhost
(``peer_transport_url``):

* host H consumes two queues, ``blobcr-peer.H`` (requests) and
  ``blobcr-peer.H.reply`` (answers to its own calls), and may read or
  declare no other (bus.peer_permissions);
* every message goes through the default exchange with ``user_id`` =
  the publisher's broker user: RabbitMQ refuses a message whose
  ``user_id`` is not the user that published it, and a message without
  one is dropped here. The user names the host (``peer_user_format``);
* a request is ``{"v": 1, "method", "args"}``; ``handoff`` is answered
  (``{"result"}`` or ``{"error": {"type", "message"}}``) into the
  caller's reply queue, whatever ``reply_to`` says, and the caller
  takes an answer only from the user of the host it asked;
* a handoff or its preparation is served only to the host it names as
  the destination, hints only from the host they name as their source
  (NotAuthorized otherwise). Requests expire on the broker with their
  call (or CAST_TTL), so an agent that was down does not act on stale
  ones.
"""

import concurrent.futures
import inspect
import logging
import socket
import threading
import urllib.parse
import uuid

import kombu
import oslo_messaging as messaging

from blobcr_common import exception
from blobcr_common.rpc import bus

LOG = logging.getLogger(__name__)

WIRE_VERSION = 1
CAST_TTL = 60.0          # seconds a cast waits on the broker for its agent
CALL_TIMEOUT = 60.0      # a call's answer, unless the caller says
WORKERS = 8              # requests served at once (a handoff may wait 10 s)
RECONNECT_MAX = 10.0     # seconds between two connection attempts, at most


def kombu_urls(conf, url):
    """``url`` (an oslo.messaging transport URL) as kombu's failover
    list of amqp:// URLs, and its first user.
    """
    parsed = messaging.TransportURL.parse(conf, url)
    if not parsed.hosts:
        raise exception.InvalidInput('no broker host in %s' %
                                     parsed.transport)
    vhost = urllib.parse.quote(parsed.virtual_host or '', '')
    urls = []
    for h in parsed.hosts:
        cred = '%s:%s@' % (urllib.parse.quote(h.username or '', ''),
                           urllib.parse.quote(h.password or '', ''))
        urls.append('amqp://%s%s:%d/%s' % (cred, h.hostname, h.port or 5672,
                                           vhost))
    return ';'.join(urls), parsed.hosts[0].username


class PeerRequests(object):
    """What a peer may ask, with the host the broker says asked
    (``caller``) first. Each returns what is answered (None for a cast).
    """

    def __init__(self, manager):
        self.manager = manager

    @staticmethod
    def _for_caller(caller, named, what):
        if caller != named:
            raise exception.NotAuthorized(
                '%s names %s, but %s asked' % (what, named, caller))

    def handoff(self, caller, image, dest, wait=0):
        self._for_caller(caller, dest, 'a handoff to a destination')
        return self.manager.handoff(image, dest, wait=wait)

    def prepare_handoff(self, caller, image, dest):
        self._for_caller(caller, dest, 'a handoff to a destination')
        self.manager.prepare_handoff(image, dest)

    def hints(self, caller, scope, source, chunks):
        self._for_caller(caller, source, 'hints from a source')
        self.manager.receive_hints(scope, source, chunks)


# method -> answered (a call) or not (a cast)
METHODS = {'handoff': True, 'prepare_handoff': False, 'hints': False}


def _error(e):
    return {'type': type(e).__name__, 'message': str(e)}


def _rebuilt(error):
    """The callee's error as this side's exception type."""
    cls = getattr(exception, str(error.get('type')), None)
    if not (isinstance(cls, type) and issubclass(cls, exception.BlobCRError)):
        cls = exception.BlobCRError
    rebuilt = cls.__new__(cls)
    Exception.__init__(rebuilt, str(error.get('message')))
    return rebuilt


class PeerBus(object):
    """This host's end of the authenticated peer side: it serves
    :class:`PeerRequests` (``start``/``stop``/``wait``, as an RPC
    server) and is the client the manager asks its peers with
    (``set_peers``).
    """

    def __init__(self, conf, requests, host=None):
        settings = bus.register(conf)
        self.host = host or conf.agent.host
        # Unset: [DEFAULT] transport_url.
        self._urls, user = kombu_urls(conf, bus.peer_url(conf))
        self._user_format = settings.peer_user_format
        if bus.peer_host(self._user_format, user) != self.host:
            raise exception.InvalidInput(
                'the peer bus user %s is not %s, the user [blobcr_bus] '
                'peer_user_format names for host %s: its peers would take '
                'its calls for another host\'s'
                % (user, bus.peer_user(self._user_format, self.host),
                   self.host))
        self.user = user
        self.requests = requests
        self._stopping = threading.Event()
        self.ready = threading.Event()
        self._thread = None
        self._workers = None
        self._pending = {}            # correlation id -> _Pending
        self._pending_lock = threading.Lock()
        self._publisher = None
        self._publish_lock = threading.Lock()
        self.dropped = 0              # requests refused before any method

    # -- serving ------------------------------------------------------------

    def start(self):
        self._stopping.clear()
        self._workers = concurrent.futures.ThreadPoolExecutor(
            WORKERS, thread_name_prefix='blobcr-peer')
        self._thread = threading.Thread(target=self._consume, daemon=True,
                                        name='blobcr-peer-bus')
        self._thread.start()
        LOG.info('peer bus: serving %s as %s', bus.peer_queue(self.host),
                 self.user)

    def stop(self):
        self._stopping.set()

    def wait(self):
        if self._thread is not None:
            self._thread.join()
        if self._workers is not None:
            self._workers.shutdown(wait=True)
        with self._publish_lock:
            if self._publisher is not None:
                self._publisher.release()
                self._publisher = None

    def _queue(self, name):
        return kombu.Queue(name, exchange=kombu.Exchange(''),
                           routing_key=name, durable=False,
                           auto_delete=False)

    def _consumer(self, conn, queue, callback):
        # JSON only (a pickle would run code here); what does not decode
        # is dropped, not raised into the loop (a reconnect per message).
        return conn.Consumer([self._queue(queue)], callbacks=[callback],
                             accept=['json'], no_ack=True,
                             on_decode_error=self._undecodable)

    def _undecodable(self, message, error):
        self.dropped += 1
        LOG.warning('peer bus: dropped a message from broker user %r: %s',
                    message.properties.get('user_id'), error)

    def _consume(self):
        delay = 0.5
        while not self._stopping.is_set():
            try:
                with kombu.Connection(self._urls, heartbeat=30) as conn:
                    conn.ensure_connection(max_retries=1)
                    with self._consumer(conn, bus.peer_queue(self.host),
                                        self._on_request), \
                            self._consumer(conn, bus.reply_queue(self.host),
                                           self._on_reply):
                        self.ready.set()
                        delay = 0.5
                        self._drain(conn)
            except Exception as e:
                self.ready.clear()
                if self._stopping.is_set():
                    break
                LOG.warning('peer bus: %s; connecting again in %.1f s',
                            e, delay)
                self._stopping.wait(delay)
                delay = min(delay * 2, RECONNECT_MAX)
        self.ready.clear()

    def _drain(self, conn):
        while not self._stopping.is_set():
            try:
                conn.drain_events(timeout=0.5)
            except socket.timeout:
                conn.heartbeat_check()

    def _caller(self, message):
        return bus.peer_host(self._user_format,
                             message.properties.get('user_id'))

    def _on_request(self, body, message):
        caller = self._caller(message)
        method = body.get('method') if isinstance(body, dict) else None
        args = body.get('args') if isinstance(body, dict) else None
        if caller is None or method not in METHODS or \
                not isinstance(args, dict) or body.get('v') != WIRE_VERSION:
            self.dropped += 1
            LOG.warning('peer bus: dropped a request %r from broker user '
                        '%r: %s', method, message.properties.get('user_id'),
                        'no host of ours' if caller is None else
                        'not a request of version %d' % WIRE_VERSION)
            return
        correlation = message.properties.get('correlation_id')
        self._workers.submit(self._serve, caller, method, args, correlation)

    def _serve(self, caller, method, args, correlation):
        serve = getattr(self.requests, method)
        try:
            try:
                inspect.signature(serve).bind(caller, **args)
            except TypeError as e:
                raise exception.InvalidInput('%s: %s' % (method, e))
            result = {'result': serve(caller, **args)}
        except exception.BlobCRError as e:
            if isinstance(e, exception.NotAuthorized):
                LOG.warning('peer bus: refused %s from %s: %s', method,
                            caller, e)
            result = {'error': _error(e)}
        except Exception as e:
            LOG.exception('peer bus: %s from %s failed', method, caller)
            result = {'error': _error(exception.BlobCRError(str(e)))}
        if METHODS[method] and correlation:
            # Only to the caller's own reply queue: a forged reply_to
            # would make this agent publish into another host's queue.
            self._publish(bus.reply_queue(caller), result,
                          correlation_id=correlation, expiration=CAST_TTL)
        elif 'error' in result:
            LOG.info('peer bus: %s from %s: %s', method, caller,
                     result['error']['message'])

    # -- calling --------------------------------------------------------------

    def _publish(self, queue, body, **properties):
        with self._publish_lock:
            if self._publisher is None:
                self._publisher = kombu.Connection(self._urls)
            producer = self._publisher.Producer(serializer='json')
            publish = self._publisher.ensure(producer, producer.publish,
                                             max_retries=3)
            publish(body, exchange='', routing_key=queue, user_id=self.user,
                    declare=[], **properties)

    def _on_reply(self, body, message):
        correlation = message.properties.get('correlation_id')
        with self._pending_lock:
            pending = self._pending.get(correlation)
        if pending is None:
            return              # late, or a call from before a restart
        sender = message.properties.get('user_id')
        if sender != pending.user or not isinstance(body, dict):
            LOG.warning('peer bus: dropped an answer to %s from broker user '
                        '%r (asked %s)', pending.method, sender, pending.user)
            return
        pending.answer(body)

    def _request(self, host, method, args, timeout=None):
        body = {'v': WIRE_VERSION, 'method': method, 'args': args}
        if not METHODS[method]:
            self._publish(bus.peer_queue(host), body, expiration=CAST_TTL)
            return None
        timeout = CALL_TIMEOUT if timeout is None else timeout
        if not self.ready.wait(timeout):
            raise messaging.MessagingTimeout(
                'peer bus not connected: cannot ask %s for %s'
                % (host, method))
        pending = _Pending(method, bus.peer_user(self._user_format, host))
        correlation = uuid.uuid4().hex
        with self._pending_lock:
            self._pending[correlation] = pending
        try:
            self._publish(bus.peer_queue(host), body,
                          reply_to=bus.reply_queue(self.host),
                          correlation_id=correlation, expiration=timeout)
            body = pending.wait(timeout)
        finally:
            with self._pending_lock:
                self._pending.pop(correlation, None)
        if body is None:
            raise messaging.MessagingTimeout(
                'no answer from %s to %s in %.0f s' % (host, method, timeout))
        if 'error' in body:
            raise _rebuilt(body['error'])
        return body.get('result')

    # The manager's peers (manager/handoff.py set_peers), as AgentAPI's.

    def handoff(self, host, image, dest, wait=0, rpc_timeout=None):
        return self._request(host, 'handoff', dict(image=image, dest=dest,
                                                   wait=wait), rpc_timeout)

    def prepare_handoff(self, host, image, dest):
        self._request(host, 'prepare_handoff', dict(image=image, dest=dest))
        return True

    def publish_hints(self, scope, source, chunks, hosts=None):
        if hosts is None:
            raise exception.InvalidInput(
                'the authenticated peer bus sends hints to listed hosts')
        for host in hosts:
            self._request(host, 'hints', dict(scope=scope, source=source,
                                              chunks=list(chunks)))

    def hints_to_listeners(self):
        return True


class _Pending(object):
    """A call waiting for the answer of broker user ``user``."""

    def __init__(self, method, user):
        self.method = method
        self.user = user
        self._done = threading.Event()
        self._body = None

    def answer(self, body):
        self._body = body
        self._done.set()

    def wait(self, timeout):
        return self._body if self._done.wait(timeout) else None
