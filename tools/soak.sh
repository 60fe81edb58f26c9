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

# The model walk of the Cinder driver's flows (tests/cinder_model.py) for
# hours, outside CI: walks of --steps steps on new seeds from --seed
# until --hours have passed. A failure prints its seed and the command
# that replays it; CI runs a bounded form of the same test.
#
#   bash tools/soak.sh --hours 2 [--seed S] [--steps 300] [--ceph]
#
# --ceph: on the micro Ceph cluster the test session starts (erasure-
# coded data pool) instead of the local store. The walks overlap
# requests, play Nova's flows with paused agents and run agents in PID
# namespaces (tests/cinder_model_overlap.py).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
hours=1
seed=
export BLOBCR_MODEL_BACKEND=local
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
export BLOBCR_MODEL_HOURS=$hours BLOBCR_MODEL_STEPS=$steps BLOBCR_MODEL_SEEDS=1 \
    BLOBCR_MODEL_RADOS_SEEDS=1
if [ -n "$seed" ]; then
    export BLOBCR_MODEL_SEED=$seed
fi
exec .venv/bin/pytest -p no:cacheprovider -x -s \
    tests/integration/test_cinder_model.py
