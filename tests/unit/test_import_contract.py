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

"""The layering of the tree, read from every import statement (function-
level ones included) with ``ast``, so that a wrong import fails here and
not on a host that lacks the imported code.

- The product (what a cloud host installs: blobcr_agent, blobcr_cinder,
  blobcr_nova, blobcr_guest, blobcr_dashboard) never imports the lab,
  the benchmarks or the tests.
- The lab (real services on one machine) never imports the benchmarks;
  neither imports the tests, and nor do the scripts in tools/.
- The agent imports no Cinder, Nova or Horizon code, nor the packages
  that wrap them.
- The guest side uses the standard library only: it runs inside VMs.
- The agent's distribution (setup.cfg) ships the product packages only.
"""

import ast
import configparser
import os
import subprocess
import sys

import pytest

TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
PRODUCT = ('blobcr_agent', 'blobcr_cinder', 'blobcr_nova', 'blobcr_guest',
           'blobcr_dashboard')
LAB = os.path.join('lab', 'blobcr_lab')
BENCH = os.path.join('lab', 'blobcr_bench')
OPENSTACK_SIDE = ('cinder', 'nova', 'os_brick', 'horizon', 'django',
                  'openstack_dashboard', 'blobcr_cinder', 'blobcr_nova',
                  'blobcr_dashboard')

# What each part may not import (top-level package names).
FORBIDDEN = {
    'product': ('blobcr_lab', 'blobcr_bench', 'tests'),
    'lab': ('blobcr_bench', 'tests'),
    'bench': ('tests',),
    'tools': ('tests',),
}


def _python_files(folder):
    for root, dirs, files in os.walk(os.path.join(TOP, folder)):
        dirs[:] = [d for d in dirs if d != '__pycache__']
        for name in files:
            if name.endswith('.py'):
                yield os.path.join(root, name)


def imports_of(path, whole=False):
    """(line, top-level package) of every absolute import in a file;
    with ``whole``, (line, every module name it may import: for ``from
    a.b import c``, both ``a.b`` and ``a.b.c``).
    """
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, (alias.name if whole
                                    else alias.name.split('.')[0])
        elif isinstance(node, ast.ImportFrom) and not node.level:
            if not whole:
                yield node.lineno, node.module.split('.')[0]
                continue
            yield node.lineno, node.module
            for alias in node.names:
                yield node.lineno, node.module + '.' + alias.name


def violations(folders, forbidden):
    found = []
    for folder in folders:
        for path in _python_files(folder):
            for line, name in imports_of(path):
                if name in forbidden:
                    found.append('%s:%d imports %s'
                                 % (os.path.relpath(path, TOP), line, name))
    return found


@pytest.mark.parametrize('part,folders', [
    ('product', PRODUCT),
    ('lab', (LAB,)),
    ('bench', (BENCH,)),
    ('tools', ('tools',)),
])
def test_parts_import_only_what_is_below_them(part, folders):
    for folder in folders:
        assert os.path.isdir(os.path.join(TOP, folder)), folder
    assert violations(folders, FORBIDDEN[part]) == []


def test_the_agent_imports_nothing_from_the_openstack_side():
    assert violations(('blobcr_agent',), OPENSTACK_SIDE) == []


@pytest.mark.parametrize('folder,above', [
    # The repository is the bottom of the agent: nothing that uses it.
    ('blobcr_agent/repository', ('blobcr_agent.mirror', 'blobcr_agent.manager',
                                 'blobcr_agent.rpc', 'blobcr_agent.proxy',
                                 'blobcr_agent.control',
                                 'blobcr_agent.hypervisor')),
    # The manager is called by RPC, the admin socket and the endpoint.
    ('blobcr_agent/manager', ('blobcr_agent.rpc', 'blobcr_agent.proxy',
                              'blobcr_agent.control', 'blobcr_agent.cmd')),
    # (The control socket's code, blobcr_agent.control, serves the
    # mirror's socket and the agent's alike.)
    ('blobcr_agent/mirror', ('blobcr_agent.manager', 'blobcr_agent.rpc',
                             'blobcr_agent.proxy', 'blobcr_agent.cmd')),
])
def test_the_agent_layers_import_downwards(folder, above):
    found = ['%s:%d imports %s' % (os.path.relpath(path, TOP), line, name)
             for path in _python_files(folder)
             for line, name in imports_of(path, whole=True)
             if any(name == a or name.startswith(a + '.') for a in above)]
    assert found == []


def test_the_guest_side_uses_the_standard_library_only():
    allowed = set(sys.stdlib_module_names) | {'blobcr_guest'}
    found = ['%s:%d imports %s' % (os.path.relpath(path, TOP), line, name)
             for path in _python_files('blobcr_guest')
             for line, name in imports_of(path) if name not in allowed]
    assert found == []


def test_the_agent_distribution_ships_the_product_only():
    config = configparser.ConfigParser()
    config.read(os.path.join(TOP, 'setup.cfg'))
    packages = config['files']['packages'].split()
    assert sorted(packages) == sorted(PRODUCT)
    # No benchmark or lab code hides inside a product package.
    for package in PRODUCT:
        for path in _python_files(package):
            assert os.sep + 'bench' + os.sep not in path, path


def test_the_lab_and_the_benchmarks_run_without_the_tests(tmp_path):
    """From a directory outside the tree (so neither tests/ nor the
    source is on the path but for the installs): blobcr-bench answers,
    and the demos and benchmarks import without any test module.
    """
    bindir = os.path.dirname(sys.executable)
    done = subprocess.run([os.path.join(bindir, 'blobcr-bench'), 'cinder',
                           '--help'], cwd=str(tmp_path), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and 'blobcr-bench cinder' in done.stdout, \
        done.stderr[-2000:]
    probe = ('import sys\n'
             'import blobcr_lab.demo, blobcr_lab.cinder_demo\n'
             'import blobcr_bench.cli, blobcr_bench.cinder_stack\n'
             'import blobcr_bench.metadata\n'
             'print([m for m in sys.modules if m.split(".")[0] == "tests"])')
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
    done = subprocess.run([sys.executable, '-c', probe], cwd=str(tmp_path),
                          capture_output=True, text=True, timeout=120,
                          env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == '[]'
