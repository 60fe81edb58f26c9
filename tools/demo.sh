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

# The main job, end to end, on a fresh Debian 12 machine (as root):
# install what BlobCR needs, start a real blobcr-agent and drive it with
# blobcr-manage only: import a real ext4 disk image, attach it, take three
# live checkpoints while a workload keeps writing to it, restore one
# (clone + attach) and restart the job from it, export and verify every
# version byte for byte and with e2fsck, print the version tree, detach,
# and stop the agent with SIGTERM (see lab/blobcr_lab/demo.py).
#   tools/demo.sh           embedded local store (default)
#   tools/demo.sh --ceph    a micro Ceph cluster on 127.0.0.1 (erasure-
#                           coded data pool), started and stopped here
#   tools/demo.sh --cinder  the Cinder path: openstack volume snapshot
#                           create on a real Keystone + Cinder with the
#                           BlobCR driver (blobcr-cinder-demo, lab/blobcr_lab/cinder_demo.py)
# Further arguments go to blobcr-demo (--keep, --workdir DIR).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
bash "$top/tools/install-deps.sh"

mon_running() { # DIR
    local pid
    pid=$(cat "$1/run/mon.a.pid" 2>/dev/null) || return 1
    [[ $pid =~ ^[0-9]+$ && -r /proc/$pid/cmdline ]] || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "-c $1/ceph.conf "
}

port_free() { # DIR: is the mon port in its ceph.conf free?
    local port
    port=$(sed -n 's/^mon_host = \[v2:127\.0\.0\.1:\([0-9]*\)\]$/\1/p' \
        "$1/ceph.conf")
    [ -n "$port" ] || return 0
    python3 - "$port" <<'END'
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(('127.0.0.1', int(sys.argv[1])))
except OSError:
    sys.exit(1)
END
}

if [ "${1:-}" = "--cinder" ]; then
    shift
    exec "$top/.venv/bin/blobcr-cinder-demo" "$@"
elif [ "${1:-}" = "--ceph" ]; then
    shift
    ceph_dir=${BLOBCR_DEMO_CEPH_DIR:-/var/tmp/blobcr-demo-ceph}
    # The cluster of an earlier demo keeps its mon port; if that cluster
    # is down and another one (a test session's) took the port since, a
    # new demo cluster is made on a free port instead.
    if [ -z "${BLOBCR_DEMO_CEPH_DIR:-}" ] && [ -e "$ceph_dir/cluster-created" ] \
        && ! mon_running "$ceph_dir" && ! port_free "$ceph_dir"; then
        echo "demo: the mon port of $ceph_dir is taken: new cluster" >&2
        bash "$top/tools/ceph-cluster.sh" stop "$ceph_dir" || true
        rm -rf "$ceph_dir"
    fi
    trap 'bash "$top/tools/ceph-cluster.sh" stop "$ceph_dir"' EXIT
    bash "$top/tools/ceph-cluster.sh" start "$ceph_dir"
    "$top/.venv/bin/blobcr-demo" --backend rados \
        --ceph-conf "$ceph_dir/ceph.conf" "$@"
else
    "$top/.venv/bin/blobcr-demo" "$@"
fi
