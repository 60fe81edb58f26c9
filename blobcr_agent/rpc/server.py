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

"""The agent side of the RPC API: one endpoint object, served by an
oslo.messaging RPC server on topic blobcr-agent, server = this host.

Each method takes the request context first (as oslo.messaging passes
it) and calls the AgentManager. Errors reach the caller as the agent's
exception types with their messages (see ``allowed_remote_exmods``).

Any caller with the broker's credentials can call: exports are
held to ``[agent] export_dir`` here (root on the admin socket may write
anywhere, its ``admin_group`` members not).
"""

import logging
import os
import time

import oslo_messaging as messaging

from blobcr_agent.rpc import peer_bus
from blobcr_common import exception
from blobcr_common import rpc
from blobcr_common.rpc import api as rpc_api
from blobcr_common.rpc import bus
from blobcr_common.rpc import context

LOG = logging.getLogger(__name__)


# The caller's mistakes (and Busy: try again later) are answered without
# a traceback in the agent's log. Every other error (backend unreachable,
# corrupt object, lost race, aborted commit, failed quiesce) is a failure
# of the agent and is logged as one before it is answered.
CALLER_ERRORS = (exception.InvalidInput, exception.ImageNotFound,
                 exception.AmbiguousImage, exception.VersionNotFound,
                 exception.VersionNotStable, exception.Busy)

DEFAULT_EXPORT_DIR = '/var/lib/blobcr/exports'


def _expected(method):
    return messaging.expected_exceptions(*CALLER_ERRORS)(method)


def confined_export_path(export_dir, path, who):
    """The real path of ``path`` if it is inside ``export_dir`` (made if
    needed); InvalidInput naming ``who`` otherwise.
    """
    if not isinstance(path, str) or not os.path.isabs(path):
        raise exception.InvalidInput('export needs an absolute path')
    root = os.path.realpath(export_dir)
    real = os.path.realpath(path)
    if real == root or os.path.commonpath([real, root]) != root:
        raise exception.InvalidInput(
            '%s go under %s ([agent] export_dir): %s is not there'
            % (who, root, path))
    if os.path.dirname(real) == root:
        try:
            os.makedirs(root, mode=0o700, exist_ok=True)
        except OSError as e:
            raise exception.BlobCRError('cannot make %s: %s' % (root, e))
    return real


class PeerEndpoint(object):
    """What agents ask each other (the peer side, rpc/bus.py) over
    oslo.messaging, which cannot tell who asks: every public method is
    an RPC call. With ``[blobcr_bus] authenticated_peers`` the peer side
    is rpc/peer_bus.py instead.
    """

    target = messaging.Target(version=rpc.VERSION)

    def __init__(self, manager):
        self.manager = manager

    # -- 1.6: asked by a live migration's destination ----------------------

    @_expected
    def handoff(self, ctxt, image, dest, wait=0):
        return self.manager.handoff(image, dest, wait=wait)

    # -- 1.8 ---------------------------------------------------------------

    def hints(self, ctxt, scope, source, chunks):
        return self.manager.receive_hints(scope, source, chunks)

    # -- 1.10 --------------------------------------------------------------

    @_expected
    def prepare_handoff(self, ctxt, image, dest):
        return self.manager.prepare_handoff(image, dest)


class ControlEndpoint(object):
    """The control side: every public method is an RPC call (API
    version: rpc.VERSION).
    """

    target = messaging.Target(version=rpc.VERSION)

    def __init__(self, manager, export_dir=DEFAULT_EXPORT_DIR):
        self.manager = manager
        self.export_dir = export_dir

    def _export_path(self, path):
        """The real path of ``path`` if it is inside export_dir."""
        return confined_export_path(self.export_dir, path, 'RPC exports')

    @_expected
    def attach(self, ctxt, image, version=None, instance=None,
               project=None, migrate_from=None, block_device=False,
               durability=None):
        return self.manager.attach(image, version=version, instance=instance,
                                   project=project, migrate_from=migrate_from,
                                   block_device=block_device,
                                   durability=durability)

    @_expected
    def detach(self, ctxt, image, discard=False, force=False,
               background=False):
        return self.manager.detach(image, discard=discard, force=force,
                                   background=background)

    @_expected
    def take_over(self, ctxt, image, why='its host is lost'):
        return self.manager.take_over(image, why=why)

    @_expected
    def checkpoint(self, ctxt, image, quiesce=None, group=None,
                   members=None, project=None, creator='rpc', label=None):
        # A group member's tag is recorded after the ack (the caller may
        # hold other members still meanwhile); wait_stable waits for it.
        started = time.monotonic()
        # Wall clock: a caller on the same clock splits its round trip
        # into the request's travel and the answer's.
        received_at = time.time()
        result = self.manager.checkpoint(image, quiesce=quiesce, group=group,
                                         members=members, project=project,
                                         creator=creator, label=label,
                                         tag_after_ack=True)
        # The agent's whole part of the call (records, hold, COMMIT): the
        # caller's round trip less this is the RPC path.
        result['served_ms'] = round((time.monotonic() - started) * 1e3, 3)
        result['received_at'] = received_at
        return result

    @_expected
    def state(self, ctxt, image, version):
        return self.manager.state(image, version)

    @_expected
    def wait_stable(self, ctxt, image, version, timeout=600):
        return self.manager.wait_stable(image, version, timeout=timeout)

    @_expected
    def clone(self, ctxt, image, version=None, name=None):
        return self.manager.clone(image, version=version, name=name)

    @_expected
    def list_versions(self, ctxt, image):
        return self.manager.list_versions(image)

    @_expected
    def obsolete(self, ctxt, image, versions):
        return self.manager.obsolete(image, versions)

    @_expected
    def gc(self, ctxt, grace=None, pending_timeout=None):
        return self.manager.gc(grace=grace, pending_timeout=pending_timeout)

    @_expected
    def status(self, ctxt):
        return self.manager.status()

    @_expected
    def export(self, ctxt, image, version, path, timeout=600,
               overwrite=False):
        return self.manager.export(image, version, self._export_path(path),
                                   timeout=timeout, overwrite=overwrite)

    @_expected
    def group_state(self, ctxt, group, project=None):
        return self.manager.group_state(group, project=project)

    @_expected
    def admit_group(self, ctxt, group, members, project=None):
        return self.manager.admit_group(group, members, project=project)

    # -- 1.3: volumes -----------------------------------------------------

    @_expected
    def create_image(self, ctxt, name, size, chunk_size=None):
        return self.manager.create_image(name, size, chunk_size=chunk_size)

    @_expected
    def delete_image(self, ctxt, image):
        return self.manager.delete_image(image)

    @_expected
    def extend_image(self, ctxt, image, size):
        return self.manager.extend_image(image, size)

    @_expected
    def snapshot(self, ctxt, image):
        return self.manager.snapshot(image)

    @_expected
    def revert(self, ctxt, image, version):
        return self.manager.revert(image, version)

    @_expected
    def delete_snapshot(self, ctxt, image, version):
        return self.manager.delete_snapshot(image, version)

    @_expected
    def import_file(self, ctxt, image, path):
        path = confined_export_path(self.export_dir, path, 'RPC imports')
        return self.manager.import_file(image, path)

    @_expected
    def capacity(self, ctxt):
        return self.manager.capacity()

    # -- 1.4 ---------------------------------------------------------------

    @_expected
    def list_images(self, ctxt):
        return self.manager.list_images()

    @_expected
    def label(self, ctxt, image, version, made_by):
        return self.manager.label(image, version, made_by)

    # -- 1.5 ---------------------------------------------------------------

    @_expected
    def hold(self, ctxt, image, quiesce=None, timeout=60):
        return self.manager.hold(image, quiesce=quiesce, timeout=timeout)

    @_expected
    def release(self, ctxt, image):
        return self.manager.release(image)

    # -- 1.14: a host's members of a group checkpoint, a call per phase --

    @_expected
    def hold_members(self, ctxt, members, timeout=60):
        return self.manager.hold_members(members, timeout=timeout)

    @_expected
    def checkpoint_members(self, ctxt, members, group, count,
                           creator='rpc', label=None):
        started, received_at = time.monotonic(), time.time()
        results = self.manager.checkpoint_members(
            members, group, count, creator=creator, label=label)
        served = round((time.monotonic() - started) * 1e3, 3)
        for result in results:
            # As checkpoint's: the agent's whole part of the call, and
            # when it came in (the caller splits its round trip).
            result.update(served_ms=served, received_at=received_at)
        return results


def _server(transport, topic, host, endpoint):
    server = messaging.get_rpc_server(
        transport, messaging.Target(exchange=rpc.EXCHANGE, topic=topic,
                                    server=host),
        [endpoint], executor='threading',
        access_policy=messaging.DefaultRPCAccessPolicy,
        serializer=context.RequestContextSerializer())
    LOG.info('RPC server on topic %s, server %s', topic, host)
    return server


class AgentEndpoint(ControlEndpoint, PeerEndpoint):
    """The control side, and the peer side for agents older than 1.12."""


def get_server(conf, manager, transport=None):
    """The control side's RPC server (not started) for ``manager``; it
    serves the peer calls too unless the peer side is authenticated.
    """
    transport = transport or messaging.get_rpc_transport(conf)
    endpoint = ControlEndpoint if bus.register(conf).authenticated_peers \
        else AgentEndpoint
    return _server(transport, rpc.TOPIC, conf.agent.host,
                   endpoint(manager, export_dir=conf.agent.export_dir))


def get_peer_server(conf, manager, transport=None):
    """The peer side's RPC server (not started): on ``transport``, or the
    one [blobcr_bus] peer_transport_url names ([DEFAULT] transport_url
    if unset).
    """
    if transport is None:
        transport = messaging.get_rpc_transport(conf, url=bus.peer_url(conf))
    return _server(transport, rpc.PEER_TOPIC, conf.agent.host,
                   PeerEndpoint(manager))


def get_servers(conf, manager):
    """Both sides' RPC servers (not started) for ``manager``; one broker
    connection when the peer side is on the same bus. With
    authenticated_peers, the peer side is a PeerBus (rpc/peer_bus.py).
    """
    transport = messaging.get_rpc_transport(conf)
    if bus.register(conf).authenticated_peers:
        # The peer bus first: its start returns at once, and the control
        # side's waits for its broker.
        return [peer_bus.PeerBus(conf, peer_bus.PeerRequests(manager)),
                get_server(conf, manager, transport)]
    peer_url = bus.peer_url(conf)
    peer_transport = transport if peer_url is None else \
        messaging.get_rpc_transport(conf, url=peer_url)
    return [get_server(conf, manager, transport),
            get_peer_server(conf, manager, peer_transport)]


def peers_of(conf, servers):
    """What the agent asks its peers with: the PeerBus among ``servers``,
    or an oslo.messaging client.
    """
    for server in servers:
        if isinstance(server, peer_bus.PeerBus):
            return server
    return rpc_api.AgentAPI(conf)
