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
# Give BlobCR its own connection type in the Nova and os-brick that a
# Python runs: devstack/patches/ adds 'blobcr' to Nova's table of libvirt
# volume drivers and BLOBCR to os-brick's table of connectors (both are
# fixed tables, with no plug-in point). Each patch is applied where that
# Python imports the package from (a venv's site-packages, or a source
# tree installed with pip -e, as devstack does), once: a patch already
# there is left alone. A patch that does not fit (another Nova or
# os-brick) stops with a message; such hosts keep the GPFS route
# ([backend] blobcr_connection_type = gpfs).
#
#   tools/apply-connection-patches.sh PYTHON
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
py=${1:?usage: $0 PYTHON}

# The patched tables name blobcr_nova's classes: never patch a Python
# that cannot import them (Nova would fail to attach any BlobCR volume).
"$py" -c 'import blobcr_nova.brick_connector' 2>/dev/null || {
    echo "apply-connection-patches: $py cannot import blobcr_nova: install blobcr-openstack into it first" >&2
    exit 1
}

apply() {   # PACKAGE PATCH
    local package=$1 patch=$2 root
    if ! root=$("$py" -c "import os, $package; print(os.path.dirname(os.path.dirname($package.__file__)))" 2>/dev/null); then
        echo "apply-connection-patches: $package is not installed for $py: skipped" >&2
        return 0
    fi
    if patch -d "$root" -p1 -R --dry-run -s -f < "$patch" >/dev/null 2>&1; then
        echo "apply-connection-patches: $(basename "$patch"): already in $root" >&2
        return 0
    fi
    if ! patch -d "$root" -p1 --forward --dry-run -s -f < "$patch" >/dev/null 2>&1; then
        echo "apply-connection-patches: $(basename "$patch") does not fit the $package in $root; set blobcr_connection_type = gpfs on its backends" >&2
        return 1
    fi
    patch -d "$root" -p1 --forward -s -f --no-backup-if-mismatch < "$patch"
    echo "apply-connection-patches: $(basename "$patch"): applied in $root" >&2
}

apply nova "$top/devstack/patches/nova-blobcr-volume-driver.patch"
apply os_brick "$top/devstack/patches/os-brick-blobcr-connector.patch"
