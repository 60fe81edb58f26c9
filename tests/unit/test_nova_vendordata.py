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

"""blobcr-vendordata behind its Keystone check: answers and refusals of
the application itself, over HTTP on 127.0.0.1.

Here the identity headers keystonemiddleware sets after validating a
token are sent by the test; tests/integration/test_nova_vendordata.py
puts the real auth_token middleware and a real Keystone in front (and
shows that a client cannot send those headers itself). Nova's API, which
says where each instance runs, is tests/fake_nova_api.py's stand-in,
asked over HTTP through keystoneauth as the service asks the real one.
"""

import http.client
import http.server
import json
import os
import re
import subprocess
import sys
import threading
import time

import pytest

from blobcr_common import auth
from blobcr_guest import config as guest_config
from blobcr_lab import agents
from blobcr_nova import vendordata
from tests import fake_nova_api

TOP = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
SECRET = 'cloud-wide-token-secret'
INSTANCE = '6f1c2a9e-0b7d-4d55-9a43-2c1d0e6f7a88'
OTHER = 'a4d3a0c2-77b4-4c0e-8d0a-5f3c9b1e2d10'
PROJECT = '0c8a7e1d2f3b4a5c9d8e7f6a5b4c3d2e'
HOST = 'compute-1'
ENDPOINT = 'http://169.254.169.254'
LIFETIME = 600
# What keystonemiddleware passes on for Nova's service user.
NOVA = {'X-Identity-Status': 'Confirmed', 'X-Roles': 'service,member',
        'X-User-Name': 'nova', 'X-User-Id': 'f00dfeed',
        'X-User-Domain-Name': 'Default', 'X-User-Domain-Id': 'default',
        'X-Project-Name': 'service'}


def nova_body(instance=INSTANCE, project=PROJECT):
    # The keys nova.api.metadata.vendordata_dynamic sends.
    return {'project-id': project, 'instance-id': instance,
            'image-id': 'c0ffee00-0000-4000-8000-000000000001',
            'user-data': None, 'hostname': 'vm-1',
            'metadata': {'role': 'rank-0'}, 'boot-roles': 'member,reader'}


@pytest.fixture(scope='module')
def nova_api():
    """Nova's API: INSTANCE and OTHER of PROJECT on HOST."""
    api = fake_nova_api.FakeAPI()
    for instance in (INSTANCE, OTHER):
        api.server(instance, HOST, project=PROJECT)
    yield api
    api.stop()


def application(nova_api, tmp_path, **options):
    """The service's application from a configuration file, as the
    command loads it (Keystone's middleware left out), asking
    ``nova_api``.
    """
    sections = dict(nova_api.conf(), vendordata=dict(
        {'token_secret': SECRET, 'endpoint_url': ENDPOINT,
         'max_body': '4096', 'token_lifetime': str(LIFETIME)}, **options))
    del sections['cinder']
    path = str(tmp_path / 'nova-vendordata.conf')
    agents.write_conf(path, sections)
    return vendordata.application(
        vendordata.load_conf(['--config-file', path]))


@pytest.fixture(scope='module')
def server(nova_api, tmp_path_factory):
    srv = vendordata.serve(
        application(nova_api, tmp_path_factory.mktemp('vendordata')),
        '127.0.0.1', 0)
    yield srv
    srv.shutdown()
    srv.server_close()


def agent_accepts(instance, token, host=HOST, secret=SECRET, now=None):
    """Whether the agent of ``host`` (``[proxy] host_secret`` =
    ``secret``) takes ``token`` for ``instance``.
    """
    checker = auth.Authenticator(host_secret=secret, host=host,
                                 clock=lambda: now or time.time())
    return checker.instance({'X-Instance-ID': instance,
                             'X-BlobCR-Token': token}) == instance


def request(server, method='POST', path='/', body=None, headers=None,
            raw=None):
    conn = http.client.HTTPConnection('127.0.0.1', server.server_port,
                                      timeout=10)
    try:
        if raw is None and body is not None:
            raw = json.dumps(body).encode()
        conn.request(method, path, body=raw,
                     headers=dict(NOVA if headers is None else headers,
                                  **{'Content-Type': 'application/json'}))
        response = conn.getresponse()
        return (response.status, json.loads(response.read()),
                response.getheader('Cache-Control'))
    finally:
        conn.close()


def test_answer_is_what_the_agent_checks_and_the_guest_reads(server):
    before = int(time.time())
    status, answer, cache = request(server, body=nova_body())
    assert status == 200, answer
    assert cache == 'no-store'
    token = answer.pop('token')
    assert answer == {'endpoint': ENDPOINT, 'instance_id': INSTANCE,
                      'project_id': PROJECT}
    # The agent of the instance's host, with [proxy] host_secret =
    # token_secret, takes it for this instance and no other.
    assert agent_accepts(INSTANCE, token)
    assert not agent_accepts(OTHER, token)
    # Another secret (an agent not configured with it): refused.
    assert not agent_accepts(INSTANCE, token, secret='other')
    # It says until when it is good, and no more than the lifetime.
    expires = int(token.split('.')[1])
    assert before + LIFETIME <= expires <= int(time.time()) + LIFETIME
    # The host's name is nowhere in it (Nova hides it from users).
    assert HOST not in token


def test_the_token_is_bound_to_the_instances_host_and_expires(server):
    """Finding 6 of issue 54: a token was HMAC(instance id), good on
    every host for ever. Now the host Nova runs the instance on, and an
    expiry, are in what is signed.
    """
    _, answer, _ = request(server, body=nova_body())
    token = answer['token']
    expires = int(token.split('.')[1])
    assert agent_accepts(INSTANCE, token, host=HOST)
    # Another host's agent, with the same secret, refuses it.
    assert not agent_accepts(INSTANCE, token, host='compute-2')
    # Once it expired, its own host refuses it too.
    assert agent_accepts(INSTANCE, token, now=expires - 1)
    assert not agent_accepts(INSTANCE, token, now=expires)
    assert not agent_accepts(INSTANCE, token, now=expires + 3600)
    # A forged expiry breaks the signature.
    later = '%s.%d.%s' % (token.split('.')[0], expires + 86400,
                          token.split('.')[2])
    assert not agent_accepts(INSTANCE, later)
    # The token of the old form, HMAC(instance id), is no token now.
    assert not agent_accepts(INSTANCE, auth.sign(SECRET, INSTANCE))


def test_the_host_is_novas_word_asked_at_each_request(server, nova_api):
    _, a, _ = request(server, body=nova_body())
    # The instance moved (a migration): the next answer is for the new
    # host, and the host's name never comes from the request.
    nova_api.server(INSTANCE, 'compute-2', project=PROJECT)
    try:
        body = nova_body()
        body['host'] = HOST
        _, b, _ = request(server, body=body)
    finally:
        nova_api.server(INSTANCE, HOST, project=PROJECT)
    assert agent_accepts(INSTANCE, a['token'], host=HOST)
    assert not agent_accepts(INSTANCE, b['token'], host=HOST)
    assert agent_accepts(INSTANCE, b['token'], host='compute-2')


@pytest.mark.parametrize('case', ['unknown to Nova', 'no host',
                                  'another project', 'Nova down'])
def test_no_token_unless_nova_confirms_the_instance(nova_api, tmp_path,
                                                    case):
    instance = INSTANCE
    if case == 'unknown to Nova':
        instance, status = '0e1d2c3b-4a59-4687-9a0b-1c2d3e4f5a6b', 404
    elif case == 'no host':
        instance, status = '1f2e3d4c-5b6a-4798-8a0b-2c3d4e5f6a7b', 409
        nova_api.server(instance, None, project=PROJECT)
    elif case == 'another project':
        instance, status = '2a3b4c5d-6e7f-4a8b-9c0d-1e2f3a4b5c6d', 409
        nova_api.server(instance, HOST, project='another')
    app = application(nova_api, tmp_path)
    if case == 'Nova down':
        status = 503
        app = application(_Down(), tmp_path)
    srv = vendordata.serve(app, '127.0.0.1', 0)
    try:
        got, answer, _ = request(srv, body=nova_body(instance=instance))
    finally:
        srv.shutdown()
        srv.server_close()
    assert got == status, answer
    assert set(answer) == {'error'}


class _Down(object):
    """A Nova API nobody answers at."""

    def conf(self):
        return {'nova': {'auth_type': 'none', 'timeout': '2',
                         'endpoint_override': 'http://127.0.0.1:9/v2.1'},
                'cinder': {}}


def test_a_service_account_that_is_not_novas_gets_no_token(server):
    """Finding 6 of issue 54: ``allowed_roles`` alone (``service``) let
    every service account of the cloud (Cinder's, Neutron's, Glance's,
    a deployment tool's) fetch any instance's token. Nova calls with its
    own ``[vendordata_dynamic_auth]`` user: that user (by default
    ``nova`` of the Default domain) with that role, and nobody else.
    """
    def ask(**changes):
        headers = dict(NOVA, **changes)
        status, answer, _ = request(server, body=nova_body(),
                                    headers=headers)
        return status, answer
    assert ask()[0] == 200
    for changes in ({'X-User-Name': 'cinder', 'X-User-Id': 'c1nder',
                     'X-Roles': 'service'},
                    {'X-User-Name': 'neutron', 'X-User-Id': 'n3utron',
                     'X-Roles': 'service,admin'},
                    # A user called nova in a domain its admin runs.
                    {'X-User-Domain-Name': 'tenant-domain',
                     'X-User-Domain-Id': 'd0ma1n'},
                    # Nova's user without the role.
                    {'X-Roles': 'member,reader'}):
        status, answer = ask(**changes)
        assert status == 403, (changes, answer)
        assert set(answer) == {'error'}


def test_the_allowed_user_by_id_or_name(nova_api, tmp_path):
    app = application(nova_api, tmp_path,
                      allowed_users='f00dfeed,nova-api',
                      allowed_user_domain='service-domain')
    srv = vendordata.serve(app, '127.0.0.1', 0)
    try:
        def status(**changes):
            return request(srv, body=nova_body(),
                           headers=dict(NOVA, **changes))[0]
        # By id, whatever its name and domain.
        assert status(**{'X-User-Name': 'renamed'}) == 200
        # By name, in the domain configured only.
        other = {'X-User-Id': 'other-id', 'X-User-Name': 'nova-api'}
        assert status(**other) == 403
        assert status(**dict(other, **{
            'X-User-Domain-Name': 'service-domain'})) == 200
        assert status(**dict(other, **{
            'X-User-Domain-Name': 'elsewhere',
            'X-User-Domain-Id': 'service-domain'})) == 200
        assert status(**{'X-User-Id': 'other-id'}) == 403
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.mark.parametrize('case,status', [
    ('unauthenticated', 401),
    ('identity invalid', 401),
    ('member only', 403),
    ('no roles', 403),
    ('another user', 403),
    ('no user', 403),
    ('GET', 405),
    ('other path', 404),
    ('no length', 411),
    ('chunked', 411),
    ('too large', 413),
    ('not JSON', 400),
    ('not an object', 400),
    ('no instance', 400),
    ('instance not a string', 400),
    ('instance too long', 400),
    ('instance control characters', 400),
    ('instance not a UUID', 400),
    ('no project', 400),
    ('project with a slash', 400),
    ('project too long', 400),
])
def test_refusals_are_clear_json_errors(server, case, status):
    headers, method, path, body, raw = dict(NOVA), 'POST', '/', \
        nova_body(), None
    if case == 'unauthenticated':
        headers = {}
    elif case == 'identity invalid':
        headers['X-Identity-Status'] = 'Invalid'
    elif case == 'member only':
        headers['X-Roles'] = 'member,reader'
    elif case == 'no roles':
        del headers['X-Roles']
    elif case == 'another user':
        headers.update({'X-User-Name': 'glance', 'X-User-Id': 'g'})
    elif case == 'no user':
        for name in ('X-User-Name', 'X-User-Id'):
            del headers[name]
    elif case == 'GET':
        method, body = 'GET', None
    elif case == 'other path':
        path = '/v1/other'
    elif case == 'too large':
        body['metadata'] = {'x': 'y' * 5000}
    elif case == 'not JSON':
        raw = b'instance-id=1'
    elif case == 'not an object':
        raw = b'["instance-id"]'
    elif case == 'no instance':
        del body['instance-id']
    elif case == 'instance not a string':
        body['instance-id'] = 12
    elif case == 'instance too long':
        body['instance-id'] = 'i' * 65
    elif case == 'instance control characters':
        body['instance-id'] = 'vm\n1'
    elif case == 'instance not a UUID':
        body['instance-id'] = 'vm-1'
    elif case == 'no project':
        del body['project-id']
    elif case == 'project with a slash':
        body['project-id'] = '../admin'
    elif case == 'project too long':
        body['project-id'] = 'p' * 65
    if case in ('no length', 'chunked'):
        got = _raw_request(server, case)
        assert got[0] == status and 'Length' in got[1]['error'], got
        return
    got, answer, _ = request(server, method, path, body, headers, raw)
    assert got == status, answer
    assert set(answer) == {'error'} and answer['error']
    assert not re.search(r'[0-9a-f]{64}', json.dumps(answer))


def _raw_request(server, case):
    import socket
    with socket.create_connection(('127.0.0.1', server.server_port),
                                  timeout=10) as s:
        head = ('POST / HTTP/1.0\r\nX-Identity-Status: Confirmed\r\n'
                'X-Roles: service\r\nX-User-Name: nova\r\n'
                'X-User-Domain-Name: Default\r\n')
        if case == 'chunked':
            head += 'Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n'
        else:
            head += '\r\n'
        s.sendall(head.encode())
        data = b''
        while True:
            piece = s.recv(65536)
            if not piece:
                break
            data += piece
    status_line, _, rest = data.partition(b'\r\n')
    body = rest.split(b'\r\n\r\n', 1)[1]
    return int(status_line.split()[1]), json.loads(body)


def test_guest_reads_its_credentials_from_the_answer(server, tmp_path):
    """The guest's discovery (blobcr_guest.config) takes endpoint,
    instance id and token from this answer as Nova places it in
    vendor_data2.json (under the target's name, ``blobcr``).
    """
    _, answer, _ = request(server, body=nova_body())
    # vendor_data2.json is {target name: answer, ...}.
    metadata = serve_vendor_data2({'static': {},
                                   guest_config.VENDORDATA_KEY: answer})
    try:
        url = 'http://127.0.0.1:%d/openstack/latest/vendor_data2.json' % \
            metadata.server_port
        found = guest_config.discover(
            config_path=str(tmp_path / 'none.json'),
            environ={'BLOBCR_METADATA_URL': url})
    finally:
        metadata.shutdown()
        metadata.server_close()
    assert (found.endpoint, found.instance_id, found.token) == (
        ENDPOINT, INSTANCE, answer['token'])
    assert found.sources['token'] == url
    assert metadata.asked == ['/openstack/latest/vendor_data2.json']


def serve_vendor_data2(document):
    """A metadata service on 127.0.0.1 serving ``document`` as
    /openstack/latest/vendor_data2.json, as Nova's metadata API serves
    it to the guest (404 elsewhere); ``asked``: the paths it was asked
    for, in order. ``document`` may be changed while it serves.
    """
    class Metadata(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            server.asked.append(self.path)
            ok = self.path == '/openstack/latest/vendor_data2.json'
            payload = json.dumps(document if ok else {}).encode()
            self.send_response(200 if ok else 404)
            self.send_header('Content-Length', str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):
            pass
    server = http.server.HTTPServer(('127.0.0.1', 0), Metadata)
    server.asked = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_app_needs_a_secret_a_role_a_user_and_nova():
    nova = object()
    with pytest.raises(ValueError, match='token_secret'):
        vendordata.VendordataApp('', ENDPOINT, nova=nova)
    with pytest.raises(ValueError, match='allowed_roles'):
        vendordata.VendordataApp(SECRET, ENDPOINT, [' '], nova=nova)
    with pytest.raises(ValueError, match='allowed_users'):
        vendordata.VendordataApp(SECRET, ENDPOINT, allowed_users=[],
                                 nova=nova)
    with pytest.raises(ValueError, match='Nova'):
        vendordata.VendordataApp(SECRET, ENDPOINT)


def test_command_refuses_to_start_without_a_secret(tmp_path):
    conffile = tmp_path / 'vendordata.conf'
    conffile.write_text('[vendordata]\nport = 0\n')
    proc = subprocess.run(
        [sys.executable, '-m', 'blobcr_nova.vendordata', '--config-file',
         str(conffile)], capture_output=True, text=True, timeout=60,
        cwd=TOP)
    assert proc.returncode == 2, proc.stderr
    assert 'token_secret is required' in proc.stderr
