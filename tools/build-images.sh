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

# Build the container images of etc/container with podman (rootful, no
# daemon), as root, from Debian's apt mirror and PyPI alone: no container
# registry need be reachable (the project's CI reaches none).
#   1. localhost/blobcr-debian:bookworm: a debootstrap (minbase) of
#      Debian 12 from the mirror, imported (its tarball kept in the cache);
#   2. localhost/blobcr-kolla-base:bookworm: etc/container/kolla-base, a
#      stand-in of kolla's base image with kolla's own start scripts,
#      taken from the kolla release on PyPI pinned here (KOLLA_VERSION);
#   3. the wheels: pip wheel of the tree's distributions and of their
#      requirements (upper-constraints.txt; Cinder at the series
#      service-requirements.txt pins), on this host (Debian 12, the
#      images' release: the C core, pyfuse3 and libvirt-python are built
#      here, against the same libraries);
#   4. localhost/blobcr-agent and localhost/blobcr-cinder-volume
#      (etc/container/blobcr-agent, etc/container/cinder-volume).
# Cached in BLOBCR_IMAGE_CACHE (build/containers): the base's tarball,
# every wheel, podman's layers. A second run rebuilds the tree's own
# wheels and the layers from them on, nothing else.
#   tools/build-images.sh [--refresh-base]
# --refresh-base: debootstrap again (a newer point release).
# Each step's time goes to stderr. Exit status 77: podman cannot run a
# container on this host (what it said is on stderr).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cache=${BLOBCR_IMAGE_CACHE:-$top/build/containers}
venv=${BLOBCR_VENV:-$top/.venv}
mirror=${BLOBCR_DEBIAN_MIRROR:-http://deb.debian.org/debian}
security=${BLOBCR_DEBIAN_SECURITY:-http://deb.debian.org/debian-security}
KOLLA_VERSION=23.0.0
debian_image=localhost/blobcr-debian:bookworm
base_image=localhost/blobcr-kolla-base:bookworm
refresh=
[ "${1:-}" = "--refresh-base" ] && refresh=1

# shellcheck source=tools/lib/apt.sh
. "$top/tools/lib/apt.sh"
# shellcheck source=tools/lib/service-packages.sh
. "$top/tools/lib/service-packages.sh"
ensure_packages --no-recommends "${container_packages[@]}"
# shellcheck source=tools/lib/podman.sh
. "$top/tools/lib/podman.sh"
[ -x "$venv/bin/pip" ] \
    || { echo "build-images: no venv at $venv (run tools/install-deps.sh)" >&2; exit 1; }

mkdir -p "$cache"
began=$SECONDS
step=$SECONDS
took() {
    echo "build-images: $1 in $((SECONDS - step)) s" >&2
    step=$SECONDS
}

# 1. Debian's base.
tarball=$cache/debian-bookworm.tar
if [ -n "$refresh" ] || ! "${podman[@]}" image exists "$debian_image"; then
    if [ -n "$refresh" ] || [ ! -s "$tarball" ]; then
        rootfs=$cache/rootfs.tmp
        rm -rf "$rootfs"
        echo "build-images: debootstrap bookworm from $mirror" >&2
        debootstrap --variant=minbase bookworm "$rootfs" "$mirror" \
            >"$cache/debootstrap.log" 2>&1 \
            || { echo "build-images: debootstrap failed (see $cache/debootstrap.log)" >&2; exit 1; }
        cat >"$rootfs/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb $security bookworm-security main
EOF
        rm -rf "$rootfs"/var/cache/apt/archives/*.deb \
            "$rootfs"/var/lib/apt/lists/*
        tar -C "$rootfs" --numeric-owner -cf "$tarball.tmp" .
        mv "$tarball.tmp" "$tarball"
        rm -rf "$rootfs"
    fi
    "${podman[@]}" import --quiet --change 'CMD ["/bin/bash"]' "$tarball" \
        "$debian_image" >/dev/null
fi
took "Debian's base ($debian_image)"
# Can podman run a container on this host at all? If not, say why, with
# exit status 77 (tests/integration/test_containers.py skips on it): a
# failure after this is the recipes'.
if ! probe=$("${podman[@]}" run --rm --network host "${podman_limits[@]}" \
                 "$debian_image" true 2>&1); then
    echo "build-images: podman cannot run a container here: $probe" >&2
    exit 77
fi

# 2. kolla's start scripts, from its release on PyPI.
context=$cache/context
kolla=$context/kolla
if [ "$(cat "$kolla/version" 2>/dev/null)" != "$KOLLA_VERSION" ]; then
    "$venv/bin/pip" download -q --no-deps -d "$cache/downloads" \
        "kolla==$KOLLA_VERSION"
    rm -rf "$kolla"
    mkdir -p "$kolla"
    "$venv/bin/python" - "$cache/downloads/kolla-$KOLLA_VERSION-py3-none-any.whl" \
        "$kolla" <<'EOF'
import os
import sys
import zipfile

wheel, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    for name in ('set_configs.py', 'start.sh', 'copy_cacerts.sh',
                 'install_projects.sh', 'sudoers'):
        with open(os.path.join(out, name), 'wb') as f:
            f.write(z.read('kolla/docker/base/' + name))
EOF
    echo "$KOLLA_VERSION" >"$kolla/version"
fi
took "kolla $KOLLA_VERSION's start scripts"

# 3. The wheels, per image: deps/ (from PyPI or built here once, kept in
# the pool) and blobcr/ (the tree's, built each time).
pool=$cache/wheelhouse
mkdir -p "$pool"
cinder=$(sed -e 's/[[:space:]]*#.*//' "$top/service-requirements.txt" \
             | grep -E '^cinder[=<>!~]')
wheels() {
    local image=$1 tmp name
    shift
    tmp=$(mktemp -d "$cache/wheels.XXXXXX")
    "$venv/bin/pip" wheel -q --wheel-dir "$tmp" --find-links "$pool" \
        -c "$top/upper-constraints.txt" "$@" >&2
    rm -rf "${context:?}/$image"
    mkdir -p "$context/$image/deps" "$context/$image/blobcr"
    for wheel in "$tmp"/*.whl; do
        name=$(basename "$wheel")
        case $name in
            blobcr_*) mv "$wheel" "$context/$image/blobcr/" ;;
            *)
                [ -e "$pool/$name" ] || cp -p "$wheel" "$pool/"
                # The pool's copy (its time too): an unchanged
                # dependency keeps podman's cached layer.
                cp -p "$pool/$name" "$context/$image/deps/"
                ;;
        esac
    done
    rm -rf "$tmp"
}
wheels blobcr-agent "$top/blobcr-common" "$top"
wheels cinder-volume "$top/blobcr-common" "$top/blobcr-cinder" "$cinder"
took "the wheels"

# 4. The images.
build() {
    local tag=$1 recipe=$2 log
    shift 2
    log=$cache/build-$(basename "$(dirname "$recipe")").log
    "${podman[@]}" build --network host --layers "${podman_limits[@]}" \
        -f "$top/etc/container/$recipe" -t "$tag" "$@" "$context" \
        >"$log" 2>&1 \
        || { tail -n 40 "$log" >&2
             echo "build-images: $tag failed (all of it: $log)" >&2; exit 1; }
    took "$tag"
}
build "$base_image" kolla-base/Dockerfile --build-arg "DEBIAN=$debian_image"
build localhost/blobcr-agent blobcr-agent/Dockerfile \
    --build-arg "BASE=$base_image"
build localhost/blobcr-cinder-volume cinder-volume/Dockerfile \
    --build-arg "BASE=$base_image"
echo "build-images: done in $((SECONDS - began)) s" >&2
