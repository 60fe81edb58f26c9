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

"""``blobcr-nova-listener`` end to end: Nova's versioned notifications
drive real agents.

Everything runs for real on the session's RabbitMQ: two blobcr-agents
("hosts" A and B) on one local store, the listener as its own process
(``python -m blobcr_nova.listener --config-file ...``), and the
notifications emitted by nova 34's own code in a child process (this
module run as ``python -m``): ``nova.compute.utils.
notify_about_instance_action`` / ``notify_about_volume_attach_detach``
with a ``nova.objects.Instance``, its BlockDeviceMappings and nova's
versioned notifier (``nova.rpc``, driver messagingv2), so publisher id,
event type and payload are nova's own, field for field. The topic is
one of this module's, set in both nova.conf and the listener's file.

No real Nova runs in this lane: the listener asks a fake of Nova's and
Cinder's APIs (tests/fake_nova_api.py, an HTTP server of the test
process) whether each event happened, and :meth:`Cloud.notify` first
sets there what real Nova reports once it emitted that event (the server
deleted on the host, its host the destination after a live migration's
post_dest.end...). ``test_forged_notifications_move_nothing`` publishes
forged notifications on the same RabbitMQ with oslo.messaging, as a
compromised compute host can.

``BLOBCR_LISTENER_BENCH=RUNS`` also runs the migration measurement
(several dirty-data sizes, RUNS runs each, medians printed; see
doc/source/nova.rst, "Notifications").
"""

import json
import os
import random
import re
import statistics
import subprocess
import sys
import time
import uuid

from oslo_config import cfg
import oslo_messaging as messaging
import pytest

from blobcr_agent.repository.backends import local
from blobcr_agent.repository import repository
from blobcr_common.rpc import api as rpc_api
from blobcr_lab import agent_rpc
from blobcr_lab import agents as lab_agents
from tests import fake_nova_api

TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
MiB = 1 << 20
IMAGE_SIZE = 128 * MiB
AGENT_TIMEOUT = 3
HANDLED_TIMEOUT = 120


# -- the Nova side: a child process emitting with nova's own code -----------

def emitter_main(conffile):
    """Read one JSON request a line from stdin, emit it with nova's code,
    answer ``sent`` on stdout.
    """
    import datetime
    import warnings
    warnings.simplefilter('ignore')
    from nova.compute import utils as compute_utils
    from nova import config as nova_config
    from nova import context as nova_context
    from nova.network import model as network_model
    from nova import objects
    from nova.objects import fields
    from nova import rpc as nova_rpc

    objects.register_all()
    # As nova-compute starts: nova's library defaults (control_exchange
    # 'nova' among them), then its notifiers.
    nova_config.parse_args(['nova-compute', '--config-file', conffile],
                           default_config_files=[], configure_db=False)
    assert nova_rpc.NOTIFIER is not None
    for line in sys.stdin:
        req = json.loads(line)
        ctxt = nova_context.RequestContext('user-1', req['project'])
        now = datetime.datetime.now(datetime.timezone.utc)
        flavor = objects.Flavor(
            flavorid='1', name='m1.tiny', memory_mb=512, vcpus=1, root_gb=0,
            ephemeral_gb=0, swap=0, rxtx_factor=1.0, is_public=True,
            disabled=False, extra_specs={}, description=None)
        instance = objects.Instance(
            uuid=req['instance'], user_id='user-1',
            project_id=req['project'], reservation_id='r-1',
            display_name='vm', display_description='', hostname='vm',
            host=req['instance_host'], node=req['instance_host'],
            os_type=None, architecture=None, availability_zone='nova',
            image_ref='', key_name=None, kernel_id='', ramdisk_id='',
            created_at=now, launched_at=now, terminated_at=None,
            deleted_at=None, updated_at=None, vm_state='active',
            power_state=1, task_state=None, progress=0, metadata={},
            locked=False, auto_disk_config=False, flavor=flavor,
            system_metadata={},
            info_cache=objects.InstanceInfoCache(
                network_info=network_model.NetworkInfo()),
            shares=objects.ShareMappingList(objects=[]))
        action, phase = req['event'].split('.')
        if action == 'volume_detach':
            compute_utils.notify_about_volume_attach_detach(
                ctxt, instance, req['host'], action=action, phase=phase,
                volume_id=req['volume_id'])
        else:
            bdms = objects.BlockDeviceMappingList(objects=[
                objects.BlockDeviceMapping(
                    volume_id=v, device_name='/dev/vd%s' % chr(97 + i),
                    boot_index=i if i == 0 else None,
                    delete_on_termination=False, tag=None,
                    source_type='volume', destination_type='volume')
                for i, v in enumerate(req.get('volumes', []))])
            assert getattr(fields.NotificationAction, action.upper()) == \
                action
            compute_utils.notify_about_instance_action(
                ctxt, instance, req['host'], action=action, phase=phase,
                bdms=bdms)
        print('sent', flush=True)


class Nova(object):
    """The emitter child; ``emit`` returns once nova's notifier sent."""

    def __init__(self, workdir, url, topic):
        self.conffile = os.path.join(workdir, 'nova.conf')
        lab_agents.write_conf(self.conffile, {
            'DEFAULT': {'transport_url': url},
            'notifications': {'notification_format': 'versioned',
                              'versioned_notifications_topics': topic},
            'oslo_messaging_notifications': {'driver': 'messagingv2'}})
        self.log = open(os.path.join(workdir, 'nova-emitter.log'), 'ab')
        self.proc = subprocess.Popen(
            [sys.executable, '-m', 'tests.integration.test_nova_listener',
             self.conffile], cwd=TOP, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self.log, text=True)

    def emit(self, event, host, instance, instance_host, project='proj-1',
             volumes=(), volume_id=None):
        req = {'event': event, 'host': host, 'instance': instance,
               'instance_host': instance_host, 'project': project,
               'volumes': list(volumes), 'volume_id': volume_id}
        self.proc.stdin.write(json.dumps(req) + '\n')
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line.strip() == 'sent', 'emitter died: see %s' % self.log.name

    def stop(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Forger(object):
    """A compromised compute host: it holds the credentials Nova's
    notifications are published with, and publishes ``instance.*``
    notifications in any host's name on Nova's exchange, with
    oslo.messaging as nova-compute does.
    """

    def __init__(self, workdir, url, topic):
        conffile = os.path.join(workdir, 'forger.conf')
        lab_agents.write_conf(conffile, {
            'DEFAULT': {'transport_url': url, 'control_exchange': 'nova'}})
        self.conf = cfg.ConfigOpts()
        self.conf(['--config-file', conffile], project='forger',
                  default_config_files=[])
        self.transport = messaging.get_notification_transport(self.conf)
        self.notifier = messaging.Notifier(
            self.transport, driver='messagingv2', topics=[topic])

    def send(self, event, host, data):
        self.notifier.prepare(publisher_id='nova-compute:%s' % host).info(
            {}, 'instance.%s' % event,
            {'nova_object.name': 'InstanceActionPayload',
             'nova_object.namespace': 'nova',
             'nova_object.version': '1.8', 'nova_object.data': data})

    def stop(self):
        self.transport.cleanup()


class Listener(object):
    def __init__(self, workdir, url, topic, nova_api):
        self.logfile = os.path.join(workdir, 'listener.log')
        self.conffile = os.path.join(workdir, 'listener.conf')
        lab_agents.write_conf(self.conffile, dict({
            'DEFAULT': {'transport_url': url, 'log_file': self.logfile,
                        'debug': 'false'},
            'listener': {'topics': topic,
                         'pool': 'test-' + uuid.uuid4().hex[:6],
                         'agent_timeout': str(AGENT_TIMEOUT),
                         'persist_timeout': '60'}}, **nova_api.conf()))
        self.proc = subprocess.Popen(
            [sys.executable, '-m', 'blobcr_nova.listener', '--config-file',
             self.conffile], cwd=TOP, stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(workdir, 'listener.err'), 'ab'))
        self.wait_for('listening on', after=0)

    def text(self):
        try:
            with open(self.logfile, errors='replace') as f:
                return f.read()
        except FileNotFoundError:
            return ''

    def wait_for(self, pattern, after, timeout=HANDLED_TIMEOUT):
        """The first log line past offset ``after`` matching ``pattern``."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.text()[after:]
            found = re.search('^.*%s.*$' % pattern, text, re.M)
            if found:
                return found.group(0)
            assert self.proc.poll() is None, \
                'listener exited %s: %s' % (self.proc.returncode, text[-2000:])
            assert time.monotonic() < deadline, \
                'no %r in the listener log: %s' % (pattern, text[-3000:])
            time.sleep(0.05)

    def stop(self):
        self.proc.terminate()
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


class Cloud(object):
    def __init__(self, api, repo, nova, listener, agents, url, nova_api,
                 forger):
        self.api, self.repo, self.url = api, repo, url
        self.nova, self.listener = nova, listener
        self.nova_api, self.forger = nova_api, forger
        self.agents = agents            # host -> AgentProcess
        self.a, self.b = sorted(agents)

    def notify(self, event, host, instance, instance_host=None,
               genuine=True, **kw):
        """Emit ``instance.EVENT`` from ``host`` and wait until the
        listener has handled it; returns the log it wrote meanwhile.
        ``genuine``: Nova's API first reports what that event leaves.
        """
        if genuine:
            self.nova_api.after(event, host, instance, instance_host or host,
                                volumes=kw.get('volumes', ()),
                                project=kw.get('project', 'proj-1'),
                                volume_id=kw.get('volume_id'))
        mark = len(self.listener.text())
        self.nova.emit(event, host, instance, instance_host or host, **kw)
        return self._handled(event, host, instance, mark)

    def forge(self, event, host, instance, data):
        """The forger publishes ``instance.EVENT`` in ``host``'s name,
        with ``data`` in its payload; waits until it was handled.
        """
        mark = len(self.listener.text())
        self.forger.send(event, host, dict(data, uuid=instance))
        return self._handled(event, host, instance, mark)

    def _handled(self, event, host, instance, mark):
        self.listener.wait_for(r'handled instance\.%s from %s of instance '
                               r'%s' % (re.escape(event), re.escape(host),
                                        instance), mark)
        return self.listener.text()[mark:]

    def volume(self, host, instance=None, name=None, project='proj-1'):
        """A new image, attached on ``host`` (bound to ``instance``)."""
        name = name or 'img-' + uuid.uuid4().hex[:8]
        image = self.api.create_image(host, name, IMAGE_SIZE)['id']
        got = self.api.attach(host, image, instance=instance,
                              project=project if instance else None)
        return image, got['path']

    def newest(self, image):
        versions = agent_rpc.committed(self.repo.image(image).versions)
        stable = [v for v in versions if v.state == 'stable']
        return stable[-1]


def write(path, rng, size, offset=0):
    """``size`` random bytes at ``offset``, synced; returns them."""
    data = rng.randbytes(size)
    with open(path, 'r+b', buffering=0) as f:
        f.seek(offset)
        for pos in range(0, size, 4 * MiB):
            f.write(data[pos:pos + 4 * MiB])
        os.fsync(f.fileno())
    return data


@pytest.fixture(scope='module')
def cloud(rabbitmq_url, tmp_path_factory):
    top = tmp_path_factory.mktemp('nova-listener')
    backend = local.LocalBackend(str(top / 'store'))
    repo = repository.Repository(backend)
    api = rpc_api.AgentAPI(transport_url=rabbitmq_url, timeout=60)
    topic = 'versioned-' + uuid.uuid4().hex[:8]
    agents, nova, listener, forger = {}, None, None, None
    nova_api = fake_nova_api.FakeAPI()
    try:
        for label in ('a', 'b'):
            host = agent_rpc.host_name('nl-' + label)
            workdir = top / ('agent-' + label)
            workdir.mkdir()
            agents[host] = lab_agents.AgentProcess(
                str(workdir), backend,
                agent_rpc.rpc_settings(rabbitmq_url, host)).start()
        for host in agents:
            agent_rpc.wait_rpc(api, host)
        nova = Nova(str(top), rabbitmq_url, topic)
        listener = Listener(str(top), rabbitmq_url, topic, nova_api)
        forger = Forger(str(top), rabbitmq_url, topic)
        yield Cloud(api, repo, nova, listener, agents, rabbitmq_url,
                    nova_api, forger)
    finally:
        if forger is not None:
            forger.stop()
        if listener is not None:
            listener.stop()
        nova_api.stop()
        if nova is not None:
            nova.stop()
        api.cleanup()
        for agent in agents.values():
            agent.stop()
        repo.close()


def test_delete_releases_the_mirror_and_loses_nothing(cloud):
    rng = random.Random(1)
    instance = str(uuid.uuid4())
    image, path = cloud.volume(cloud.a, instance)
    data = write(path, rng, 3 * MiB, offset=5 * MiB)

    log = cloud.notify('delete.end', cloud.a, instance)
    assert 'released on %s' % cloud.a in log
    assert image not in cloud.api.status(cloud.a)['attached']
    assert not os.path.exists(path)
    newest = cloud.newest(image)
    assert newest.made_by == 'nova-release'
    assert cloud.repo.read(image, newest.number, 5 * MiB, 3 * MiB) == data
    # Handled twice (a second listener of the pool, a redelivery):
    # nothing left to do, nothing committed.
    log = cloud.notify('delete.end', cloud.a, instance)
    assert 'holds no BlobCR image of instance %s' % instance in log
    assert cloud.newest(image).number == newest.number


def test_shelve_offload_finds_a_cinder_volume_by_its_id(cloud):
    """An image attached without an instance binding, named the way the
    Cinder driver names a volume's image: the payload's block_devices
    lead to it.
    """
    rng = random.Random(2)
    instance, volume = str(uuid.uuid4()), str(uuid.uuid4())
    image, path = cloud.volume(cloud.a, name='volume-%s' % volume)
    data = write(path, rng, 2 * MiB)

    log = cloud.notify('shelve_offload.end', cloud.a, instance,
                       volumes=[volume])
    assert 'image %s of instance %s released' % (image, instance) in log
    assert image not in cloud.api.status(cloud.a)['attached']
    newest = cloud.newest(image)
    assert cloud.repo.read(image, newest.number, 0, 2 * MiB) == data


def test_shelve_commits_and_keeps_the_mirror(cloud):
    rng = random.Random(3)
    instance = str(uuid.uuid4())
    image, path = cloud.volume(cloud.a, instance)
    data = write(path, rng, MiB)
    log = cloud.notify('shelve.end', cloud.a, instance)
    assert 'kept on %s' % cloud.a in log
    entry = cloud.api.status(cloud.a)['attached'][image]
    assert entry['instances'] == [instance] and not entry['dirty']
    assert cloud.repo.read(image, cloud.newest(image).number, 0, MiB) == data
    cloud.api.detach(cloud.a, image)


def test_volume_detach_makes_sure_the_mirror_is_gone(cloud):
    rng = random.Random(4)
    instance, volume = str(uuid.uuid4()), str(uuid.uuid4())
    image, path = cloud.volume(cloud.a, instance, name='volume-%s' % volume)
    other, _ = cloud.volume(cloud.a)
    data = write(path, rng, MiB)

    log = cloud.notify('volume_detach.end', cloud.a, instance,
                       volume_id=volume)
    assert 'still attached' in log
    attached = cloud.api.status(cloud.a)['attached']
    assert image not in attached
    assert cloud.repo.read(image, cloud.newest(image).number, 0, MiB) == data
    # Another image of the host is not that volume: it stays.
    assert other in attached
    cloud.api.detach(cloud.a, other)


def migrate(cloud, rng, size):
    """Live-migrate an instance whose image has ``size`` dirty bytes from
    A to B; returns (timings of the MOVED line, image, data, path on B).
    The writer stops before the migration starts (a guest is paused at
    the switch; here it simply stops writing).
    """
    instance = str(uuid.uuid4())
    image, path = cloud.volume(cloud.a, instance)
    data = write(path, rng, size) if size else b''
    cloud.notify('live_migration_pre.start', cloud.b, instance,
                 instance_host=cloud.a)
    log = cloud.notify('live_migration_post.end', cloud.a, instance,
                       instance_host=cloud.a)
    moved = re.search(r'MOVED instance=%s .*' % instance, log).group(0)
    timings = {k: float(v) for k, v in
               re.findall(r'(\w+_ms)=([0-9.]+)', moved)}
    timings['start_chunks'] = int(re.search(r'start_chunks=(\d+)',
                                            moved).group(1))
    return timings, image, data, instance


def test_live_migration_moves_the_mirror(cloud):
    rng = random.Random(5)
    timings, image, data, instance = migrate(cloud, rng, 8 * MiB)
    assert image not in cloud.api.status(cloud.a)['attached']
    entry = cloud.api.status(cloud.b)['attached'][image]
    assert entry['instances'] == [instance]
    newest = cloud.newest(image)
    assert newest.made_by == 'migrate'
    assert entry['attached_version'] == newest.number
    with open(entry['path'], 'rb') as f:
        assert f.read(len(data)) == data
    assert timings['start_chunks'] > 0
    print('\nlive migration, 8 MiB dirty: source commit %.1f ms, end '
          '(commit + detach) %.1f ms, attach on B %.1f ms, extra %.1f ms'
          % (timings['start_ms'], timings['end_commit_ms'],
             timings['attach_ms'], timings['extra_ms']))
    # The post_dest.end that also comes is a no-op.
    log = cloud.notify('live_migration_post_dest.end', cloud.b, instance)
    assert 'already done' in log
    assert cloud.api.status(cloud.b)['attached'][image]['attached_version'] \
        == newest.number
    cloud.api.detach(cloud.b, image)


def test_writes_after_the_start_are_committed_at_the_end(cloud):
    """The guest runs on the source until the switch: what it writes
    after live_migration_pre is committed by the source at the end, before
    the destination attaches.
    """
    rng = random.Random(10)
    instance = str(uuid.uuid4())
    image, path = cloud.volume(cloud.a, instance)
    first = write(path, rng, 2 * MiB)
    cloud.notify('live_migration_pre.start', cloud.b, instance,
                 instance_host=cloud.a)
    second = write(path, rng, MiB, offset=MiB)
    log = cloud.notify('live_migration_post_dest.end', cloud.b, instance)
    assert re.search(r'MOVED .*start_chunks=[1-9]\d* .*end_chunks=[1-9]', log)
    entry = cloud.api.status(cloud.b)['attached'][image]
    with open(entry['path'], 'rb') as f:
        assert f.read(2 * MiB) == first[:MiB] + second
    cloud.api.detach(cloud.b, image)


def test_destination_attached_before_the_commit_is_reported(cloud):
    """What Nova's Cinder attachment does: the destination's agent
    attaches the volume at live_migration_pre, before the source commits.
    The listener cannot bring that mirror to the newer version: it says
    so (an error naming both versions) and changes nothing there.
    """
    rng = random.Random(12)
    instance = str(uuid.uuid4())
    image, path = cloud.volume(cloud.a, instance)
    early = cloud.api.attach(cloud.b, image, instance=instance,
                             project='proj-1')
    write(path, rng, MiB)
    cloud.notify('live_migration_pre.start', cloud.b, instance,
                 instance_host=cloud.a)
    log = cloud.notify('live_migration_post.end', cloud.a, instance)
    newest = cloud.newest(image).number
    assert re.search(r'ERROR .*image %s of instance %s was already attached '
                     r'on %s from version %d, older than version %d'
                     % (image, instance, cloud.b, early['version'], newest),
                     log), log
    assert image not in cloud.api.status(cloud.a)['attached']
    entry = cloud.api.status(cloud.b)['attached'][image]
    assert entry['attached_version'] == early['version']
    cloud.api.detach(cloud.b, image)


def test_incoming_destination_takes_the_source_s_last_version(cloud):
    """The same with the destination attached incoming (what the Cinder
    driver asks since RPC 1.6): the listener leaves it to the handoff,
    and once the source committed and detached at the end, the
    destination reads what the source wrote last.
    """
    rng = random.Random(13)
    instance = str(uuid.uuid4())
    image, path = cloud.volume(cloud.a, instance)
    incoming = cloud.api.attach(cloud.b, image, instance=instance,
                                project='proj-1', migrate_from=cloud.a)
    data = write(path, rng, MiB)
    cloud.notify('live_migration_pre.start', cloud.b, instance,
                 instance_host=cloud.a)
    log = cloud.notify('live_migration_post.end', cloud.a, instance)
    assert 'image %s of instance %s is incoming on %s' % (
        image, instance, cloud.b) in log, log
    assert 'ERROR' not in log.split('live_migration_post.end')[-1]
    assert image not in cloud.api.status(cloud.a)['attached']
    with open(incoming['path'], 'rb') as f:
        assert f.read(MiB) == data
    entry = cloud.api.status(cloud.b)['attached'][image]
    assert entry['incoming']['done']
    assert entry['attached_version'] == cloud.newest(image).number
    cloud.api.detach(cloud.b, image)


def test_resize_moves_and_revert_moves_back(cloud):
    rng = random.Random(11)
    instance = str(uuid.uuid4())
    image, path = cloud.volume(cloud.a, instance)
    data = write(path, rng, MiB)
    cloud.notify('resize_prep.start', cloud.b, instance,
                 instance_host=cloud.a)
    cloud.notify('resize_finish.end', cloud.b, instance)
    assert image not in cloud.api.status(cloud.a)['attached']
    on_b = cloud.api.status(cloud.b)['attached'][image]
    assert on_b['instances'] == [instance]
    more = write(on_b['path'], rng, MiB, offset=MiB)
    cloud.notify('resize_revert.end', cloud.a, instance)
    assert image not in cloud.api.status(cloud.b)['attached']
    on_a = cloud.api.status(cloud.a)['attached'][image]
    assert on_a['instances'] == [instance]
    with open(on_a['path'], 'rb') as f:
        assert f.read(2 * MiB) == data + more
    cloud.api.detach(cloud.a, image)


def test_rollback_leaves_the_source_attached(cloud):
    rng = random.Random(6)
    instance = str(uuid.uuid4())
    image, path = cloud.volume(cloud.a, instance)
    data = write(path, rng, MiB)
    cloud.notify('live_migration_pre.start', cloud.b, instance,
                 instance_host=cloud.a)
    log = cloud.notify('live_migration_rollback.end', cloud.a, instance)
    assert 'stay on %s' % cloud.a in log
    entry = cloud.api.status(cloud.a)['attached'][image]
    assert entry['instances'] == [instance]
    assert image not in cloud.api.status(cloud.b)['attached']
    with open(path, 'rb') as f:
        assert f.read(MiB) == data
    # The migration is forgotten: a late post.end moves nothing.
    log = cloud.notify('live_migration_post.end', cloud.a, instance,
                       genuine=False)
    assert 'its start was not seen' in log
    assert image in cloud.api.status(cloud.a)['attached']
    cloud.api.detach(cloud.a, image)


def test_what_the_host_does_not_hold_changes_nothing(cloud):
    rng = random.Random(7)
    mine, my_volume = str(uuid.uuid4()), str(uuid.uuid4())
    image, path = cloud.volume(cloud.a, mine, name='volume-%s' % my_volume)
    write(path, rng, MiB)
    before = [v.number for v in cloud.repo.image(image).versions]
    stranger, volume = str(uuid.uuid4()), str(uuid.uuid4())
    log = cloud.notify('delete.end', cloud.a, stranger, volumes=[volume])
    assert 'holds no BlobCR image of instance %s' % stranger in log
    log = cloud.notify('volume_detach.end', cloud.a, stranger,
                       volume_id=volume)
    assert 'is not a BlobCR volume' in log
    # The image of another instance, named by the payload's volume: left
    # alone.
    log = cloud.notify('delete.end', cloud.a, stranger,
                       volumes=[my_volume])
    assert 'is bound to %s, not to %s: left alone' % (mine, stranger) in log
    assert 'holds no BlobCR image of instance %s' % stranger in log
    entry = cloud.api.status(cloud.a)['attached'][image]
    assert entry['instances'] == [mine] and entry['dirty']
    assert [v.number for v in cloud.repo.image(image).versions] == before
    cloud.api.checkpoint(cloud.a, image)
    cloud.api.detach(cloud.a, image)


def test_forged_notifications_move_nothing(cloud):
    """Issue 54, finding 1: a compromised compute host publishes, on the
    lab's RabbitMQ and in host A's name (or its own, B), notifications
    of events that did not happen. Nova's API (the fake: no real Nova in
    this lane) reports what is true, and the listener drops each forged
    one with a warning naming the publisher: on A nothing is committed,
    detached or attached, nothing is attached on B. The same events,
    once Nova confirms them, are acted on.
    """
    rng = random.Random(14)
    fake = cloud.nova_api
    running, deleted = str(uuid.uuid4()), str(uuid.uuid4())
    mine, storage = str(uuid.uuid4()), str(uuid.uuid4())
    # A's honest state: an instance runs there with its image and a
    # Cinder volume; the storage side has a volume's image attached
    # there for its own work (no instance bound); another instance was
    # deleted on B.
    image, path = cloud.volume(cloud.a, running)
    write(path, rng, MiB)
    volume, vpath = cloud.volume(cloud.a, running, name='volume-%s' % mine)
    write(vpath, rng, MiB)
    own, _ = cloud.volume(cloud.a, name='volume-%s' % storage)
    fake.server(running, cloud.a, volumes=[mine])
    fake.volume(mine, 'in-use', [(running, cloud.a)])
    fake.volume(storage, 'downloading')
    fake.server(deleted, cloud.b, 'deleted')
    images = (image, volume, own)
    before = {i: [v.number for v in cloud.repo.image(i).versions]
              for i in images}
    bdms = [{'nova_object.data': {'volume_id': v}} for v in (mine, storage)]
    forged = [
        ('delete.end', cloud.a, running, {'host': cloud.a}),
        ('shelve_offload.end', cloud.a, running,
         {'host': None, 'block_devices': bdms}),
        ('volume_detach.end', cloud.a, running,
         {'host': cloud.a, 'volume_id': mine}),
        ('volume_detach.end', cloud.a, running,
         {'host': cloud.a, 'volume_id': storage}),
        # A delete that did happen, but on B: A's storage image is not
        # that instance's.
        ('delete.end', cloud.a, deleted,
         {'host': cloud.a, 'block_devices': bdms}),
        # B (the forger's own name) makes itself the destination.
        ('live_migration_pre.start', cloud.b, running,
         {'host': cloud.a, 'tenant_id': 'proj-evil'}),
        ('live_migration_post_dest.end', cloud.b, running,
         {'host': cloud.b, 'tenant_id': 'proj-evil'}),
        ('resize_prep.start', cloud.b, running, {'host': cloud.a}),
        ('resize_finish.end', cloud.b, running, {'host': cloud.b}),
    ]
    for event, host, instance, data in forged:
        log = cloud.forge(event, host, instance, data)
        # An end whose (forged) start was dropped finds no start.
        assert re.search(r'WARNING .*instance\.%s of instance %s from '
                         r'nova-compute:%s dropped: ' % (
                             re.escape(event), instance, host), log) or (
            event.endswith('.end') and 'its start was not seen' in log), log
    attached = cloud.api.status(cloud.a)['attached']
    assert set(images) <= set(attached)
    assert attached[image]['instances'] == [running]
    assert attached[image]['dirty'] and attached[volume]['dirty']
    assert not set(images) & set(cloud.api.status(cloud.b)['attached'])
    assert {i: [v.number for v in cloud.repo.image(i).versions]
            for i in images} == before

    # A live migration to B that Nova did start (the listener remembers
    # it), whose end is forged while Nova still has the instance on A.
    cloud.notify('live_migration_pre.start', cloud.b, running,
                 instance_host=cloud.a)
    log = cloud.forge('live_migration_post_dest.end', cloud.b, running,
                      {'host': cloud.b})
    assert re.search(r'WARNING .*dropped: Nova reports instance %s active '
                     r'\(migrating\) on host %s, not on host %s' % (
                         running, cloud.a, cloud.b), log), log
    assert set(images) <= set(cloud.api.status(cloud.a)['attached'])
    assert not set(images) & set(cloud.api.status(cloud.b)['attached'])
    cloud.notify('live_migration_rollback.end', cloud.a, running)

    # Confirmed by Nova, the delete releases the instance's images (the
    # storage side's stays: not the instance's).
    log = cloud.notify('delete.end', cloud.a, running)
    assert 'dropped' not in log
    attached = cloud.api.status(cloud.a)['attached']
    assert image not in attached and volume not in attached
    assert own in attached
    cloud.api.detach(cloud.a, own)


def test_dead_agent_is_an_error_and_the_next_event_is_handled(cloud):
    rng = random.Random(8)
    dead = agent_rpc.host_name('nl-dead')
    instance = str(uuid.uuid4())
    log = cloud.notify('delete.end', dead, instance)
    assert re.search(r'ERROR .*instance\.delete\.end of instance %s not '
                     r'handled: the blobcr-agent of host %s does not answer'
                     % (instance, dead), log), log
    assert 'Traceback' not in log
    # A migration whose destination is dead: released on A, not lost.
    image, path = cloud.volume(cloud.a, instance)
    data = write(path, rng, MiB)
    cloud.notify('live_migration_pre.start', dead, instance,
                 instance_host=cloud.a)
    log = cloud.notify('live_migration_post.end', cloud.a, instance)
    assert re.search(r'ERROR .*released on %s at version \d+ and is not '
                     r'attached on %s' % (cloud.a, dead), log), log
    assert image not in cloud.api.status(cloud.a)['attached']
    assert cloud.repo.read(image, cloud.newest(image).number, 0, MiB) == data
    # The listener still handles the next notification.
    image, path = cloud.volume(cloud.a, instance)
    cloud.notify('delete.end', cloud.a, instance)
    assert image not in cloud.api.status(cloud.a)['attached']


def test_killed_agent_loses_nothing(cloud, tmp_path):
    """A host's agent killed (SIGKILL) with an instance's writes not
    committed: the delete is an error, nothing is committed; once the
    agent is back (it re-attaches from its cache), the next delete
    releases the image with those writes.
    """
    rng = random.Random(13)
    host = agent_rpc.host_name('nl-c')
    agent = lab_agents.AgentProcess(
        str(tmp_path), cloud.repo.backend,
        agent_rpc.rpc_settings(cloud.url, host)).start()
    try:
        agent_rpc.wait_rpc(cloud.api, host)
        instance = str(uuid.uuid4())
        image, path = cloud.volume(host, instance)
        data = write(path, rng, MiB)
        before = [v.number for v in cloud.repo.image(image).versions]
        agent.kill()
        log = cloud.notify('delete.end', host, instance)
        assert re.search(r'ERROR .*instance\.delete\.end of instance %s not '
                         r'handled: the blobcr-agent of host %s does not '
                         r'answer' % (instance, host), log), log
        assert [v.number for v in cloud.repo.image(image).versions] == \
            before
        agent.start()
        agent_rpc.wait_rpc(cloud.api, host)
        assert cloud.api.status(host)['attached'][image]['dirty']
        log = cloud.notify('delete.end', host, instance)
        assert 'released on %s' % host in log
        assert cloud.repo.read(image, cloud.newest(image).number, 0,
                               MiB) == data
    finally:
        agent.stop()


@pytest.mark.skipif(not os.environ.get('BLOBCR_LISTENER_BENCH'),
                    reason='set BLOBCR_LISTENER_BENCH=RUNS to measure')
def test_bench_migration_extra_time(cloud):
    runs = int(os.environ['BLOBCR_LISTENER_BENCH'])
    rng = random.Random(9)
    results = {}
    for size in (0, 4 * MiB, 16 * MiB, 64 * MiB):
        rows = []
        for _ in range(runs):
            timings, image, _, _ = migrate(cloud, rng, size)
            cloud.api.detach(cloud.b, image)
            rows.append(timings)
        results[size] = {k: statistics.median(r[k] for r in rows)
                         for k in ('start_ms', 'end_commit_ms', 'attach_ms',
                                   'extra_ms')}
    print('\ndirty MiB  source commit ms  end ms  attach ms  extra ms '
          '(medians of %d runs)' % runs)
    for size, m in results.items():
        print('%9d  %16.1f  %6.1f  %9.1f  %8.1f'
              % (size // MiB, m['start_ms'], m['end_commit_ms'],
                 m['attach_ms'], m['extra_ms']))


if __name__ == '__main__':
    emitter_main(sys.argv[1])
