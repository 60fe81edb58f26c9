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

# Run the benchmarks of doc/source/benchmarks.rst that need nothing but
# this machine and a micro Ceph cluster on 127.0.0.1 (started here,
# stopped at the end), each with its defaults, and write each result to
# doc/source/_static/<name>.json (a PNG beside it where the benchmark
# draws one). The docs' tables are read from these files.
#
#   bash tools/run-benchmarks.sh [NAME ...]
#
# NAMEs (default: all, in this order): peers interval-rados
# persist-rados persist-local repo-local repo-rados mirror guest-io (fio
# on the loop device over a cluster volume's mirror file, the file, a
# plain file and RBD cache off and writeback) flush (BlobCR
# cluster and host durability, a plain file and RBD, into
# flush-durability.json) host-loss (the data each peer loses with its
# host, measured by losing it) proxy cinder (on a cloud of its own:
# blobcr_bench/cinder_stack.py; 64 MiB and 1 GiB dirty) handoff
# interval-local protect busy-local busy-rados busy-flush-rados (checkpoints every 2 s
# under fio writing 4 KiB at queue depth 8, O_DIRECT, 3 runs of 30 s;
# busy-flush-rados: the writer flushes every 16 writes, durability cluster). Progress and each benchmark's log go to
# stderr. Not here: scale (about 20 minutes), checkpoint and restart;
# their commands are in benchmarks.rst.
# Nothing else should run on the machine meanwhile: every figure is a
# ratio against a baseline of the same run, but a busy machine widens
# the spread.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
[ -x .venv/bin/blobcr-bench ] || bash tools/install-deps.sh
out=doc/source/_static
all="peers interval-rados persist-rados persist-local repo-local repo-rados mirror guest-io flush host-loss proxy cinder handoff interval-local protect busy-local busy-rados busy-flush-rados"
busy=(checkpoint --interval 2 --iodepth 8 --write-size 4K --checkpoints 15
      --runs 3)
names=${*:-$all}
ceph=
cleanup() {
    if [ -n "$ceph" ]; then
        bash tools/ceph-cluster.sh stop "$ceph" >/dev/null 2>&1 || true
        rm -rf "$ceph"
    fi
}
trap cleanup EXIT
needs_ceph() {
    if [ -z "$ceph" ]; then
        ceph=$(mktemp -d /tmp/bench-ceph-XXXXXX)
        echo "run-benchmarks: starting a micro Ceph cluster in $ceph" >&2
        bash tools/ceph-cluster.sh start "$ceph" >&2
    fi
}
bench() {
    local name=$1; shift
    echo "run-benchmarks: $name: blobcr-bench $*" >&2
    local began=$SECONDS rc=0
    .venv/bin/blobcr-bench "$@" --json > "$out/$name.json.new" || rc=$?
    # A benchmark whose checks failed still writes its JSON ("valid":
    # false, the failed checks named): keep it, and go on to the others.
    if [ -s "$out/$name.json.new" ]; then
        mv "$out/$name.json.new" "$out/$name.json"
    else
        rm -f "$out/$name.json.new"
    fi
    echo "run-benchmarks: $name: $((SECONDS - began)) s, exit $rc," \
         "$out/$name.json" >&2
    if [ "$rc" != 0 ]; then
        failed="$failed $name"
    fi
}
failed=
for name in $names; do
    case $name in
        peers) needs_ceph
            bench peers peers --ceph-conf "$ceph/ceph.conf" --plot "$out/peers.png" ;;
        repo-local) bench repo-local repo ;;
        repo-rados) needs_ceph
            bench repo-rados repo --backend rados --ceph-conf "$ceph/ceph.conf" ;;
        persist-local) bench persist-local persist ;;
        persist-rados) needs_ceph
            bench persist-rados persist --backend rados --ceph-conf "$ceph/ceph.conf" ;;
        mirror) bench mirror-local-1g mirror ;;
        guest-io) needs_ceph    # the loop device stock Nova opens, and RBD
            bench guest-io-rados guest-io --rbd --backend rados \
                --ceph-conf "$ceph/ceph.conf" ;;
        flush) needs_ceph
            bench flush-durability flush --backend rados --rbd \
                --ceph-conf "$ceph/ceph.conf" ;;
        host-loss) needs_ceph
            bench host-loss host-loss --ceph-conf "$ceph/ceph.conf" ;;
        protect) bench protect protect ;;
        proxy) bench proxy-local proxy --plot "$out/proxy-local.png" ;;
        handoff) bench handoff handoff ;;
        interval-rados) needs_ceph
            bench checkpoint-interval-rados checkpoint --interval --backend rados \
                --ceph-conf "$ceph/ceph.conf" --plot "$out/checkpoint-interval-rados.png" ;;
        interval-local) bench checkpoint-interval-local checkpoint --interval ;;
        busy-local) bench checkpoint-busy-local "${busy[@]}" \
                --plot "$out/checkpoint-busy-local.png" ;;
        busy-rados) needs_ceph
            bench checkpoint-busy-rados "${busy[@]}" --backend rados \
                --ceph-conf "$ceph/ceph.conf" --plot "$out/checkpoint-busy-rados.png" ;;
        busy-flush-rados) needs_ceph    # the writer flushes every 16 writes
            bench checkpoint-busy-flush-rados "${busy[@]}" --fsync 16 \
                --durability cluster --backend rados --ceph-conf "$ceph/ceph.conf" \
                --plot "$out/checkpoint-busy-flush-rados.png" ;;
        cinder)
            echo "run-benchmarks: cinder: a cloud of its own (cinder_stack)" >&2
            began=$SECONDS
            # Not 4 GiB dirty: with 'cluster' durability the write-ahead
            # log keeps the dirty data three times over in the metadata
            # pool until the next version is stable, and 4 GiB filled
            # OSDs of 20 GiB (benchmarks.rst).
            .venv/bin/python -m blobcr_bench.cinder_stack -- --runs 3 \
                --write-mib 64,1024 --plot "$out/cinder-rbd.png" \
                > "$out/cinder-rbd.json.new"
            mv "$out/cinder-rbd.json.new" "$out/cinder-rbd.json"
            echo "run-benchmarks: cinder: $((SECONDS - began)) s" >&2 ;;
        *) echo "run-benchmarks: unknown benchmark $name (known: $all)" >&2
           exit 2 ;;
    esac
done
if [ -n "$failed" ]; then
    echo "run-benchmarks: failed or invalid:$failed" >&2
    exit 1
fi
