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

"""Nova's side, end to end with real parts: Keystone (the session's
OpenStack stack), blobcr-vendordata as its own process behind
keystonemiddleware, Nova's own DynamicVendorData and metadata-signature
code (nova 34, run in a child process: its options live on the global
cfg.CONF), a real blobcr-agent whose guest endpoint checks the tokens and
signatures, and the guest's own discovery and client. Nova's API, which
blobcr-vendordata asks where an instance runs, is tests/fake_nova_api.py's
stand-in (no Nova API runs here).

Identities: a ``nova`` user (role service in project service), whose
token Nova's ``[vendordata_dynamic_auth]`` sends; a ``blobcr`` user
(service) with which keystonemiddleware validates tokens, and which
stands for any other service account; the stack's ``demo`` member stands
for any other user of the cloud.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid

import pytest
import requests

from blobcr_agent.repository.backends import local
from blobcr_agent.repository import repository
from blobcr_common import auth
from blobcr_guest import client as guest_client
from blobcr_guest import config as guest_config
from blobcr_guest import exception as guest_exception
from blobcr_lab import agent_rpc
from blobcr_lab import agents
from blobcr_lab import openstack as stack_module
from tests import fake_nova_api
from tests.unit.test_nova_vendordata import serve_vendor_data2

SECRET = 'token-secret-of-every-agent'
HOST = 'compute-a'                  # the agent's [agent] host
TOKEN = re.compile(r'2\.[0-9]+\.[0-9a-f]{64}')
META = 'neutron-metadata-proxy-secret'
CHUNK = 64 * 1024
PASSWORD = 'nova-side-secret'

# Run in a child process: Nova's own code for what Nova does with
# vendordata and metadata-proxy signatures.
NOVA_SCRIPT = r'''
import json
import sys

import nova.conf
from nova import objects

spec = json.load(sys.stdin)
CONF = nova.conf.CONF
CONF(['--config-file', spec['conf']], project='nova',
     default_config_files=[])
objects.register_all()
from nova.api.metadata import handler
from nova.api.metadata import vendordata_dynamic

out = {'vendordata': [], 'signatures': []}
for inst in spec['instances']:
    instance = objects.Instance(
        uuid=inst['uuid'], project_id=inst['project'],
        image_ref='c0ffee00-0000-4000-8000-000000000001', user_data=None,
        hostname=inst['hostname'], metadata={'job': 'rank'},
        system_metadata={'boot_roles': 'member,reader'})
    try:
        out['vendordata'].append(
            vendordata_dynamic.DynamicVendorData(instance=instance).get())
    except Exception as e:
        out['vendordata'].append({'error': '%s: %s' % (type(e).__name__,
                                                       e)})
checker = handler.MetadataRequestHandler()
for instance_id, signature in spec['signatures']:
    try:
        checker._validate_shared_secret(instance_id, signature, '10.0.0.5')
        out['signatures'].append(True)
    except Exception:
        out['signatures'].append(False)
print(json.dumps(out))
'''


def run_nova(conf, instances=(), signatures=(), python=sys.executable):
    """What Nova's own code (``python``'s Nova) makes of ``instances``'
    vendordata and of metadata-proxy ``signatures``.
    """
    proc = subprocess.run(
        [python, '-c', NOVA_SCRIPT], capture_output=True, text=True,
        timeout=120, input=json.dumps({
            'conf': conf, 'instances': list(instances),
            'signatures': [list(s) for s in signatures]}))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def nova_conf(path, stack, vendordata_url, password=PASSWORD,
              user='nova'):
    agents.write_conf(path, {
        'DEFAULT': {'use_stderr': 'true'},
        'api': {'vendordata_providers': 'StaticJSON,DynamicJSON',
                'vendordata_dynamic_targets': 'blobcr@%s' % vendordata_url,
                'vendordata_dynamic_failure_fatal': 'true'},
        'vendordata_dynamic_auth': {
            'auth_type': 'password', 'auth_url': stack.auth_url,
            'username': user, 'password': password,
            'project_name': 'service', 'user_domain_name': 'Default',
            'project_domain_name': 'Default'},
        'neutron': {'service_metadata_proxy': 'true',
                    'metadata_proxy_shared_secret': META},
    })
    return str(path)


@pytest.fixture(scope='module')
def identities(openstack_cloud):
    """The nova and blobcr service users (unique names), removed after."""
    from keystoneclient.v3 import client
    keystone = client.Client(session=openstack_cloud.session('admin'))
    roles = {role.name: role for role in keystone.roles.list()}
    domain = keystone.domains.get('default')
    service = keystone.projects.find(name='service')
    suffix = uuid.uuid4().hex[:8]
    users = {}
    for kind in ('nova', 'blobcr'):
        user = keystone.users.create('%s-%s' % (kind, suffix),
                                     domain=domain, password=PASSWORD,
                                     default_project=service)
        keystone.roles.grant(roles['service'], user=user, project=service)
        users[kind] = user.name
    projects = {
        'P': openstack_cloud.session('demo').get_project_id(),
        'Q': openstack_cloud.session('admin').get_project_id()}
    yield users, projects
    for user in keystone.users.list(domain=domain):
        if user.name in users.values():
            keystone.users.delete(user)


class Host(object):
    """One compute host: a real agent with three instances attached,
    A and B of project P, C of project Q.
    """

    def __init__(self, directory, projects):
        self.repo = repository.Repository(
            local.LocalBackend(os.path.join(directory, 'store')),
            chunk_size=CHUNK)
        workdir = os.path.join(directory, 'agent')
        os.makedirs(workdir)
        self.agent = agents.AgentProcess(workdir, self.repo.backend, {
            'agent': {'quiesce': 'none', 'libvirt_uri': 'test:///default',
                      'host': HOST},
            'proxy': {'host_secret': SECRET,
                      'metadata_proxy_shared_secret': META}})
        self.instances, self.images, self.projects = {}, {}, {}
        for name, project in (('A', 'P'), ('B', 'P'), ('C', 'Q')):
            self.images[name] = self.repo.create_image(
                'disk-%s' % name, CHUNK * 16).id
            self.instances[name] = str(uuid.uuid4())
            self.projects[name] = projects[project]

    def start(self):
        self.agent.start()
        for name, image in self.images.items():
            self.agent.client.call('attach', image=image,
                                   instance=self.instances[name],
                                   project=self.projects[name])
        self.url = 'http://127.0.0.1:%d' % self.agent.proxy_port()
        return self

    def committed(self, name):
        return [v.number for v in agent_rpc.committed(
            self.repo.image(self.images[name]).versions)]

    def stop(self):
        self.agent.stop()
        self.repo.close()


class VendordataService(object):
    """``python -m blobcr_nova.vendordata`` (the blobcr-vendordata
    command) with its own configuration file, stopped by its pid.
    """

    def __init__(self, directory, stack, user, endpoint_url, nova_api,
                 nova_user, command=None):
        # command: the console script of another install
        # (test_separate_venvs.py), not this venv's module.
        self.command = command or [sys.executable, '-m',
                                   'blobcr_nova.vendordata']
        self.port = stack_module.free_port()
        self.url = 'http://127.0.0.1:%d/' % self.port
        self.conffile = os.path.join(directory, 'nova-vendordata.conf')
        self.logfile = os.path.join(directory, 'vendordata.log')
        agents.write_conf(self.conffile, {
            'DEFAULT': {'use_stderr': 'true', 'debug': 'true'},
            'vendordata': {'listen': '127.0.0.1', 'port': self.port,
                           'endpoint_url': endpoint_url,
                           'token_secret': SECRET,
                           'allowed_users': nova_user},
            'nova': nova_api.conf()['nova'],
            'keystone_authtoken': {
                'www_authenticate_uri': stack.auth_url,
                'auth_url': stack.auth_url, 'auth_type': 'password',
                'username': user, 'password': PASSWORD,
                'project_name': 'service', 'user_domain_name': 'Default',
                'project_domain_name': 'Default',
                'region_name': stack_module.REGION},
        })
        self.proc = None

    def start(self, timeout=60):
        with open(self.logfile, 'ab') as log:
            self.proc = subprocess.Popen(
                self.command + ['--config-file', self.conffile],
                stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError('blobcr-vendordata exited with %s:\n%s'
                                   % (self.proc.returncode, self.log()))
            try:
                requests.post(self.url, json={}, timeout=5)
                return self
            except requests.ConnectionError:
                if time.monotonic() > deadline:
                    raise RuntimeError('blobcr-vendordata not answering:\n'
                                       + self.log())
            time.sleep(0.1)

    def log(self):
        return stack_module.tail(self.logfile, 60)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode if self.proc else None


@pytest.fixture(scope='module')
def cloud(openstack_cloud, identities, tmp_path_factory):
    """(stack, host, vendordata service, nova.conf, users); Nova's API
    (``host.nova_api``) runs the host's instances on HOST.
    """
    users, projects = identities
    directory = str(tmp_path_factory.mktemp('nova-side'))
    host = Host(directory, projects).start()
    host.nova_api = nova_api = fake_nova_api.FakeAPI()
    for name in 'ABC':
        nova_api.server(host.instances[name], HOST,
                        project=host.projects[name])
    service = None
    try:
        service = VendordataService(directory, openstack_cloud,
                                    users['blobcr'], host.url, nova_api,
                                    users['nova']).start()
        conf = nova_conf(os.path.join(directory, 'nova.conf'),
                         openstack_cloud, service.url, user=users['nova'])
        yield openstack_cloud, host, service, conf, users
    finally:
        if service is not None:
            assert service.stop() == 0, service.log()
        host.stop()
        nova_api.stop()


def _eventually(predicate, timeout=30):
    """``predicate()`` once true, or its last value after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def guest_of(document, tmp_path):
    """The guest's client, its credentials found as a guest finds them."""
    server = serve_vendor_data2(document)
    try:
        found = guest_config.discover(
            config_path=str(tmp_path / 'absent.json'),
            environ={'BLOBCR_METADATA_URL':
                     'http://127.0.0.1:%d/openstack/latest/'
                     'vendor_data2.json' % server.server_port})
    finally:
        server.shutdown()
        server.server_close()
    return guest_client.CheckpointClient(found.endpoint, found.instance_id,
                                         token=found.token, timeout=60,
                                         retries=0)


def test_nova_hands_out_credentials_the_guest_checkpoints_with(cloud,
                                                               tmp_path):
    stack, host, service, conf, users = cloud
    spec = [{'uuid': host.instances[n], 'project': host.projects[n],
             'hostname': 'vm-%s' % n.lower()} for n in 'ABC']
    # D: an instance of another host (Nova knows it, this agent does not).
    elsewhere = str(uuid.uuid4())
    host.nova_api.server(elsewhere, 'compute-d', project=host.projects['A'])
    spec.append({'uuid': elsewhere, 'project': host.projects['A'],
                 'hostname': 'vm-d'})
    out = run_nova(conf, spec)
    data = dict(zip('ABCD', out['vendordata']))
    agent_auth = auth.Authenticator(SECRET, host=HOST)
    for name in 'ABC':
        assert set(data[name]) == {'blobcr'}, data[name]
        answer = dict(data[name]['blobcr'])
        token = answer.pop('token')
        assert answer == {
            'endpoint': host.url, 'instance_id': host.instances[name],
            'project_id': host.projects[name]}
        # Made for this instance on HOST (where Nova's API says it runs).
        assert agent_auth.instance({
            'X-Instance-ID': host.instances[name],
            'X-BlobCR-Token': token}) == host.instances[name]
    assert "instance %s (project %s) on host %s until " % (
        host.instances['A'], host.projects['A'], HOST) in service.log()
    assert " for %s (" % users['nova'] in service.log()

    guests = {n: guest_of(data[n], tmp_path) for n in 'ABC'}
    before = host.committed('A')
    taken = guests['A'].checkpoint(sync=False)
    assert guests['A'].wait_stable(taken.version, timeout=60) == 'stable'
    assert host.committed('A') == before + [taken.version]

    # A's token does not pass for B: 401, nothing committed on B.
    b_before = host.committed('B')
    forged = guest_client.CheckpointClient(
        host.url, host.instances['B'], token=guests['A'].token, retries=0)
    with pytest.raises(guest_exception.CheckpointError) as refused:
        forged.checkpoint(sync=False)
    assert refused.value.status == 401
    assert host.committed('B') == b_before

    # D's own valid token, made for D's host, at an agent of another
    # host: 401, and nothing is committed anywhere.
    counts = {n: host.committed(n) for n in 'ABC'}
    with pytest.raises(guest_exception.CheckpointError) as refused:
        guest_of(data['D'], tmp_path).checkpoint(sync=False)
    assert refused.value.status == 401
    assert {n: host.committed(n) for n in 'ABC'} == counts

    # Groups per project: C (project Q) uses P's group id and count but
    # joins nothing of P's, and sees nothing of it.
    group = 'job-%s' % uuid.uuid4().hex[:6]
    a1 = guests['A'].checkpoint(group=group, members=2, sync=False)
    c1 = guests['C'].checkpoint(group=group, members=2, sync=False)
    for name, ck in (('A', a1), ('C', c1)):
        guests[name].wait_stable(ck.version, timeout=60)
    # Members are recorded just after their ack (manager/tagger.py).
    assert _eventually(lambda: guests['A'].group_state(group) == {
        'group': group, 'members': 2, 'stable': 1, 'complete': False})
    b1 = guests['B'].checkpoint(group=group, members=2, sync=False)
    guests['B'].wait_stable(b1.version, timeout=60)
    assert _eventually(lambda: guests['A'].group_state(group)['complete'])
    # Q's group of that id has C alone: never completed by P's members.
    assert guests['C'].group_state(group) == {
        'group': group, 'members': 2, 'stable': 1, 'complete': False}
    p_group = host.agent.client.call('group_state', group=group,
                                     project=host.projects['A'])
    assert {v['image'] for v in p_group['versions'].values()} == {
        host.images['A'], host.images['B']}
    # A group of P that C is not in: the same 404 as no group at all.
    only_p = 'only-p-%s' % uuid.uuid4().hex[:6]
    guests['A'].checkpoint(group=only_p, members=1, sync=False)
    for name in ('C', 'B'):
        with pytest.raises(guest_exception.CheckpointError) as hidden:
            guests[name].group_state(only_p)
        assert hidden.value.status == 404


def test_forged_vendordata_requests_get_no_token(cloud, tmp_path):
    stack, host, service, conf, users = cloud
    body = {'instance-id': host.instances['A'],
            'project-id': host.projects['A']}

    def post(headers):
        reply = requests.post(service.url, json=body, headers=headers,
                              timeout=30)
        assert not TOKEN.search(reply.text)
        return reply.status_code
    # No token; a made-up one; the identity headers keystonemiddleware
    # sets, sent by the client itself (the middleware drops them).
    assert post({}) == 401
    assert post({'X-Auth-Token': 'gAAAAAforged'}) == 401
    assert post({'X-Identity-Status': 'Confirmed', 'X-Roles': 'service',
                 'X-User-Name': users['nova']}) == 401
    # A real token of a user without the service role (any tenant).
    demo = stack.session('demo').get_token()
    assert post({'X-Auth-Token': demo}) == 403
    assert post({'X-Auth-Token': demo, 'X-Roles': 'service'}) == 403
    # A real token of a service account that is not Nova's: the blobcr
    # user has the service role in the service project, as every
    # service's user has (issue 54, finding 6).
    from keystoneauth1.identity import v3
    from keystoneauth1 import session
    blobcr = session.Session(auth=v3.Password(
        auth_url=stack.auth_url, username=users['blobcr'],
        password=PASSWORD, project_name='service',
        user_domain_name='Default',
        project_domain_name='Default')).get_token()
    assert post({'X-Auth-Token': blobcr}) == 403
    # Nova's own client with a wrong password gets no token either
    # (failure_fatal: the error surfaces instead of empty vendordata).
    bad = nova_conf(str(tmp_path / 'nova-bad.conf'), stack, service.url,
                    password='wrong', user=users['nova'])
    out = run_nova(bad, [{'uuid': host.instances['A'],
                          'project': host.projects['A'],
                          'hostname': 'vm-a'}])
    assert 'Unauthorized' in out['vendordata'][0]['error'], out
    # The service's own answer to bad input from a valid caller.
    nova_token = {'X-Auth-Token': session.Session(auth=v3.Password(
        auth_url=stack.auth_url, username=users['nova'], password=PASSWORD,
        project_name='service', user_domain_name='Default',
        project_domain_name='Default')).get_token()}
    for bad_body, status in (({'project-id': 'p'}, 400),
                             ({'instance-id': 'x' * 65,
                               'project-id': 'p'}, 400),
                             ({'instance-id': 'vm'}, 400)):
        reply = requests.post(service.url, json=bad_body,
                              headers=nova_token, timeout=30)
        assert reply.status_code == status, reply.text
        assert 'token' not in reply.json()
    reply = requests.post(service.url, json=body, headers=nova_token,
                          timeout=30)
    assert reply.status_code == 200
    assert auth.Authenticator(SECRET, host=HOST).instance({
        'X-Instance-ID': host.instances['A'],
        'X-BlobCR-Token': reply.json()['token']}) == host.instances['A']


def test_metadata_proxy_route_signed_as_nova_checks_it(cloud, tmp_path):
    """The second route: no token, the X-Instance-ID-Signature a
    metadata proxy adds. What Nova's metadata API accepts as signed, the
    agent accepts, and what Nova refuses, the agent refuses.
    """
    stack, host, service, conf, users = cloud
    a, b = host.instances['A'], host.instances['B']
    cases = [(a, auth.sign(META, a), True),        # as the proxy signs
             (a, auth.sign(META, b), False),       # another's signature
             (a, auth.sign('guessed', a), False),  # another secret
             (a, auth.sign(SECRET, a), False)]     # the token is no signature
    out = run_nova(conf, signatures=[(i, s) for i, s, _ in cases])
    assert out['signatures'] == [ok for _, _, ok in cases]
    before = host.committed('A')
    versions = []
    for instance, signature, ok in cases:
        guest = guest_client.CheckpointClient(
            host.url, instance, signature=signature, retries=0)
        if ok:
            versions.append(guest.checkpoint(sync=False).version)
            assert guest.wait_stable(versions[-1], timeout=60) == 'stable'
        else:
            with pytest.raises(guest_exception.CheckpointError) as refused:
                guest.checkpoint(sync=False)
            assert refused.value.status == 401
    assert host.committed('A') == before + versions
