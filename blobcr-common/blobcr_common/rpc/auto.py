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

Decisions that name no host (hints cast to every agent, whether hints
go to listeners only, batching a group's members) take the lowest
version among the agents asked within the TTL: agents this caller has
not called are not counted.
"""

import threading
import time

from blobcr_common import rpc
from blobcr_common.rpc import context

AUTO = 'auto'
TTL = 120.0
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


def speaks(client, host, version):
    """Whether ``host``'s agent accepts calls of ``version``, asked over
    ``client`` (its control side). A timeout or any other error raises.
    """
    try:
        client.prepare(server=host, version=version,
                       version_cap=version).call(context.outgoing(), PROBE)
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
    """Each host's agent version, asked with ``ask(host, version)`` (a
    bool) and kept ``ttl`` seconds.
    """

    def __init__(self, ask, ttl=TTL, clock=time.monotonic):
        self._ask = ask
        self._ttl = ttl
        self._clock = clock
        self._known = {}
        self._lock = threading.Lock()

    def of(self, host):
        now = self._clock()
        with self._lock:
            known = self._known.get(host)
        if known is not None and known[1] > now:
            return known[0]
        version = highest(lambda v: self._ask(host, v))
        with self._lock:
            self._known[host] = (version, now + self._ttl)
        return version

    def lowest_known(self):
        """The lowest version of the agents asked within the TTL, or
        None if none was.
        """
        now = self._clock()
        with self._lock:
            versions = [v for v, until in self._known.values() if until > now]
        return min(versions, key=parse) if versions else None


def allows(cap, version):
    """Whether a cap of ``cap`` lets a call of ``version`` be sent."""
    return parse(version) <= parse(cap)
