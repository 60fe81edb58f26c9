#!/bin/bash
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
.venv/bin/flake8 blobcr_agent blobcr_cinder blobcr_nova blobcr_guest blobcr_dashboard lab tests
make -s -C tests/native check tsan OUT="$top/build/native-tests"
exec .venv/bin/pytest -p no:cacheprovider --durations=15 tests "$@"
