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
shows that a client cannot send those headers itself).
"""

import http.client
import http.server
import json
import os
import subprocess
import sys
import threading

import pytest

from blobcr_common import auth
from blobcr_guest import config as guest_config
from blobcr_nova import vendordata

TOP = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
SECRET = 'cloud-wide-token-secret'
INSTANCE = '6f1c2a9e-0b7d-4d55-9a43-2c1d0e6f7a88'
PROJECT = '0c8a7e1d2f3b4a5c9d8e7f6a5b4c3d2e'
ENDPOINT = 'http://169.254.169.254'
# What keystonemiddleware passes on for Nova's service user.
NOVA = {'X-Identity-Status': 'Confirmed', 'X-Roles': 'service,member',
        'X-User-Name': 'nova'}


def nova_body(instance=INSTANCE, project=PROJECT):
    # The keys nova.api.metadata.vendordata_dynamic sends.
    return {'project-id': project, 'instance-id': instance,
            'image-id': 'c0ffee00-0000-4000-8000-000000000001',
            'user-data': None, 'hostname': 'vm-1',
            'metadata': {'role': 'rank-0'}, 'boot-roles': 'member,reader'}


@pytest.fixture(scope='module')
def server():
    app = vendordata.VendordataApp(SECRET, ENDPOINT, ['service'],
                                   max_body=4096)
    srv = vendordata.serve(app, '127.0.0.1', 0)
    yield srv
    srv.shutdown()
    srv.server_close()


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
    status, answer, cache = request(server, body=nova_body())
    assert status == 200, answer
    assert cache == 'no-store'
    assert answer == {'endpoint': ENDPOINT, 'instance_id': INSTANCE,
                      'project_id': PROJECT,
                      'token': auth.sign(SECRET, INSTANCE)}
    # The agent's endpoint, with [proxy] host_secret = token_secret,
    # takes it for this instance and no other.
    agent_auth = auth.Authenticator(host_secret=SECRET)
    assert agent_auth.instance({'X-Instance-ID': INSTANCE,
                                'X-BlobCR-Token': answer['token']}) == \
        INSTANCE
    other = 'a4d3a0c2-77b4-4c0e-8d0a-5f3c9b1e2d10'
    assert agent_auth.instance({'X-Instance-ID': other,
                                'X-BlobCR-Token': answer['token']}) is None
    # Another secret (an agent not configured with it): refused.
    assert auth.Authenticator(host_secret='other').instance(
        {'X-Instance-ID': INSTANCE, 'X-BlobCR-Token': answer['token']}) \
        is None


def test_token_depends_on_the_instance_only_not_on_the_rest(server):
    _, a, _ = request(server, body=nova_body())
    body = nova_body()
    body.update({'hostname': 'renamed', 'metadata': {}, 'user-data': 'eA=='})
    _, b, _ = request(server, body=body)
    _, c, _ = request(server, body=nova_body(
        instance='a4d3a0c2-77b4-4c0e-8d0a-5f3c9b1e2d10'))
    assert a['token'] == b['token'] != c['token']


@pytest.mark.parametrize('case,status', [
    ('unauthenticated', 401),
    ('identity invalid', 401),
    ('member only', 403),
    ('no roles', 403),
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
    assert auth.sign(SECRET, INSTANCE) not in json.dumps(answer)


def _raw_request(server, case):
    import socket
    with socket.create_connection(('127.0.0.1', server.server_port),
                                  timeout=10) as s:
        head = ('POST / HTTP/1.0\r\nX-Identity-Status: Confirmed\r\n'
                'X-Roles: service\r\n')
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
        ENDPOINT, INSTANCE, auth.sign(SECRET, INSTANCE))
    assert found.sources['token'] == url


def serve_vendor_data2(document):
    """A metadata service on 127.0.0.1 serving ``document`` as
    /openstack/latest/vendor_data2.json, as Nova's metadata API serves
    it to the guest (404 elsewhere).
    """
    class Metadata(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            ok = self.path == '/openstack/latest/vendor_data2.json'
            payload = json.dumps(document if ok else {}).encode()
            self.send_response(200 if ok else 404)
            self.send_header('Content-Length', str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):
            pass
    server = http.server.HTTPServer(('127.0.0.1', 0), Metadata)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_app_needs_a_secret_and_a_role():
    with pytest.raises(ValueError, match='token_secret'):
        vendordata.VendordataApp('', ENDPOINT)
    with pytest.raises(ValueError, match='allowed_roles'):
        vendordata.VendordataApp(SECRET, ENDPOINT, [' '])


def test_command_refuses_to_start_without_a_secret(tmp_path):
    conffile = tmp_path / 'vendordata.conf'
    conffile.write_text('[vendordata]\nport = 0\n')
    proc = subprocess.run(
        [sys.executable, '-m', 'blobcr_nova.vendordata', '--config-file',
         str(conffile)], capture_output=True, text=True, timeout=60,
        cwd=TOP)
    assert proc.returncode == 2, proc.stderr
    assert 'token_secret is required' in proc.stderr
