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

# Build blobcr-passthrough, the plain libfuse3 baseline of
# `blobcr-bench mirror`, to OUT_PATH. As root, installs the Debian
# packages it needs (compiler, fuse3 headers, fusermount3, fio) first,
# only those missing.
set -euo pipefail

if [ $# -ne 1 ]; then
    echo "usage: $0 OUT_PATH" >&2
    exit 2
fi
out=$1
top=$(cd "$(dirname "$0")/.." && pwd)
packages=(gcc make pkg-config libfuse3-dev fuse3 fio)

. "$top/tools/lib/apt.sh"
ensure_packages "${packages[@]}"

mkdir -p "$(dirname "$out")"
# An absolute OUT so that make -C does not resolve it against native/bench.
case $out in
    /*) ;;
    *) out=$(pwd)/$out ;;
esac
make -s -C "$top/native/bench" OUT="$out"
