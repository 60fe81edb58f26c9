#!/bin/bash
# The model walk of the Cinder driver's flows (tests/cinder_model.py) for
# hours, outside CI: walks of --steps steps on new seeds from --seed
# until --hours have passed. A failure prints its seed and the command
# that replays it; CI runs a bounded form of the same test.
#
#   bash tools/soak.sh --hours 2 [--seed S] [--steps 300] [--ceph]
#
# --ceph: on the micro Ceph cluster the test session starts (erasure-
# coded data pool) instead of the local store.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
hours=1
seed=
steps=300
while [ $# -gt 0 ]; do
    case "$1" in
        --hours) hours=$2; shift 2 ;;
        --seed) seed=$2; shift 2 ;;
        --steps) steps=$2; shift 2 ;;
        --ceph) export BLOBCR_MODEL_BACKEND=rados; shift ;;
        *) echo "usage: $0 [--hours H] [--seed S] [--steps N] [--ceph]" >&2; exit 2 ;;
    esac
done
[ -x "$top/.venv/bin/pytest" ] || bash "$top/tools/install-deps.sh"
cd "$top"
export BLOBCR_MODEL_HOURS=$hours BLOBCR_MODEL_STEPS=$steps BLOBCR_MODEL_SEEDS=1
if [ -n "$seed" ]; then
    export BLOBCR_MODEL_SEED=$seed
fi
exec .venv/bin/pytest -p no:cacheprovider -x -s \
    tests/integration/test_cinder_model.py
