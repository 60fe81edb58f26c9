"""The agent side of the RPC API: one endpoint object, served by an
oslo.messaging RPC server on topic blobcr-agent, server = this host.

Each method takes the request context first (as oslo.messaging passes
it) and calls the AgentManager. Errors reach the caller as the agent's
exception types with their messages (see ``allowed_remote_exmods``).
"""

import logging

import oslo_messaging as messaging

from blobcr_agent import exception
from blobcr_agent import rpc

LOG = logging.getLogger(__name__)


def _expected(method):
    # The caller's mistakes are answered, not logged as agent failures.
    return messaging.expected_exceptions(exception.BlobCRError)(method)


class AgentEndpoint(object):
    """Every public method is an RPC call of API version 1.0."""

    target = messaging.Target(version=rpc.VERSION)

    def __init__(self, manager):
        self.manager = manager

    @_expected
    def attach(self, ctxt, image, version=None, instance=None):
        return self.manager.attach(image, version=version, instance=instance)

    @_expected
    def detach(self, ctxt, image, discard=False):
        return self.manager.detach(image, discard=discard)

    @_expected
    def checkpoint(self, ctxt, image, quiesce=None, group=None,
                   members=None):
        return self.manager.checkpoint(image, quiesce=quiesce, group=group,
                                       members=members)

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
    def export(self, ctxt, image, version, path, timeout=600):
        return self.manager.export(image, version, path, timeout=timeout)

    @_expected
    def group_state(self, ctxt, group):
        return self.manager.group_state(group)


def get_server(conf, manager, transport=None):
    """An RPC server (not started) for ``manager`` on this host."""
    transport = transport or messaging.get_rpc_transport(conf)
    target = messaging.Target(exchange=rpc.EXCHANGE, topic=rpc.TOPIC,
                              server=conf.agent.host)
    server = messaging.get_rpc_server(
        transport, target, [AgentEndpoint(manager)], executor='threading',
        access_policy=messaging.DefaultRPCAccessPolicy)
    LOG.info('RPC server on topic %s, server %s', rpc.TOPIC,
             conf.agent.host)
    return server
