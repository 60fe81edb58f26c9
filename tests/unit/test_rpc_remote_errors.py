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

"""An agent's errors reach the client as their own types, whether the
agent raised them from blobcr_common.exception or, before blobcr-common,
from blobcr_agent.exception (an agent not yet upgraded). The errors go
through oslo.messaging's own serialization, as on the wire; the broker
is left out (tests/integration/test_agent_rpc.py has it).
"""

import sys

from oslo_messaging._drivers import common as driver_common
import pytest

from blobcr_common import exception
from blobcr_common.rpc import api


def _on_the_wire(error):
    """``error`` raised by a server, as the client deserializes it."""
    try:
        raise error
    except Exception:
        data = driver_common.serialize_remote_exception(sys.exc_info())
    return driver_common.deserialize_remote_exception(data,
                                                      api.REMOTE_EXMODS)


def _old_agents(cls):
    """A class like ``cls`` as an agent before blobcr-common defined it:
    in module blobcr_agent.exception, which this client cannot import.
    """
    return type(cls.__name__, (Exception,),
                {'__module__': 'blobcr_agent.exception'})


class _Call(object):
    """A prepared RPC client context whose call raises ``error``."""

    def __init__(self, error):
        self.error = error

    def prepare(self, **kwargs):
        return self

    def call(self, ctxt, method, **kwargs):
        raise self.error


def _through_agent_api(error, monkeypatch):
    client = api.AgentAPI(transport_url='fake:/', version_cap='1.13')
    monkeypatch.setattr(client, 'client_for', lambda host: _Call(error))
    with pytest.raises(Exception) as caught:
        client.state('host-a', 'img', 1)
    return caught.value


@pytest.mark.parametrize('make', [
    lambda: exception.ImageNotFound('img'),
    lambda: exception.VersionNotFound('img', 3),
    lambda: exception.Busy('a persist is under way'),
])
def test_an_agents_error_comes_back_as_its_type(make, monkeypatch):
    sent = make()
    got = _through_agent_api(_on_the_wire(sent), monkeypatch)
    assert type(got) is type(sent)
    assert str(got) == str(sent)


@pytest.mark.parametrize('make', [
    lambda: exception.ImageNotFound('img'),
    lambda: exception.VersionNotFound('img', 3),
])
def test_an_old_agents_error_comes_back_as_its_type(make, monkeypatch):
    sent = make()
    old = _old_agents(type(sent))(str(sent))
    on_wire = _on_the_wire(old)
    # oslo.messaging cannot rebuild it (no such module here)...
    assert type(on_wire).__name__ == 'RemoteError'
    # ...and the client can.
    got = _through_agent_api(on_wire, monkeypatch)
    assert type(got) is type(sent)
    assert str(got) == str(sent)


def test_an_error_of_another_module_stays_a_remote_error(monkeypatch):
    other = type('ImageNotFound', (Exception,),
                 {'__module__': 'somewhere.else'})('image gone')
    got = _through_agent_api(_on_the_wire(other), monkeypatch)
    assert type(got).__name__ == 'RemoteError'
