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

"""Process-level checkpointing with the real CRIU on this host: a counting
process is dumped by blobcr-checkpoint --criu (which then asks a test
endpoint for the disk snapshot), killed, restored by blobcr-restore, and
goes on counting from where it was dumped.

The process stays stopped from the dump until the snapshot is requested:
the endpoint reads the counting file as the request arrives and again a
moment later, and the restore starts from that file as the snapshot
holds it (the counter keeps it open, so CRIU checks its size): the next
count follows the last one on the disk exactly, no count replayed or
lost.

CRIU depends on the kernel. When ``criu check`` refuses this one, the
round trip is skipped with what criu printed, and what is left is shown:
the refusal reaches the user as one clear line and commits nothing.
Debian 12's criu 3.17 is refused by kernels 6.13 and newer (the vDSO
"vvar" split in two); a criu 4.1 put first in PATH passes the round trip.
"""

import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

BIN = os.path.dirname(sys.executable)
CRIU = shutil.which('criu') or shutil.which('criu', path='/usr/sbin:/sbin')

# The file stays open: CRIU then checks its size on restore.
COUNTER = '''
import os, sys, time
n = 0
with open(sys.argv[1], 'a') as f:
    while True:
        n += 1
        f.write('%d %d\\n' % (os.getpid(), n))
        f.flush()
        time.sleep(0.05)
'''


def criu_refusal():
    """None when ``criu check`` passes, else exactly what it printed."""
    if CRIU is None:
        return 'criu is not installed (apt-get install criu)'
    result = subprocess.run([CRIU, 'check'], capture_output=True, text=True,
                            timeout=60)
    if result.returncode == 0:
        return None
    return 'criu check refuses kernel %s (exit %d):\n%s' % (
        os.uname().release, result.returncode,
        (result.stdout + result.stderr).strip())


@pytest.fixture(scope='module')
def refusal():
    return criu_refusal()


class Endpoint(object):
    """Records checkpoint requests; answers as the proxy does, with
    ``status``. As a request arrives, it reads the ``watch`` file and
    the state of ``pid``, and the file again 0.3 s later.
    """

    def __init__(self):
        self.received = []
        self.status = 200
        self.watch = self.pid = None


@pytest.fixture
def endpoint():
    state = Endpoint()
    received = state.received

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            length = int(self.headers.get('Content-Length') or 0)
            request = {'path': self.path,
                       'instance': self.headers.get('X-Instance-ID'),
                       'body': self.rfile.read(length),
                       'time': time.monotonic()}
            if state.watch:
                request['content'] = state.watch.read_text()
                request['process'] = process_state(state.pid)
                time.sleep(0.3)
                request['later'] = state.watch.read_text()
            received.append(request)
            if state.status == 200:
                payload = json.dumps({'version': len(received) + 1,
                                      'downtime_ms': 1.0}).encode()
            else:
                payload = json.dumps({'error': 'the checkpoint could not '
                                      'be taken'}).encode()
            self.send_response(state.status)
            self.send_header('Content-Length', str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
    threading.Thread(target=httpd.serve_forever, args=(0.05,),
                     daemon=True).start()
    state.url = 'http://127.0.0.1:%d' % httpd.server_port
    yield state
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def counter(tmp_path):
    """A process counting into a file, in a session of its own."""
    log = tmp_path / 'count.log'
    proc = subprocess.Popen([sys.executable, '-c', COUNTER, str(log)],
                            stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    wait_for(lambda: len(lines(log)) >= 5)
    yield proc, log
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def lines(log):
    try:
        text = log.read_text()
    except FileNotFoundError:
        return []
    complete = text.splitlines()
    if not text.endswith('\n'):
        complete = complete[:-1]        # being written
    return [tuple(map(int, line.split())) for line in complete]


def wait_for(predicate, timeout=30):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, 'timed out'
        time.sleep(0.02)


def command(name, *args):
    environ = dict(os.environ, BLOBCR_METADATA_URL='',
                   BLOBCR_GUEST_CONFIG='/nonexistent/guest.json')
    return subprocess.run([os.path.join(BIN, name)] + list(args),
                          env=environ, capture_output=True, text=True,
                          timeout=300)


def process_state(pid):
    try:
        with open('/proc/%d/stat' % pid) as f:
            return f.read().rpartition(')')[2].split()[0]
    except (FileNotFoundError, IndexError):
        return None


def alive(pid):
    return process_state(pid) not in (None, 'Z', 'X')


def checkpoint(endpoint, proc, log, dumps, *more):
    endpoint.watch, endpoint.pid = log, proc.pid
    return command('blobcr-checkpoint', '--endpoint', endpoint.url,
                   '--instance-id', 'vm-1', '--token', 't', '--criu',
                   str(proc.pid), '--dir', str(dumps), '--json', *more)


def held_still(request):
    """The process was stopped, and wrote nothing, during the request."""
    assert request['process'] == 'T'
    assert request['content'] == request['later']
    assert request['content'].endswith('\n')


def test_dump_kill_restore_goes_on_from_the_dump(refusal, endpoint, counter,
                                                 tmp_path):
    if refusal:
        pytest.skip(refusal)
    proc, log = counter
    dumps = tmp_path / 'dumps'
    result = checkpoint(endpoint, proc, log, dumps)
    assert result.returncode == 0, result.stderr
    reply = json.loads(result.stdout)
    assert reply['version'] == 2 and len(endpoint.received) == 1
    images = reply['criu_dump']
    assert os.path.realpath(dumps / 'latest') == images
    assert os.path.exists(os.path.join(images, 'pstree.img'))
    [request] = endpoint.received
    held_still(request)
    # What the disk snapshot holds: the file as the dump left it.
    snapshot = request['content']
    at_dump = len(snapshot.splitlines())
    # Continued: it counts on past the dump, then dies.
    wait_for(lambda: len(lines(log)) >= at_dump + 5)
    assert process_state(proc.pid) != 'T'
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    # The VM restarts from its snapshot: the file is as the snapshot
    # holds it, and CRIU finds the size it dumped.
    log.write_text(snapshot)
    restored = None
    try:
        result = command('blobcr-restore', '--criu', str(dumps), '--json')
        assert result.returncode == 0, result.stderr
        restored = json.loads(result.stdout)['pid']
        assert restored == proc.pid           # CRIU keeps the pid
        wait_for(lambda: len(lines(log)) >= at_dump + 5)
        counted = lines(log)
        assert {pid for pid, _ in counted} == {proc.pid}
        # Straight on from the last count on the disk: none replayed,
        # none lost.
        counts = [n for _, n in counted]
        assert counts == list(range(1, len(counts) + 1))
    finally:
        if restored and alive(restored):
            os.kill(restored, signal.SIGKILL)


def test_kill_comes_after_the_checkpoint(refusal, endpoint, counter,
                                         tmp_path):
    if refusal:
        pytest.skip(refusal)
    proc, log = counter
    result = checkpoint(endpoint, proc, log, tmp_path / 'dumps', '--kill')
    assert result.returncode == 0, result.stderr
    [request] = endpoint.received
    held_still(request)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    assert log.read_text() == request['content']


@pytest.mark.parametrize('after', ['--leave-running', '--kill'])
def test_a_failed_checkpoint_continues_the_process(refusal, endpoint,
                                                   counter, tmp_path, after):
    if refusal:
        pytest.skip(refusal)
    proc, log = counter
    endpoint.status = 503
    result = checkpoint(endpoint, proc, log, tmp_path / 'dumps', after)
    assert result.returncode == 4 and result.stdout == ''
    assert result.stderr.startswith('blobcr-checkpoint: error: the '
                                    'checkpoint could not be taken (HTTP '
                                    '503)')
    [request] = endpoint.received
    held_still(request)
    count = len(request['content'].splitlines())
    wait_for(lambda: len(lines(log)) >= count + 5)
    assert proc.poll() is None and process_state(proc.pid) != 'T'


def test_a_refused_dump_is_one_line_and_commits_nothing(refusal, endpoint,
                                                        counter, tmp_path):
    if CRIU is None:
        pytest.skip('criu is not installed (apt-get install criu)')
    if not refusal:
        pytest.skip('criu works here: the round trip above covers it')
    proc, log = counter
    dumps = tmp_path / 'dumps'
    result = command('blobcr-checkpoint', '--endpoint', endpoint.url,
                     '--instance-id', 'vm-1', '--token', 't', '--criu',
                     str(proc.pid), '--dir', str(dumps))
    assert result.returncode == 6 and result.stdout == ''
    assert result.stderr.count('\n') == 1
    assert result.stderr.startswith('blobcr-checkpoint: error: criu dump '
                                    'failed (exit 1): ')
    # The cause criu check gave, not the noise before it.
    cause = [line for line in refusal.splitlines()
             if line.startswith('Error') and 'exited, status=' not in line]
    assert cause and cause[0] in result.stderr
    assert endpoint.received == []
    assert not os.path.lexists(dumps / 'latest')
    count = len(lines(log))
    wait_for(lambda: len(lines(log)) > count)     # still running
    assert proc.poll() is None
