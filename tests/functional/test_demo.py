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

"""The README's first command, tools/demo.sh, runs blobcr-demo: run it
on the local store and check that it verified every version it made.
"""

import re
import subprocess
import sys


def test_demo_on_local_store(tmp_path):
    workdir = tmp_path / 'demo'
    done = subprocess.run(
        [sys.executable, '-m', 'blobcr_lab.demo', '--workdir',
         str(workdir)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    # Import, three live checkpoints, the restored clone and its restart.
    assert re.search(r'verified +6 versions byte for byte \(disk@1, disk@2, '
                     r'disk@3, disk@4, restored@1, restored@2\)', out), out
    assert len(re.findall(r'^  disk@\d +\S+ s +\S+ ms', out, re.M)) == 3
    assert 'exited 0, mount gone' in out
    assert out.rstrip().endswith('demo passed: every check held')
    # Without --keep nothing is left behind.
    assert not workdir.exists()
