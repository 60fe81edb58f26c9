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
# Beside pytest, the mirror core's C stress test runs plain and under
# ThreadSanitizer (tests/native/; gcc's libtsan2 comes with
# build-essential, which install-deps.sh installs).
# pytest runs in two lanes at once: the tests on the session's OpenStack
# stack (real services, TCG guests) leave a core idle much of the time,
# and the unit, functional and light integration tests fill it. Each
# lane has its own session fixtures (micro Ceph, RabbitMQ); the light
# lane's output follows the stack lane's. BLOBCR_TEST_LANES=1 runs one
# pytest.
# Extra arguments go to pytest (to both lanes), e.g.
# tools/run-tests.sh -k rados; "{lane}" in them becomes the lane's name,
# e.g. --junitxml=/tmp/junit-{lane}.xml.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
bash tools/install-deps.sh
.venv/bin/flake8 blobcr-common blobcr_agent blobcr_cinder blobcr_nova blobcr-cinder blobcr-nova blobcr-guest python-blobcrclient blobcr-dashboard lab tests
pytest=(.venv/bin/pytest -p no:cacheprovider --durations=15)
if [[ ${BLOBCR_TEST_LANES:-2} == 1 ]]; then
    make -s -C tests/native check tsan OUT="$top/build/native-tests"
    exec "${pytest[@]}" tests "${@//\{lane\}/all}"
fi
mkdir -p build
# The native tests (C, a minute of CPU) beside the lanes: the session's
# first minutes, starting services, leave CPU to spare.
native_log=build/test-native.log
make -s -C tests/native check tsan OUT="$top/build/native-tests" \
    >"$native_log" 2>&1 &
native=$!
# Integration tests that need no OpenStack stack of the session (no
# Keystone, Cinder or Nova fixture) run in the other lane, which would
# otherwise end long before this one.
light=(agent_rpc agent_volume_rpc backend_full bench_metadata bench_peers
       bus_split ceph_faults checkpoint_under_load cinder_driver_start
       cinder_model containers guest_vm guest_vm_checkpoint live_migration
       nova_listener nova_metadata_route rabbitmq scale_bench)
light_paths=() heavy_ignores=()
for name in "${light[@]}"; do
    light_paths+=("tests/integration/test_$name.py")
    heavy_ignores+=("--ignore=tests/integration/test_$name.py")
done
lane_log=build/test-lane-light.log
# Its own range of mon ports: both lanes may make a Ceph cluster at once.
# (A background command of a script starts with SIGINT ignored; the
# trap below needs it back.)
(trap - INT
 BLOBCR_CEPH_MON_PORT_FIRST=40889 exec "${pytest[@]}" tests/unit \
     tests/functional "${light_paths[@]}" "${@//\{lane\}/light}") >"$lane_log" 2>&1 &
lane=$!
# Stopped with the script: SIGINT, so that pytest tears its fixtures
# down (its Ceph cluster, its agents).
trap 'kill -INT "$lane" 2>/dev/null; kill "$native" 2>/dev/null' INT TERM
echo "run-tests: the unit, functional and light integration tests run beside the stack's tests (output: $lane_log, shown at the end)"
rc=0
stack_log=build/test-lane-stack.log
"${pytest[@]}" tests/integration "${heavy_ignores[@]}" \
    "${@//\{lane\}/stack}" 2>&1 | tee "$stack_log" || rc=$?
lane_rc=0 native_rc=0
wait "$lane" || lane_rc=$?
wait "$native" || native_rc=$?
echo "run-tests: the native tests (exit status $native_rc):"
cat "$native_log"
echo "run-tests: the light lane (exit status $lane_rc):"
cat "$lane_log"
echo "run-tests: exit statuses: the stack's lane $rc, the light lane $lane_rc, the native tests $native_rc"
((native_rc == 0)) || exit 1
# A test that failed beside the other lane runs again alone, once: some
# depend on timing that two lanes on two cores can stretch. One that
# passes alone is named here (load-sensitive: a test to fix); one that
# fails again fails the run, as does a lane that failed with no test
# named (a crash, an error at collection). Status 5: the arguments
# deselected every test of that lane.
failed=()
for lane_status in "$rc:$stack_log" "$lane_rc:$lane_log"; do
    status=${lane_status%%:*} log=${lane_status#*:}
    ((status == 0 || status == 5)) && continue
    # A program missing (a setup error like "libvirtd exited (127)") is
    # an install step missing, not load: it fails the run, not retried.
    missing="exited \\(127\\)|failed to execute|command not found"
    missing+="|No such file or directory: '((/usr)?/s?bin/)?[^/']+'"
    if grep -E "^E +.*($missing)" "$log"; then
        echo "run-tests: a test found a program missing ($log): an install step is missing from tools/install-deps.sh"
        exit 1
    fi
    mapfile -t named < <(sed -nE 's/^(FAILED|ERROR) (tests\/[^ ]+).*/\2/p' \
        "$log" | sort -u)
    if ((${#named[@]} == 0)); then
        echo "run-tests: a lane failed (status $status, $log) without a failed test to run again"
        exit 1
    fi
    failed+=("${named[@]}")
done
((${#failed[@]} == 0)) && exit 0
echo "run-tests: running alone the ${#failed[@]} test(s) that failed beside the other lane: ${failed[*]}"
again=0
"${pytest[@]}" "${failed[@]}" "${@//\{lane\}/again}" || again=$?
if ((again == 0)); then
    echo "run-tests: LOAD-SENSITIVE: failed beside the other lane, passed alone: ${failed[*]}"
fi
exit "$again"
