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
# (tests/integration/test_tempest.py, about 8 minutes, the classes that
# boot servers against the real Nova included). Extra arguments go to
# pytest. Installs what the tests need first.
#
# BLOBCR_REAL_NOVA=1 also runs the volume tests that need a server against
# a real Nova (test_tempest_volume_with_real_nova, ~15 min more) with
# Neutron's API (build/neutron-venv: tools/install-neutron.sh, which
# install-deps.sh runs).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
bash tools/install-deps.sh
export BLOBCR_TEMPEST_REGEX=${BLOBCR_TEMPEST_REGEX:-'^(tempest\.api\.volume|cinder_tempest_plugin)'}
exec .venv/bin/pytest -p no:cacheprovider -s tests/integration/test_tempest.py "$@"
