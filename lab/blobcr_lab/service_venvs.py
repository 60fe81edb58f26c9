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

"""A service's own virtualenv, as an operator installs BlobCR into it:
the OpenStack service from PyPI and the wheels built from this tree's
distributions, nothing else of the tree (no agent, no C core, no
libfuse3 or libvirt-python).

``service_venv(directory, requirements, distributions)`` builds it (or reuses
the one made from the same inputs) and returns its bin directory; the
service's version and its libraries' are the project venv's (``pip
freeze``, as constraints), so that the two differ only by what BlobCR
installs. ``importable(bindir, names)`` says which modules import there.
"""

import hashlib
import json
import os
import subprocess
import sys

import blobcr_lab

# The project venv's packages that are this tree's, or its test and lab
# tools: never constraints for a service's venv.
OWN_PREFIXES = ('blobcr', 'python-blobcrclient')


class VenvError(Exception):
    pass


def _run(argv, log, timeout, env=None):
    with open(log, 'a') as out:
        out.write('$ %s\n' % ' '.join(argv))
        out.flush()
        done = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, timeout=timeout,
                              env=env)
    if done.returncode:
        with open(log, errors='replace') as f:
            raise VenvError('%s failed (%d); log %s:\n%s' % (
                ' '.join(argv[:4]), done.returncode, log,
                ''.join(f.readlines()[-40:])))


def constraints():
    """The project venv's versions (``pip freeze``), less this tree's
    own distributions and editable installs.
    """
    out = subprocess.run([sys.executable, '-m', 'pip', 'freeze',
                          '--exclude-editable'], capture_output=True,
                         text=True, check=True, timeout=120).stdout
    return sorted(line for line in out.splitlines()
                  if '==' in line and not line.lower().startswith(
                      OWN_PREFIXES))


def build_wheels(distributions, directory, log):
    """Wheels of this tree's ``distributions`` (directories under its
    top), built as pip builds them; their paths.
    """
    os.makedirs(directory, exist_ok=True)
    for name in distributions:
        _run([sys.executable, '-m', 'pip', 'wheel', '-q', '--no-deps',
              '-w', directory, os.path.join(blobcr_lab.SOURCE, name)],
             log, 600)
    wheels = sorted(os.path.join(directory, f) for f in os.listdir(directory)
                    if f.endswith('.whl'))
    if len(wheels) != len(distributions):
        raise VenvError('%d wheels for %d distributions in %s'
                        % (len(wheels), len(distributions), directory))
    return wheels


def service_venv(directory, requirements, distributions, log):
    """A virtualenv under ``directory`` with ``requirements`` from PyPI
    (the service and what its host adds, e.g. ``['cinder==29.*',
    'psycopg2-binary']``; may be empty) and the wheels of
    ``distributions`` (``.`` is the agent's, at the tree's top); its bin
    directory. Made again only when its inputs change.
    """
    pins = constraints()
    key = hashlib.sha256(json.dumps(
        [requirements, distributions, pins,
         _tree_state(distributions)]).encode()
    ).hexdigest()[:16]
    venv = os.path.join(directory, 'venv-%s' % key)
    bindir = os.path.join(venv, 'bin')
    if os.path.exists(os.path.join(venv, 'ready')):
        return bindir
    os.makedirs(directory, exist_ok=True)
    wheels = build_wheels(distributions, os.path.join(venv + '-wheels'),
                          log)
    _run([sys.executable, '-m', 'venv', venv], log, 300)
    constraint_file = os.path.join(directory, 'constraints-%s.txt' % key)
    with open(constraint_file, 'w') as f:
        f.write('\n'.join(pins) + '\n')
    _run([os.path.join(bindir, 'pip'), 'install', '-q', '-c',
          constraint_file] + list(requirements) + wheels, log, 1800)
    open(os.path.join(venv, 'ready'), 'w').close()
    return bindir


def _tree_state(distributions):
    """What the wheels are built from: the tree's commit and changes."""
    def git(*args):
        return subprocess.run(['git', '-C', blobcr_lab.SOURCE] + list(args),
                              capture_output=True, text=True,
                              timeout=60).stdout
    return [git('rev-parse', 'HEAD').strip(),
            git('status', '--porcelain', '--', *distributions)]


def importable(bindir, names):
    """Which of the module ``names`` import in the venv of ``bindir``."""
    code = ('import importlib, json, sys\n'
            'found = []\n'
            'for name in sys.argv[1:]:\n'
            '    try:\n'
            '        importlib.import_module(name)\n'
            '    except ImportError:\n'
            '        continue\n'
            '    found.append(name)\n'
            'print(json.dumps(found))\n')
    # Isolated (-I: no PYTHONPATH, no current directory on the path) and
    # from /: a source tree there would lend its packages.
    out = subprocess.run([os.path.join(bindir, 'python'), '-I', '-c',
                          code] + list(names), capture_output=True,
                         text=True, timeout=300, cwd='/')
    if out.returncode:
        raise VenvError('python in %s failed:\n%s' % (bindir, out.stderr))
    return json.loads(out.stdout.strip().splitlines()[-1])
