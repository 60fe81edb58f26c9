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

# Install everything BlobCR needs on Debian 12, as root, idempotently:
# Debian packages (only the missing ones), a virtualenv in .venv with the
# Python requirements, the project itself (which builds the C core in
# native/), and Debian's librados binding linked into the venv (PyPI has
# none; Debian's python3.11 and the venv share the ABI).
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
venv=${BLOBCR_VENV:-$top/.venv}
packages=(
    python3 python3-venv python3-dev build-essential pkg-config git
    # The full-cache tests make small ext4 and XFS file systems.
    e2fsprogs xfsprogs
    ceph-mon ceph-osd ceph-mgr ceph-common python3-rados librados-dev
    # librbd's binding: Cinder's RBD driver (the baseline of blobcr-bench
    # cinder) and the benchmark's own writes and snapshot checks.
    python3-rbd
    fuse3 libfuse3-dev fio qemu-utils libvirt-dev
    # qemu-storage-daemon: the QEMU peers of blobcr-bench peers.
    qemu-system-common
    # A boot disk in a BlobCR volume for the real Nova test
    # (blobcr_lab/nova.py make_boot_disk: FAT + syslinux, no mount).
    dosfstools mtools syslinux
    # Headless browser for the Horizon panel's page test
    # (tests/integration/test_dashboard_browser.py, selenium drives it).
    chromium chromium-driver
    # Lints the devstack plugin (tests/integration/test_devstack_plugin.py).
    shellcheck
    # xgettext: the Horizon panel's message catalogue (tools/extract_messages.py).
    gettext
    # tools/apply-connection-patches.sh (Nova's and os-brick's tables).
    patch
    # blobcr-bench scale: hosts as network namespaces (ip netns, veth,
    # bridge) entered with nsenter.
    iproute2 util-linux
    # systemd-analyze verifies etc/systemd/ (tests/unit/test_systemd_units.py).
    systemd
)

. "$top/tools/lib/apt.sh"
ensure_packages "${packages[@]}"
# CRIU for blobcr-checkpoint --criu (its test says what the kernel refuses).
ensure_packages --no-recommends criu
# The services the tests start (RabbitMQ, libvirtd, QEMU) and the container
# engine that builds and runs the images (podman, debootstrap): installed here,
# before either test lane starts, not by whichever test first runs
# tools/rabbitmq.sh or tools/build-guest.sh.
. "$top/tools/lib/service-packages.sh"
ensure_packages --no-recommends "${guest_packages[@]}" "${broker_packages[@]}" \
    "${container_packages[@]}"

if [ ! -x "$venv/bin/python" ]; then
    echo "install-deps: creating $venv" >&2
    /usr/bin/python3 -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip
fi
# What the agent, the Cinder driver and the Nova side share (pure Python),
# a distribution of its own, before what requires it.
"$venv/bin/pip" install -q -e "$top/blobcr-common"
"$venv/bin/pip" install -q -r "$top/requirements.txt" \
    -r "$top/test-requirements.txt"
# Editable install: builds blobcr_agent/_native from native/ in place.
"$venv/bin/pip" install -q -e "$top"
# The Cinder driver, the Nova side and the guest side: distributions of
# their own, pure Python, without the agent (cinder-volume's and Nova's
# environments need no C compiler, libfuse3 or libvirt-python for them).
"$venv/bin/pip" install -q -e "$top/blobcr-cinder" -e "$top/blobcr-nova" \
    -e "$top/blobcr-guest"
# The lab and the benchmarks (blobcr-demo, blobcr-bench), a distribution
# of their own (lab/setup.cfg): cloud hosts install the product alone.
"$venv/bin/pip" install -q -e "$top/lab"
# The client (openstack blobcr ..., blobcr-restart) and the Horizon panel,
# distributions of their own: a workstation or a Horizon host installs
# them without the agent's C core, libfuse3 or libvirt.
"$venv/bin/pip" install -q -e "$top/python-blobcrclient" \
    -e "$top/blobcr-dashboard"

bash "$top/tools/link-rados.sh" "$venv"
# Debian's librbd binding, linked the same way (PyPI has none either).
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
for so in /usr/lib/python3/dist-packages/rbd.cpython-*.so; do
    ln -sf "$so" "$site/"
done
"$venv/bin/python" -c 'import rados, rbd, blobcr_agent._native' \
    || { echo "install-deps: the rados or rbd binding or the C core does not load" >&2; exit 1; }
# The agent's own user, for the tests that run it unprivileged.
bash "$top/tools/agent-user.sh" "$venv"
bash "$top/tools/install-openstack.sh" "$venv"
# Tempest and cinder-tempest-plugin, in a virtualenv of their own.
bash "$top/tools/install-tempest.sh"
# Neutron's API for the real Nova of the Nova flows test.
bash "$top/tools/install-neutron.sh"
echo "install-deps: ready ($venv)" >&2
