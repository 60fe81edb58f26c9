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

"""Finding domains and quiescing them, on libvirt's test:///default driver
(a real libvirt, with an in-memory hypervisor: no guest can run here for a
unit test; the QEMU guest comes with the end-to-end test).
"""

import threading
import uuid

import pytest

from blobcr_agent.hypervisor import domains
from blobcr_agent import manager
from blobcr_common import exception

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


# -- only active domains, by real path ---------------------------------------

INACTIVE = ('<domain type="test"><name>%s</name><memory>65536</memory>'
            '<os><type>hvm</type></os><devices><disk type="file" '
            'device="disk"><source file="%s"/><target dev="vda"/></disk>'
            '</devices></domain>')


def test_domain_for_compares_real_paths_of_active_domains(hypervisor,
                                                          tmp_path):
    (tmp_path / 'guest-link').symlink_to('/guest')
    found = hypervisor.domain_for(str(tmp_path / 'guest-link' / 'diskimage1'))
    assert found is not None and found.name() == 'test'
    # A domain whose disk is a symlink to the file.
    (tmp_path / 'real').mkdir()
    disk = tmp_path / 'real' / 'disk.raw'
    (tmp_path / 'disk-link.raw').symlink_to(disk)
    conn = hypervisor.connection()
    name = 'linked-' + uuid.uuid4().hex[:6]
    linked = conn.defineXML(INACTIVE % (name, tmp_path / 'disk-link.raw'))
    try:
        # Defined but not running: it does not use its disks.
        assert not linked.isActive()
        assert hypervisor.domain_for(str(disk)) is None
        linked.create()
        assert hypervisor.domain_for(str(disk)).name() == name
        linked.destroy()
        assert hypervisor.domain_for(str(disk)) is None
    finally:
        linked.undefine()


# -- paused domains and concurrent holds --------------------------------------

@pytest.mark.parametrize('mode', ['suspend', 'fsfreeze'])
def test_a_paused_domain_stays_paused_after_a_hold(hypervisor, mode):
    domain = hypervisor.domain_for('/guest/diskimage1')
    domain.suspend()                    # an operator paused it
    try:
        with hypervisor.quiesced(domain, mode):
            assert domain.state()[0] == PAUSED
        assert domain.state()[0] == PAUSED
        with pytest.raises(RuntimeError):
            with hypervisor.quiesced(domain, mode):
                raise RuntimeError('COMMIT failed')
        assert domain.state()[0] == PAUSED
    finally:
        domain.resume()


class CountingDomain(object):
    """A domain that counts its suspend/resume/freeze/thaw calls."""

    def __init__(self, domain):
        self._domain = domain
        self.calls = []

    def __getattr__(self, name):
        attr = getattr(self._domain, name)
        if name not in ('suspend', 'resume', 'fsFreeze', 'fsThaw'):
            return attr

        def call(*args):
            self.calls.append(name)
            return attr(*args)
        return call


def _hold_in_thread(hypervisor, domain, mode, inside, release, errors):
    def run():
        try:
            with hypervisor.quiesced(domain, mode):
                inside.set()
                assert release.wait(30)
        except BaseException as e:     # pragma: no cover - reported below
            errors.append(e)
            inside.set()
    t = threading.Thread(target=run)
    t.start()
    return t


@pytest.mark.parametrize('mode,quiet,wake', [('suspend', 'suspend', 'resume'),
                                             ('fsfreeze', 'fsFreeze',
                                              'fsThaw')])
def test_concurrent_holds_of_one_domain_share_it(hypervisor, mode, quiet,
                                                 wake):
    # Two checkpoints of two disks of one domain at once: one pause (or
    # freeze), undone when the last one is done; neither fails.
    domain = CountingDomain(hypervisor.domain_for('/guest/diskimage1'))
    errors = []
    in_a, out_a = threading.Event(), threading.Event()
    in_b, out_b = threading.Event(), threading.Event()
    a = _hold_in_thread(hypervisor, domain, mode, in_a, out_a, errors)
    assert in_a.wait(30)
    b = _hold_in_thread(hypervisor, domain, mode, in_b, out_b, errors)
    assert in_b.wait(30)
    assert errors == []
    if mode == 'suspend':
        assert domain.state()[0] == PAUSED
    out_a.set()
    a.join(30)
    # A is done, B still holds it: not woken under B.
    assert domain.calls == [quiet]
    if mode == 'suspend':
        assert domain.state()[0] == PAUSED
    out_b.set()
    b.join(30)
    assert errors == []
    assert domain.calls == [quiet, wake]
    assert domain.state()[0] == RUNNING


def test_holds_of_other_modes_take_turns(hypervisor):
    domain = CountingDomain(hypervisor.domain_for('/guest/diskimage1'))
    errors = []
    in_a, out_a = threading.Event(), threading.Event()
    in_b, out_b = threading.Event(), threading.Event()
    a = _hold_in_thread(hypervisor, domain, 'suspend', in_a, out_a, errors)
    assert in_a.wait(30)
    b = _hold_in_thread(hypervisor, domain, 'fsfreeze', in_b, out_b, errors)
    assert not in_b.wait(0.3)           # waits for the suspend to end
    out_a.set()
    a.join(30)
    assert in_b.wait(30)
    out_b.set()
    b.join(30)
    assert errors == []
    assert domain.calls == ['suspend', 'resume', 'fsFreeze', 'fsThaw']
    assert domain.state()[0] == RUNNING


def test_nested_holds_in_one_thread(hypervisor):
    domain = CountingDomain(hypervisor.domain_for('/guest/diskimage1'))
    with hypervisor.quiesced(domain, 'suspend'):
        with hypervisor.quiesced(domain, 'fsfreeze'):
            assert domain.state()[0] == PAUSED
        assert domain.state()[0] == PAUSED
    assert domain.calls == ['suspend', 'resume']
    assert domain.state()[0] == RUNNING


def test_quiesce_failed_is_an_agent_exception():
    assert domains.QuiesceFailed is exception.QuiesceFailed
    assert exception.QuiesceFailed.__module__ == 'blobcr_common.exception'


# -- libvirt errors -----------------------------------------------------------

class FakeError(libvirt.libvirtError):
    def __init__(self, code):
        Exception.__init__(self, 'libvirt error %d' % code)
        self.err = (code, 0, 'libvirt error %d' % code, 2, None, None, None,
                    0, 0)


class FakeConnection(object):
    """Raises ``errors`` (one per call, then answers) on every lookup."""

    def __init__(self, errors=(), domain=None):
        self.errors = list(errors)
        self.domain = domain
        self.calls = []
        self.keepalive = None

    def _answer(self, name, *args):
        self.calls.append((name,) + args)
        if self.errors:
            raise FakeError(self.errors.pop(0))
        return self.domain

    def lookupByUUIDString(self, text):
        return self._answer('uuid', text)

    def lookupByName(self, text):
        return self._answer('name', text)

    def listAllDomains(self, flags=0):
        self._answer('list', flags)
        return [self.domain] if self.domain is not None else []

    def isAlive(self):
        return 1

    def setKeepAlive(self, interval, count):
        self.keepalive = (interval, count)

    def close(self):
        pass


@pytest.fixture
def fake_libvirt(monkeypatch):
    """(hypervisor, opened): a Hypervisor whose connections are the
    FakeConnections in ``opened`` (append the next one to open).
    """
    opened, made = [], []

    def fake_open(uri):
        made.append(uri)
        return opened[len(made) - 1]
    monkeypatch.setattr(libvirt, 'open', fake_open)
    return domains.Hypervisor('fake:///'), opened, made


def test_lookup_not_found_only_for_no_domain(fake_libvirt):
    h, opened, made = fake_libvirt
    no = libvirt.VIR_ERR_NO_DOMAIN
    opened.append(FakeConnection([no, no]))
    missing = str(uuid.uuid4())
    assert h.lookup(missing) is None
    assert opened[0].calls == [('uuid', missing), ('name', missing)]
    # Not a UUID: not looked up as one (that is "invalid UUID").
    opened[0].errors = [no]
    assert h.lookup('vm-1') is None
    assert opened[0].calls[2:] == [('name', 'vm-1')]
    assert len(made) == 1


def test_other_libvirt_errors_reconnect_once_then_fail(fake_libvirt):
    h, opened, made = fake_libvirt
    internal = libvirt.VIR_ERR_INTERNAL_ERROR
    opened += [FakeConnection([internal]), FakeConnection([internal])]
    with pytest.raises(exception.BackendUnavailable, match='libvirt'):
        h.lookup('vm-1')
    assert len(made) == 2
    # A new connection that answers: found.
    domain = object()
    opened.append(FakeConnection([internal]))
    opened.append(FakeConnection([], domain=domain))
    h._conn = None
    assert h.lookup('vm-1') is domain
    assert len(made) == 4


def test_domain_for_lists_active_domains_and_maps_errors(fake_libvirt):
    h, opened, made = fake_libvirt
    internal = libvirt.VIR_ERR_INTERNAL_ERROR
    opened += [FakeConnection(), FakeConnection([internal]),
               FakeConnection([internal])]
    assert h.domain_for('/no/such/disk') is None
    assert opened[0].calls == [
        ('list', libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE)]
    h._conn = None
    with pytest.raises(exception.BackendUnavailable):
        h.domain_for('/no/such/disk')
    assert len(made) == 3


def test_keepalive_is_set_where_the_driver_has_it(hypervisor, fake_libvirt):
    h, opened, made = fake_libvirt
    opened.append(FakeConnection())
    h.connection()
    assert opened[0].keepalive == (domains.KEEPALIVE_INTERVAL,
                                   domains.KEEPALIVE_COUNT)
    # test:///default has none: the connection works without.
    assert hypervisor.connection().isAlive()


# -- what the manager asks of them --------------------------------------------

class StubMirror(object):
    def __init__(self, path):
        self.path = path

    def path_of(self, image_id):
        return self.path


class StubLoops(object):
    """The image's loop device ('local' connections), if any."""

    def __init__(self, device=None):
        self.device = device

    def device_of(self, image_id):
        return self.device


def test_explicit_quiesce_needs_a_running_domain(hypervisor, tmp_path):
    agent = manager.AgentManager.__new__(manager.AgentManager)
    agent.hypervisor = hypervisor
    agent.loops = StubLoops()
    agent.mirror = StubMirror(str(tmp_path / 'unused.raw'))
    for mode in ('suspend', 'fsfreeze'):
        with pytest.raises(exception.InvalidInput,
                           match='no running domain uses image img: cannot '
                                 + mode):
            agent._hold('img', mode, explicit=True)
        # The configured default falls back to none.
        assert agent._hold('img', mode, explicit=False) == (None, 'none')
    (tmp_path / 'guest').symlink_to('/guest')
    agent.mirror = StubMirror(str(tmp_path / 'guest' / 'diskimage1'))
    hold, used = agent._hold('img', 'suspend', explicit=True)
    assert used == 'suspend'
    with hold:
        assert hypervisor.connection().lookupByName(
            'test').state()[0] == PAUSED
    assert hypervisor.connection().lookupByName('test').state()[0] == \
        RUNNING


def test_the_domain_on_the_images_loop_device_is_held(hypervisor, tmp_path):
    # A 'local' connection: the domain names the loop device over the
    # mirror file, not the file (libvirt's test domain has the disk
    # /guest/diskimage1, standing in for /dev/loopN).
    agent = manager.AgentManager.__new__(manager.AgentManager)
    agent.hypervisor = hypervisor
    agent.mirror = StubMirror(str(tmp_path / 'mirror' / 'img'))
    agent.loops = StubLoops('/guest/diskimage1')
    hold, used = agent._hold('img', 'suspend', explicit=True)
    assert used == 'suspend'
    with hold:
        assert hypervisor.connection().lookupByName(
            'test').state()[0] == PAUSED
    agent.loops = StubLoops()
    with pytest.raises(exception.InvalidInput, match='no running domain'):
        agent._hold('img', 'suspend', explicit=True)


# -- the project Nova recorded ------------------------------------------------

NOVA_DOMAIN = (
    '<domain type="test"><name>%s</name><uuid>%s</uuid>'
    '<memory>65536</memory><metadata>'
    '<nova:instance xmlns:nova="http://openstack.org/xmlns/libvirt/nova/1.1">'
    '<nova:name>vm</nova:name><nova:owner>'
    '<nova:user uuid="u-1">alice</nova:user>'
    '<nova:project uuid="%s">demo</nova:project>'
    '</nova:owner></nova:instance></metadata>'
    '<os><type>hvm</type></os><devices/></domain>')


def test_instance_project_comes_from_nova_metadata(hypervisor):
    conn = hypervisor.connection()
    instance = str(uuid.uuid4())
    project = uuid.uuid4().hex
    domain = conn.defineXML(NOVA_DOMAIN % ('nova-' + instance[:8], instance,
                                           project))
    try:
        assert hypervisor.instance_project(instance) == project
        # Not the user's id, not another domain's.
        assert hypervisor.instance_project('test') is None
        assert hypervisor.instance_project(str(uuid.uuid4())) is None
    finally:
        domain.undefine()
