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

"""The metadata route (doc/source/nova.rst, route 2): the guest sends no
credentials to 169.254.169.254; what answers that address on its host
relays ``/v1/`` to the agent as Neutron's metadata proxy relays to
Nova's metadata API, with ``X-Instance-ID`` for the instance at the
guest's address and its ``X-Instance-ID-Signature`` (that Nova's own
check accepts exactly these signatures is in test_nova_vendordata.py).

A real agent; the guest's own client; the relay of
test_nova_volume_xml.py in its signing mode.
"""

import uuid

import pytest

from blobcr_guest import client as guest_client
from blobcr_guest import exception as guest_exception
from blobcr_lab.metadata_front import MetadataFront
from tests.integration.test_nova_vendordata import Host
from tests.integration.test_nova_vendordata import META


@pytest.fixture
def host(tmp_path):
    host = Host(str(tmp_path), {'P': uuid.uuid4().hex,
                                'Q': uuid.uuid4().hex}).start()
    yield host
    host.stop()


def relay(host, instance, secret=META):
    return MetadataFront({}, host.agent.proxy_port(),
                         sign=(secret, instance))


def guest(front, **credentials):
    return guest_client.CheckpointClient('http://127.0.0.1:%d' % front.port,
                                         retries=0, **credentials)


def test_guest_without_credentials_checkpoints_through_the_signing_relay(
        host):
    a = host.instances['A']
    front = relay(host, a)
    try:
        before = {n: host.committed(n) for n in 'ABC'}
        taken = guest(front).checkpoint(sync=False)
        assert guest(front).wait_stable(taken.version, timeout=60) == \
            'stable'
        # A guest claiming to be B (with B's id, and a made-up signature)
        # is still A: the relay says who it is, not the guest.
        claimed = guest(front, instance_id=host.instances['B'],
                        signature='0' * 64).checkpoint(sync=False)
        guest(front).wait_stable(claimed.version, timeout=60)
        assert host.committed('A') == before['A'] + [taken.version,
                                                     claimed.version]
        assert {n: host.committed(n) for n in 'BC'} == {
            n: before[n] for n in 'BC'}
    finally:
        front.close()


@pytest.mark.parametrize('case', ['wrong secret', 'not hosted here'])
def test_relay_refusals_commit_nothing(host, case):
    if case == 'wrong secret':
        front, status = relay(host, host.instances['A'], 'not-' + META), 401
    else:
        front, status = relay(host, str(uuid.uuid4())), 403
    try:
        before = {n: host.committed(n) for n in 'ABC'}
        with pytest.raises(guest_exception.CheckpointError) as refused:
            guest(front).checkpoint(sync=False)
        assert refused.value.status == status
        assert {n: host.committed(n) for n in 'ABC'} == before
    finally:
        front.close()
