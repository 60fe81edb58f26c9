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

"""bindep.txt (what OpenStack's CI installs) and the install scripts
(what this tree's CI and README install) name the same Debian packages.
"""

import os
import re

TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
SCRIPTS = ('install-deps.sh', 'install-openstack.sh', 'build-guest.sh',
           'rabbitmq.sh', 'build-passthrough.sh', 'agent-user.sh',
           'lib/service-packages.sh')
WORD = re.compile(r'^[a-z0-9][a-z0-9.+-]+$')


def _bindep():
    names = set()
    with open(os.path.join(TOP, 'bindep.txt')) as f:
        for line in f:
            line = line.split('#')[0].strip()
            if line:
                names.add(line.split()[0])
    return names


def _scripted():
    """Package names in ``packages=( ... )`` arrays and ensure_packages
    calls of the install scripts (line continuations joined).
    """
    names = set()
    for script in SCRIPTS:
        with open(os.path.join(TOP, 'tools', script)) as f:
            text = f.read().replace('\\\n', ' ')
        lines = [line.split('#')[0] for line in text.splitlines()]
        text = '\n'.join(lines)
        chunks = re.findall(r'packages=\(([^)]*)\)', text)
        chunks += re.findall(r'ensure_packages ([^\n|]*)', text)
        for chunk in chunks:
            names.update(w for w in chunk.split()
                         if WORD.match(w) and not w.startswith('-'))
    return names


def test_bindep_lists_what_the_scripts_install():
    scripted = _scripted()
    listed = _bindep()
    # python3 and the interpreter's own packages come with Debian's
    # python3-venv; the guest build's python3.11 is the guest image's.
    implied = {'python3', 'python3.11', 'libpython3.11-stdlib'}
    assert scripted - listed - implied == set()
    assert listed - scripted == set()
