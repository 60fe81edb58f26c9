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
- blobcr_common (the agent's RPC API and client, its errors, instance
  tokens) uses the standard library and oslo.* only; the Cinder driver
  and the Nova side import it, never the agent (blobcr_agent: its C
  core, FUSE and libvirt), so that cinder-volume's and Nova's
  environments install them without those.
- The agent's distribution (setup.cfg) ships its product packages only;
  the client (python-blobcrclient) and the Horizon panel
  (blobcr-dashboard) are distributions of their own that import none of
  the agent, the Cinder driver or the Nova side, so that a workstation
  or a Horizon host installs them without the C core, libfuse3 or
  libvirt.
"""

import ast
import configparser
import os
import subprocess
import sys

import pytest

TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
AGENT_DISTRIBUTION = ('blobcr_agent',)
# At the top of the tree; each C-free distribution's folder links to
# its package there (test_the_openstack_packages_sit_at_the_root).
CINDER = 'blobcr_cinder'
NOVA = 'blobcr_nova'
GUEST = os.path.join('blobcr-guest', 'blobcr_guest')
COMMON = os.path.join('blobcr-common', 'blobcr_common')
CLIENT = os.path.join('python-blobcrclient', 'blobcrclient')
DASHBOARD = os.path.join('blobcr-dashboard', 'blobcr_dashboard')
PRODUCT = AGENT_DISTRIBUTION + (COMMON, CINDER, NOVA, GUEST, CLIENT,
                                DASHBOARD)
LAB = os.path.join('lab', 'blobcr_lab')
BENCH = os.path.join('lab', 'blobcr_bench')
OPENSTACK_SIDE = ('cinder', 'nova', 'os_brick', 'horizon', 'django',
                  'openstack_dashboard', 'blobcr_cinder', 'blobcr_nova',
                  'blobcr_dashboard', 'blobcrclient')
# What the client and the panel run without.
AGENT_SIDE = ('blobcr_agent', 'blobcr_cinder', 'blobcr_nova', 'blobcr_guest',
              'pyfuse3', 'trio', 'libvirt', 'rados', 'zstandard')

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
    assert violations(('blobcr_agent', COMMON), OPENSTACK_SIDE) == []


def test_the_common_part_needs_oslo_only():
    allowed = set(sys.stdlib_module_names) | {
        'blobcr_common', 'oslo_config', 'oslo_context', 'oslo_messaging'}
    found = ['%s:%d imports %s' % (os.path.relpath(path, TOP), line, name)
             for path in _python_files(COMMON)
             for line, name in imports_of(path) if name not in allowed]
    assert found == []


def test_the_cinder_and_nova_sides_need_nothing_of_the_agent():
    assert violations((CINDER, NOVA),
                      ('blobcr_agent', 'pyfuse3', 'trio', 'libvirt',
                       'zstandard')) == []


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
             for path in _python_files(GUEST)
             for line, name in imports_of(path) if name not in allowed]
    assert found == []


def test_the_client_and_the_panel_need_nothing_of_the_agent():
    assert violations((CLIENT, DASHBOARD), AGENT_SIDE) == []
    for folder in (CLIENT,):
        assert violations((folder,), ('blobcr_dashboard', 'horizon',
                                      'django')) == []


@pytest.mark.parametrize('distribution,packages,forbidden', [
    ('.', AGENT_DISTRIBUTION, ()),
    ('python-blobcrclient', ('blobcrclient',),
     ('pyfuse3', 'trio', 'libvirt-python', 'zstandard', 'blobcr-openstack')),
    ('blobcr-dashboard', ('blobcr_dashboard',),
     ('pyfuse3', 'trio', 'libvirt-python', 'zstandard', 'blobcr-openstack')),
    ('blobcr-common', ('blobcr_common',),
     ('pyfuse3', 'trio', 'libvirt-python', 'zstandard', 'blobcr-openstack')),
    ('blobcr-cinder', ('blobcr_cinder',),
     ('pyfuse3', 'trio', 'libvirt-python', 'zstandard', 'blobcr-openstack')),
    ('blobcr-nova', ('blobcr_nova',),
     ('pyfuse3', 'trio', 'libvirt-python', 'zstandard', 'blobcr-openstack')),
    ('blobcr-guest', ('blobcr_guest',),
     ('pyfuse3', 'trio', 'libvirt-python', 'zstandard', 'blobcr-openstack')),
])
def test_each_distribution_ships_its_own_packages(distribution, packages,
                                                  forbidden):
    config = configparser.ConfigParser()
    config.read(os.path.join(TOP, distribution, 'setup.cfg'))
    assert sorted(config['files']['packages'].split()) == sorted(packages)
    with open(os.path.join(TOP, distribution, 'requirements.txt')) as f:
        required = {line.split('>')[0].split('=')[0].split('<')[0].strip()
                    .lower() for line in f if line.strip()
                    and not line.startswith('#')}
    assert required.isdisjoint(forbidden), required & set(forbidden)
    # No extension module outside the agent's distribution.
    if distribution != '.':
        with open(os.path.join(TOP, distribution, 'setup.py')) as f:
            assert 'Extension' not in f.read()


@pytest.mark.parametrize('distribution,must_hold', [
    ('blobcr-common', ('blobcr_common/rpc/api.py',
                       'blobcr_common/exception.py',
                       'blobcr_common/auth.py')),
    ('blobcr-cinder', ('blobcr_cinder/driver.py',)),
    ('blobcr-nova', ('blobcr_nova/vendordata.py',
                     'blobcr_nova/brick_connector.py')),
    ('blobcr-guest', ('blobcr_guest/cli.py', 'blobcr_guest/__main__.py')),
    ('python-blobcrclient', ('blobcrclient/osc/plugin.py',
                             'blobcrclient/restart.py')),
    ('blobcr-dashboard', (
        'blobcr_dashboard/templates/project/checkpoints/index.html',
        'blobcr_dashboard/static/blobcr/checkpoints.js',
        'blobcr_dashboard/locale/django.pot',
        'blobcr_dashboard/enabled/_1375_project_blobcr_checkpoints.py')),
])
def test_pure_distributions_build_as_pure_wheels(distribution, must_hold,
                                                 tmp_path):
    """Built as pip builds them (no C compiler involved): a pure
    Python wheel holding the panel's templates, static files and
    catalogue.
    """
    import shutil
    import zipfile
    # From a copy (no build/ left in the tree), outside git as in an
    # sdist: the files must come from the distribution's own MANIFEST.in.
    source = tmp_path / distribution
    shutil.copytree(os.path.join(TOP, distribution), source,
                    ignore=shutil.ignore_patterns('build', '*.egg-info',
                                                  '__pycache__'))
    done = subprocess.run(
        [sys.executable, '-m', 'pip', 'wheel', '-q', '--no-deps',
         '--no-build-isolation', '-w', str(tmp_path / 'wheels'),
         str(source)], env=dict(os.environ, PBR_VERSION='1.0.0'),
        cwd=str(tmp_path), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    wheels = list((tmp_path / 'wheels').glob('*.whl'))
    assert len(wheels) == 1 and wheels[0].name.endswith('-py3-none-any.whl')
    names = zipfile.ZipFile(wheels[0]).namelist()
    missing = [name for name in must_hold if name not in names]
    assert missing == [], missing
    assert not [n for n in names if n.endswith('.so')]


@pytest.mark.parametrize('distribution,package', [
    ('blobcr-cinder', 'blobcr_cinder'), ('blobcr-nova', 'blobcr_nova')])
def test_the_openstack_packages_sit_at_the_root(distribution, package):
    """The driver and the Nova side at the top of the tree, beside
    blobcr_agent; their distributions (setup.cfg of their own, C-free)
    ship them through a relative link, which git keeps and pip, the
    wheels and the sdists follow.
    """
    link = os.path.join(TOP, distribution, package)
    assert os.path.isdir(os.path.join(TOP, package, ''))
    assert not os.path.islink(os.path.join(TOP, package))
    assert os.path.islink(link) and os.readlink(link) == os.path.join(
        os.pardir, package)


def test_no_benchmark_hides_in_the_product():
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


def _cycle(graph):
    """One import cycle of ``graph`` ({module: modules it imports}), as
    a list of modules, or None.
    """
    state = {}

    def visit(node, path):
        state[node] = 'open'
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 'open':
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt, path + [nxt])
                if found:
                    return found
        state[node] = 'done'
        return None
    for node in sorted(graph):
        if node not in state:
            found = visit(node, [node])
            if found:
                return found
    return None


@pytest.mark.parametrize('folder,package', [(BENCH, 'blobcr_bench'),
                                            (LAB, 'blobcr_lab')])
def test_no_import_cycle_between_modules(folder, package):
    """No two modules of the benchmarks (or of the lab) import each
    other, even through a function-level import: one concern each, and
    the graph reads downwards.
    """
    graph = {}
    for path in _python_files(folder):
        name = os.path.splitext(os.path.basename(path))[0]
        graph[name] = {imported.split('.')[1]
                       for _, imported in imports_of(path, whole=True)
                       if imported.startswith(package + '.')} - {name}
    assert _cycle({'a': {'b'}, 'b': {'a'}}) == ['a', 'b', 'a']
    assert _cycle(graph) is None, _cycle(graph)
