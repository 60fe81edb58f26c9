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

"""Shared live prefetch hints: instances restarting together from one
group checkpoint prefetch for the slower ones what the faster ones read
(the BlobCR paper's adaptive prefetch, seed 000 section 4.1.5).

The ranks of a job read their disks in about the same order at restart
(the same binaries, each its own checkpoint file at the same offsets),
a little apart in time. An image attached from a version of a group
checkpoint (or a clone's first version made from one) joins that
group's *scope*. Every INTERVAL its publisher sends the chunks its guest
read for the first time since the last send (the core's first-read
order), and every other image of the scope, on this host and on the
others, fetches those of its own chunks in the background, through the
image's fetch path: a chunk is fetched once, never over a write.

Hints go to the hosts that restart members of the scope, not to every
host (:class:`Listeners`): a host joining a scope adds itself to the
scope's listener keys in the store (one write, no compare-and-set), and
a publishing host reads them at most every REFRESH seconds and casts to
each (``HintHub.remote(scope, chunks, hosts)``). A host it finds that
it has not sent to yet first gets everything it sent for the scope, so
a member that attaches late misses nothing. With ``listeners``
unset (agents older than API 1.13 on the bus), hints go as a fanout
cast to every agent (``hosts`` None).

A chunk index leaves a host at most once per scope, sent by whichever
of its images reads it first, and never once the host heard it (from
one of its own images or from another host): the others had that hint
already. So what a host receives grows with the chunks the group reads,
not with the members or the hosts reading them. Hints only cost
bandwidth when wrong; an index outside the image is dropped.
"""

import collections
import hashlib
import json
import logging
import threading
import time

from blobcr_agent.repository import groups
from blobcr_common import exception

LOG = logging.getLogger(__name__)

INTERVAL = 0.05         # seconds between two sends of one image
PUBLISH_FOR = 900.0     # seconds after the attach: a restart is over
MAX_PER_MESSAGE = 4096  # chunk indexes in one message
# Chunks one hinted fetch asks for: 4, not 16, so that a follower's
# backlog does not put 16 reads at once ahead of the first reader's
# one-at-a-time reads on the OSDs (at M = 16 its restart went from
# 0.40-0.46 s to 0.31-0.35 s; in lazy mode it takes 0.26-0.31 s).
BATCH = 4
REFRESH = 0.5           # seconds between two reads of a scope's listeners


def scope_of(repo, header, number):
    """The hint scope of an image attached from version ``number``: the
    group checkpoint that version (or, for a clone's first version, its
    origin) belongs to; None when it belongs to none.
    """
    if number is None:
        return None
    try:
        tag = header.version(number).group
        if not tag and number == 1 and header.origin:
            origin = repo.image(header.origin['image'])
            tag = origin.version(header.origin['version']).group
    except exception.BlobCRError:
        return None
    if not tag:
        return None
    return groups.record_name(tag['id'], tag.get('project'))


def valid_chunks(chunks):
    """``chunks`` as a list of ints if it is one (of a sane length);
    None for anything else (a message is never trusted).
    """
    if not isinstance(chunks, list) or len(chunks) > MAX_PER_MESSAGE:
        return None
    if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0
               for c in chunks):
        return None
    return chunks


class Follower(object):
    """Fetches the chunks hinted to one image, oldest hint first, once
    its guest reads (:meth:`activate`: at its first read that waits for
    the store, or the publisher's next look at its reads). Before that,
    the image's prefetch would only slow down the members reading
    first, whose restart is the group's (ranks start a little apart: at
    M = 16 the first reader took 1.2-1.6 s, against 0.3-0.5 s without
    hints, while 15 members not started yet fetched what it read).
    """

    def __init__(self, image):
        self.image = image
        self.queue = collections.deque()
        self.cond = threading.Condition()
        self.received = 0           # hinted indexes (stats)
        self.hinted = set()         # chunks this image fetched by hint
        self.active = False         # its guest read
        self.stopped = False
        self.thread = threading.Thread(
            target=self._run, daemon=True,
            name='blobcr-hints-%s' % image.id[:8])
        self.thread.start()

    def offer(self, chunks):
        nchunks = self.image.header.nchunks
        with self.cond:
            for c in chunks:
                if c < nchunks:
                    self.queue.append(c)
                    self.received += 1
            self.cond.notify()

    def activate(self):
        with self.cond:
            if not self.active:
                self.active = True
                self.cond.notify()

    def _take(self):
        with self.cond:
            while not (self.queue and self.active) and not self.stopped:
                self.cond.wait()
            if self.stopped:
                return None
            batch = []
            while self.queue and len(batch) < BATCH:
                batch.append(self.queue.popleft())
            return batch

    def _run(self):
        image = self.image
        while True:
            batch = self._take()
            if batch is None:
                return
            todo = [c for c in dict.fromkeys(batch)
                    if not image.core.is_present(c)]
            if not todo or image._closing:
                continue
            try:
                image.fetch(todo, reason='hint')
                self.hinted.update(todo)
            except Exception as e:
                # Best effort: the guest's own read fetches (and
                # reports) what fails here.
                LOG.warning('hinted prefetch of %s failed at %s: %s',
                            image.id, todo[0], e)

    def stop(self):
        with self.cond:
            self.stopped = True
            self.cond.notify_all()
        self.thread.join()


class Publisher(object):
    """Sends one image's new first reads to its scope every INTERVAL."""

    def __init__(self, hub, image, follower):
        self.hub = hub
        self.image = image
        self.follower = follower
        self.sent = 0               # length of the order already seen
        self.published = 0          # indexes sent (stats)
        self.messages = 0
        self.stopped = threading.Event()
        self.thread = threading.Thread(
            target=self._run, daemon=True,
            name='blobcr-hintpub-%s' % image.id[:8])
        self.thread.start()

    def _run(self):
        deadline = time.monotonic() + PUBLISH_FOR
        while not self.stopped.wait(INTERVAL):
            self.flush()
            if time.monotonic() > deadline:
                return

    def flush(self):
        try:
            order = self.image.core.read_order()
        except Exception:
            return                  # closed under us
        if order:
            self.follower.activate()
        new = self.hub.claim(self.image.hint_scope, order[self.sent:])
        self.sent = len(order)
        if not new:
            self.hub.refresh(self.image.hint_scope)
        for k in range(0, len(new), MAX_PER_MESSAGE):
            part = new[k:k + MAX_PER_MESSAGE]
            self.published += len(part)
            self.messages += 1
            self.hub.publish(self.image.hint_scope, self.image.id, part)

    def stop(self):
        self.stopped.set()
        self.thread.join()


class Listeners(object):
    """The hosts restarting members of a scope, as keys beside the
    group's index in the store: ``{digest of the host: {"host", "at"}}``
    (a digest: a host name need not be a valid key). A key older than
    PUBLISH_FOR is a restart that is over.
    """

    def __init__(self, repo, host):
        self.repo = repo
        self.host = host

    @staticmethod
    def record(scope):
        return scope + '.hosts'

    def listen(self, scope):
        key = hashlib.sha256(self.host.encode()).hexdigest()[:32]
        self.repo.add_keys(self.record(scope), {key: json.dumps(
            {'host': self.host, 'at': time.time()}).encode()})

    def hosts(self, scope):
        """The other hosts listening to ``scope`` now."""
        found = set()
        since = time.time() - PUBLISH_FOR
        for value in self.repo.backend.read_keys(
                self.record(scope)).values():
            try:
                entry = json.loads(value)
                host, at = entry['host'], float(entry['at'])
            except (ValueError, KeyError, TypeError):
                continue                # not ours to judge here
            if at >= since and host != self.host and \
                    isinstance(host, str):
                found.add(host)
        return found


class HintHub(object):
    """The scopes of the images attached here, and the way out to other
    hosts: ``remote(scope, chunks, hosts)`` (None: this host only;
    ``hosts`` None: every host), to the hosts ``listeners`` lists.
    """

    def __init__(self, remote=None, listeners=None):
        self.remote = remote
        # Listeners: hints go to the hosts listed; None: to every host.
        self.listeners = listeners
        self._lock = threading.Lock()
        # scope -> (read at, hosts listening); scope -> hosts sent what
        # the scope said from here; scope -> chunk indexes sent from here
        self._heard_by = {}
        self._sent_to = {}
        self._said = {}
        self._unlisted = set()      # scopes whose listeners could not be read
        self._scopes = {}           # scope -> {image id: Follower}
        # scope -> chunk indexes sent from or heard on this host
        self._announced = {}
        self._publishers = {}       # image id -> Publisher
        self.remote_errors = 0
        self.remote_received = 0    # chunk indexes from other hosts
        self.remote_messages = 0    # ... in that many messages

    def join(self, image):
        """Start following and publishing for ``image`` (its
        ``hint_scope`` is set); its Follower.
        """
        follower = Follower(image)
        with self._lock:
            first = image.hint_scope not in self._scopes
            self._scopes.setdefault(image.hint_scope, {})[image.id] = \
                follower
        if first and self.listeners is not None and self.remote is not None:
            try:
                self.listeners.listen(image.hint_scope)
            except Exception as e:
                # Best effort: its guest's own reads fetch what it needs.
                self.remote_errors += 1
                LOG.warning('%s will hear no hints from other hosts: %s',
                            image.id, e)
        self._publishers[image.id] = Publisher(self, image, follower)
        LOG.info('%s restarts from group scope %s: sharing its reads',
                 image.id, image.hint_scope)
        return follower

    def leave(self, image):
        publisher = self._publishers.pop(image.id, None)
        if publisher is not None:
            publisher.stop()
        with self._lock:
            members = self._scopes.get(image.hint_scope, {})
            follower = members.pop(image.id, None)
            if not members:
                self._scopes.pop(image.hint_scope, None)
                self._announced.pop(image.hint_scope, None)
                self._heard_by.pop(image.hint_scope, None)
                self._sent_to.pop(image.hint_scope, None)
                self._said.pop(image.hint_scope, None)
        if follower is not None:
            follower.stop()

    def claim(self, scope, chunks):
        """Of ``chunks`` (first read here), those no image of
        ``scope`` here sent or heard yet, now marked as sent.
        """
        with self._lock:
            if scope not in self._scopes:
                return []
            announced = self._announced.setdefault(scope, set())
            new = [c for c in dict.fromkeys(chunks) if c not in announced]
            announced.update(new)
            self._said.setdefault(scope, set()).update(new)
        return new

    def _deliver(self, scope, chunks, skip=None):
        with self._lock:
            followers = [f for image_id, f in
                         self._scopes.get(scope, {}).items()
                         if image_id != skip]
            if scope in self._scopes:
                self._announced.setdefault(scope, set()).update(chunks)
        for follower in followers:
            follower.offer(chunks)

    def publish(self, scope, image_id, chunks):
        """``image_id``'s guest read ``chunks`` first: the others of the
        scope here, then the other hosts of the scope, prefetch them.
        """
        if chunks:
            self._deliver(scope, chunks, skip=image_id)
        if self.remote is None:
            return
        try:
            if self.listeners is None:
                if chunks:
                    self.remote(scope, chunks, None)
                return
            for hosts, part in self._routes(scope, chunks):
                self.remote(scope, part, hosts)
        except Exception as e:
            self.remote_errors += 1
            LOG.warning('hints of %s not sent to other hosts: %s',
                        image_id, e)

    def refresh(self, scope):
        """Send what ``scope`` announced here to the hosts that started
        listening since (a publisher whose guest read nothing new).
        """
        if self.remote is not None and self.listeners is not None:
            self.publish(scope, None, [])

    def _routes(self, scope, chunks):
        """``[(hosts, chunk indexes)]`` that send ``chunks`` of
        ``scope``: to the hosts sent to before, ``chunks``; to hosts
        listening since, everything sent from here (``chunks`` too;
        what this host heard, its sender sends them).
        """
        now = time.monotonic()
        with self._lock:
            read_at, hosts = self._heard_by.get(scope, (None, set()))
        if read_at is None or now - read_at >= REFRESH:
            read_at = now
            try:
                hosts = self.listeners.hosts(scope)
                self._unlisted.discard(scope)
            except Exception as e:
                # The hosts known so far go on hearing; said once per
                # outage, not at every look (20 a second).
                self.remote_errors += 1
                if scope not in self._unlisted:
                    self._unlisted.add(scope)
                    LOG.warning('hosts restarting members of %s not read '
                                '(hints go to the %d known): %s', scope,
                                len(hosts), e)
        with self._lock:
            if scope not in self._scopes:
                return []
            self._heard_by[scope] = (read_at, hosts)
            sent_to = self._sent_to.setdefault(scope, set())
            new = hosts - sent_to
            old = hosts & sent_to
            sent_to.update(new)
            # Sorted only for a new host: this runs at every look (20 a
            # second per image), and the set grows with the chunks read.
            said = sorted(self._said.get(scope, ())) if new else []
        routes = []
        for targets, part in ((old, chunks), (new, said)):
            if targets and part:
                routes += [(sorted(targets), part[k:k + MAX_PER_MESSAGE])
                           for k in range(0, len(part), MAX_PER_MESSAGE)]
        return routes

    def receive(self, scope, chunks):
        """Hints from another host (an RPC cast); a bad message is
        dropped.
        """
        chunks = valid_chunks(chunks)
        if chunks is None or not isinstance(scope, str):
            LOG.warning('malformed prefetch hints dropped')
            return 0
        self.remote_received += len(chunks)
        self.remote_messages += 1
        self._deliver(scope, chunks)
        return len(chunks)

    def totals(self):
        with self._lock:
            scopes = len(self._scopes)
        return {'scopes': scopes, 'remote_received': self.remote_received,
                'remote_messages': self.remote_messages,
                'remote_errors': self.remote_errors}

    def stats(self, image_id):
        with self._lock:
            follower = None
            for members in self._scopes.values():
                follower = members.get(image_id, follower)
        publisher = self._publishers.get(image_id)
        return {'hints_received': follower.received if follower else 0,
                'hints_published': publisher.published if publisher else 0,
                'hint_messages': publisher.messages if publisher else 0}
