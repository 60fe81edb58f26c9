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

"""blobcr_agent/sdnotify.py against systemd's protocol: descriptors
sent with FDSTORE=1 arrive with their name, and come back to the next
run through LISTEN_FDS, LISTEN_FDNAMES and LISTEN_PID, as the lab's
store (blobcr_lab/fdstore.py) and systemd pass them.
"""

import json
import os
import subprocess
import sys
import time

from blobcr_agent import sdnotify
from blobcr_lab import fdstore

CHILD = '''
import json, os
from blobcr_agent import sdnotify
found = sdnotify.listen_fds()
print(json.dumps({
    name: [os.read(fd, 64).decode() for fd in fds]
    for name, fds in found.items()}))
print(json.dumps([os.environ.get(v) for v in
                  ('LISTEN_PID', 'LISTEN_FDS', 'LISTEN_FDNAMES')]))
'''


def _pipe_with(text):
    r, w = os.pipe()
    os.write(w, text.encode())
    os.close(w)
    return r


def test_stored_descriptors_come_back_by_name(monkeypatch):
    store = fdstore.FdStore()
    try:
        monkeypatch.setenv('NOTIFY_SOCKET', store.path)
        for name, text in (('first', 'one'), ('second', 'two'),
                           ('first', 'three')):
            fd = _pipe_with(text)
            assert sdnotify.notify_fds([fd], 'FDSTORE=1', 'FDNAME=' + name)
            os.close(fd)
        assert sdnotify.notify('FDSTOREREMOVE=1', 'FDNAME=second')
        assert sdnotify.notify('READY=1')
        deadline = time.monotonic() + 10
        while len(store.messages) < 5:
            assert time.monotonic() < deadline, store.messages
            time.sleep(0.01)
        # A later descriptor under a name replaces the earlier one; a
        # removed name is gone.
        assert sorted(store.fds) == ['first']
        args, pass_fds = store.wrap([sys.executable, '-c', CHILD])
        done = subprocess.run(args, pass_fds=pass_fds, capture_output=True,
                              text=True, timeout=60, check=True)
        found, left = [json.loads(line) for line in
                       done.stdout.splitlines()]
        assert found == {'first': ['three']}
        # Read once, and not handed on to the agent's own children.
        assert left == [None, None, None]
    finally:
        store.close()


def test_descriptors_for_another_process_are_not_taken():
    # LISTEN_PID names someone else (a variable inherited by mistake):
    # nothing is taken, and the variables go all the same.
    env = dict(os.environ, LISTEN_PID='1', LISTEN_FDS='1',
               LISTEN_FDNAMES='blobcr-images')
    done = subprocess.run([sys.executable, '-c', CHILD], env=env,
                          capture_output=True, text=True, timeout=60,
                          check=True)
    found, left = [json.loads(line) for line in done.stdout.splitlines()]
    assert found == {} and left == [None, None, None]
