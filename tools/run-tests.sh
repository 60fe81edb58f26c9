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

# Install everything the tests need, then run them all: style (flake8 with
# OpenStack's hacking rules), unit tests, functional tests on the local
# store and on a real micro Ceph cluster (started on 127.0.0.1 by the test
# session, stopped at its end), and integration tests (OSD failure).
# Before pytest, the mirror core's C stress test runs plain and under
# ThreadSanitizer (tests/native/; gcc's libtsan2 comes with
# build-essential, which install-deps.sh installs).
# Extra arguments go to pytest, e.g. tools/run-tests.sh -k rados
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
bash tools/install-deps.sh
.venv/bin/flake8 blobcr_agent blobcr_cinder blobcr_nova blobcr_guest python-blobcrclient blobcr-dashboard lab tests
make -s -C tests/native check tsan OUT="$top/build/native-tests"
exec .venv/bin/pytest -p no:cacheprovider --durations=15 tests "$@"
