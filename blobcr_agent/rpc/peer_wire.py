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

"""The messages of the authenticated peer side (peer_bus.py): what a
request and an answer hold, and what a received message must be before
anything in it is believed.

A request's body is JSON::

    {"v": 1, "to": HOST, "deadline": EPOCH_SECONDS, "method": NAME,
     "args": {...}}

``to`` and ``deadline`` are the sender's, under its ``user_id``: a host
that dead-letters or holds back messages sent to its own queue (its
queue is its to declare) cannot pass them on to another host, nor late.
An answer is ``{"result": ...}`` or ``{"error": {"type", "message"}}``.

Messages are read raw (py-amqp), not through kombu's decoding: kombu
would decompress a body as its sender's headers say before any check
(a small message can expand to gigabytes) and could unpickle one.
"""

import json
import time
import urllib.parse

import oslo_messaging as messaging

from blobcr_common import exception
from blobcr_common.rpc import bus

WIRE_VERSION = 1
MAX_BODY = 1 << 20          # bytes; a request of 4,096 hint indexes is 30 KB
CLOCK_SKEW = 30.0           # seconds of clock difference between two hosts
# Each queue's own bounds, set by its host as it declares it: the broker
# refuses a publish past them rather than hold a flood.
QUEUE_ARGUMENTS = {'x-max-length': 1000, 'x-max-length-bytes': 8 << 20,
                   'x-overflow': 'reject-publish'}
# method -> answered (a call) or not (a cast)
METHODS = {'handoff': True, 'prepare_handoff': False, 'hints': False}


class Dropped(Exception):
    """A message not to act on; the reason is the message."""


def _tls_asked(conf, parsed):
    if parsed.query and any(k.startswith('ssl') for k in parsed.query):
        return True
    try:
        return bool(conf.oslo_messaging_rabbit.ssl)
    except Exception:             # the rabbit options are not registered
        return False


def kombu_urls(conf, url):
    """``url`` (an oslo.messaging transport URL; None: [DEFAULT]
    transport_url) as kombu's failover list of amqp:// URLs, and its
    user, the same on every broker (``user_id`` must be it everywhere).
    """
    parsed = messaging.TransportURL.parse(conf, url)
    if not parsed.hosts:
        raise exception.InvalidInput('the peer bus has no broker host')
    if _tls_asked(conf, parsed):
        raise exception.InvalidInput(
            '[blobcr_bus] authenticated_peers does not speak TLS to the '
            'broker yet: unset it, or the TLS options')
    users = {h.username for h in parsed.hosts}
    if len(users) != 1 or not parsed.hosts[0].username:
        raise exception.InvalidInput(
            'the peer bus needs one broker user on every broker host, '
            'not %s' % sorted(u or '' for u in users))
    vhost = urllib.parse.quote(parsed.virtual_host or '', '')
    urls = []
    for h in parsed.hosts:
        cred = '%s:%s@' % (urllib.parse.quote(h.username, ''),
                           urllib.parse.quote(h.password or '', ''))
        name = '[%s]' % h.hostname if ':' in h.hostname else h.hostname
        urls.append('amqp://%s%s:%d/%s' % (cred, name, h.port or 5672,
                                           vhost))
    return ';'.join(urls), parsed.hosts[0].username


def request(to, method, args, ttl):
    return {'v': WIRE_VERSION, 'to': to, 'deadline': time.time() + ttl,
            'method': method, 'args': args}


def decoded(message, user_format):
    """``(calling host, body)`` of a raw py-amqp message, or Dropped."""
    properties = message.properties or {}
    headers = properties.get('application_headers') or {}
    caller = bus.peer_host(user_format, properties.get('user_id'))
    if caller is None:
        raise Dropped('from broker user %r, no host of ours'
                      % properties.get('user_id'))
    if any(k.startswith('x-death') or k.startswith('x-first-death')
           for k in headers):
        raise Dropped('from %s, dead-lettered on its way' % caller)
    if headers.get('compression') or \
            properties.get('content_type') != 'application/json':
        raise Dropped('from %s, not plain JSON' % caller)
    body = message.body
    if len(body) > MAX_BODY:
        raise Dropped('from %s, %d bytes' % (caller, len(body)))
    try:
        body = json.loads(body)
    except ValueError:
        raise Dropped('from %s, not JSON' % caller)
    if not isinstance(body, dict):
        raise Dropped('from %s, not an object' % caller)
    return caller, body


def checked_request(body, host):
    """``(method, args)`` of a request ``body`` meant for ``host`` and
    still in time, or Dropped.
    """
    method, args = body.get('method'), body.get('args')
    if body.get('v') != WIRE_VERSION or not isinstance(method, str) or \
            method not in METHODS or not isinstance(args, dict):
        raise Dropped('not a request of version %d' % WIRE_VERSION)
    if body.get('to') != host:
        raise Dropped('%s meant for %r' % (method, body.get('to')))
    still_in_time(body)
    return method, args


def still_in_time(body):
    deadline = body.get('deadline')
    if not isinstance(deadline, (int, float)) or \
            time.time() > deadline + CLOCK_SKEW:
        raise Dropped('%s past its deadline' % body.get('method'))


def answer_error(e):
    return {'error': {'type': type(e).__name__, 'message': str(e)}}


def answered(body):
    """The result of an answer ``body``, or the callee's error raised as
    this side's exception type.
    """
    error = body.get('error')
    if error is None:
        return body.get('result')
    if not isinstance(error, dict):
        error = {'message': repr(error)}
    cls = getattr(exception, str(error.get('type')), None)
    if not (isinstance(cls, type) and issubclass(cls, exception.BlobCRError)):
        cls = exception.BlobCRError
    rebuilt = cls.__new__(cls)
    Exception.__init__(rebuilt, str(error.get('message')))
    raise rebuilt
