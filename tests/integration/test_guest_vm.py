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

"""A real guest under libvirt/TCG: disk, network, qemu-ga, suspend.

The guest (tools/build-guest.sh, blobcr_lab/guest_vm.py) mounts its ext4 data
disk, writes a file, POSTs to the metadata address through the slirp
guestfwd to an HTTP server of this test on 127.0.0.1, checks that it
cannot reach the host otherwise (restrict=on), then obeys commands the
server hands out. Meanwhile the test freezes its filesystems through
qemu-ga (a write in the guest must wait for the thaw), suspends and
resumes it. After the guest powered off, its files are read from the
disk image with debugfs.
"""

import http.server
import json
import subprocess
import threading
import time

import libvirt

from blobcr_lab import guest_vm
from tests.lab_fixtures import guest_image  # noqa: F401 (fixture)
from tests.lab_fixtures import session_libvirt  # noqa: F401 (fixture)

SCENARIO = """set -e
mount -t ext4 /dev/vda /mnt
echo 'written by the guest' > /mnt/hello.txt
sync
python3 /root/guest.py
umount /mnt
echo SCENARIO-DONE
"""

# Runs in the guest: Debian's python3.11 with a pruned standard library.
GUEST_PY = r"""
import json
import os
import socket
import sys
import time
import urllib.request

URL = 'http://%s' % os.environ.get('METADATA_IP', '169.254.169.254')
with open('/etc/test.json') as f:
    conf = json.load(f)


def call(path, body=None):
    req = urllib.request.Request(URL + path, data=body,
                                 method='GET' if body is None else 'POST')
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.read().decode()


# A package directory from the host, in Debian's default sys.path.
import guestpkg
print('GUESTPKG', guestpkg.VALUE)
reply = call('/ping', json.dumps({'from': 'guest'}).encode())
print('PING-REPLY', reply)
# restrict=on: slirp's gateway address must not lead to the host.
s = socket.socket()
s.settimeout(2)
try:
    s.connect((conf['gateway'], conf['port']))
    print('GATEWAY-REACHABLE')
except OSError as e:
    print('GATEWAY-ISOLATED', type(e).__name__)
s.close()
sys.stdout.flush()
while True:
    cmd = call('/next')
    if cmd == 'write':
        # Blocks while the filesystem is frozen.
        with open('/mnt/during-freeze.txt', 'w') as f:
            f.write('written after the thaw\n')
            f.flush()
            os.fsync(f.fileno())
        call('/wrote', b'')
    elif cmd == 'done':
        break
    else:
        time.sleep(0.2)
"""


class MetadataServer(object):
    """The host end of the guestfwd: records requests, hands out cmds."""

    def __init__(self):
        self.lock = threading.Lock()
        self.requests = []
        self.command = 'wait'
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _reply(self, body):
                data = body.encode()
                self.send_response(200)
                self.send_header('Content-Length', str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                with server.lock:
                    server.requests.append(('GET', self.path, b''))
                    cmd = server.command
                self._reply(cmd if self.path == '/next' else '')

            def do_POST(self):
                length = int(self.headers.get('Content-Length', 0))
                body = self.rfile.read(length)
                with server.lock:
                    server.requests.append(('POST', self.path, body))
                if self.path == '/ping':
                    self._reply(json.dumps({'pong': json.loads(body)}))
                else:
                    self._reply('ok')

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(('127.0.0.1', 0),
                                                     Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever,
                                       daemon=True)

    def count(self, method, path):
        with self.lock:
            return sum(1 for m, p, _b in self.requests
                       if (m, p) == (method, path))

    def wait(self, method, path, at_least=1, timeout=120):
        deadline = time.monotonic() + timeout
        while self.count(method, path) < at_least:
            assert time.monotonic() < deadline, (
                'no %s %s from the guest after %ss' % (method, path,
                                                       timeout))
            time.sleep(0.05)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def _debugfs_cat(image, path):
    return subprocess.run(['debugfs', '-R', 'cat %s' % path, image],
                          check=True, capture_output=True, timeout=60,
                          text=True).stdout


def test_guest_disk_network_freeze_suspend(guest_image,  # noqa: F811
                                           session_libvirt,  # noqa: F811
                                           tmp_path):
    disk = str(tmp_path / 'disk.raw')
    with open(disk, 'wb') as f:
        f.truncate(64 << 20)
    subprocess.run(['mkfs.ext4', '-q', '-F', disk], check=True, timeout=60)
    pkg = tmp_path / 'guestpkg'
    pkg.mkdir()
    (pkg / '__init__.py').write_text('VALUE = 42\n')

    with MetadataServer() as server:
        files = {
            '/scenario.sh': SCENARIO,
            '/root/guest.py': GUEST_PY,
            '/etc/test.json': json.dumps({'gateway': guest_vm.GATEWAY,
                                          'port': server.port}),
            # A host directory, copied recursively.
            '/usr/lib/python3/dist-packages/guestpkg': pkg,
        }
        vm = guest_vm.GuestVM('blobcr-e2e', disk, session_libvirt.uri,
                              base_dir=guest_image, files=files,
                              metadata_port=server.port,
                              console_log=str(tmp_path / 'console.log'))
        t0 = time.monotonic()
        with vm:
            try:
                vm.wait_for(guest_vm.READY_MARKER, timeout=180)
                boot = time.monotonic() - t0
                server.wait('POST', '/ping')
                vm.wait_for('GATEWAY-', timeout=60)
                server.wait('GET', '/next')
                guest_up = time.monotonic() - t0
                dom = vm.domain

                # Freeze through qemu-ga: a write must wait for the thaw.
                t = time.monotonic()
                assert dom.fsFreeze() == 1  # /mnt, the ext4 data disk
                freeze_ms = (time.monotonic() - t) * 1000
                assert vm.agent('guest-fsfreeze-status') == 'frozen'
                server.command = 'write'
                time.sleep(2)
                assert server.count('POST', '/wrote') == 0, (
                    'the guest wrote to a frozen filesystem')
                t = time.monotonic()
                assert dom.fsThaw() == 1
                thaw_ms = (time.monotonic() - t) * 1000
                server.command = 'wait'
                server.wait('POST', '/wrote', timeout=60)
                assert vm.agent('guest-fsfreeze-status') == 'thawed'

                # Suspended, the guest polls no more; resumed, it does.
                dom.suspend()
                assert dom.state()[0] == libvirt.VIR_DOMAIN_PAUSED
                time.sleep(0.5)  # a request already sent may still land
                polls = server.count('GET', '/next')
                time.sleep(1.5)
                assert server.count('GET', '/next') == polls
                dom.resume()
                assert dom.state()[0] == libvirt.VIR_DOMAIN_RUNNING
                server.wait('GET', '/next', at_least=polls + 1, timeout=60)

                server.command = 'done'
                status = vm.wait_exit(timeout=120)
                total = time.monotonic() - t0
            finally:
                console = vm.console()
                print('\n--- guest console ---\n%s--- end ---' % console)

    assert status == 0, console
    assert 'SCENARIO-DONE' in console
    assert 'GATEWAY-ISOLATED' in console
    assert 'GUESTPKG 42' in console
    ping = [b for m, p, b in server.requests if (m, p) == ('POST', '/ping')]
    assert [json.loads(b) for b in ping] == [{'from': 'guest'}]
    assert 'PING-REPLY {"pong": {"from": "guest"}}' in console
    # The guest powered off: its writes are in the image.
    assert _debugfs_cat(disk, '/hello.txt') == 'written by the guest\n'
    assert _debugfs_cat(disk, '/during-freeze.txt') == (
        'written after the thaw\n')
    print('guest: READY %.1f s after start(), scenario running %.1f s, '
          'fsFreeze %.0f ms, fsThaw %.0f ms, powered off %.1f s'
          % (boot, guest_up, freeze_ms, thaw_ms, total))
