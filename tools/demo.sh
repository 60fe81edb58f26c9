#!/bin/bash
# The main job, end to end, on a fresh Debian 12 machine (as root):
# install what BlobCR needs, then import a real ext4 disk image, COMMIT
# incremental versions, CLONE one, export and verify every version, GC,
# and print the version tree.
#   tools/demo.sh           embedded local store (default)
#   tools/demo.sh --ceph    a micro Ceph cluster on 127.0.0.1 (erasure-
#                           coded data pool), started and stopped here
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
bash "$top/tools/install-deps.sh"

if [ "${1:-}" = "--ceph" ]; then
    ceph_dir=${BLOBCR_DEMO_CEPH_DIR:-/var/tmp/blobcr-demo-ceph}
    trap 'bash "$top/tools/ceph-cluster.sh" stop "$ceph_dir"' EXIT
    bash "$top/tools/ceph-cluster.sh" start "$ceph_dir"
    "$top/.venv/bin/blobcr-demo" --backend rados \
        --ceph-conf "$ceph_dir/ceph.conf"
else
    "$top/.venv/bin/blobcr-demo"
fi
