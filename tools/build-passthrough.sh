#!/bin/bash
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

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' \
        || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "build-passthrough: installing ${missing[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" \
        >/dev/null
fi

mkdir -p "$(dirname "$out")"
# An absolute OUT so that make -C does not resolve it against native/bench.
case $out in
    /*) ;;
    *) out=$(pwd)/$out ;;
esac
make -s -C "$top/native/bench" OUT="$out"
