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

"""Client of the agent RPC API, for Cinder, Nova and tools.

    api = AgentAPI(transport_url='rabbit://...')
    path = api.attach('compute-1', 'vol-1')['path']
    version = api.checkpoint('compute-1', 'vol-1')['version']

Every call names the host whose agent serves it. Calls raise
oslo_messaging.MessagingTimeout when that agent does not answer, and
the agent's own errors (``blobcr_common.exception``) otherwise.

A checkpoint may wait for the image's previous persist before it is
taken: its call waits ``rpc_timeout`` (CHECKPOINT_TIMEOUT, 300 s, by
default) rather than the client's timeout; an agent that cannot start
it in time answers ``exception.Busy`` (try again later) rather than
letting the call time out while it still commits.
"""

import logging
import time

from oslo_config import cfg
import oslo_messaging as messaging

from blobcr_common import exception
from blobcr_common import rpc
from blobcr_common.rpc import auto
from blobcr_common.rpc import bus
from blobcr_common.rpc import context
from blobcr_common.rpc import pool

LOG = logging.getLogger(__name__)
# Seconds a cast's version probe (under auto) may take: a cast is not
# waited for, and neither should its probe be.
CAST_PROBE_TIMEOUT = 1.0

# Remote errors of these modules are rebuilt as their own types.
REMOTE_EXMODS = ['blobcr_common.exception']
# Where agents before blobcr-common raised the same errors from: their
# errors reach this client as RemoteError, turned back by _unrebuilt.
LEGACY_EXMODS = ('blobcr_agent.exception',)

# Rolling upgrades, as Nova's and Cinder's [upgrade_levels]: callers
# (cinder-volume, the Nova listener, agents calling their peers) send no
# newer RPC version than the oldest agent still running understands.
UPGRADE_GROUP = 'upgrade_levels'
upgrade_opts = [
    cfg.StrOpt('blobcr_agent',
               help='Highest RPC API version (such as 1.2) sent to '
                    'blobcr-agents, while some still run an older release '
                    'during a rolling upgrade; unset: the newest this '
                    'release speaks. A call that needs a newer version is '
                    'refused here with a clear error instead of failing on '
                    'the old agent. Unset it once every agent is '
                    'upgraded. "auto": each call is capped at the version '
                    'of the agent it goes to, which this caller asks that '
                    'agent (once every 120 s per host; not for 1.0 calls, '
                    'which every agent speaks); hints cast to every agent '
                    'take the lowest version among the agents asked '
                    'lately.'),
]


def configured_version_cap(conf):
    """The RPC version cap ``conf`` asks for (checked), the newest, or
    ``auto.AUTO``.
    """
    conf.register_opts(upgrade_opts, group=UPGRADE_GROUP)
    cap = conf[UPGRADE_GROUP].blobcr_agent
    if cap is None:
        return rpc.VERSION
    if cap == auto.AUTO:
        return cap
    try:
        wanted = tuple(int(p) for p in cap.split('.'))
    except ValueError:
        wanted = ()
    newest = tuple(int(p) for p in rpc.VERSION.split('.'))
    if len(wanted) != 2 or wanted[0] != newest[0] or wanted > newest:
        raise exception.InvalidInput(
            '[%s] blobcr_agent = %s: a version 1.0 to %s, or auto'
            % (UPGRADE_GROUP, cap, rpc.VERSION))
    return cap


def list_opts():
    return [(UPGRADE_GROUP, upgrade_opts)] + bus.list_opts()


# Seconds a checkpoint call waits for its answer, unless told otherwise.
CHECKPOINT_TIMEOUT = 300


def _without_remote_traceback(error):
    """The agent's error as its own type with the agent's one-line
    message; oslo.messaging appends the remote traceback to it.
    """
    base = next(c for c in type(error).__mro__
                if not c.__name__.endswith('_Remote'))
    clean = base.__new__(base)
    Exception.__init__(clean, str(error).split('\n', 1)[0])
    return clean


def _version_changed(error):
    """Whether ``error`` is a version refusal: this caller's cap below
    the call's version, or the agent not speaking it.
    """
    # The agent's refusal is a RemoteError over a broker, rebuilt as
    # itself where oslo.messaging's own module is allowed.
    return isinstance(error, messaging.RPCVersionCapError) or \
        'UnsupportedVersion' in (getattr(error, 'exc_type', None),
                                 type(error).__name__)


def _unrebuilt(error):
    """The agent's error that oslo.messaging could not rebuild (it calls
    the class with the message alone: VersionNotFound, VersionNotStable,
    AmbiguousImage... take other arguments) as its own type, or None.
    """
    cls = getattr(exception, error.exc_type or '', None)
    last = (error.traceback or [''])[-1]
    if not (isinstance(cls, type) and
            issubclass(cls, exception.BlobCRError) and
            any(last.startswith('%s.%s:' % (module, cls.__name__))
                for module in (exception.__name__,) + LEGACY_EXMODS)):
        return None
    clean = cls.__new__(cls)
    Exception.__init__(clean, str(error.value).split('\n', 1)[0])
    return clean


class AgentAPI(object):
    """Calls to blobcr-agents: the control side on each agent's own
    queue (on its own virtual host with ``[blobcr_bus] host_vhosts``),
    the peer side (handoff, hints) on the bus agents share (rpc/bus.py).

    ``max_hosts``: at most this many hosts' virtual hosts have a
    transport kept open (rpc/pool.py); past it the least recently used
    one is closed once no call uses it. None: ``[blobcr_bus]
    max_host_transports``. One no call used for ``[blobcr_bus]
    host_transport_idle_timeout`` seconds is closed too.

    ``version_cap`` ``auto`` (rpc/auto.py): each host's calls capped at
    its agent's version, asked of it; for peer calls, on the peer side
    with ``[blobcr_bus] host_vhosts`` (an agent has no permission on
    another host's control vhost).
    """

    def __init__(self, conf=None, transport_url=None, timeout=None,
                 version_cap=None, max_hosts=None):
        conf = conf or cfg.CONF
        if version_cap is None:
            version_cap = configured_version_cap(conf)
        self._conf = conf
        self._url = transport_url
        self._timeout = timeout
        self._versions = self._peer_versions = None
        self._vhost_format = bus.host_vhost_format(conf)
        settings = bus.register(conf)
        if max_hosts is None:
            max_hosts = settings.max_host_transports
        if version_cap == auto.AUTO:
            version_cap = rpc.VERSION
            self._versions = auto.AgentVersions(self._speaks)
            # Peer calls probe where they go: the same as the control
            # side's but with host_vhosts.
            self._peer_versions = self._versions \
                if self._vhost_format is None else \
                auto.AgentVersions(self._speaks_to_peer)
        self._cap = version_cap
        self.transport = self._transport(transport_url)
        self.client = self._client(self.transport, rpc.TOPIC)
        # Per host vhost URL, made at the first call.
        self._hosts = pool.TransportPool(
            self._open_host, max_hosts, settings.host_transport_idle_timeout)
        peer_url = bus.peer_url(conf, transport_url)
        self.peer_transport = self.transport if peer_url == transport_url \
            else self._transport(peer_url)
        self.peer_client = self._client(self.peer_transport, rpc.PEER_TOPIC)

    def _transport(self, url):
        return messaging.get_rpc_transport(
            self._conf, url=url, allowed_remote_exmods=REMOTE_EXMODS)

    def _client(self, transport, topic):
        target = messaging.Target(exchange=rpc.EXCHANGE, topic=topic,
                                  version=rpc.VERSION)
        return messaging.get_rpc_client(
            transport, target, version_cap=self._cap, timeout=self._timeout)

    def _open_host(self, url):
        transport = self._transport(url)
        return transport, self._client(transport, rpc.TOPIC)

    def client_for(self, host):
        """The RPC client that reaches the control side of ``host``'s
        agent. With host vhosts, it stays usable until handed back with
        :meth:`give_back` (each call of this class does).
        """
        if self._vhost_format is None:
            return self.client
        return self._hosts.get(
            bus.host_url(self._conf, self._url, self._vhost_format, host))

    def give_back(self, client):
        """The caller of :meth:`client_for` no longer uses ``client``."""
        self._hosts.give_back(client)

    def _speaks(self, host, version, timeout):
        client = self.client_for(host)
        try:
            return auto.speaks(client, host, version, timeout)
        finally:
            self.give_back(client)

    def _speaks_to_peer(self, host, version, timeout):
        """Asked on the peer side (with host_vhosts): an agent that does
        not answer there is older than 1.12, and its peers cannot call
        it on its control vhost either.
        """
        return auto.speaks(self.peer_client, host, version, timeout)

    def _cap_for(self, host, timeout=None, peer=False):
        """The version cap of calls to ``host``: the configured one, or
        with ``auto`` its agent's (this caller's newest if it did not
        tell within ``timeout`` s, rpc/auto.py).
        """
        if self._versions is None or host is None:
            return self._cap
        versions = self._peer_versions if peer else self._versions
        return versions.of(host, timeout) or self._cap

    def _can_send(self, version, host=None, peer=False):
        """Whether a call of ``version`` may go to ``host`` (None: to
        every agent).
        """
        if self._versions is None:
            return self.client.can_send_version(version)
        if host is not None:
            cap = self._cap_for(host, peer=peer)
        else:
            known = [v for v in (self._versions.lowest_known(),
                                 self._peer_versions.lowest_known()) if v]
            cap = min(known, key=auto.parse) if known else self._cap
        return auto.allows(cap, version)

    def _peer_client(self, host, cap=None):
        """The peer side once every agent serves it (cap 1.12, or
        ``cap``, the call's), else the control side, as older agents
        are called.
        """
        if cap is None:
            serves = self._can_send('1.12', host, peer=True)
        else:
            serves = auto.allows(cap, '1.12')
        if serves:
            return self.peer_client
        return self.client if host is None else self.client_for(host)

    def _timeout_of(self, rpc_timeout):
        if rpc_timeout is not None:
            return rpc_timeout
        if self._timeout is not None:
            return self._timeout
        return self._conf.rpc_response_timeout

    def _call(self, host, method, rpc_timeout=None, api_version='1.0',
              peer=False, **kwargs):
        try:
            return self._call_once(host, method, rpc_timeout, api_version,
                                   peer, **kwargs)
        except messaging.MessagingException as e:
            versions = self._peer_versions if peer else self._versions
            if versions is None or host is None or not _version_changed(e):
                raise
            # Under auto, the agent's version changed since it was asked
            # (upgraded: the cap refused the call here; rolled back: the
            # agent refused it): ask it again, once.
            LOG.info('%s: %s refused at version %s (%s): asking its agent '
                     'its version again', method, host, api_version, e)
            versions.forget(host)
            return self._call_once(host, method, rpc_timeout, api_version,
                                   peer, **kwargs)

    def _call_once(self, host, method, rpc_timeout, api_version, peer,
                   **kwargs):
        # timeout=None in prepare() would replace the client's timeout
        # (and fall back to rpc_response_timeout): pass it only if set.
        extra = {} if rpc_timeout is None else {'timeout': rpc_timeout}
        # Every agent speaks X.0: only later versions, and peer calls
        # (their path), need the agent's own.
        if self._versions is not None and (
                peer or auto.parse(api_version)[1] > 0):
            timeout = self._timeout_of(rpc_timeout)
            start = time.monotonic()
            extra['version_cap'] = self._cap_for(host, timeout, peer)
            # The probe's time is the call's.
            extra['timeout'] = timeout - (time.monotonic() - start)
            if extra['timeout'] <= 0:
                raise messaging.MessagingTimeout(
                    '%s did not answer in %s s (%s)' % (host, timeout, method))
        client = self._peer_client(host, extra.get('version_cap')) if peer \
            else self.client_for(host)
        try:
            cctxt = client.prepare(server=host, version=api_version, **extra)
            return cctxt.call(context.outgoing(), method, **kwargs)
        except exception.BlobCRError as e:
            raise _without_remote_traceback(e) from None
        except messaging.RemoteError as e:
            agent_error = _unrebuilt(e)
            if agent_error is None:
                raise
            raise agent_error from None
        finally:
            self.give_back(client)

    @staticmethod
    def _since(api_version, **arguments):
        """The ``arguments`` of a later API version that are set, with
        that version to send them as; {} (a 1.0 call) when none is.
        """
        given = {k: v for k, v in arguments.items() if v is not None}
        if given:
            given['api_version'] = api_version
        return given

    def attach(self, host, image, version=None, instance=None,
               project=None, migrate_from=None, block_device=False,
               durability=None):
        """``project`` (API 1.2): the instance's, the scope of the
        group ids its guest uses. ``migrate_from`` (API 1.6): the host
        the image is live-migrated from (attached incoming until its
        handoff). ``block_device`` (API 1.9): a loop device over the
        mirror file too. ``durability`` (API 1.15, rpc.DURABILITIES):
        what a guest's flush makes durable; None, the agent's default.
        """
        if durability is None and not block_device and migrate_from is None:
            return self._call(host, 'attach', image=image, version=version,
                              instance=instance,
                              **self._since('1.2', project=project))
        # The newest version among the arguments given, and every
        # argument up to it.
        later = {'project': project, 'migrate_from': migrate_from}
        if durability is not None:
            api_version = '1.15'
            later.update(block_device=bool(block_device),
                         durability=durability)
        elif block_device:
            api_version = '1.9'
            later['block_device'] = True
        else:
            api_version = '1.6'
        return self._call(host, 'attach', api_version=api_version,
                          image=image, version=version, instance=instance,
                          **later)

    def detach(self, host, image, discard=False, force=False,
               background=False):
        """``force`` (API 1.1) detaches even while a running domain uses
        the image; ``background`` (API 1.7) returns before the last
        checkpoints are stable.
        """
        if background:
            return self._call(host, 'detach', api_version='1.7', image=image,
                              discard=discard, force=force, background=True)
        if force:
            return self._call(host, 'detach', api_version='1.1', image=image,
                              discard=discard, force=True)
        return self._call(host, 'detach', image=image, discard=discard)

    def take_over(self, host, image, why='its host is lost'):
        """Fence the claim of a lost host on ``image`` (API 1.7)."""
        return self._call(host, 'take_over', api_version='1.7', image=image,
                          why=why)

    def checkpoint(self, host, image, quiesce=None, group=None,
                   members=None, rpc_timeout=CHECKPOINT_TIMEOUT,
                   project=None, creator=None, label=None):
        """``quiesce`` asked for (fsfreeze, suspend) needs a running
        domain on the image (else InvalidInput); left out, the agent's
        default applies, which falls back to none without a domain.
        ``rpc_timeout`` (None: the client's timeout) bounds the wait
        for the answer. ``project`` scopes ``group``, ``creator`` is
        recorded by a group's first member (API 1.2); ``label`` marks
        the version as the caller's own, not a checkpoint to list
        (Version.made_by, API 1.4).
        """
        later = self._since('1.2', project=project, creator=creator)
        later.update(self._since('1.4', label=label))
        return self._call(host, 'checkpoint', rpc_timeout=rpc_timeout,
                          image=image, quiesce=quiesce, group=group,
                          members=members, **later)

    def state(self, host, image, version):
        return self._call(host, 'state', image=image, version=version)

    def wait_stable(self, host, image, version, timeout=600):
        return self._call(host, 'wait_stable', rpc_timeout=timeout + 30,
                          image=image, version=version, timeout=timeout)

    def clone(self, host, image, version=None, name=None):
        return self._call(host, 'clone', image=image, version=version,
                          name=name)

    def list_versions(self, host, image):
        return self._call(host, 'list_versions', image=image)

    def obsolete(self, host, image, versions):
        return self._call(host, 'obsolete', image=image,
                          versions=list(versions))

    def gc(self, host, grace=None, pending_timeout=None):
        return self._call(host, 'gc', grace=grace,
                          pending_timeout=pending_timeout)

    def status(self, host, timeout=None):
        return self._call(host, 'status', rpc_timeout=timeout)

    def export(self, host, image, version, path, timeout=600,
               overwrite=False):
        """Write ``image@version`` to ``path`` on the agent's host: a path
        under its ``[agent] export_dir``. An existing file is replaced
        only with ``overwrite`` (API 1.1).
        """
        extra = {'api_version': '1.1', 'overwrite': True} if overwrite \
            else {}
        return self._call(host, 'export', rpc_timeout=timeout + 30,
                          image=image, version=version, path=path,
                          timeout=timeout, **extra)

    def group_state(self, host, group, project=None):
        return self._call(host, 'group_state', group=group,
                          **self._since('1.2', project=project))

    # -- 1.3: volumes -----------------------------------------------------

    def create_image(self, host, name, size, chunk_size=None):
        return self._call(host, 'create_image', api_version='1.3',
                          name=name, size=size, chunk_size=chunk_size)

    def delete_image(self, host, image):
        return self._call(host, 'delete_image', api_version='1.3',
                          image=image)

    def extend_image(self, host, image, size):
        return self._call(host, 'extend_image', api_version='1.3',
                          image=image, size=size)

    def snapshot(self, host, image):
        """A version of a detached image (an attached one: checkpoint)."""
        return self._call(host, 'snapshot', api_version='1.3', image=image)

    def revert(self, host, image, version):
        return self._call(host, 'revert', api_version='1.3', image=image,
                          version=version)

    def delete_snapshot(self, host, image, version):
        """Obsolete ``version``; the image's content stays."""
        return self._call(host, 'delete_snapshot', api_version='1.3',
                          image=image, version=version)

    def import_file(self, host, image, path, timeout=3600):
        """A new version of ``image`` from the raw file ``path`` under the
        agent's ``[agent] export_dir``.
        """
        return self._call(host, 'import_file', api_version='1.3',
                          rpc_timeout=timeout, image=image, path=path)

    def capacity(self, host):
        return self._call(host, 'capacity', api_version='1.3')

    # -- 1.4 -----------------------------------------------------------------

    def list_images(self, host):
        """Every image of the host's repository, with its versions and
        where it is attached.
        """
        return self._call(host, 'list_images', api_version='1.4')

    def label(self, host, image, version, made_by):
        """Mark a version as not a checkpoint to list (Version.made_by),
        e.g. one Cinder stopped managing.
        """
        return self._call(host, 'label', api_version='1.4', image=image,
                          version=version, made_by=made_by)

    # -- 1.5 -----------------------------------------------------------------

    def hold(self, host, image, quiesce=None, timeout=60):
        """Hold the guest of ``image`` still until :meth:`release` or
        ``timeout`` s: phase one of a group checkpoint across hosts (a
        checkpoint in the same quiesce mode joins the hold).
        """
        return self._call(host, 'hold', api_version='1.5', image=image,
                          quiesce=quiesce, timeout=timeout)

    def release(self, host, image):
        return self._call(host, 'release', api_version='1.5', image=image)

    # -- 1.6 -----------------------------------------------------------------

    def handoff(self, host, image, dest, wait=0, rpc_timeout=None):
        """Asked by ``dest``'s agent: ``host`` hands ``image`` off once
        its guest stopped (``{'version': N}``), or says it still runs
        (``{'running': True}``) after waiting ``wait`` s.
        """
        return self._call(host, 'handoff', api_version='1.6',
                          rpc_timeout=rpc_timeout, peer=True, image=image,
                          dest=dest, wait=wait)

    # -- 1.8 -----------------------------------------------------------------

    def publish_hints(self, scope, source, chunks, hosts=None):
        """Cast to the agents of ``hosts`` (None: a fanout cast to every
        agent): an image of ``source`` restarting in hint ``scope`` read
        ``chunks`` first (mirror/hints.py). Not sent while the version
        cap is below 1.8 (agents that would not understand it).
        """
        if not self._can_send('1.8'):
            return
        client = self._peer_client(None)
        targets = [dict(fanout=True)] if hosts is None else \
            [dict(server=host) for host in hosts]
        for target in targets:
            client.prepare(version='1.8', **target).cast(
                context.outgoing(), 'hints', scope=scope, source=source,
                chunks=list(chunks))

    def hints_to_listeners(self):
        """Whether every agent lists itself as a listener of the scopes
        it restarts members of (1.13), so that hints go to those hosts
        only, not as a fanout.
        """
        return self._can_send('1.13')

    # -- 1.10 ----------------------------------------------------------------

    def prepare_handoff(self, host, image, dest):
        """Cast to ``host``: ``dest`` attached ``image`` for a live
        migration from it; checkpoint what the guest wrote so far (no
        answer). False if the version cap keeps it from being sent.
        """
        # A cast the attach does not wait for: a silent source's probe
        # must not hold the destination's attach (Nova's
        # pre_live_migration) for the probe's 10 s.
        cap = self._cap_for(host, timeout=CAST_PROBE_TIMEOUT, peer=True)
        if not auto.allows(cap, '1.10'):
            return False
        cctxt = self._peer_client(host, cap).prepare(server=host,
                                                     version='1.10')
        cctxt.cast(context.outgoing(), 'prepare_handoff', image=image,
                   dest=dest)
        return True

    # -- 1.11 ----------------------------------------------------------------

    def admit_group(self, host, group, members, project=None):
        """Check ``members`` against ``group``'s index on ``host`` once,
        before its members checkpoint (agent API 1.11); None, sending
        nothing, while the version cap is below 1.11.
        """
        if not self._can_send('1.11', host):
            return None
        return self._call(host, 'admit_group', api_version='1.11',
                          group=group, members=members, project=project)

    # -- 1.14 ----------------------------------------------------------------

    def can_batch_members(self, hosts):
        """Whether the version cap lets hold_members and
        checkpoint_members be sent to each of ``hosts`` (a group's).
        """
        if self._versions is None:
            return self._can_send('1.14')
        return all(self._can_send('1.14', host) for host in hosts)

    def hold_members(self, host, members, timeout=60):
        """Hold still the guests of ``members`` on ``host`` (dicts with
        ``image`` and ``quiesce``), each until its checkpoint_members'
        COMMIT or ``timeout`` seconds; all of them or none.
        """
        return self._call(host, 'hold_members', api_version='1.14',
                          members=members, timeout=timeout)

    def checkpoint_members(self, host, members, group, count,
                           rpc_timeout=CHECKPOINT_TIMEOUT, creator=None,
                           label=None):
        """Checkpoint ``members`` on ``host`` (dicts with ``image``,
        ``quiesce`` and ``project``) as members of ``group`` (``count``
        in all), each released from its hold once COMMITted: a
        checkpoint's answer per member, in their order, or an error and
        no version kept.
        """
        extra = {} if creator is None else {'creator': creator}
        return self._call(host, 'checkpoint_members', api_version='1.14',
                          rpc_timeout=rpc_timeout, members=members,
                          group=group, count=count, label=label, **extra)

    def cleanup(self):
        self._hosts.close()
        self.transport.cleanup()
        if self.peer_transport is not self.transport:
            self.peer_transport.cleanup()
