#!/bin/bash
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

# Every test of Tempest's volume API and of cinder-tempest-plugin (API and
# scenario: those that need Nova are skipped by Tempest itself), on the
# test session's stack. CI runs the volume API tests of both only
# (tests/integration/test_tempest.py, about 6 minutes). Extra arguments
# go to pytest. Installs what the tests need first.
#
# BLOBCR_REAL_NOVA=1 also runs the volume tests that need a server against
# a real Nova (test_tempest_volume_with_real_nova, ~15 min more): its
# Neutron API lives in a venv of its own, build/neutron-venv, made here
# (neutron-lib's flake8 checks must stay out of the project venv).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
bash tools/install-deps.sh
if [ -n "${BLOBCR_REAL_NOVA:-}" ] && [ -z "${BLOBCR_NEUTRON_VENV:-}" ] \
        && ! build/neutron-venv/bin/python -c 'import neutron.wsgi' \
            2>/dev/null; then
    python3 -m venv build/neutron-venv
    site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    nsite=$(build/neutron-venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    # The project venv's OpenStack libraries; pip adds Neutron's own.
    echo "$site" > "$nsite/blobcr-openstack-venv.pth"
    build/neutron-venv/bin/pip install -q 'neutron==29.*'
fi
export BLOBCR_TEMPEST_REGEX=${BLOBCR_TEMPEST_REGEX:-'^(tempest\.api\.volume|cinder_tempest_plugin)'}
exec .venv/bin/pytest -p no:cacheprovider -s tests/integration/test_tempest.py "$@"
