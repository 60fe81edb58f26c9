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

"""blobcr-nova-listener without a broker: its options, its sample
configuration, that every event it acts on is one nova 34 emits, and
(issue 54) that it acts only on what Nova and Cinder confirm, keeping a
bounded number of migrations and per-host broker connections whatever
host names notifications carry.

No real Nova runs in this lane: Nova's and Cinder's APIs are the fake of
tests/fake_nova_api.py (an HTTP server of this process, asked through
keystoneauth as the listener asks the real ones); the agents are a
recording stand-in. The same checks against real agents, with forged
notifications on RabbitMQ: tests/integration/test_nova_listener.py.
"""

import json
import logging
import os
import subprocess
import sys
import uuid

from oslo_config import cfg
import pytest

from blobcr_common import exception as agent_exception
from blobcr_common.rpc import api as rpc_api
from blobcr_common.rpc import bus
from blobcr_lab import agents as lab_agents
from blobcr_nova import authority
from blobcr_nova import listener
from tests import fake_nova_api


def test_events_are_novas_own():
    """Each event type is instance.<a NotificationAction of nova>.<a
    NotificationPhase>, read from nova's code (in a child: importing
    nova brings eventlet along).
    """
    code = ('import json; from nova.objects import fields as f; '
            'print(json.dumps([list(f.NotificationAction.ALL), '
            'list(f.NotificationPhase.ALL)]))')
    done = subprocess.run([sys.executable, '-W', 'ignore', '-c', code],
                          check=True, capture_output=True, text=True)
    actions, phases = json.loads(done.stdout.strip().splitlines()[-1])
    for event in listener.EVENTS:
        obj, action, phase = event.split('.')
        assert obj == 'instance' and action in actions and \
            phase in phases, event


def test_payload_fields():
    payload = {'nova_object.data': {
        'uuid': 'i-1', 'volume_id': 'v-2',
        'block_devices': [{'nova_object.data': {'volume_id': 'v-1'}},
                          {'nova_object.data': {'volume_id': None}}]}}
    data = listener._data(payload)
    assert listener._volumes(data) == ['v-1', 'v-2']
    assert listener._volumes({'block_devices': None}) == []
    assert listener._host_of('nova-compute:host-1') == 'host-1'
    assert listener._host_of('nova-compute:a:b') == 'a:b'
    assert listener._host_of('nova-compute') is None
    assert listener._data(None) == {}


class _NoAgent(object):
    def __getattr__(self, name):
        raise AssertionError('no agent call expected: %s' % name)


def test_events_ignored_or_refused_without_calling_agents(caplog):
    caplog.set_level(logging.INFO)
    conf = type('opts', (), {'migration_ttl': 60, 'agent_timeout': 1})
    handler = listener.Handler(_NoAgent(), conf, _NoAgent())
    data = {'nova_object.data': {'uuid': 'i-1', 'host': 'h'}}
    assert handler.handle('nova-compute:h', 'instance.pause.end',
                          data) is None
    assert handler.handle('nova-compute', 'instance.delete.end',
                          data) is None
    assert 'without an instance uuid or a host' in caplog.text
    # What a forged payload may hold instead of strings.
    assert handler.handle('nova-compute:h', 'instance.delete.end', {
        'nova_object.data': {'uuid': ['i-1']}}) is None
    assert handler.handle(['x'], 'instance.delete.end', data) is None
    # An end without its start: the source is unknown, nothing moves.
    assert handler.handle('nova-compute:h',
                          'instance.live_migration_post.end',
                          data) == listener.MIGRATE_END
    assert 'its start was not seen' in caplog.text
    # Same-host resize: nothing to move.
    assert handler.handle('nova-compute:h', 'instance.resize_prep.start',
                          data) == listener.MIGRATE_START
    assert 'both h: nothing to move' in caplog.text


# -- issue 54: what Nova and Cinder confirm -----------------------------------

class Agents(object):
    """Agents of every host, recorded: ``attached[host][image]`` is the
    status entry of each mirror; list_versions finds ``volume-<id>``.
    """

    def __init__(self):
        self.attached = {}
        self.calls = []

    def status(self, host):
        self.calls.append((host, 'status'))
        return {'attached': dict(self.attached.get(host, {}))}

    def list_versions(self, host, image):
        self.calls.append((host, 'list_versions', image))
        if image in self.attached.get(host, {}):
            return {'image': image, 'versions': []}
        raise agent_exception.ImageNotFound(image)

    def checkpoint(self, host, image, **kwargs):
        self.calls.append((host, 'checkpoint', image))
        return {'version': 7, 'chunks': 1}

    def wait_stable(self, host, image, version, timeout=None):
        return 'stable'

    def detach(self, host, image):
        self.calls.append((host, 'detach', image))
        del self.attached[host][image]

    def attach(self, host, image, version=None, instance=None,
               project=None):
        self.calls.append((host, 'attach', image, instance, project))
        self.attached.setdefault(host, {})[image] = {
            'instances': [instance], 'attached_version': version}
        return {'version': version, 'path': '/x/%s' % image}

    def changes(self):
        return [c for c in self.calls
                if c[1] in ('checkpoint', 'detach', 'attach')]


@pytest.fixture
def nova_api():
    api = fake_nova_api.FakeAPI()
    yield api
    api.stop()


def _conf(tmp_path, sections):
    conffile = str(tmp_path / 'listener.conf')
    lab_agents.write_conf(conffile, sections)
    conf = cfg.ConfigOpts()
    listener.register_opts(conf)
    conf(['--config-file', conffile], project='blobcr',
         default_config_files=[])
    return conf


@pytest.fixture
def cloud(tmp_path, nova_api):
    """(handler, agents, Nova's fake API); instance ``run`` runs on h1
    with image img-1 bound to it and its volume ``vol``.
    """
    conf = _conf(tmp_path, dict(nova_api.conf(), listener={
        'max_migrations': '8'}))
    agents = Agents()
    handler = listener.Handler(agents, conf.listener,
                               authority.Authority.from_conf(conf))
    handler.run, handler.vol = str(uuid.uuid4()), str(uuid.uuid4())
    agents.attached['h1'] = {
        'img-1': {'instances': [handler.run], 'dirty': 1},
        'volume-%s' % handler.vol: {'instances': [handler.run], 'dirty': 1}}
    nova_api.server(handler.run, 'h1', volumes=[handler.vol])
    nova_api.volume(handler.vol, 'in-use', [(handler.run, 'h1')])
    return handler, agents, nova_api


def _event(handler, event, publisher, instance, **data):
    return handler.handle('nova-compute:%s' % publisher, 'instance.' + event,
                          {'nova_object.data': dict(data, uuid=instance)})


def test_forged_events_are_dropped_before_any_agent_call(cloud, caplog):
    """Each notification Nova or Cinder contradicts is dropped with a
    warning naming its publisher, and no agent is called at all (not
    even for its status: no connection to a host a notification names).
    """
    caplog.set_level(logging.INFO)
    handler, agents, nova = cloud
    run, vol = handler.run, handler.vol
    stored, dead = str(uuid.uuid4()), str(uuid.uuid4())
    agents.attached['h1']['volume-%s' % stored] = {'instances': []}
    nova.volume(stored, 'downloading')
    nova.server(dead, 'h2', 'deleted')
    bdms = [{'nova_object.data': {'volume_id': v}} for v in (vol, stored)]
    forged = [
        ('delete.end', 'h1', run, {}),
        ('delete.end', 'h1', str(uuid.uuid4()), {}),   # unknown to Nova
        ('delete.end', 'h1', dead, {'block_devices': bdms}),
        ('shelve_offload.end', 'h1', run, {'block_devices': bdms}),
        ('shelve.end', 'h1', run, {}),
        ('volume_detach.end', 'h1', run, {'volume_id': vol}),
        ('volume_detach.end', 'h1', run, {'volume_id': stored}),
        ('volume_detach.end', 'h2', run, {'volume_id': vol}),
        ('live_migration_pre.start', 'h2', run, {'host': 'h1'}),
        ('resize_prep.start', 'h2', run, {'host': 'h1'}),
        ('delete.end', 'h1', '../os-hypervisors', {}),
    ]
    for event, host, instance, data in forged:
        caplog.clear()
        assert _event(handler, event, host, instance, **data)
        assert 'instance.%s of instance %s from nova-compute:%s dropped: ' \
            % (event, instance, host) in caplog.text, (event, caplog.text)
        assert [r.levelname for r in caplog.records
                if 'dropped' in r.getMessage()] == ['WARNING']
    assert agents.calls == []
    assert handler.migrations == {}
    # A migration Nova has, from elsewhere or to elsewhere: not this one.
    nova.migration(run, 'h1', 'h3', 'running')
    _event(handler, 'live_migration_pre.start', 'h2', run, host='h1')
    _event(handler, 'live_migration_pre.start', 'h3', run, host='h4')
    assert agents.calls == [] and handler.migrations == {}


def test_confirmed_events_are_acted_on(cloud):
    """What real Nova reports once it emitted the events (the states of
    nova 34's compute manager at those points) lets each one through.
    """
    handler, agents, nova = cloud
    run, vol = handler.run, handler.vol
    # A live migration h1 -> h2: the start commits on h1, the end (Nova:
    # the instance on h2, the migration running) moves the images, for
    # Nova's project, not the payload's.
    nova.after('live_migration_pre.start', 'h2', run, 'h1')
    _event(handler, 'live_migration_pre.start', 'h2', run, host='h1',
           block_devices=[{'nova_object.data': {'volume_id': vol}}])
    assert ('h1', 'checkpoint', 'img-1') in agents.calls
    # The end from the destination, before Nova reports the instance
    # there: not confirmed; once it does, the move.
    _event(handler, 'live_migration_post_dest.end', 'h2', run,
           tenant_id='proj-evil')
    assert not [c for c in agents.changes() if c[1] != 'checkpoint']
    nova.after('live_migration_post_dest.end', 'h2', run)
    _event(handler, 'live_migration_post_dest.end', 'h2', run,
           tenant_id='proj-evil')
    assert ('h1', 'detach', 'img-1') in agents.calls
    assert ('h2', 'attach', 'img-1', run, 'proj-1') in agents.calls
    assert set(agents.attached['h2']) == {'img-1', 'volume-%s' % vol}
    # Deleted on h2 (Nova: deleted there): released there.
    nova.volume(vol, 'available')
    nova.after('delete.end', 'h2', run)
    _event(handler, 'delete.end', 'h2', run)
    assert agents.attached['h2'] == {}
    # A volume detach Cinder confirms.
    other, ovol = str(uuid.uuid4()), str(uuid.uuid4())
    agents.attached['h1']['volume-%s' % ovol] = {'instances': [other]}
    nova.after('volume_detach.end', 'h1', other, volume_id=ovol)
    _event(handler, 'volume_detach.end', 'h1', other, volume_id=ovol)
    assert 'volume-%s' % ovol not in agents.attached['h1']


def test_nova_that_does_not_answer_drops_the_event(cloud, caplog):
    handler, agents, nova = cloud
    nova.after('delete.end', 'h1', handler.run)
    nova.stop()
    _event(handler, 'delete.end', 'h1', handler.run)
    assert 'dropped: Nova could not be asked' in caplog.text
    assert agents.calls == []


def test_migrations_remembered_are_bounded(cloud, caplog):
    """[listener] max_migrations (8 here): starts past it forget the
    oldest, with a warning.
    """
    handler, agents, nova = cloud
    instances = [str(uuid.uuid4()) for _ in range(20)]
    for i in instances:
        nova.after('live_migration_pre.start', 'h2', i, 'h1')
        _event(handler, 'live_migration_pre.start', 'h2', i, host='h1')
    assert list(handler.migrations) == instances[-8:]
    assert 'the oldest, of %s from h1 to h2, is forgotten' % instances[0] \
        in caplog.text
    # A forgotten one's end moves nothing; a remembered one's does.
    nova.after('live_migration_post_dest.end', 'h2', instances[0])
    _event(handler, 'live_migration_post_dest.end', 'h2', instances[0])
    assert 'its start was not seen' in caplog.text


def _vhost_conf():
    conf = cfg.ConfigOpts()
    conf([], project='blobcr-test', default_config_files=[])
    bus.register(conf)
    conf.set_override('host_vhosts', True, group=bus.GROUP)
    return conf


def test_agent_clients_per_host_are_bounded(monkeypatch):
    """One transport per host name called, at most max_hosts at once:
    thousands of names (what forged notifications could name) leave
    max_hosts open; an evicted one a call still uses is closed when the
    call gives it back, not under it.
    """
    api = rpc_api.AgentAPI(_vhost_conf(), transport_url='fake://u:p@h:1/x',
                           max_hosts=4)
    closed = []
    made = api._transport

    def transport(url):
        t = made(url)
        monkeypatch.setattr(t, 'cleanup', lambda: closed.append(url))
        return t
    monkeypatch.setattr(api, '_transport', transport)
    held = api.client_for('host-held')
    for n in range(2000):
        api.give_back(api.client_for('forged-%d' % n))
    # Closed off the callers' path (rpc/pool.py): wait for the closes.
    assert api._hosts.settle(10)
    assert len(api._hosts._vhosts) == 4
    assert len(closed) == 2000 - 4
    assert not any('host-held' in url for url in closed)
    api.give_back(held)
    assert api._hosts.settle(10)
    assert closed[-1].endswith('/blobcr-host-held')
    # Each call gives its client back.
    monkeypatch.setattr(held.__class__, 'prepare',
                        lambda self, **kw: (_ for _ in ()).throw(
                            agent_exception.Busy('x')))
    for n in range(10):
        with pytest.raises(agent_exception.Busy):
            api.status('again-%d' % n)
    assert len(api._hosts._vhosts) == 4
    assert len(api._hosts) == 4
    api.cleanup()


def test_make_listener_bounds_its_agent_api(tmp_path, nova_api):
    conf = _conf(tmp_path, dict(nova_api.conf(), DEFAULT={
        'transport_url': 'fake:/'}, listener={'max_agent_hosts': '3'}))
    _, handler = listener.make_listener(conf)
    assert handler.api._hosts.max_open == 3
    handler.api.cleanup()


def test_listener_refuses_to_start_without_nova_credentials(tmp_path):
    conffile = str(tmp_path / 'listener.conf')
    lab_agents.write_conf(conffile, {'DEFAULT': {
        'transport_url': 'fake:/', 'log_file': str(tmp_path / 'log')}})
    done = subprocess.run(
        [sys.executable, '-m', 'blobcr_nova.listener', '--config-file',
         conffile], capture_output=True, text=True, timeout=120,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert done.returncode == 2, done
    assert '[nova] auth_type is not set' in done.stderr


def test_authority_refuses_what_is_not_an_id(nova_api):
    auth = authority.Authority(None, None)
    for bad in ('../os-hypervisors', 'i-1', None, 7):
        with pytest.raises(authority.Refused, match='not a UUID'):
            auth.server(bad)
        with pytest.raises(authority.Refused, match='not a UUID'):
            auth.volume(bad)
