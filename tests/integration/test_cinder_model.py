"""The Cinder driver's operations as a randomized walk checked against a
model (tests/cinder_model.py says what it does and what is not real),
on real agents over the session's RabbitMQ and the local store.

CI runs a bounded budget: BLOBCR_MODEL_SEEDS walks (default 4) of
BLOBCR_MODEL_STEPS steps (default 120), seeds from BLOBCR_MODEL_SEED
(default: new ones, printed), on the local store (BLOBCR_MODEL_BACKEND
=rados: the micro Ceph cluster). tools/soak.sh runs walks for hours. A
failure names its seed; replay it with::

    BLOBCR_MODEL_SEED=<seed> BLOBCR_MODEL_SEEDS=1 \\
        .venv/bin/pytest tests/integration/test_cinder_model.py
"""

import os
import random
import time
import types

import pytest

from blobcr_agent.bench import harness
from blobcr_agent.repository import repository
from blobcr_agent.rpc import api as rpc_api
from tests import agent_rpc
from tests import cinder_model
from tests import conftest

COMPUTE = ('compute-a', 'compute-b')


def _budget():
    seeds = int(os.environ.get('BLOBCR_MODEL_SEEDS', '4'))
    steps = int(os.environ.get('BLOBCR_MODEL_STEPS', '120'))
    hours = float(os.environ.get('BLOBCR_MODEL_HOURS', '0'))
    first = os.environ.get('BLOBCR_MODEL_SEED')
    first = int(first) if first else random.SystemRandom().randrange(1 << 31)
    return first, seeds, steps, hours


def _driver(group, storage, url):
    from cinder import objects
    from cinder.volume import configuration
    from oslo_config import cfg

    from blobcr_cinder import driver as driver_mod
    from blobcr_cinder import options
    objects.register_all()
    conf = configuration.Configuration(options.blobcr_opts,
                                       config_group=group)
    cfg.CONF.set_override('blobcr_agent_host', storage, group=group)
    cfg.CONF.set_override('blobcr_rpc_timeout', 60, group=group)
    cfg.CONF.set_override('blobcr_snapshot_timeout', 300, group=group)
    driver = driver_mod.BlobCRDriver(configuration=conf,
                                     host='model@%s' % group)
    driver.api = rpc_api.AgentAPI(transport_url=url, timeout=60)
    return driver


@pytest.fixture
def world(tmp_path, rabbitmq_url, api, request):
    # BLOBCR_MODEL_BACKEND=rados: the micro Ceph cluster (tools/soak.sh
    # --ceph); CI walks the local store.
    backend = conftest.make_backend(
        os.environ.get('BLOBCR_MODEL_BACKEND', 'local'), tmp_path, request)
    settings = {'repository': {'chunk_size': str(cinder_model.CHUNK)}}
    agents = {}
    names = {}

    def start(role):
        host = names.setdefault(role, agent_rpc.host_name(role))
        workdir = tmp_path / role
        workdir.mkdir(exist_ok=True)
        # libvirt's test driver: no domain uses a mirror file, so no
        # guest is running during a handoff (a live migration's switch).
        agent = harness.AgentProcess(
            str(workdir), backend,
            dict(settings, **agent_rpc.rpc_settings(
                rabbitmq_url, host, libvirt_uri='test:///default',
                handoff_timeout='60')))
        agents[host] = agent.start()
        agent_rpc.wait_rpc(api, host)
        return host

    storage = start('storage')
    for role in COMPUTE:
        start(role)

    def restart(host):
        agents[host].kill()
        role = next(r for r, h in names.items() if h == host)
        start(role)

    repo = repository.Repository(backend, chunk_size=cinder_model.CHUNK)
    driver = _driver('blobcr-model-%s' % storage[-6:], storage, rabbitmq_url)
    yield types.SimpleNamespace(
        driver=driver, api=api, storage=storage, repo=repo, restart=restart,
        compute={names[r]: None for r in COMPUTE})
    driver.api.cleanup()
    for agent in agents.values():
        agent.stop()
    repo.close()
    backend.close()


def test_cinder_flows_against_the_model(world, monkeypatch, capsys):
    first, seeds, steps, hours = _budget()
    current = {}
    deadline = time.monotonic() + hours * 3600
    done = []
    with cinder_model.cinder_records(monkeypatch, lambda: current['walk']):
        seed = first
        while True:
            walk = current['walk'] = cinder_model.Walk(seed, world)
            with capsys.disabled():
                print('\nmodel walk: seed %d, %d steps (replay: '
                      'BLOBCR_MODEL_SEED=%d BLOBCR_MODEL_SEEDS=1 '
                      'BLOBCR_MODEL_STEPS=%d)' % (seed, steps, seed, steps))
            walk.run(steps)
            _clean_up(walk)
            done.append(walk)
            seed += 1
            if len(done) >= seeds and time.monotonic() >= deadline:
                break
    counts = {}
    for walk in done:
        for name, n in walk.counts.items():
            counts[name] = counts.get(name, 0) + n
    with capsys.disabled():
        print('model walks: %d seeds from %d, %d steps: %s'
              % (len(done), first, sum(w.steps for w in done),
                 ', '.join('%s %d' % kv for kv in sorted(counts.items()))))
    # The walks reached what they claim to test (a replay of one short
    # walk need not).
    if sum(w.steps for w in done) < 300:
        return
    for name in ('write', 'snapshot', 'clone', 'delete_snapshot', 'detach',
                 'gc', 'kill_agent', 'migrate'):
        assert counts.get(name), 'no %s step ran' % name


def _clean_up(walk):
    """Detach and delete what the walk made, then check GC leaves the
    store with what nothing references gone.
    """
    for volume in walk.volumes:
        if volume.host:
            walk.driver.terminate_connection(volume, {'host': volume.host})
            volume.detach_record()
    walk.verify_all()
    for snapshot in list(walk.snapshots):
        walk.driver.delete_snapshot(snapshot)
        walk.snapshots.remove(snapshot)
    for volume in list(walk.volumes):
        walk.driver.delete_volume(volume)
        walk.volumes.remove(volume)
    walk.world.api.gc(walk.world.storage, grace=0)
