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

"""Loop devices over a file, with direct I/O, as the agent sets them up
for a 'local' connection (blobcr_agent/manager/loopdevs.py), for the
benchmarks that write the block device stock Nova opens.
"""

import contextlib
import os
import subprocess


def available():
    return os.path.exists('/dev/loop-control')


def attach(path):
    """A new loop device over ``path``, direct I/O on; its path."""
    return subprocess.run(
        ['losetup', '--find', '--show', '--direct-io=on', path],
        check=True, capture_output=True, text=True).stdout.strip()


def detach(device):
    subprocess.run(['losetup', '--detach', device], check=False,
                   capture_output=True)


def written(device):
    """Bytes written to ``device`` so far (its block statistics: the
    seventh field counts 512-byte sectors), since the kernel made it,
    across the files it was set up over.
    """
    name = os.path.basename(device)
    with open('/sys/block/%s/stat' % name) as f:
        return int(f.read().split()[6]) * 512


@contextlib.contextmanager
def over(path):
    """A loop device over ``path`` while in the block; None where the
    host has none.
    """
    if not available():
        yield None
        return
    device = attach(path)
    try:
        yield device
    finally:
        detach(device)
