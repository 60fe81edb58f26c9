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

"""``blobcr-nova-listener``: Nova's versioned notifications drive the
blobcr-agents.

Nova publishes an ``instance.<action>.<phase>`` notification for each
step of an instance's life (``[notifications] notification_format =
versioned``, topic ``versioned_notifications``): publisher
``nova-compute:<host that emits it>``, payload ``nova_object.data`` with
the instance's ``uuid``, ``host``, ``tenant_id``, ``block_devices``
(only with ``[notifications] bdms_in_notifications``) and, for volume
events, ``volume_id``. This listener maps some of them to agent RPC
calls (doc/source/nova.rst, "Notifications", has the table and why):

* the instance leaves a host (``delete.end``, ``shelve_offload.end``):
  that host's agent commits what is left unpersisted of the instance's
  images and detaches them;
* ``shelve.end``: commit, keep the mirror;
* ``volume_detach.end``: the volume's mirror must be gone from the host;
* live migration, resize: at the start (``live_migration_pre.start``,
  ``resize_prep.start``, both emitted by the destination with the
  source in the payload) the source commits its dirty chunks; at the end
  (``live_migration_post.end``, ``live_migration_post_dest.end``,
  ``resize_finish.end``) the source commits what is still dirty and
  detaches, and the destination attaches that committed version;
  ``live_migration_rollback.end`` and ``resize_revert.end`` leave (or
  put) the mirror on the source.

A notification proves nothing (any compute host may publish one, in
any host's name and with any payload: issue 54), so the listener acts
only on what Nova's and Cinder's APIs confirm (authority.py, asked with
the listener's own credentials, ``[nova]``), and only on the hosts
Nova names:

* ``delete.end``: Nova reports the instance deleted on the publisher;
* ``shelve_offload.end``: Nova reports it shelved offloaded, on no host
  (or deleted since, on no host);
* ``shelve.end``: shelved, on the publisher or on no host;
* ``volume_detach.end``: the instance on the publisher, and Cinder
  reports the volume attached neither to it nor on that host, and
  settled (not attaching, detaching or copying: ``SETTLED``);
* a move's start: Nova's newest migration of the instance is from the
  payload's host to the publisher (or to no host yet: a resize's
  destination claims after resize_prep.start), and is under way or done;
  its end: that migration (the one seen starting) is at its end
  (``END_STATUSES``) and Nova reports the instance on the destination;
  a resize's revert: it is ``reverted`` and the instance back on the
  source; a rollback: the instance is on the source.

A notification they do not confirm (or that cannot be checked: Nova
does not answer) is dropped with a warning naming its publisher.

Which images are an instance's on a host: the agent's instance bindings
(``status``: ``attached[image]['instances']``, set by every attach that
named the instance, Cinder's included), and those of the payload's
Cinder volumes (``block_devices``, ``volume_id``) that Nova lists as the
instance's (for a deleted instance, whose volumes Nova no longer lists:
those Cinder reports deleted or attached nowhere on that host), whose
image is named ``volume-<id>`` by the BlobCR Cinder driver; releasing
one needs Cinder to report it settled and attached neither to the
instance nor on that host. The project a move attaches for is Nova's.
What the listener cannot know (an image nobody bound, a host that does
not answer) it logs; it never detaches what it was not sure of, never
discards writes and attaches on a destination only what the source
committed.

Notifications are acknowledged once handled, failed or not: a dead
agent is an error in the log, not a notification handled again and
again. ``python -m blobcr_nova.listener --config-file
/etc/blobcr/nova-listener.conf``.
"""

import collections
import signal
import sys
import threading
import time

from oslo_config import cfg
from oslo_log import log as oslo_log
import oslo_messaging as messaging

from blobcr_common import exception as agent_exception
from blobcr_common.rpc import api as rpc_api
from blobcr_nova import authority as nova_authority
from blobcr_nova import listener_opts

LOG = oslo_log.getLogger(__name__)

LOCKS = 64

RELEASE = 'release'
SHELVE = 'shelve'
DETACH_VOLUME = 'detach_volume'
MIGRATE_START = 'migrate_start'
MIGRATE_END = 'migrate_end'
MIGRATE_BACK = 'migrate_back'
ROLLBACK = 'rollback'

# event type -> what the listener does (doc/source/nova.rst has why).
EVENTS = {
    'instance.delete.end': RELEASE,
    'instance.shelve_offload.end': RELEASE,
    'instance.shelve.end': SHELVE,
    'instance.volume_detach.end': DETACH_VOLUME,
    'instance.live_migration_pre.start': MIGRATE_START,
    'instance.live_migration_post.end': MIGRATE_END,
    'instance.live_migration_post_dest.end': MIGRATE_END,
    'instance.live_migration_rollback.end': ROLLBACK,
    'instance.live_migration_rollback_dest.end': ROLLBACK,
    'instance.resize_prep.start': MIGRATE_START,
    'instance.resize_finish.end': MIGRATE_END,
    'instance.resize_revert.end': MIGRATE_BACK,
}


# Cinder's statuses of a volume nobody is attaching, detaching or copying
# ('reserved': Nova's shelve offload leaves an attachment without a host).
SETTLED = ('available', 'in-use', 'reserved', 'deleting')
# Nova's statuses of a migration under way or done, at its start (a late
# listener may see it done) and at its end (post_dest.end and post.end
# come while it is 'running', resize_finish.end once 'finished').
START_STATUSES = ('queued', 'accepted', 'preparing', 'running', 'completed',
                  'pre-migrating', 'migrating', 'post-migrating', 'finished')
END_STATUSES = ('running', 'completed', 'finished', 'confirming',
                'confirmed')

Refused = nova_authority.Refused


class AgentDown(Exception):
    """An agent did not answer: the event is not handled on its host."""


def _host_of(publisher_id):
    """The host of a publisher id ``nova-compute:HOST``."""
    if not isinstance(publisher_id, str) or ':' not in publisher_id:
        return None
    return publisher_id.split(':', 1)[1]


def _data(payload):
    data = payload.get('nova_object.data') if isinstance(payload, dict) \
        else None
    return data if isinstance(data, dict) else {}


def _volumes(data):
    """Volume ids the payload names (block_devices, volume_id)."""
    ids = []
    for bdm in data.get('block_devices') or ():
        vid = _data(bdm).get('volume_id')
        if vid:
            ids.append(vid)
    if data.get('volume_id'):
        ids.append(data['volume_id'])
    return ids


def _migration(m):
    if m is None:
        return 'none'
    return 'from %s to %s (%s)' % (m.get('source_compute'),
                                   m.get('dest_compute'), m.get('status'))


class Migration(object):
    def __init__(self, instance, source, dest):
        self.instance = instance
        self.source = source
        self.dest = dest
        self.versions = {}          # image -> version committed at start
        self.start_ms = 0.0
        self.chunks = 0
        self.done = False
        self.seen = time.monotonic()


class Handler(object):
    """What each event does, with an AgentAPI to the agents, once the
    Authority confirmed it.
    """

    def __init__(self, api, conf_group, authority):
        self.api = api
        self.opts = conf_group
        self.authority = authority
        # instance -> Migration, oldest first (at most max_migrations).
        self.migrations = collections.OrderedDict()
        self._lock = threading.Lock()
        self._instance_locks = [threading.Lock() for _ in range(LOCKS)]

    # -- entry -------------------------------------------------------------

    def handle(self, publisher_id, event_type, payload):
        """Handle one notification; never raises. Returns the action
        taken (a key of EVENTS' values) or None when ignored.
        """
        action = EVENTS.get(event_type)
        if action is None:
            return None
        data = _data(payload)
        instance = data.get('uuid')
        publisher = _host_of(publisher_id)
        if not instance or not isinstance(instance, str) or not publisher:
            LOG.error('%s from %r without an instance uuid or a host: '
                      'ignored', event_type, publisher_id)
            return None
        with self._instance_lock(instance):
            try:
                getattr(self, '_' + action)(event_type, publisher, instance,
                                            data)
            except Refused as e:
                LOG.warning('%s of instance %s from %s dropped: %s',
                            event_type, instance, publisher_id, e)
            except AgentDown as e:
                LOG.error('%s of instance %s not handled: %s', event_type,
                          instance, e)
            except agent_exception.BlobCRError as e:
                # The agent's own answer (Busy, a version that failed...):
                # the mirror is as the agent left it, nothing discarded.
                LOG.error('%s of instance %s not completed: the agent '
                          'answered %s: %s', event_type, instance,
                          type(e).__name__, e)
            except Exception:
                LOG.exception('%s of instance %s failed', event_type,
                              instance)
            LOG.info('handled %s from %s of instance %s', event_type,
                     publisher, instance)
        return action

    def _instance_lock(self, instance):
        """One instance's events are handled one at a time, in the
        order they arrive (a lock per stripe, not per instance ever seen).
        """
        with self._lock:
            self._expire()
        return self._instance_locks[hash(instance) % len(
            self._instance_locks)]

    def _expire(self):
        now = time.monotonic()
        for instance, m in list(self.migrations.items()):
            if now - m.seen > self.opts.migration_ttl:
                LOG.warning('migration of %s from %s to %s never ended: '
                            'forgotten', instance, m.source, m.dest)
                self.migrations.pop(instance, None)

    def _remember(self, m):
        with self._lock:
            self.migrations.pop(m.instance, None)
            self.migrations[m.instance] = m
            while len(self.migrations) > self.opts.max_migrations:
                instance, old = self.migrations.popitem(last=False)
                LOG.warning('%d migrations under way ([listener] '
                            'max_migrations): the oldest, of %s from %s to '
                            '%s, is forgotten', len(self.migrations) + 1,
                            instance, old.source, old.dest)

    # -- what Nova and Cinder confirm --------------------------------------

    def _server(self, instance):
        server = self.authority.server(instance)
        if server is None:
            raise Refused('Nova has no record of instance %s' % instance)
        return server

    def _on(self, instance, host):
        """Nova's record of ``instance``, which runs on ``host``."""
        server = self._server(instance)
        if server.deleted or server.host != host:
            raise Refused('Nova reports instance %s %s, not on host %s'
                          % (instance, server, host))
        return server

    def _own_volumes(self, instance, data):
        """The payload's volumes that Nova attaches to ``instance``."""
        own = self.authority.volumes_of(instance)
        return [v for v in _volumes(data) if v in own]

    def _cinder_holds(self, volume, host, instance):
        """Why Cinder keeps ``volume``'s image on ``host`` (attached
        there or to ``instance``, or busy), or None: it may go.
        """
        record = self.authority.volume(
            nova_authority.check_id(volume, 'volume'))
        if record is None:
            return None                 # deleted
        status = record.get('status')
        on = sorted({'%s (host %s)' % (a.get('server_id'), a.get('host_name'))
                     for a in record.get('attachments') or ()
                     if isinstance(a, dict) and (
                         a.get('host_name') == host or
                         a.get('server_id') == instance)})
        if on:
            return 'Cinder reports volume %s attached to %s' % (
                volume, ', '.join(on))
        if status not in SETTLED:
            return 'Cinder reports volume %s %s' % (volume, status)
        return None

    def _releasable(self, event_type, host, instance, volumes):
        """Those of ``volumes`` whose image may leave ``host``."""
        free = []
        for volume in volumes:
            why = self._cinder_holds(volume, host, instance)
            if why is None:
                free.append(volume)
            else:
                LOG.info('%s of instance %s: %s: its image on %s is left '
                         'alone', event_type, instance, why, host)
        return free

    def _confirm_release(self, event_type, host, instance, data):
        """The volumes whose images may be released with the instance's
        on ``host``; Refused unless Nova says the instance left it.
        """
        server = self._server(instance)
        if event_type == 'instance.delete.end':
            if not server.deleted or server.host != host:
                raise Refused('Nova reports instance %s %s, not deleted on '
                              'host %s' % (instance, server, host))
            # Nova lists no volume of a deleted server: Cinder decides.
            volumes = _volumes(data)
        else:
            if server.host or not (
                    server.deleted or server.vm_state == 'shelved_offloaded'):
                raise Refused('Nova reports instance %s %s, not shelved '
                              'offloaded' % (instance, server))
            volumes = self._own_volumes(instance, data)
        return self._releasable(event_type, host, instance, volumes)

    def _confirm_move(self, instance, source, dest, on, statuses, data):
        """(project, volumes) of a move of ``instance`` from ``source``
        to ``dest``: Refused unless Nova's newest migration of it is that
        one, in one of ``statuses``, and the instance is on ``on``.
        """
        server = self._on(instance, on)
        m = self.authority.migration(instance)
        if m is None or (m.get('source_compute'), m.get('dest_compute')) != \
                (source, dest) or m.get('status') not in statuses:
            raise Refused('Nova\'s newest migration of instance %s is %s, '
                          'not one from %s to %s (%s)' % (
                              instance, _migration(m), source, dest,
                              ', '.join(statuses)))
        return server.project, self._own_volumes(instance, data)

    # -- agent calls ---------------------------------------------------------

    def _call(self, host, method, *args, **kwargs):
        try:
            return getattr(self.api, method)(host, *args, **kwargs)
        except messaging.MessagingTimeout:
            raise AgentDown('the blobcr-agent of host %s does not answer '
                            '(%s, %d s): nothing was changed by this event '
                            'there' % (host, method, self.opts.agent_timeout))

    def _held(self, host, instance, volumes):
        """{image id: its status entry} of the images of ``instance`` that
        ``host``'s agent mirrors: bound to the instance, or the image of
        one of the Cinder ``volumes`` (confirmed the instance's).
        """
        attached = self._call(host, 'status')['attached']
        held = {image: a for image, a in attached.items()
                if instance in (a.get('instances') or ())}
        for volume in volumes:
            try:
                image = self._call(host, 'list_versions',
                                   'volume-%s' % volume)['image']
            except (agent_exception.ImageNotFound,
                    agent_exception.AmbiguousImage):
                LOG.info('volume %s of instance %s is not a BlobCR volume '
                         'here', volume, instance)
                continue
            if image in attached and image not in held:
                others = attached[image].get('instances') or []
                if others:
                    LOG.warning('image %s (volume %s) on %s is bound to %s, '
                                'not to %s: left alone', image, volume, host,
                                ', '.join(others), instance)
                    continue
                held[image] = attached[image]
        return held

    def _commit(self, host, image, entry, label):
        """Commit what ``image``'s mirror on ``host`` has not persisted
        and wait until it is stable. Returns (version, chunks, ms): the
        version that holds the mirror's content.
        """
        start = time.monotonic()
        if not entry.get('dirty', 1):
            version = entry.get('last_version') or \
                entry.get('attached_version')
            if version is not None:
                state = self._call(host, 'wait_stable', image, version,
                                   timeout=self.opts.persist_timeout)
                if state == 'stable':
                    return version, 0, (time.monotonic() - start) * 1000
        cp = self._call(host, 'checkpoint', image, quiesce='none',
                        label=label, rpc_timeout=max(
                            self.opts.agent_timeout,
                            rpc_api.CHECKPOINT_TIMEOUT))
        state = self._call(host, 'wait_stable', image, cp['version'],
                           timeout=self.opts.persist_timeout)
        if state != 'stable':
            raise agent_exception.VersionNotStable(image, cp['version'],
                                                   state)
        return cp['version'], cp.get('chunks', 0), \
            (time.monotonic() - start) * 1000

    def _release(self, event_type, host, instance, data):
        """Commit and detach the instance's images left on ``host``
        (delete.end, shelve_offload.end). Returns {image: version} of
        what was released.
        """
        volumes = self._confirm_release(event_type, host, instance, data)
        held = self._held(host, instance, volumes)
        if not held:
            LOG.info('%s: host %s holds no BlobCR image of instance %s: '
                     'nothing to do', event_type, host, instance)
            return {}
        released = {}
        for image, entry in sorted(held.items()):
            version = self._release_image(event_type, host, instance, image,
                                          entry)
            if version is not None:
                released[image] = version
        return released

    def _release_image(self, event_type, host, instance, image, entry):
        """Commit, wait until stable, detach; the version, or None when
        the agent refused the detach (the mirror stays, nothing lost).
        """
        version, chunks, ms = self._commit(host, image, entry,
                                           self.opts.release_label)
        try:
            self._call(host, 'detach', image)
        except agent_exception.InvalidInput as e:
            # A running domain uses it, or it was written after the
            # commit.
            LOG.error('%s: image %s of instance %s stays attached on %s: '
                      '%s', event_type, image, instance, host, e)
            return None
        LOG.info('%s: image %s of instance %s released on %s at version %s '
                 '(%d chunks committed in %.1f ms)', event_type, image,
                 instance, host, version, chunks, ms)
        return version

    # -- actions -------------------------------------------------------------

    def _shelve(self, event_type, host, instance, data):
        server = self._server(instance)
        if server.deleted or server.host not in (None, host) or \
                server.vm_state not in ('shelved', 'shelved_offloaded'):
            raise Refused('Nova reports instance %s %s, not shelved on host '
                          '%s' % (instance, server, host))
        held = self._held(host, instance, self._own_volumes(instance, data))
        if not held:
            LOG.info('%s: host %s holds no BlobCR image of instance %s: '
                     'nothing to do', event_type, host, instance)
        for image, entry in sorted(held.items()):
            version, chunks, ms = self._commit(host, image, entry,
                                               self.opts.release_label)
            LOG.info('%s: image %s of instance %s kept on %s, committed '
                     'at version %s (%d chunks, %.1f ms)', event_type,
                     image, instance, host, version, chunks, ms)

    def _detach_volume(self, event_type, host, instance, data):
        volume = data.get('volume_id')
        if not volume:
            LOG.error('%s of instance %s names no volume: ignored',
                      event_type, instance)
            return
        self._on(instance, host)
        why = self._cinder_holds(volume, host, instance)
        if why is not None:
            raise Refused(why)
        try:
            image = self._call(host, 'list_versions',
                               'volume-%s' % volume)['image']
        except (agent_exception.ImageNotFound,
                agent_exception.AmbiguousImage):
            LOG.info('%s: volume %s is not a BlobCR volume: nothing to do',
                     event_type, volume)
            return
        entry = self._call(host, 'status')['attached'].get(image)
        if entry is None:
            LOG.info('%s: image %s of volume %s is not attached on %s: '
                     'nothing to do', event_type, image, volume, host)
            return
        others = [i for i in entry.get('instances') or () if i != instance]
        if others:
            LOG.warning('%s: image %s of volume %s on %s is bound to %s: '
                        'left alone', event_type, image, volume, host,
                        ', '.join(others))
            return
        LOG.warning('%s: image %s of volume %s is still attached on %s '
                    '(Cinder\'s terminate_connection did not detach it): '
                    'releasing it', event_type, image, volume, host)
        self._release_image(event_type, host, instance, image, entry)

    def _migrate_start(self, event_type, dest, instance, data):
        """Emitted by the destination; the payload's host is the source:
        commit the source's dirty chunks ahead of the switch.
        """
        source = data.get('host')
        if source == dest:
            LOG.info('%s of instance %s: source and destination are both '
                     '%s: nothing to move', event_type, instance, dest)
            return
        if not source:
            LOG.error('%s of instance %s: no source host in the payload: '
                      'ignored', event_type, instance)
            return
        nova = self.authority.migration(instance)
        if nova is None or nova.get('source_compute') != source or \
                nova.get('dest_compute') not in (dest, None) or \
                nova.get('status') not in START_STATUSES:
            raise Refused('Nova\'s newest migration of instance %s is %s, '
                          'not one from %s to %s under way' % (
                              instance, _migration(nova), source, dest))
        server = self._server(instance)
        if server.deleted or server.host not in (source, dest):
            raise Refused('Nova reports instance %s %s, not on %s or %s'
                          % (instance, server, source, dest))
        volumes = self._own_volumes(instance, data)
        m = Migration(instance, source, dest)
        self._remember(m)
        held = self._held(source, instance, volumes)
        if not held:
            LOG.info('%s: source %s holds no BlobCR image of instance %s: '
                     'nothing to move', event_type, source, instance)
            return
        start = time.monotonic()
        for image, entry in sorted(held.items()):
            version, chunks, _ = self._commit(source, image, entry,
                                              self.opts.migrate_label)
            m.versions[image] = version
            m.chunks += chunks
        m.start_ms = (time.monotonic() - start) * 1000
        LOG.info('%s: instance %s, %s -> %s: source committed %s '
                 '(%d chunks) in %.1f ms', event_type, instance, source,
                 dest, m.versions, m.chunks, m.start_ms)

    def _migrate_end(self, event_type, publisher, instance, data):
        m = self.migrations.get(instance)
        if m is None:
            LOG.error('%s of instance %s: its start was not seen (no '
                      'live_migration_pre or resize_prep): the source is '
                      'unknown, nothing moved', event_type, instance)
            return
        if publisher not in (m.source, m.dest):
            LOG.error('%s of instance %s from %s, which is neither the '
                      'source %s nor the destination %s: ignored',
                      event_type, instance, publisher, m.source, m.dest)
            return
        if m.done:
            LOG.info('%s: move of instance %s from %s to %s already done',
                     event_type, instance, m.source, m.dest)
            return
        project, volumes = self._confirm_move(
            instance, m.source, m.dest, m.dest, END_STATUSES, data)
        self._move(event_type, m, m.source, m.dest, volumes, project)
        # Both ends come (post_dest.end from the destination, post.end
        # from the source): the second one is a no-op.
        m.done = True

    def _move(self, event_type, m, source, dest, volumes, project):
        start = time.monotonic()
        held = self._held(source, m.instance, volumes)
        if not held and not m.versions:
            LOG.info('%s: instance %s has no BlobCR image on %s: nothing '
                     'to move', event_type, m.instance, source)
            return
        # Images committed at the start that the source no longer holds
        # (Cinder's terminate_connection committed and detached them):
        # the newest stable version holds their data.
        moved = {image: None for image in m.versions or {}
                 if image not in held}
        chunks = 0
        for image, entry in sorted(held.items()):
            version, n, _ = self._commit(source, image, entry,
                                         self.opts.migrate_label)
            chunks += n
            try:
                self._call(source, 'detach', image)
            except agent_exception.InvalidInput as e:
                # Still used there: two hosts must never write it.
                LOG.error('%s: image %s of instance %s stays on %s and is '
                          'not attached on %s: %s', event_type, image,
                          m.instance, source, dest, e)
                continue
            moved[image] = version
        commit_ms = (time.monotonic() - start) * 1000
        attach_start = time.monotonic()
        for image, version in sorted(moved.items()):
            try:
                self._attach_moved(event_type, m.instance, image, version,
                                   source, dest, project)
            except AgentDown as e:
                LOG.error('%s: image %s of instance %s was released on %s '
                          'at version %s and is not attached on %s: %s',
                          event_type, image, m.instance, source,
                          'newest' if version is None else version, dest, e)
        attach_ms = (time.monotonic() - attach_start) * 1000
        LOG.info('MOVED instance=%s source=%s dest=%s images=%d '
                 'start_chunks=%d start_ms=%.1f end_chunks=%d '
                 'end_commit_ms=%.1f attach_ms=%.1f extra_ms=%.1f',
                 m.instance, source, dest, len(moved), m.chunks,
                 m.start_ms, chunks, commit_ms, attach_ms,
                 m.start_ms + commit_ms + attach_ms)

    def _attach_moved(self, event_type, instance, image, version, source,
                      dest, project):
        """Attach on ``dest`` what ``source`` released at ``version``
        (None: it was released before, its newest stable version).
        """
        there = self._call(dest, 'status')['attached'].get(image)
        incoming = (there or {}).get('incoming') or {}
        if incoming and not incoming.get('done'):
            # Attached for this live migration (Cinder's connection on
            # the destination): it takes the source's last version at
            # its handoff (blobcr_agent/mirror/handoff.py).
            LOG.info('%s: image %s of instance %s is incoming on %s: it '
                     'takes %s\'s last version at the handoff', event_type,
                     image, instance, dest, source)
            return
        if there is not None:
            # Already mirrored there: Nova's Cinder attachment of the
            # destination (made at live_migration_pre, before the
            # source's last writes were committed), or an operator's.
            if version is None:
                version = max(v['version'] for v in self._call(
                    dest, 'list_versions', image)['versions']
                    if v['state'] == 'stable')
            base = max(there.get('attached_version') or 0,
                       there.get('last_version') or 0)
            if base < version:
                LOG.error('%s: image %s of instance %s was already '
                          'attached on %s from version %s, older than '
                          'version %s the source %s committed last: chunks '
                          'written on %s after version %s and not '
                          'rewritten on %s are read there as they were in '
                          'version %s. The agent cannot move an attached '
                          'mirror to a newer version; detach it there and '
                          'attach version %s before the instance uses it '
                          '(doc/source/nova.rst, "Notifications")',
                          event_type, image, instance, dest, base, version,
                          source, source, base, dest, base, version)
            else:
                LOG.info('%s: image %s of instance %s already attached on '
                         '%s (from version %s)', event_type, image,
                         instance, dest, base)
            return
        try:
            got = self._call(dest, 'attach', image, version=version,
                             instance=instance, project=project)
        except agent_exception.BlobCRError as e:
            LOG.error('%s: image %s of instance %s is not attached on %s '
                      'at version %s: %s (it was released on %s; that '
                      'version holds its data)', event_type, image,
                      instance, dest, version, e, source)
            return
        LOG.info('%s: image %s of instance %s attached on %s at version %s '
                 '(%s)', event_type, image, instance, dest, got['version'],
                 got['path'])

    def _migrate_back(self, event_type, source, instance, data):
        """resize_revert.end, emitted by the source the instance is back
        on: the mirror moves back from the destination if the listener
        moved it there.
        """
        m = self.migrations.get(instance)
        dest = m.dest if m is not None and m.done else None
        if dest is None:
            self.migrations.pop(instance, None)
            LOG.info('%s: instance %s is back on %s; the listener moved '
                     'nothing (or does not remember it): nothing to do',
                     event_type, instance, source)
            return
        if source != m.source:
            raise Refused('the listener moved instance %s from %s, not from '
                          '%s' % (instance, m.source, source))
        project, volumes = self._confirm_move(
            instance, m.source, m.dest, source, ('reverted',), data)
        self.migrations.pop(instance, None)
        back = Migration(instance, dest, source)
        self._move(event_type, back, dest, source, volumes, project)

    def _rollback(self, event_type, publisher, instance, data):
        m = self.migrations.get(instance)
        if m is None:
            LOG.info('%s of instance %s: no migration under way: nothing '
                     'to do', event_type, instance)
            return
        if publisher not in (m.source, m.dest):
            raise Refused('%s is neither the source %s nor the destination '
                          '%s of the migration of instance %s' % (
                              publisher, m.source, m.dest, instance))
        self._on(instance, m.source)
        self.migrations.pop(instance, None)
        LOG.info('%s: live migration of instance %s from %s to %s rolled '
                 'back: its images stay on %s (versions %s were committed '
                 'there for it)', event_type, instance, m.source, m.dest,
                 m.source, m.versions)


class NotificationEndpoint(object):
    """oslo.messaging endpoint: INFO notifications of instances."""

    filter_rule = messaging.NotificationFilter(event_type=r'^instance\.')

    def __init__(self, handler):
        self.handler = handler

    def info(self, ctxt, publisher_id, event_type, payload, metadata):
        self.handler.handle(publisher_id, event_type, payload)
        return messaging.NotificationResult.HANDLED


def register_opts(conf):
    listener_opts.register_opts(conf)


def make_listener(conf, api=None, authority=None):
    """(listener, handler) on the notification transport of ``conf``.
    Raises authority.NotConfigured without ``[nova]`` credentials.
    """
    authority = authority or nova_authority.Authority.from_conf(conf)
    api = api or rpc_api.AgentAPI(conf, timeout=conf.listener.agent_timeout,
                                  max_hosts=conf.listener.max_agent_hosts)
    handler = Handler(api, conf.listener, authority)
    transport = messaging.get_notification_transport(conf)
    targets = [messaging.Target(topic=topic, exchange=conf.listener.exchange)
               for topic in conf.listener.topics]
    listener = messaging.get_notification_listener(
        transport, targets, [NotificationEndpoint(handler)],
        executor='threading', pool=conf.listener.pool or None)
    return listener, handler


def main(argv=None):
    conf = cfg.CONF
    register_opts(conf)
    oslo_log.register_options(conf)
    try:
        conf(sys.argv[1:] if argv is None else argv, project='blobcr',
             prog='blobcr-nova-listener')
    except cfg.Error as e:
        sys.stderr.write('blobcr-nova-listener: %s\n' % e)
        return 2
    oslo_log.setup(conf, 'blobcr-nova-listener')
    try:
        listener, handler = make_listener(conf)
    except nova_authority.NotConfigured as e:
        LOG.error('%s', e)
        sys.stderr.write('blobcr-nova-listener: %s\n' % e)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    listener.start()
    LOG.info('blobcr-nova-listener listening on %s (exchange %s, pool %s)',
             ', '.join(conf.listener.topics), conf.listener.exchange,
             conf.listener.pool or '-')
    stop.wait()
    listener.stop()
    listener.wait()
    handler.api.cleanup()
    return 0


if __name__ == '__main__':
    sys.exit(main())
