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

"""The transports a caller keeps open to agents' virtual hosts
(``[blobcr_bus] host_vhosts``): one per host vhost called, since an AMQP
connection belongs to one vhost.

At most ``max_open`` are kept: past it the least recently used one is
closed. One no call used for ``idle_timeout`` seconds is closed too.
Neither closes a transport under a call: one handed out by :meth:`get`
is closed once given back (:meth:`give_back`).

A transport is closed in a thread of its own, off the caller's path:
oslo.messaging's cleanup waits for its reply waiter's poll to end (up
to 5 s). Until then its connections stay (``closing`` counts those
transports).
"""

import collections
import logging
import threading
import time

LOG = logging.getLogger(__name__)


class _Vhost(object):
    """A vhost's transport, client, the calls using it and when the last
    one ended.
    """

    def __init__(self, transport, client):
        self.transport = transport
        self.client = client
        self.users = 0
        self.evicted = False
        self.last_used = time.monotonic()


class TransportPool(object):
    """Transports by URL, made by ``open_vhost(url)`` as ``(transport,
    client)``. ``max_open``, ``idle_timeout``: None (or 0 for the
    latter), no bound.
    """

    def __init__(self, open_vhost, max_open=None, idle_timeout=None):
        self._open = open_vhost
        self.max_open = max_open
        self.idle_timeout = idle_timeout or None
        self._lock = threading.Lock()
        # Least recently used first; and each one's by its client.
        self._vhosts = collections.OrderedDict()
        self._by_client = {}
        self._timer = None
        self._closed = False
        # The threads closing transports.
        self._closers = set()

    def __len__(self):
        """How many transports are open (evicted ones still in use
        included).
        """
        with self._lock:
            return len(self._by_client)

    @property
    def closing(self):
        """How many transports are being closed."""
        with self._lock:
            return len(self._closers)

    def settle(self, timeout=None):
        """Wait until the transports being closed are (True), or
        ``timeout`` s (False).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                closers = list(self._closers)
            if not closers:
                return True
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            closers[0].join(left)

    def get(self, url):
        """The client on ``url``'s transport, usable until given back."""
        with self._lock:
            vhost = self._vhosts.get(url)
            if vhost is None:
                vhost = _Vhost(*self._open(url))
                self._vhosts[url] = vhost
                self._by_client[id(vhost.client)] = vhost
            else:
                self._vhosts.move_to_end(url)
            vhost.users += 1
            unused = self._evict()
        self._close(unused)
        return vhost.client

    def give_back(self, client):
        """The caller of :meth:`get` no longer uses ``client``."""
        with self._lock:
            vhost = self._by_client.get(id(client))
            if vhost is None or vhost.client is not client:
                return
            vhost.users -= 1
            vhost.last_used = time.monotonic()
            done = vhost.evicted and vhost.users <= 0
            if done:
                del self._by_client[id(client)]
            self._arm()
        if done:
            self._close([vhost.transport])

    def _drop(self, url):
        """Forget ``url``'s vhost; its transport if no call uses it (to
        close), else None. Under _lock.
        """
        vhost = self._vhosts.pop(url)
        vhost.evicted = True
        if vhost.users > 0:
            return None
        del self._by_client[id(vhost.client)]
        return vhost.transport

    def _evict(self):
        """Past ``max_open``, drop the least recently used vhosts; the
        transports to close. Under _lock.
        """
        unused = []
        while self.max_open is not None and \
                len(self._vhosts) > self.max_open:
            unused.append(self._drop(next(iter(self._vhosts))))
        return unused

    def _arm(self):
        """Start the idle timer, if it is off, for when the first vhost
        no call uses turns idle (one in use is armed for as it is given
        back). Under _lock.
        """
        if self.idle_timeout is None or self._timer is not None or \
                self._closed:
            return
        unused = [v.last_used for v in self._vhosts.values() if v.users <= 0]
        if not unused:
            return
        due = min(unused) + self.idle_timeout
        self._timer = threading.Timer(max(due - time.monotonic(), 0.01),
                                      self._close_idle)
        self._timer.daemon = True
        self._timer.start()

    def _close_idle(self):
        """Close the transports no call used for idle_timeout (a call
        that holds one keeps it open).
        """
        with self._lock:
            self._timer = None
            oldest = time.monotonic() - self.idle_timeout
            idle = [url for url, v in self._vhosts.items()
                    if v.users <= 0 and v.last_used <= oldest]
            unused = [self._drop(url) for url in idle]
            self._arm()
        self._close(unused)

    def _close(self, transports):
        """Close ``transports`` (None: one still in use), each in a
        thread of its own.
        """
        for transport in transports:
            if transport is not None:
                self._start_closer(transport)

    def _start_closer(self, transport):
        def run():
            try:
                transport.cleanup()
            except Exception:
                LOG.warning('closing a transport to an agent host failed',
                            exc_info=True)
            finally:
                with self._lock:
                    self._closers.discard(closer)
        closer = threading.Thread(target=run, daemon=True)
        # Started under the lock: settle() joins only started threads.
        with self._lock:
            self._closers.add(closer)
            closer.start()

    def close(self):
        """Close every transport, in use or not, stop the timer, and
        wait for the closes.
        """
        with self._lock:
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            transports = [v.transport for v in self._by_client.values()]
            self._vhosts = collections.OrderedDict()
            self._by_client = {}
        self._close(transports)
        self.settle()
