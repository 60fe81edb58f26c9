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

"""A writer killed inside COMMIT leaves a pending version that nobody
will finish (found by the Cinder model walk: an agent SIGKILLed between
registering a checkpoint's version and recording it in flight). Deleting
the image must not be refused for it: its writer, a process of this
host, is provably gone. A live writer still blocks the delete.

A writer is judged only by a process that can see it (issue 32): GC and
delete in the host's PID namespace leave alone a writer that runs in a
PID namespace of its own (``unshare --pid --fork --mount-proc``, as
OpenStack services in containers run, with the host's name), and judge
one of an earlier boot gone even where its PID and start tick now name
a live process.
"""

import signal
import subprocess
import sys
import textwrap

import pytest

from blobcr_agent.repository.backends import local
from blobcr_agent.repository import gc
from blobcr_agent.repository import identity
from blobcr_agent.repository import image as image_mod
from blobcr_agent.repository import repository
from blobcr_common import exception

WRITER = r'''
import sys
from blobcr_agent.repository.backends import local
from blobcr_agent.repository import repository
repo = repository.Repository(local.LocalBackend(sys.argv[1]),
                             chunk_size=4096)
pending = repo.begin_commit(sys.argv[2])
pending.put(0, b'x' * 4096)
print(pending.version, flush=True)
sys.stdin.read()            # killed here, inside COMMIT
'''


def _pending_of_a_killed_writer(store, image_id):
    writer = subprocess.Popen([sys.executable, '-c', WRITER, store,
                               image_id], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    number = int(writer.stdout.readline())
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    return number


def test_delete_is_not_blocked_by_a_dead_writers_version(tmp_path):
    store = str(tmp_path / 'store')
    repo = repository.Repository(local.LocalBackend(store), chunk_size=4096)
    header = repo.create_image('vol', 1 << 20)
    repo.commit(header.id, {1: b'y' * 4096})
    number = _pending_of_a_killed_writer(store, header.id)
    assert repo.image(header.id).version(number).state == image_mod.PENDING
    repo.delete_image(header.id)
    deleted = repo.images(include_deleted=True)[0]
    assert deleted.deleted
    v = deleted.version(number)
    assert v.state == image_mod.OBSOLETE and 'gone' in v.error, v
    assert all(x.state == image_mod.OBSOLETE for x in deleted.versions)


def test_a_live_writer_still_blocks_the_delete(tmp_path):
    repo = repository.Repository(local.LocalBackend(str(tmp_path / 's')),
                                 chunk_size=4096)
    header = repo.create_image('vol', 1 << 20)
    pending = repo.begin_commit(header.id)
    with pytest.raises(exception.InvalidInput, match='being written'):
        repo.delete_image(header.id)
    pending.abort('test over')
    repo.delete_image(header.id)


def _in_pid_namespace(script):
    """A shell running ``script`` as PID 1 of a new PID namespace (its
    own /proc), the host's name and file systems otherwise.
    """
    return subprocess.Popen(
        ['unshare', '--pid', '--fork', '--mount-proc', 'bash', '-c',
         script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def _gc(store, pending_timeout=3600):
    repo = repository.Repository(local.LocalBackend(store), chunk_size=4096)
    report = gc.Report()
    gc.fail_abandoned(repo, pending_timeout, report)
    return report.versions_failed


def test_a_writer_in_another_pid_namespace_is_not_judged(tmp_path):
    """Its PID (1 or 2 there) names another process here: the old
    identity made it "gone", GC failed its version under it and delete
    gave it up.
    """
    store = str(tmp_path / 'store')
    repo = repository.Repository(local.LocalBackend(store), chunk_size=4096)
    header = repo.create_image('vol', 1 << 20)
    repo.commit(header.id, {1: b'y' * 4096})
    writer = _in_pid_namespace('exec %s -c %s %s %s' % tuple(
        _quote(x) for x in (sys.executable, WRITER, store, header.id)))
    try:
        number = int(writer.stdout.readline())
        assert _gc(store) == 0
        v = repo.image(header.id).version(number)
        assert v.state == image_mod.PENDING, v
        with pytest.raises(exception.InvalidInput, match='being written'):
            repo.delete_image(header.id)
        assert v.owner.split(':')[4] != identity.pid_namespace(), v.owner
    finally:
        writer.kill()
        writer.wait()


GC_AFTER_KILL = textwrap.dedent('''
    "$PY" -c "$WRITER" "$STORE" "$IMAGE" > "$OUT" &
    while [ ! -s "$OUT" ]; do sleep 0.05; done
    kill -9 $!; wait $!
    "$PY" -c "$GC" "$STORE"
''')

GC = r'''
import sys
from blobcr_agent.repository.backends import local
from blobcr_agent.repository import gc, repository
repo = repository.Repository(local.LocalBackend(sys.argv[1]))
report = gc.Report()
gc.fail_abandoned(repo, 3600, report)
print(report.versions_failed, flush=True)
'''


def test_gc_in_the_writers_namespace_judges_it(tmp_path):
    """The same PID namespace sees its dead writer: failed at once, not
    after pending_timeout.
    """
    store = str(tmp_path / 'store')
    repo = repository.Repository(local.LocalBackend(store), chunk_size=4096)
    header = repo.create_image('vol', 1 << 20)
    repo.commit(header.id, {1: b'y' * 4096})
    env = 'PY=%s WRITER=%s GC=%s STORE=%s IMAGE=%s OUT=%s' % tuple(
        _quote(x) for x in (sys.executable, WRITER, GC, store, header.id,
                            str(tmp_path / 'version')))
    ns = _in_pid_namespace('export %s\n%s' % (env, GC_AFTER_KILL))
    out, _ = ns.communicate(timeout=60)
    assert ns.returncode == 0
    assert out.split() == ['1'], out
    number = int(open(tmp_path / 'version').read())
    v = repo.image(header.id).version(number)
    assert v.state == image_mod.FAILED and 'gone' in v.error, v


def test_a_writer_of_an_earlier_boot_is_gone(tmp_path, monkeypatch):
    """After a reboot its PID and start tick may name a live process
    (here: this one); its boot id says it is gone.
    """
    repo = repository.Repository(local.LocalBackend(str(tmp_path / 's')),
                                 chunk_size=4096)
    header = repo.create_image('vol', 1 << 20)
    pending = repo.begin_commit(header.id)
    me = repo.owner.split(':')
    assert me[3] == identity.boot_id()
    earlier = ':'.join(me[:3] + ['0' * 8 + me[3][8:]] + me[4:])

    def reboot(h):
        h.version(pending.version).owner = earlier
    repo.update_header(header.id, reboot)
    assert not identity.owner_is_gone(repo.owner)
    assert identity.owner_is_gone(earlier)
    repo.delete_image(header.id)
    v = repo.images(include_deleted=True)[0].version(pending.version)
    assert 'gone' in v.error, v
    # The older form says no boot nor namespace: never judged.
    assert not identity.owner_is_gone(':'.join(me[:3]))


def _quote(text):
    return "'" + text.replace("'", "'\\''") + "'"
