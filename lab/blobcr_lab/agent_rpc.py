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

"""Helpers for tests that call real blobcr-agent processes over RPC
(their fixtures are in tests/integration/conftest.py).

Every agent gets a host name of its own, so that tests never reach each
other's agents on the shared broker.
"""

import time
import uuid

import oslo_messaging

from blobcr_common import exception

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
    client = api.client_for(host)
    deadline = time.monotonic() + timeout
    # A call sent before the agent's queue is bound is dropped by the
    # broker and only its timeout ends it: probe briefly first, then
    # longer (an agent that is up but busy answers late).
    probe = 0.25
    while True:
        try:
            return client.prepare(server=host, timeout=probe).call(
                {}, 'status')
        except oslo_messaging.MessagingTimeout:
            if time.monotonic() > deadline:
                raise
            probe = min(probe * 2, 2.0)


def collect_garbage(api, host, timeout=120, unless=None):
    """GC now through ``host``'s agent, with no grace (the caller's
    writes are done). A store that collects by itself ([repository]
    gc_interval, the small backend's) may be collecting already: the
    agent says Busy until that run ends, and this waits for it, unless
    ``unless(busy)`` says that run will not end soon (its Busy raised
    at once).
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            return api.gc(host, grace=0)
        except exception.Busy as e:
            if time.monotonic() > deadline or (unless and unless(e)):
                raise
            time.sleep(1)


def agent_log(agent):
    with open(agent.log.name, errors='replace') as f:
        return f.read()


RESERVATION_ERROR = 'reserved for the next checkpoint'


def committed(versions):
    """An image's versions (header entries, or the dicts list_versions
    returns) without the mirror's reservations of the next version: the
    pending one at the end while the image is attached, and unused ones
    failed since (mirror/reserve.py). Call it once the checkpoints are
    stable: a checkpoint still in flight is pending too.
    """
    def field(v, name):
        return v[name] if isinstance(v, dict) else getattr(v, name)
    kept = [v for v in versions
            if not (field(v, 'state') == 'failed' and
                    (field(v, 'error') or '').startswith(RESERVATION_ERROR))]
    if kept and field(kept[-1], 'state') == 'pending' and \
            not field(kept[-1], 'chunks'):
        kept.pop()
    return kept
