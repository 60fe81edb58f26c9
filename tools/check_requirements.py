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

"""Check every distribution's requirements as OpenStack's requirements
job does: with the checker of openstack/requirements (its
``openstack_requirements.check``) against its global-requirements.txt,
denylist and backports. What the checker refuses fails the run unless
it is one of EXCEPTIONS below, each with its reason (doc/source/
install.rst, "Requirements"). Needs a checkout of openstack/requirements
and a Python with it installed::

    python3 -m venv /tmp/reqs-venv
    /tmp/reqs-venv/bin/pip install -e REQUIREMENTS_CHECKOUT
    /tmp/reqs-venv/bin/python tools/check_requirements.py \\
        REQUIREMENTS_CHECKOUT

The pyproject.toml check of the upstream job (pbr.build) is not run:
the distributions build with setup.py and pbr.
"""

import contextlib
import io
import os
import re
import sys

from openstack_requirements import check
from openstack_requirements import project
from openstack_requirements import requirement

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DISTRIBUTIONS = ('.', 'blobcr-common', 'blobcr-cinder', 'blobcr-nova',
                 'blobcr-guest', 'python-blobcrclient', 'blobcr-dashboard')
# Requirements the global list does not hold, and why they stay.
EXCEPTIONS = {
    'blobcr-common': 'this project\'s own library: a project adds its '
                     'libraries to the global list when it joins',
    'python-blobcrclient': 'the same, for the client library',
    'pyfuse3': 'the agent\'s FUSE binding; no OpenStack project mounts '
               'FUSE in Python (it would need the requirements team\'s '
               'review: LGPL-2.0+, maintained)',
    'trio': 'pyfuse3\'s event loop, required with it (in the upper '
            'constraints already, as another package\'s dependency)',
    'zstandard': 'chunk compression; the list holds another binding, '
                 'zstd, whose one-shot compress and decompress would do '
                 'for chunks (not moved yet)',
    'hypothesis': 'tests only: the property tests',
    'matplotlib': 'benchmarks only: their pictures',
}
_MISSING = re.compile(r"ERROR: Requirement '\{Requirement\(package='([^']+)'")


def _parse(reqdir, name):
    path = os.path.join(reqdir, name)
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return requirement.parse(f.read())


def errors(reqdir, distribution):
    """The checker's error lines for one distribution."""
    with open(os.path.join(reqdir, 'global-requirements.txt')) as f:
        global_reqs = check.get_global_reqs(f.read())
    reqs = check.RequirementsList(distribution,
                                  project.read(os.path.join(ROOT,
                                                            distribution)))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        reqs.process(strict=True)
        check.validate(reqs, _parse(reqdir, 'denylist.txt'), global_reqs,
                       list(_parse(reqdir, 'backports.txt')))
    return [line for line in out.getvalue().splitlines()
            if line.startswith('ERROR')]


def main(reqdir):
    failed = False
    for distribution in DISTRIBUTIONS:
        for line in errors(reqdir, distribution):
            m = _MISSING.match(line)
            if m and m.group(1) in EXCEPTIONS:
                print('%s: %s: not in global-requirements (%s)'
                      % (distribution, m.group(1), EXCEPTIONS[m.group(1)]))
            else:
                print('%s: %s' % (distribution, line))
                failed = True
    print('FAILED' if failed else
          'OK: every other requirement matches openstack/requirements')
    return 1 if failed else 0


if __name__ == '__main__':
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
