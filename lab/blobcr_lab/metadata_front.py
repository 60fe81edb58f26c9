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

"""What answers 169.254.169.254 on a compute host of the lab: Nova's
metadata (vendor_data2.json alone) and ``/v1/`` relayed to the host's
agent, as doc/source/nova.rst describes it; and the vendordata answer
blobcr-vendordata's application gives Nova.
"""

import http.client
import http.server
import io
import json
import threading

from blobcr_common import auth
from blobcr_lab import guest_vm
from blobcr_nova import authority
from blobcr_nova import vendordata


class MetadataFront(object):
    """What answers 169.254.169.254 on the compute host, as nova.rst
    describes it: Nova's metadata (here vendor_data2.json alone, with the
    answer of blobcr-vendordata's application) and ``/v1/`` relayed to
    the host's agent.

    ``sign``: ``(secret, instance)`` to relay as Neutron's metadata proxy
    does: whatever instance headers the guest sent are replaced by
    ``X-Instance-ID`` (the instance the relay knows at that address) and
    its ``X-Instance-ID-Signature``.
    """

    SIGNED = ('x-instance-id', 'x-instance-id-signature', 'x-tenant-id')

    def __init__(self, document, agent_port, sign=None):
        front = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _serve(self):
                if self.path == '/openstack/latest/vendor_data2.json':
                    return self._reply(200, json.dumps(document).encode())
                if not self.path.startswith('/v1/'):
                    return self._reply(404, b'{}')
                length = int(self.headers.get('Content-Length') or 0)
                body = self.rfile.read(length) if length else None
                conn = http.client.HTTPConnection('127.0.0.1', agent_port,
                                                  timeout=120)
                headers = {k: v for k, v in self.headers.items()
                           if k.lower().startswith('x-') or
                           k.lower() == 'content-type'}
                if sign:
                    headers = {k: v for k, v in headers.items()
                               if k.lower() not in front.SIGNED}
                    headers['X-Instance-ID'] = sign[1]
                    headers['X-Instance-ID-Signature'] = auth.sign(*sign)
                try:
                    conn.request(self.command, self.path, body=body,
                                 headers=headers)
                    answer = conn.getresponse()
                    front.relayed += 1
                    self._reply(answer.status, answer.read())
                finally:
                    conn.close()

            def _reply(self, status, payload):
                self.send_response(status)
                self.send_header('Content-Type', 'application/json')
                self.send_header('Content-Length', str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = _serve

            def log_message(self, *args):
                pass
        self.relayed = 0
        self.server = http.server.ThreadingHTTPServer(('127.0.0.1', 0),
                                                      Handler)
        self.port = self.server.server_port
        threading.Thread(target=self.server.serve_forever,
                         daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class _Nova(object):
    """Nova's API as blobcr-vendordata asks it: ``instance`` of
    ``project`` runs on ``host``.
    """

    def __init__(self, instance, project, host):
        self.record = {'id': instance, 'tenant_id': project,
                       'OS-EXT-SRV-ATTR:host': host,
                       'OS-EXT-STS:vm_state': 'active'}

    def server(self, instance):
        if instance != self.record['id']:
            return None
        return authority.Server(self.record)


def vendordata_answer(instance, project, secret, host):
    """blobcr-vendordata's application asked as Nova asks it, by Nova's
    user, for ``instance`` (of ``project``) running on ``host`` (the
    ``[agent] host`` of its agent): its Keystone check is tested in
    tests/integration/test_nova_vendordata.py, its question to Nova's API
    in tests/unit/test_nova_vendordata.py.
    """
    app = vendordata.VendordataApp(secret, 'http://%s' % guest_vm.METADATA_IP,
                                   nova=_Nova(instance, project, host))
    body = json.dumps({'instance-id': instance,
                       'project-id': project}).encode()
    got = []
    payload = app({'REQUEST_METHOD': 'POST', 'PATH_INFO': '/',
                   'CONTENT_LENGTH': str(len(body)),
                   'wsgi.input': io.BytesIO(body),
                   'HTTP_X_IDENTITY_STATUS': 'Confirmed',
                   'HTTP_X_ROLES': 'service', 'HTTP_X_USER_NAME': 'nova',
                   'HTTP_X_USER_DOMAIN_NAME': 'Default'},
                  lambda status, headers: got.append(status))
    if got != ['200 OK']:
        raise RuntimeError('blobcr-vendordata answered %s' % got)
    return json.loads(b''.join(payload))
