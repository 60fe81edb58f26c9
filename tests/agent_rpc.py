"""Helpers for tests that call real blobcr-agent processes over RPC
(their fixtures are in tests/integration/conftest.py).

Every agent gets a host name of its own, so that tests never reach each
other's agents on the shared broker.
"""

import time
import uuid

import oslo_messaging

RPC_UP_TIMEOUT = 60


def host_name(label):
    return 'rpc-%s-%s' % (label, uuid.uuid4().hex[:10])


def rpc_settings(url, host, **agent):
    return {'DEFAULT': {'transport_url': url},
            'agent': dict({'host': host, 'rpc_enabled': 'true',
                           'quiesce': 'none'}, **agent)}


def wait_rpc(api, host, timeout=RPC_UP_TIMEOUT):
    """Wait until ``host``'s agent answers RPC (it connects to the broker
    in the background after it mounted); returns its status.
    """
    cctxt = api.client.prepare(server=host, timeout=2)
    deadline = time.monotonic() + timeout
    while True:
        try:
            return cctxt.call({}, 'status')
        except oslo_messaging.MessagingTimeout:
            if time.monotonic() > deadline:
                raise


def agent_log(agent):
    with open(agent.log.name, errors='replace') as f:
        return f.read()
