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

"""A volume's durability from the RPC attach (API 1.15) to the mirror:
the control endpoint hands it to the manager, which refuses an unknown
one, or ``cluster`` on a store without a write log, before the image
settles or its mirror starts, and passes the rest to the mirror
(stubbed here: what it was asked is checked; the mirror's own handling
is tests/functional's).
"""

import types

from oslo_messaging.rpc import dispatcher as rpc_dispatcher
import pytest

from blobcr_agent import manager
from blobcr_agent.rpc import server as rpc_server
from blobcr_common import exception


class StubBackend(object):
    def __init__(self, write_log):
        self.supports_write_log = write_log

    def describe(self):
        return 'the stub store'


class StubMirror(object):
    """Records each attach's arguments; every image attaches."""

    def __init__(self):
        self.asked = []
        self.attached = {}

    def attach(self, image_id, **kwargs):
        self.asked.append((image_id, kwargs))
        self.attached[image_id] = types.SimpleNamespace(attached_version=2,
                                                        epoch=1)
        return '/mirror/' + image_id


def _endpoint(write_log):
    agent = manager.AgentManager.__new__(manager.AgentManager)
    agent.repo = types.SimpleNamespace(
        backend=StubBackend(write_log),
        image=lambda ref: types.SimpleNamespace(id=ref, name='n', size=1))
    agent.mirror = StubMirror()
    agent.settled = []
    agent.settle = agent.settled.append
    return rpc_server.ControlEndpoint(agent), agent


@pytest.mark.parametrize('write_log,durability', [
    (True, 'cluster'), (True, 'host'), (False, 'host'), (True, None),
    (False, None)])
def test_the_attach_passes_the_durability_to_the_mirror(write_log,
                                                        durability):
    endpoint, agent = _endpoint(write_log)
    got = endpoint.attach({}, 'img', durability=durability)
    assert got['path'] == '/mirror/img'
    assert agent.mirror.asked == [('img', {
        'version': None, 'incoming_from': None, 'durability': durability})]


@pytest.mark.parametrize('write_log,durability,says', [
    (True, 'rack', "unknown durability 'rack'"),
    (True, '', "unknown durability ''"),
    (False, 'cluster', 'the stub store is local to it')])
def test_a_durability_the_store_cannot_keep_is_refused_first(
        write_log, durability, says):
    endpoint, agent = _endpoint(write_log)
    # A caller's error: oslo.messaging sends it back without a traceback
    # in the agent's log.
    with pytest.raises(rpc_dispatcher.ExpectedException) as caught:
        endpoint.attach({}, 'img', durability=durability)
    error = caught.value.exc_info[1]
    assert isinstance(error, exception.InvalidInput)
    assert says in str(error)
    assert agent.mirror.asked == [] and agent.settled == []
