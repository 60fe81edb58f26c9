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
# BlobCR's own 'blobcr' connection type, kept for clouds that used it
# (blobcr_connection_type = blobcr; the default, 'local', patches nothing
# and this script is run by nothing of the project's own). It edits the
# Nova and os-brick that a Python runs, which their next upgrade undoes: devstack/patches/ adds 'blobcr' to Nova's table of libvirt
# volume drivers and BLOBCR to os-brick's table of connectors (both are
# fixed tables, with no plug-in point). Each patch is applied where that
# Python imports the package from (a venv's site-packages, or a source
# tree installed with pip -e, as devstack does), once: a patch already
# there is left alone. A patch that does not fit (another Nova or
# os-brick) stops with a message; such hosts keep the GPFS route
# ([backend] blobcr_connection_type = gpfs).
#
#   tools/apply-connection-patches.sh PYTHON            apply them
#   tools/apply-connection-patches.sh --check PYTHON    do they fit? (edits nothing)
#   tools/apply-connection-patches.sh --revert PYTHON   back to stock
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
mode=apply
case ${1:-} in
    --check|--revert) mode=${1#--}; shift ;;
esac
py=${1:?usage: $0 [--check|--revert] PYTHON}

# The patched tables name blobcr_nova's classes: never patch a Python
# that cannot import them (Nova would fail to attach any BlobCR volume).
if [ "$mode" = apply ]; then
    "$py" -c 'import blobcr_nova.brick_connector' 2>/dev/null || {
        echo "apply-connection-patches: $py cannot import blobcr_nova: install blobcr-openstack into it first" >&2
        exit 1
    }
fi

one() {   # PACKAGE PATCH
    local package=$1 patch=$2 root applied=
    if ! root=$("$py" -c "import os, $package; print(os.path.dirname(os.path.dirname($package.__file__)))" 2>/dev/null); then
        echo "apply-connection-patches: $package is not installed for $py: skipped" >&2
        return 0
    fi
    patch -d "$root" -p1 -R --dry-run -s -f < "$patch" >/dev/null 2>&1 && applied=1
    case $mode in
    revert)
        if [ -n "$applied" ]; then
            patch -d "$root" -p1 -R -s -f --no-backup-if-mismatch < "$patch"
            echo "apply-connection-patches: $(basename "$patch"): reverted in $root" >&2
        else
            echo "apply-connection-patches: $(basename "$patch"): not in $root" >&2
        fi
        return 0 ;;
    esac
    if [ -n "$applied" ]; then
        echo "apply-connection-patches: $(basename "$patch"): already in $root" >&2
        return 0
    fi
    if ! patch -d "$root" -p1 --forward --dry-run -s -f < "$patch" >/dev/null 2>&1; then
        echo "apply-connection-patches: $(basename "$patch") does not fit the $package in $root; use blobcr_connection_type = local" >&2
        return 1
    fi
    if [ "$mode" = check ]; then
        echo "apply-connection-patches: $(basename "$patch"): fits $root" >&2
        return 0
    fi
    patch -d "$root" -p1 --forward -s -f --no-backup-if-mismatch < "$patch"
    echo "apply-connection-patches: $(basename "$patch"): applied in $root" >&2
}

one nova "$top/devstack/patches/nova-blobcr-volume-driver.patch"
one os_brick "$top/devstack/patches/os-brick-blobcr-connector.patch"
