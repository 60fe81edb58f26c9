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

"""Shared fixtures: repositories on the local store and on a real Ceph.

The Ceph cluster is real: one mon, one mgr and three bluestore OSDs on
127.0.0.1, started once per test session by tools/ceph-cluster.sh and
stopped at the end. Set BLOBCR_CEPH_DIR to reuse a running one.
"""

import functools
import os
import pwd
import shutil
import tempfile
import types
import uuid

from hypothesis import HealthCheck
from hypothesis import settings
import pytest

from blobcr_agent.repository.backends import local
from blobcr_agent.repository import repository
from blobcr_lab import agents

BACKENDS = ['local', 'rados']

# tools/run-tests.sh runs two lanes of tests at once on two cores: an
# example of a property test may wait for the CPU, which is no bug
# (hypothesis' default deadline, 200 ms, failed one so).
settings.register_profile('blobcr', deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile('blobcr')

# The session's RabbitMQ, Cinder hosts and guest image over the lab's
# services: tests/lab_fixtures.py; real Keystone and Cinder
# (openstack_stack, ...): tests/openstack_fixtures.py.
pytest_plugins = ['tests.lab_fixtures', 'tests.openstack_fixtures',
                  'tests.nova_fixtures']


@pytest.fixture(scope='session')
def ceph_cluster():
    from blobcr_lab import ceph as cc
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


# The agent's own user (tools/agent-user.sh makes it).
AGENT_USER = os.environ.get('BLOBCR_AGENT_USER', 'blobcr')


@pytest.fixture
def user_space():
    """A directory for an agent that runs as its own user: its workdir
    and store go there (pytest's directories are root's, mode 0700).
    ``own(path)`` gives a tree made here by root to that user.
    """
    try:
        pw = pwd.getpwnam(AGENT_USER)
    except KeyError:
        pytest.fail('no user %r: bash tools/agent-user.sh .venv makes it'
                    % AGENT_USER)
    path = tempfile.mkdtemp(prefix='blobcr-user-')
    os.chmod(path, 0o755)

    def own(top):
        for parent, dirs, files in os.walk(top):
            for name in [parent] + [os.path.join(parent, n)
                                    for n in dirs + files]:
                os.lchown(name, pw.pw_uid, pw.pw_gid)
    space = types.SimpleNamespace(user=AGENT_USER, path=path, own=own,
                                  kwargs={'under': path, 'user': AGENT_USER})
    space.local_agent = functools.partial(_local_agent, space)
    yield space
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(params=['root', 'unprivileged'])
def agent_place(request, tmp_path):
    """Where and as whom a test's agent runs: as root in the test's
    directory, or as its own user, root's work going through its
    privileged daemon (blobcr_agent/privileged). ``kwargs`` are
    agent_factory's.
    """
    if request.param == 'unprivileged':
        return request.getfixturevalue('user_space')
    place = types.SimpleNamespace(user=None, path=str(tmp_path),
                                  own=lambda top: None, kwargs={})
    place.local_agent = functools.partial(_local_agent, place)
    return place


def _local_agent(place, factory, settings=None, **kwargs):
    """An agent of ``factory`` (agent_factory) placed at ``place``, on a
    local store there (``agent.backend``).
    """
    backend = local.LocalBackend(os.path.join(place.path, 'store'))
    place.own(backend.root)
    agent = factory(backend, settings, **dict(place.kwargs, **kwargs))
    agent.backend = backend
    return agent


@pytest.fixture
def agent_factory(tmp_path):
    """Start real blobcr-agent processes on a store (and settings); with
    ``under`` (a user_space's path), their workdirs go there.
    """
    made = []

    def factory(backend, settings=None, under=None, **kwargs):
        workdir = (tmp_path if under is None else
                   type(tmp_path)(under)) / ('agent-%d' % len(made))
        workdir.mkdir()
        agent = agents.AgentProcess(str(workdir), backend, settings,
                                    **kwargs)
        made.append(agent)
        return agent.start()
    yield factory
    agents.stop_all(made)


@pytest.fixture
def mirror_factory(tmp_path):
    made = []

    def factory(backend, *extra):
        workdir = tmp_path / ('mirror-%d' % len(made))
        workdir.mkdir()
        m = agents.MirrorProcess(str(workdir), agents.store_args(backend),
                                 extra)
        made.append(m)
        return m.start()
    yield factory
    for m in made:
        m.stop()
