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

"""upper-constraints.txt against the requirement files: every library
they name is pinned there, to a version their specifiers accept, and
tox installs with it.
"""

import configparser
import os

from packaging import requirements
from packaging import utils

TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
FILES = ['requirements.txt', 'test-requirements.txt',
         'service-requirements.txt', 'python-blobcrclient/requirements.txt',
         'blobcr-dashboard/requirements.txt', 'blobcr-common/requirements.txt']
# OpenStack's services, pinned by series in service-requirements.txt (the
# upper constraints hold libraries only, as OpenStack's do).
SERVICES = {'keystone', 'cinder', 'glance', 'nova', 'openstack-placement',
            'horizon'}
# This project's own packages (installed from the tree).
OWN = {'python-blobcrclient', 'blobcr-openstack', 'blobcr-dashboard',
       'blobcr-lab', 'blobcr-common'}


def _lines(path):
    with open(os.path.join(TOP, path)) as f:
        for line in f:
            line = line.split('#', 1)[0].strip()
            if line and not line.startswith('-'):
                yield line


def _pins():
    pins = {}
    for line in _lines('upper-constraints.txt'):
        name, _, version = line.partition('===' if '===' in line else '==')
        pins[utils.canonicalize_name(name)] = version.strip()
    return pins


def test_every_library_required_is_pinned_to_an_accepted_version():
    pins = _pins()
    unpinned, refused = [], []
    for path in FILES:
        for line in _lines(path):
            req = requirements.Requirement(line)
            name = utils.canonicalize_name(req.name)
            if name in SERVICES or name in OWN:
                continue
            if name not in pins:
                unpinned.append('%s (%s)' % (req.name, path))
            elif not req.specifier.contains(pins[name], prereleases=True):
                refused.append('%s: %s pinned, %s wants %s'
                               % (path, pins[name], req.name,
                                  req.specifier))
    assert not unpinned, 'not in upper-constraints.txt: %s' % unpinned
    assert not refused, refused


def test_tox_installs_with_the_constraints():
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(os.path.join(TOP, 'tox.ini'))
    for section in ('testenv', 'testenv:docs'):
        deps = tox[section]['deps'].split()
        assert any(d.startswith('-c') and 'upper-constraints.txt' in d
                   for d in deps), section
