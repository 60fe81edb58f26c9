"""Finding domains and quiescing them, on libvirt's test:///default driver
(a real libvirt, with an in-memory hypervisor: no guest can run here for a
unit test; the QEMU guest comes with the end-to-end test).
"""

import uuid

import pytest

from blobcr_agent import exception
from blobcr_agent.hypervisor import domains

libvirt = pytest.importorskip('libvirt')
RUNNING, PAUSED = libvirt.VIR_DOMAIN_RUNNING, libvirt.VIR_DOMAIN_PAUSED


@pytest.fixture
def hypervisor():
    h = domains.Hypervisor('test:///default')
    domain = h.connection().lookupByName('test')
    if domain.state()[0] == PAUSED:
        domain.resume()
    return h


def test_domain_is_found_by_its_disk(hypervisor):
    domain = hypervisor.domain_for('/guest/diskimage1')
    assert domain is not None and domain.name() == 'test'
    assert hypervisor.domain_for('/no/such/disk') is None


def test_suspend_resumes_even_when_the_checkpoint_fails(hypervisor):
    domain = hypervisor.domain_for('/guest/diskimage1')
    with hypervisor.quiesced(domain, 'suspend'):
        assert domain.state()[0] == PAUSED
    assert domain.state()[0] == RUNNING
    with pytest.raises(RuntimeError):
        with hypervisor.quiesced(domain, 'suspend'):
            raise RuntimeError('COMMIT failed')
    assert domain.state()[0] == RUNNING


def test_fsfreeze_thaws_whatever_happens(hypervisor):
    domain = hypervisor.domain_for('/guest/diskimage1')
    with pytest.raises(RuntimeError):
        with hypervisor.quiesced(domain, 'fsfreeze'):
            raise RuntimeError('COMMIT failed')
    # Thawed already: nothing is left frozen.
    assert domain.fsThaw() == 0


def test_bad_mode_and_unreachable_libvirt(hypervisor):
    domain = hypervisor.domain_for('/guest/diskimage1')
    with pytest.raises(exception.InvalidInput):
        with hypervisor.quiesced(domain, 'hibernate'):
            pass
    with pytest.raises(exception.BackendUnavailable, match='libvirt'):
        domains.Hypervisor('qemu+unix:///system?socket=/nonexistent'
                           ).connection()


def test_instance_lookup_by_uuid_or_name(hypervisor):
    domain = hypervisor.connection().lookupByName('test')
    by_uuid = hypervisor.lookup(domain.UUIDString())
    assert by_uuid is not None and by_uuid.name() == 'test'
    assert hypervisor.lookup('test').UUIDString() == domain.UUIDString()
    assert hypervisor.lookup(str(uuid.uuid4())) is None
    assert hypervisor.lookup('no-such-instance') is None
