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

"""``[upgrade_levels] blobcr_agent = auto``: each agent's own version.

Nova's and Cinder's ``auto`` read the services' versions from their
database. Agents record theirs nowhere a caller could read, so a caller
asks the agent it calls, once per ``TTL`` seconds per host, and caps its
calls to that host at the lower of its own newest version and the
agent's.

It asks with a method no agent has (``PROBE``) at a version: an agent
that speaks the version answers NoSuchMethod (which oslo.messaging's
server logs at debug level only, for a name ending ``_ignore_errors``),
one that does not answers UnsupportedVersion (which the agent logs with
a traceback). Every agent ever released answers so; no agent change is
needed. The caller's newest version is asked first: one call when the
agent is as new. Below it, a binary search over the minor versions,
four calls or so, each an UnsupportedVersion in that agent's log or
not.

Calls of version X.0, which every agent speaks, probe nothing. A
probe waits at most the call's own timeout (PROBE_TIMEOUT at most, the
whole search): one that gets no answer (a host down, an agent the
caller may not reach) is kept FAILED_TTL seconds, during which calls
go out capped at the caller's newest version, as without ``auto``,
and fail or succeed as they would. Concurrent first calls to a host
wait for one probe, each at most its own timeout.

Hints cast to every agent, and whether hints go to listeners only,
take the lowest version among the agents asked within the TTL: agents
this caller has not called are not counted. Batching a group's
members is decided by the group's own hosts.
"""

import logging
import threading
import time

import oslo_messaging as messaging

from blobcr_common import rpc
from blobcr_common.rpc import context

LOG = logging.getLogger(__name__)

AUTO = 'auto'
TTL = 120.0
# The most seconds one probe (its whole search) waits, whatever the
# call's timeout; how long one that got no answer is kept.
PROBE_TIMEOUT = 10.0
FAILED_TTL = 10.0
PROBE = 'blobcr_version_probe_ignore_errors'


def parse(version):
    major, minor = version.split('.')
    return int(major), int(minor)


def highest(speaks, newest=rpc.VERSION):
    """The highest version up to ``newest`` for which ``speaks(version)``
    is true (newest first, then a binary search over the minors; every
    agent speaks X.0).
    """
    major, top = parse(newest)
    if speaks(newest):
        return newest
    low, high = 0, top - 1           # low spoken; high the most that may be
    while low < high:
        middle = (low + high + 1) // 2
        if speaks('%d.%d' % (major, middle)):
            low = middle
        else:
            high = middle - 1
    return '%d.%d' % (major, low)


def speaks(client, host, version, timeout):
    """Whether ``host``'s agent accepts calls of ``version``, asked over
    ``client`` within ``timeout`` s. A timeout or any other error
    raises.
    """
    try:
        client.prepare(server=host, version=version, version_cap=version,
                       timeout=timeout).call(context.outgoing(), PROBE)
    except Exception as e:
        # Rebuilt as itself on an in-process transport; a RemoteError
        # with its name over a broker.
        name = getattr(e, 'exc_type', None) or type(e).__name__
        if name == 'NoSuchMethod':
            return True
        if name == 'UnsupportedVersion':
            return False
        raise
    return True                         # an agent that has the method


class AgentVersions(object):
    """Each host's agent version, asked with ``ask(host, version,
    timeout)`` (a bool) and kept ``ttl`` seconds from its answer; a
    probe that failed, ``failed_ttl`` seconds.
    """

    def __init__(self, ask, ttl=TTL, failed_ttl=FAILED_TTL,
                 clock=time.monotonic):
        self._ask = ask
        self._ttl = ttl
        self._failed_ttl = failed_ttl
        self._clock = clock
        self._known = {}            # host: (version or None, until)
        self._asking = {}           # host: Event set once answered
        self._lock = threading.Lock()

    def of(self, host, timeout=None):
        """The version of ``host``'s agent, or None if it did not tell
        within ``timeout`` s (None: PROBE_TIMEOUT; PROBE_TIMEOUT at
        most), or did not within ``failed_ttl`` s.
        """
        start = self._clock()
        budget = PROBE_TIMEOUT if timeout is None else \
            min(timeout, PROBE_TIMEOUT)
        with self._lock:
            known = self._known.get(host)
            if known is not None and known[1] > start:
                return known[0]
            asked = self._asking.get(host)
            if asked is None:
                asked = self._asking[host] = threading.Event()
                asking = True
            else:
                asking = False
        if not asking:
            # Another call is asking: its answer, if in time.
            if not asked.wait(budget):
                return None
            with self._lock:
                known = self._known.get(host)
            return None if known is None else known[0]
        # A re-probe that fails keeps what the agent said before (for
        # failed_ttl more): a slow answer under load does not make it an
        # agent of this caller's version.
        version = known[0] if known is not None else None
        ttl = self._failed_ttl
        try:
            def speaks(v):
                left = start + budget - self._clock()
                if left <= 0:
                    raise messaging.MessagingTimeout(
                        'no answer in %s s' % budget)
                return self._ask(host, v, left)
            version, ttl = highest(speaks), self._ttl
        except Exception as e:
            LOG.warning('%s does not tell its RPC version (%s): its calls '
                        'capped at %s for %s s', host, e,
                        version or rpc.VERSION, self._failed_ttl)
        finally:
            with self._lock:
                self._known[host] = (version, self._clock() + ttl)
                del self._asking[host]
            asked.set()
        return version

    def forget(self, host):
        """Drop what ``host``'s agent said: it is asked again at the
        next call (its agent was upgraded or rolled back since).
        """
        with self._lock:
            self._known.pop(host, None)

    def lowest_known(self):
        """The lowest version of the agents that told theirs within the
        TTL, or None if none did.
        """
        now = self._clock()
        with self._lock:
            versions = [v for v, until in self._known.values()
                        if v is not None and until > now]
        return min(versions, key=parse) if versions else None


def allows(cap, version):
    """Whether a cap of ``cap`` lets a call of ``version`` be sent."""
    return parse(version) <= parse(cap)
