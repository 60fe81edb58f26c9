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
