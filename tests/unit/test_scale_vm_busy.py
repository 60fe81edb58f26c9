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

"""A scale rank asks again while its agent answers busy (503), as
blobcr-guest's client does, and counts it. The endpoint here is a
stand-in on loopback (the agent's own 503 is the proxy's, tested with
the agent); what is under test is the rank's side.
"""

import http.server
import json
import threading

import pytest

from blobcr_bench import scale_vm


class _Busy(http.server.BaseHTTPRequestHandler):
    answers = []

    def do_POST(self):
        status = self.answers.pop(0)
        if status is None:
            return          # closed unanswered, as the proxy over its caps
        body = json.dumps({'error': 'busy'} if status == 503 else
                          {'version': 3}).encode()
        self.send_response(status)
        if status == 503:
            self.send_header('Retry-After', '0.1')
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def endpoint():
    server = http.server.HTTPServer(('127.0.0.1', 0), _Busy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield scale_vm.Endpoint('http://127.0.0.1:%d' % server.server_port,
                            'vm-1', 'secret')
    server.shutdown()


def test_a_busy_agent_is_asked_again_and_counted(endpoint):
    _Busy.answers = [503, 503, 200]
    busy = []
    assert endpoint.request('POST', '/v1/checkpoint', {}, busy=busy) == \
        {'version': 3}
    assert busy == [0.1, 0.1]


def test_a_connection_closed_unanswered_is_asked_again(endpoint):
    """The proxy over its connection caps answers 503 and closes without
    reading the body; a rank still sending it sees the connection go
    (EPIPE, a reset, or no answer) instead of the 503.
    """
    _Busy.answers = [None, 503, None, 200]
    busy = []
    assert endpoint.request('POST', '/v1/checkpoint', {}, busy=busy) == \
        {'version': 3}
    assert busy == [scale_vm.REFUSED_RETRY, 0.1, scale_vm.REFUSED_RETRY]


def test_a_refusal_is_not_asked_again(endpoint):
    _Busy.answers = [403, 200]
    with pytest.raises(RuntimeError, match='403'):
        endpoint.request('POST', '/v1/checkpoint', {})
    assert _Busy.answers == [200]
