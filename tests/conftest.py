"""Shared fixtures: repositories on the local store and on a real Ceph.

The Ceph cluster is real: one mon, one mgr and three bluestore OSDs on
127.0.0.1, started once per test session by tools/ceph-cluster.sh and
stopped at the end. Set BLOBCR_CEPH_DIR to reuse a running one.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

from blobcr_agent.mirror import client
from blobcr_agent.repository.backends import local
from blobcr_agent.repository import repository

BACKENDS = ['local', 'rados']


@pytest.fixture(scope='session')
def ceph_cluster():
    from tests import ceph_cluster as cc
    keep = os.environ.get('BLOBCR_CEPH_DIR')
    directory = keep or tempfile.mkdtemp(prefix='blobcr-ceph-')
    cluster = cc.MicroCephCluster(directory)
    cluster.start()
    yield cluster
    if not keep:
        cluster.stop()
        shutil.rmtree(directory, ignore_errors=True)


def make_backend(kind, tmp_path, request):
    if kind == 'local':
        return local.LocalBackend(str(tmp_path / ('store-%s' %
                                                  uuid.uuid4().hex[:8])))
    from blobcr_agent.repository.backends import rados
    cluster = request.getfixturevalue('ceph_cluster')
    # A namespace per repository keeps tests (and GC) apart.
    return rados.RadosBackend(cluster.conffile, 'blobcr-data', 'blobcr-meta',
                              namespace='t-' + uuid.uuid4().hex,
                              connect_timeout=10, op_timeout=60)


@pytest.fixture(params=BACKENDS)
def backend_kind(request):
    return request.param


@pytest.fixture
def backend_factory(backend_kind, tmp_path, request):
    made = []

    def factory():
        b = make_backend(backend_kind, tmp_path, request)
        made.append(b)
        return b
    yield factory
    for b in made:
        b.close()


@pytest.fixture
def repo(backend_factory):
    return repository.Repository(backend_factory(), chunk_size=4096,
                                 fanout=4, gc_grace=0)


class MirrorProcess(object):
    """A real blobcr-mirror process with its FUSE mount, for tests."""

    def __init__(self, workdir, store_args, extra=()):
        self.workdir = str(workdir)
        self.mount = os.path.join(self.workdir, 'mnt')
        self.cache = os.path.join(self.workdir, 'cache')
        self.control = os.path.join(self.workdir, 'control.sock')
        self.log = open(os.path.join(self.workdir, 'mirror.log'), 'ab')
        self.args = [sys.executable, '-m', 'blobcr_agent.cmd.mirror',
                     '--mount', self.mount, '--cache', self.cache,
                     '--control', self.control] + list(store_args) + \
            list(extra)
        self.proc = None

    def start(self):
        if os.path.exists(self.control):
            os.unlink(self.control)
        self.proc = subprocess.Popen(self.args, stdout=self.log,
                                     stderr=self.log)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError('blobcr-mirror exited: see %s'
                                   % self.log.name)
            if os.path.exists(self.control) and os.path.ismount(self.mount):
                self.client = client.MirrorClient(self.control)
                return self
            time.sleep(0.05)
        raise RuntimeError('blobcr-mirror did not come up')

    def kill(self):
        """SIGKILL, then clear the dead mount as an operator would."""
        self.client.close()
        self.proc.kill()
        self.proc.wait()
        subprocess.run(['fusermount3', '-u', '-z', self.mount],
                       check=False, capture_output=True)

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        self.client.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        subprocess.run(['fusermount3', '-u', '-z', self.mount],
                       check=False, capture_output=True)


def store_args(backend):
    """blobcr-mirror arguments that open the same store as ``backend``."""
    if backend.name == 'local':
        return ['--backend', 'local', '--store', backend.root]
    conf = os.path.join(os.path.dirname(backend.conffile),
                        'blobcr-%s.conf' % backend.namespace)
    with open(conf, 'w') as f:
        f.write('[rados]\nconffile = %s\nnamespace = %s\n'
                % (backend.conffile, backend.namespace))
    return ['--backend', 'rados', '--config-file', conf]


@pytest.fixture
def mirror_factory(tmp_path):
    made = []

    def factory(backend, *extra):
        workdir = tmp_path / ('mirror-%d' % len(made))
        workdir.mkdir()
        m = MirrorProcess(workdir, store_args(backend), extra)
        made.append(m)
        return m.start()
    yield factory
    for m in made:
        m.stop()
