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

"""The agent's distribution as a packager meets it: its metadata without
libfuse3's pkg-config, and a requirement for every library the agent
(and blobcr-common, which it requires) imports.
"""

import ast
import importlib.metadata
import os
import subprocess
import sys

from packaging import requirements
from packaging import utils
import pytest

TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
# Imported by the agent but not installed from PyPI: python3-rados comes
# with Ceph's packages (install.rst).
NOT_FROM_PYPI = {'rados'}


def test_metadata_commands_need_no_libfuse3(tmp_path):
    fake = tmp_path / 'pkg-config'
    fake.write_text('#!/bin/sh\nexit 1\n')
    fake.chmod(0o755)
    env = dict(os.environ, PATH='%s:%s' % (tmp_path, os.environ['PATH']))
    out = subprocess.run([sys.executable, 'setup.py', '--name'], cwd=TOP,
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == 'blobcr-openstack'
    assert 'apt install libfuse3-dev' in out.stderr


def _imports(package):
    names = set()
    for root, _, files in os.walk(os.path.join(TOP, package)):
        for f in files:
            if not f.endswith('.py'):
                continue
            with open(os.path.join(root, f)) as src:
                tree = ast.parse(src.read())
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names.update(a.name.split('.')[0] for a in node.names)
                elif isinstance(node, ast.ImportFrom) and not node.level:
                    names.add(node.module.split('.')[0])
    return names


@pytest.mark.parametrize('distribution,package,hosts_own', [
    ('.', 'blobcr_agent', ()),
    ('blobcr-common', 'blobcr_common', ()),
    # A driver or a plugin is installed into the service's environment,
    # which has the service: not a requirement of its own.
    ('blobcr-cinder', 'blobcr_cinder', ('cinder',)),
    ('blobcr-nova', 'blobcr_nova', ('nova', 'os_brick')),
    ('blobcr-guest', 'blobcr_guest', ()),
])
def test_every_library_a_distribution_imports_is_required(distribution,
                                                          package,
                                                          hosts_own):
    with open(os.path.join(TOP, distribution, 'requirements.txt')) as f:
        required = {utils.canonicalize_name(requirements.Requirement(
            line.strip()).name) for line in f if line.strip() and
            not line.startswith('#')}
    dists = importlib.metadata.packages_distributions()
    missing = []
    for name in sorted(_imports(os.path.join(distribution, package)) - set(
            sys.stdlib_module_names) - NOT_FROM_PYPI - {package} -
            set(hosts_own)):
        owners = {utils.canonicalize_name(d) for d in dists.get(name, ())}
        if not owners & required:
            missing.append('%s (from %s)' % (name, sorted(owners)))
    assert not missing, 'imported, not in requirements.txt: %s' % missing
