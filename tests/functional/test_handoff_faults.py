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

"""The handoff of a live migration when something goes wrong (issue 19,
findings 5 to 8).

The destination is a real mirror (a FUSE mount, a local repository);
the source is a real AgentManager in the same process (its mirror not
mounted: its guest's last writes go straight into its AttachedImage)
where its own handoff() is under test, or a function answering as
manager.handoff does where the destination's gate is. The RPC between
two real agents is tests/integration/test_live_migration.py.
"""

import errno
import os
import threading
import time

import pytest

from blobcr_agent import manager as manager_mod
from blobcr_agent.mirror import cache
from blobcr_agent.repository.backends import local
from blobcr_agent.repository import repository
from blobcr_common import exception
from tests.functional.test_mirror_handoff import _pread
from tests.functional.test_mirror_handoff import _pwrite
from tests.functional.test_mirror_handoff import serve
# Persists held at a gate.
from tests.functional.test_mirror_pipeline import gated  # noqa: F401
from tests.functional import test_mirror_reboot

CHUNK = 64 * 1024
CHUNKS = 8
OLD, NEW = b'o', b'n'   # the image's base / the source's last writes


@pytest.fixture
def repo(tmp_path):
    repo = repository.Repository(local.LocalBackend(str(tmp_path / 'store')),
                                 chunk_size=CHUNK)
    yield repo
    repo.close()


@pytest.fixture
def image(repo):
    header = repo.create_image('disk', CHUNKS * CHUNK)
    repo.commit(header.id, {i: OLD * CHUNK for i in range(CHUNKS)})
    return header.id


@pytest.fixture
def destination(repo, tmp_path):
    """A mounted mirror service (native loop) of the destination host;
    the test sets its handoff_asker.
    """
    made = []

    def start(io_loop='native'):
        service, thread = serve(repo, str(tmp_path / ('mnt-%d' % len(made))),
                                str(tmp_path / ('cache-%d' % len(made))),
                                io_loop)
        made.append((service, thread))
        return service
    yield start
    for service, thread in made:
        service.unmount()
        thread.join(10)
        if thread.is_alive():
            service.abort()
            thread.join(30)


def _source(repo, tmp_path, hypervisor=None, name='source'):
    return manager_mod.AgentManager(
        repo, str(tmp_path / name), str(tmp_path / (name + '-mnt')),
        'source-host', quiesce='none', hypervisor=hypervisor)


def _ask(source, dest='dest-host'):
    """The destination's handoff_asker, calling the source in-process."""
    return lambda host, image, wait, timeout: source.handoff(image, dest,
                                                             wait=wait)


def _last_writes(source, image):
    """The source's guest writes chunk 1 and does not checkpoint."""
    source.mirror.get(image).write(CHUNK, NEW * CHUNK)


class _Thread(threading.Thread):
    """A thread that keeps its target's result or error."""

    def __init__(self, target, *args):
        super().__init__(daemon=True)
        self._call = lambda: target(*args)
        self.result = self.error = None

    def run(self):
        try:
            self.result = self._call()
        except BaseException as e:          # the test looks at it
            self.error = e


# -- finding 5 -------------------------------------------------------------

def test_an_image_not_reattached_at_the_sources_restart(
        repo, image, tmp_path, destination, monkeypatch):
    """The source restarted and could not re-attach the image (the
    backend was unreachable for a moment): the guest's last writes are
    only in the source's cache. The handoff must not answer the newest
    stable version (the destination would rebase onto a state without
    them): it re-attaches the cache and hands off what it holds.
    """
    first = _source(repo, tmp_path)
    first.mirror.attach(image)
    _last_writes(first, image)
    first.mirror.get(image).close()         # the agent stops; cache kept
    source = _source(repo, tmp_path)        # ... and starts again
    with monkeypatch.context() as m:
        def unreachable(*args, **kwargs):
            raise exception.BackendUnavailable('the store is unreachable')
        m.setattr(source.mirror.repo, 'image', unreachable)
        source.mirror.recover()
    assert image not in source.mirror.attached
    meta = os.path.join(source.mirror.cache_dir, image, 'meta.json')
    assert os.path.exists(meta)

    dest = destination()
    dest.handoff_asker = _ask(source)
    path = dest.attach(image, incoming_from='source-host')
    assert _pread(path, CHUNK, CHUNK) == NEW * CHUNK
    assert _pread(path, 0, CHUNK) == OLD * CHUNK
    assert not os.path.exists(meta)         # handed off: detached


def test_a_stale_cache_at_the_source_refuses_the_handoff(repo, image,
                                                         tmp_path):
    """A cache from another boot whose flush record is torn cannot be
    re-attached (cache.py): the handoff is refused (the destination's
    guest gets EIO at its timeout) rather than answered with a version
    without its writes.
    """
    first = _source(repo, tmp_path)
    first.mirror.attach(image)
    _last_writes(first, image)
    attached = first.mirror.get(image)
    attached.close()
    attached.meta['boot_id'] = 'another-boot'
    attached._save_meta()
    test_mirror_reboot.tear_flush_record(attached.cache_dir)
    source = _source(repo, tmp_path)
    source.mirror.recover()
    assert image not in source.mirror.attached
    with pytest.raises(cache.StaleCache):
        source.handoff(image, 'dest-host')


# -- finding 6 -------------------------------------------------------------

class _Libvirt(object):
    """libvirt of the source host: down (cannot tell) or up with no
    domain on the image (the guest left for the destination).
    """

    def __init__(self):
        self.down = True

    def domain_for(self, *paths):
        if self.down:
            raise exception.BackendUnavailable('libvirtd is not running')
        return None


def test_source_libvirt_down_does_not_serve_the_old_base(
        repo, image, tmp_path, destination):
    """While the source cannot tell whether its guest runs, a read on
    the destination may already be the guest's (it moved): it must wait
    for the handoff, not be answered from the old base.
    """
    libvirt = _Libvirt()
    source = _source(repo, tmp_path, hypervisor=libvirt)
    source.mirror.attach(image)
    _last_writes(source, image)
    dest = destination()
    dest.handoff_asker = _ask(source)
    path = dest.attach(image, incoming_from='source-host')
    reader = _Thread(_pread, path, CHUNK, CHUNK)
    reader.start()
    reader.join(1.5)
    assert reader.is_alive(), \
        'answered while the source could not tell: %r' % (
            reader.error or reader.result[:8])
    libvirt.down = False                    # it can tell now: not running
    reader.join(30)
    assert reader.error is None and reader.result == NEW * CHUNK
    assert dest.get(image).incoming.early_reads == 0


def test_handoff_says_so_when_libvirt_cannot_tell(repo, image, tmp_path):
    libvirt = _Libvirt()
    source = _source(repo, tmp_path, hypervisor=libvirt)
    source.mirror.attach(image)
    with pytest.raises(exception.BackendUnavailable):
        source.handoff(image, 'dest-host', wait=0.2)
    assert image in source.mirror.attached  # nothing handed off


def test_a_handoff_during_the_sources_background_detach(
        repo, image, tmp_path, gated):  # noqa: F811 (fixture)
    """Nova's post-migration detach on the source came first and still
    persists its last version in the background when the destination
    asks (CI met it in test_cinder_driver): the handoff waits for it
    and answers that version. It must not attach the image again from
    the cache being dropped (then wait for a libvirt that cannot tell).
    """
    source = _source(repo, tmp_path, hypervisor=_Libvirt())
    source.mirror.attach(image)
    _last_writes(source, image)
    gate, _ = gated                         # persists held
    source.checkpoint(image, quiesce='none')
    source.detach(image, background=True)
    assert image in source.mirror.detaching
    asked = _Thread(source.handoff, image, 'dest-host')
    asked.start()
    time.sleep(0.3)
    gate.set()
    asked.join(30)
    assert asked.error is None, asked.error
    assert asked.result['running'] is False
    version = asked.result['version']
    assert repo.read(image, version, CHUNK, CHUNK) == NEW * CHUNK
    assert image not in source.mirror.attached


# -- finding 7 -------------------------------------------------------------

@pytest.mark.parametrize('io_loop', ['native', 'pyfuse3'])
def test_detach_while_a_request_waits_for_the_handoff(
        repo, image, destination, io_loop):
    """A detach of an incoming image (a migration called off) while a
    write waits in its gate, the source's answer arriving meanwhile:
    the detach holds the image's commit lock and waits for the FUSE
    requests on it (the native loop's remove()); the request must not
    wait for that lock in rebase(). It fails (EIO), the detach ends, no
    pin is left behind.
    """
    dest = destination(io_loop)
    version = repo.commit(image, {1: NEW * CHUNK})
    switch, asked = threading.Event(), threading.Event()

    def ask(host, image_id, wait, timeout):
        if not switch.is_set():
            time.sleep(min(wait, 0.05))
            return {'running': True}
        asked.set()
        # Answer once the detach holds the lock (and waits for us).
        deadline = time.monotonic() + 10
        while not attached._closing and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)
        return {'running': False, 'version': version}
    dest.handoff_asker = ask
    path = dest.attach(image, incoming_from='source-host')
    attached = dest.get(image)
    writer = _Thread(_pwrite, path, 0, b'w' * 4096)
    writer.start()
    time.sleep(0.3)
    switch.set()
    assert asked.wait(10)
    detach = _Thread(dest.detach, image)
    detach.start()
    detach.join(15)
    assert not detach.is_alive(), 'detach and the gated request deadlock'
    writer.join(15)
    assert not writer.is_alive()
    assert detach.error is None, detach.error
    assert isinstance(writer.error, OSError) and \
        writer.error.errno == errno.EIO, writer.error
    assert image not in dest.attached
    assert [p for v in repo.image(image).versions for p in v.pins] == []


# -- finding 8 -------------------------------------------------------------

def test_early_reads_from_an_obsolete_pinned_base(repo, image, destination):
    """The version the destination attached from is obsoleted (a
    snapshot deleted through Cinder) before the switch: its pin keeps it
    whole, and early reads still come from it.
    """
    dest = destination()
    dest.handoff_asker = lambda *args: {'running': True}
    path = dest.attach(image, incoming_from='source-host')
    repo.commit(image, {1: NEW * CHUNK})
    repo.obsolete(image, [1])
    assert repo.image(image).version(1).state == 'obsolete'
    assert _pread(path, 0, 2 * CHUNK) == OLD * 2 * CHUNK
    assert dest.get(image).stats()['present'] == 0


def test_a_restart_right_after_the_rebase_is_not_incoming(repo, image,
                                                          destination):
    """rebase() records the new base: a crash just after it must not
    leave the image waiting for a handoff again at the next start (the
    source has forgotten it, or is gone).
    """
    dest = destination()
    version = repo.commit(image, {1: NEW * CHUNK})
    dest.handoff_asker = lambda *args: {'running': True}
    dest.attach(image, incoming_from='source-host')
    attached = dest.get(image)
    attached.rebase(version)                # the crash comes next
    assert cache.incoming_source(attached.cache_dir) is None
    assert attached.meta['attached'] == version


def test_a_second_destination_is_refused(repo, image, tmp_path):
    """Once handed off to one host, the image is not handed to another
    (Cinder refuses a second attachment; the agent must too). The same
    destination asking again (its answer lost) gets the same version.
    """
    source = _source(repo, tmp_path)
    source.mirror.attach(image)
    _last_writes(source, image)
    done = source.handoff(image, 'dest-host')
    assert done['running'] is False
    with pytest.raises(exception.InvalidInput):
        source.handoff(image, 'other-host')
    again = source.handoff(image, 'dest-host')
    assert again['version'] == done['version']
    # Attached here again (it came back): free to go anywhere.
    source.mirror.attach(image)
    assert source.handoff(image, 'other-host')['running'] is False
