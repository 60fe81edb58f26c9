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
request/reply of its own, with kombu and py-amqp, on the peer vhost
(``peer_transport_url``):

* host H consumes two queues, ``blobcr-peer.H`` (requests) and
  ``blobcr-peer-reply.H`` (answers to its own calls), and may read or
  declare no other (bus.peer_permissions);
* every message goes through the default exchange with ``user_id`` =
  the publisher's broker user: RabbitMQ refuses a message whose
  ``user_id`` is not the user that published it, and one without it is
  dropped here. The user names the host (``peer_user_format``);
* what a message must be before it is believed (its host, plain JSON,
  meant for this host, in time) is peer_wire.py; ``handoff`` is
  answered into the caller's reply queue, whatever ``reply_to`` says,
  and the caller takes an answer only from the user of the host it
  asked;
* a handoff or its preparation is served only to the host it names as
  the destination, hints only from the host they name as their source
  (NotAuthorized otherwise);
* at most PER_CALLER requests of one host and BACKLOG in all are
  served or waiting at once; past that, a call is answered Busy and a
  cast dropped.
"""

import collections
import concurrent.futures
import inspect
import logging
import socket
import threading
import uuid

import kombu
import oslo_messaging as messaging

from blobcr_agent.rpc import peer_wire
from blobcr_common import exception
from blobcr_common.rpc import bus

LOG = logging.getLogger(__name__)

CAST_TTL = 60.0          # seconds a cast waits on the broker for its agent
CALL_TIMEOUT = 60.0      # a call's answer, unless the caller says
WORKERS = 8              # requests served at once (a handoff may wait 10 s)
PER_CALLER = 2           # one host's requests served or waiting
BACKLOG = 64             # everyone's
RECONNECT_MAX = 10.0     # seconds between two connection attempts, at most


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


class PeerBus(object):
    """This host's end of the authenticated peer side: it serves
    :class:`PeerRequests` (``start``/``stop``/``wait``, as an RPC
    server) and is the client the manager asks its peers with
    (``set_peers``).
    """

    def __init__(self, conf, requests, host=None):
        settings = bus.register(conf)
        self.host = host or conf.agent.host
        if not settings.peer_transport_url or not settings.host_vhosts:
            # Else the peers meet on vhosts where every host may do
            # everything, and the broker's user_id proves nothing.
            raise exception.InvalidInput(
                '[blobcr_bus] authenticated_peers needs host_vhosts and '
                'peer_transport_url (install.rst, step 3)')
        try:
            bus.peer_permissions(self.host)
        except ValueError as e:
            raise exception.InvalidInput(str(e))
        self._urls, user = peer_wire.kombu_urls(conf,
                                                settings.peer_transport_url)
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
        self._admitted = collections.Counter()   # caller -> requests
        self._admit_lock = threading.Lock()
        self.dropped = 0              # messages dropped unread or refused

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
            self._workers.shutdown(wait=True, cancel_futures=True)
        with self._publish_lock:
            if self._publisher is not None:
                self._publisher.release()
                self._publisher = None

    def _declare_and_consume(self, channel, name, callback):
        kombu.Queue(name, exchange=kombu.Exchange(''), routing_key=name,
                    durable=False, auto_delete=False,
                    queue_arguments=peer_wire.QUEUE_ARGUMENTS)(
                        channel).declare()
        # Raw messages (peer_wire.py: nothing decoded before the checks).
        channel.basic_consume(name, no_ack=True,
                              callback=self._guarded(callback))

    def _guarded(self, callback):
        def receive(message):
            try:
                callback(message)
            except peer_wire.Dropped as e:
                self.dropped += 1
                LOG.warning('peer bus: dropped a message: %s', e)
            except Exception:
                # Never into the loop: a reconnect per message would
                # lose what was delivered meanwhile.
                self.dropped += 1
                LOG.exception('peer bus: dropped a message')
        return receive

    def _consume(self):
        delay = 0.5
        while not self._stopping.is_set():
            try:
                with kombu.Connection(self._urls, heartbeat=30) as conn:
                    conn.ensure_connection(max_retries=1)
                    channel = conn.default_channel
                    self._declare_and_consume(
                        channel, bus.peer_queue(self.host), self._on_request)
                    self._declare_and_consume(
                        channel, bus.reply_queue(self.host), self._on_reply)
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
                pass
            # Rate-limited by kombu; also under a steady stream.
            conn.heartbeat_check()

    def _on_request(self, message):
        caller, body = peer_wire.decoded(message, self._user_format)
        method, args = peer_wire.checked_request(body, self.host)
        correlation = message.properties.get('correlation_id')
        if not self._admit(caller):
            if peer_wire.METHODS[method] and correlation:
                self._answer(caller, correlation, peer_wire.answer_error(
                    exception.Busy('%s: too many requests of %s at once'
                                   % (self.host, caller))))
            raise peer_wire.Dropped('%s from %s: too many at once'
                                    % (method, caller))
        self._workers.submit(self._serve, caller, method, args, body,
                             correlation)

    def _admit(self, caller):
        with self._admit_lock:
            if self._admitted[caller] >= PER_CALLER or \
                    sum(self._admitted.values()) >= BACKLOG:
                return False
            self._admitted[caller] += 1
            return True

    def _serve(self, caller, method, args, body, correlation):
        try:
            answer = self._result(caller, method, args, body)
            if peer_wire.METHODS[method] and correlation:
                self._answer(caller, correlation, answer)
            elif 'error' in answer:
                LOG.info('peer bus: %s from %s: %s', method, caller,
                         answer['error']['message'])
        except Exception:
            LOG.exception('peer bus: could not answer %s from %s', method,
                          caller)
        finally:
            with self._admit_lock:
                self._admitted[caller] -= 1
                if not self._admitted[caller]:
                    del self._admitted[caller]

    def _result(self, caller, method, args, body):
        serve = getattr(self.requests, method)
        try:
            # Waited in the backlog past its deadline: the caller gave up.
            peer_wire.still_in_time(body)
            try:
                inspect.signature(serve).bind(caller, **args)
            except TypeError as e:
                raise exception.InvalidInput('%s: %s' % (method, e))
            return {'result': serve(caller, **args)}
        except peer_wire.Dropped as e:
            return peer_wire.answer_error(exception.Busy(str(e)))
        except exception.BlobCRError as e:
            if isinstance(e, exception.NotAuthorized):
                LOG.warning('peer bus: refused %s from %s: %s', method,
                            caller, e)
            return peer_wire.answer_error(e)
        except Exception as e:
            LOG.exception('peer bus: %s from %s failed', method, caller)
            return peer_wire.answer_error(exception.BlobCRError(str(e)))

    def _answer(self, caller, correlation, answer):
        # Only to the caller's own reply queue: a forged reply_to would
        # make this agent publish into another host's queue.
        self._publish(bus.reply_queue(caller), answer,
                      correlation_id=correlation, expiration=CAST_TTL)

    # -- calling --------------------------------------------------------------

    def _publish(self, queue, body, **properties):
        with self._publish_lock:
            if self._publisher is None:
                # Confirmed: a publish the broker refused (a full queue)
                # or lost with the connection raises here, not silently.
                self._publisher = kombu.Connection(
                    self._urls, transport_options={'confirm_publish': True})
            producer = self._publisher.Producer(serializer='json')
            publish = self._publisher.ensure(producer, producer.publish,
                                             max_retries=2, interval_max=1)
            publish(body, exchange='', routing_key=queue, user_id=self.user,
                    declare=[], **properties)

    def _on_reply(self, message):
        correlation = message.properties.get('correlation_id')
        with self._pending_lock:
            pending = self._pending.get(correlation)
        if pending is None:
            return              # late, or a call from before a restart
        sender = message.properties.get('user_id')
        if sender != pending.user:
            raise peer_wire.Dropped('an answer to %s from broker user %r '
                                    '(asked %s)' % (pending.method, sender,
                                                    pending.user))
        _, body = peer_wire.decoded(message, self._user_format)
        pending.answer(body)

    def _request(self, host, method, args, timeout=None):
        if not peer_wire.METHODS[method]:
            self._publish(bus.peer_queue(host), peer_wire.request(
                host, method, args, CAST_TTL), expiration=CAST_TTL)
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
            self._publish(bus.peer_queue(host), peer_wire.request(
                host, method, args, timeout),
                reply_to=bus.reply_queue(self.host),
                correlation_id=correlation, expiration=timeout)
            body = pending.wait(timeout)
        finally:
            with self._pending_lock:
                self._pending.pop(correlation, None)
        if body is None:
            raise messaging.MessagingTimeout(
                'no answer from %s to %s in %.0f s' % (host, method, timeout))
        return peer_wire.answered(body)

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
