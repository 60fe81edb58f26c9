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

"""Tempest's volume API tests and cinder-tempest-plugin's, the suite
Cinder's third-party CI runs, against the session's stack with BlobCR
(the local store) as the default volume type (blobcr_lab/tempest.py
writes tempest.conf).

``BLOBCR_TEMPEST_REGEX`` selects other tests (tools/tempest.sh runs
every test of both). The counts are printed; the log of the run is
``tempest-run.log`` in the test's tmp_path.
"""

import os

import pytest

from blobcr_lab import tempest

pytestmark = pytest.mark.skipif(
    not os.path.exists(os.path.join(tempest.venv(), 'bin', 'tempest')),
    reason='no Tempest: tools/install-tempest.sh installs it')


def test_tempest_volume_api(openstack_cloud, cinder_hosts, tmp_path):
    regex = os.environ.get('BLOBCR_TEMPEST_REGEX', tempest.VOLUME_API)
    # One backend: with two, Tempest's multi-backend tests retype with
    # migration, and Cinder's generic migration between two BlobCR
    # backends fails (it connects both volumes on the cinder-volume
    # host, where no BlobCR agent runs): a known gap, not run here.
    section = cinder_hosts['local'].section
    log = str(tmp_path / 'tempest-run.log')
    counts = tempest.run(openstack_cloud, str(tmp_path), regex=regex,
                         volume_type=section, backend_names=[section],
                         log=log)
    print('tempest %s: %d passed, %d skipped, %d failed (log %s)'
          % (regex, counts['passed'], counts['skipped'], counts['failed'],
             log))
    failures = [line for line in counts['output'].splitlines()
                if '... FAILED' in line]
    assert counts['failed'] == 0, '\n'.join(failures)
    # A configuration that skips everything proves nothing.
    assert counts['passed'] > counts['skipped'], counts
