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

"""An fsfreeze hold of a guest someone else froze already (Nova's
quiesce before ``create_snapshot_force`` of each volume of a server it
images: issue 56 item 4): qemu-ga refuses the second freeze, and the
hold keeps the guest as it is and never thaws it (the thaw is Nova's,
after its last volume's snapshot). Any other freeze failure is still
QuiesceFailed. On libvirt's test:///default driver, whose fsFreeze is
replaced by one answering as libvirt 9.0 reports qemu-ga 7.2's refusal
(tests/integration/test_nova_volume_flows.py meets the real one).
"""

import pytest

from blobcr_agent.hypervisor import domains
from blobcr_common import exception

libvirt = pytest.importorskip('libvirt')

# libvirt's report of qemu-ga's answer to a freeze of a frozen guest.
REFUSED = ("internal error: unable to execute QEMU agent command "
           "'guest-fsfreeze-freeze': Command guest-fsfreeze-freeze has "
           "been disabled: the agent is in frozen state")


class Refusing(libvirt.libvirtError):
    def __init__(self, text):
        Exception.__init__(self, text)
        self.err = (libvirt.VIR_ERR_INTERNAL_ERROR, 0, text, 2, None, None,
                    None, 0, 0)


class FrozenDomain(object):
    """The test driver's domain, its fsFreeze refused with ``text``;
    calls counted.
    """

    def __init__(self, domain, text):
        self._domain = domain
        self.text = text
        self.calls = []

    def __getattr__(self, name):
        return getattr(self._domain, name)

    def fsFreeze(self, *args):
        self.calls.append('fsFreeze')
        raise Refusing(self.text)

    def fsThaw(self, *args):
        self.calls.append('fsThaw')
        return 0

    def suspend(self):
        self.calls.append('suspend')
        return self._domain.suspend()

    def resume(self):
        self.calls.append('resume')
        return self._domain.resume()


@pytest.fixture
def hypervisor():
    h = domains.Hypervisor('test:///default')
    domain = h.connection().lookupByName('test')
    if domain.state()[0] == libvirt.VIR_DOMAIN_PAUSED:
        domain.resume()
    return h


def test_a_frozen_guest_is_held_as_it_is_and_not_thawed(hypervisor):
    domain = FrozenDomain(hypervisor.domain_for('/guest/diskimage1'),
                          REFUSED)
    # Two volumes of one server, one after the other (Nova's order).
    for _ in range(2):
        with hypervisor.quiesced(domain, 'fsfreeze'):
            pass
    with pytest.raises(RuntimeError):
        with hypervisor.quiesced(domain, 'fsfreeze'):
            raise RuntimeError('COMMIT failed')
    assert domain.calls == ['fsFreeze'] * 3


def test_a_suspend_of_a_frozen_guest_pauses_and_resumes_it(hypervisor):
    domain = FrozenDomain(hypervisor.domain_for('/guest/diskimage1'),
                          REFUSED)
    with hypervisor.quiesced(domain, 'suspend'):
        assert domain.state()[0] == libvirt.VIR_DOMAIN_PAUSED
    assert domain.calls == ['suspend', 'resume']


def test_other_freeze_failures_still_fail(hypervisor):
    domain = FrozenDomain(
        hypervisor.domain_for('/guest/diskimage1'),
        "internal error: unable to execute QEMU agent command "
        "'guest-fsfreeze-freeze': Command guest-fsfreeze-freeze has been "
        "disabled")
    with pytest.raises(exception.QuiesceFailed, match='has been disabled'):
        with hypervisor.quiesced(domain, 'fsfreeze'):
            pass
    assert domain.calls == ['fsFreeze']
