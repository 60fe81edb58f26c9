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

# Build the small real guest of the end-to-end tests: OUTDIR/vmlinuz (the
# Debian 12 kernel), OUTDIR/vmlinux (the same, uncompressed ELF: QEMU boots
# it through PVH about 5 s sooner under TCG) and OUTDIR/initramfs.img
# (gzip'd newc cpio: static busybox, the virtio/ext4 modules, qemu-ga,
# Debian's python3.11 with a pruned standard library, tools/guest/init as
# /init).
#   tools/build-guest.sh [OUTDIR]      (default: <repo>/build/guest)
# As root, installs the host packages it needs first, only those missing
# (QEMU, libvirt's daemon for qemu:///session, busybox-static, cpio). The
# kernel and qemu-guest-agent are only downloaded and unpacked into
# OUTDIR/cache: the host neither boots nor runs them. A second run with the
# same inputs does nothing (OUTDIR/stamp records them).
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$top/build/guest}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cache=$out/cache
guest=$top/tools/guest
host_python=/usr/bin/python3.11
py_lib=/usr/lib/python3.11
modules=(virtio_pci virtio_blk virtio_net virtio_console virtio_rng
         crc32c_generic ext4)

. "$top/tools/lib/apt.sh"
. "$top/tools/lib/service-packages.sh"
ensure_packages --no-recommends "${guest_packages[@]}"

# Two builds at once (two test sessions) would share the staging tree.
exec 9>"$out/.lock"
flock 9

candidate() {
    apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ {print $2}'
}
kernel_pkg() {
    apt-cache depends linux-image-amd64 2>/dev/null \
        | awk '/Depends: linux-image-[0-9]/ {print $2; exit}'
}
kpkg=$(kernel_pkg)
qver=$(candidate qemu-guest-agent)
if [ -z "$kpkg" ] || [ -z "$qver" ]; then
    # No package lists yet (ensure_packages updates only to install).
    apt-get update -qq
    kpkg=$(kernel_pkg)
    qver=$(candidate qemu-guest-agent)
fi
kver=$(candidate "$kpkg")
if [ -z "$kpkg" ] || [ -z "$kver" ] || [ -z "$qver" ]; then
    echo "build-guest: no candidate for linux-image-amd64 or" \
         "qemu-guest-agent in apt" >&2
    exit 1
fi
kabi=${kpkg#linux-image-}

inputs=$(
    echo "kernel $kpkg $kver"
    echo "qemu-guest-agent $qver"
    dpkg-query -W -f='${Package} ${Version}\n' busybox-static \
        libpython3.11-minimal libpython3.11-stdlib python3.11-minimal
    echo "modules ${modules[*]}"
    cd "$top" && sha256sum tools/build-guest.sh tools/guest/*
)
if [ -f "$out/stamp" ] && [ -f "$out/vmlinuz" ] && [ -f "$out/vmlinux" ] \
        && [ -f "$out/initramfs.img" ] \
        && [ "$(cat "$out/stamp")" = "$inputs" ]; then
    echo "build-guest: $out is up to date" >&2
    exit 0
fi

# deb_path PACKAGE VERSION: the cached .deb, downloaded when missing.
deb_path() {
    local file=$cache/debs/${1}_${2//:/%3a}_amd64.deb
    if [ ! -f "$file" ]; then
        mkdir -p "$cache/debs"
        echo "build-guest: downloading $1 $2" >&2
        # apt warns that _apt cannot write here; as root it downloads anyway.
        if ! (cd "$cache/debs" && apt-get download -q "$1=$2") \
                >"$cache/download.log" 2>&1 || [ ! -f "$file" ]; then
            grep -v unsandboxed "$cache/download.log" >&2 || true
            echo "build-guest: cannot download $1 $2" >&2
            exit 1
        fi
    fi
    echo "$file"
}
unpack() {
    local deb=$1 dir=$2
    if [ ! -f "$dir/.done" ]; then
        rm -rf "$dir"
        mkdir -p "$dir"
        dpkg-deb -x "$deb" "$dir"
        touch "$dir/.done"
    fi
}
kdir=$cache/$kpkg-$kver
qdir=$cache/qemu-guest-agent-${qver//:/_}
unpack "$(deb_path "$kpkg" "$kver")" "$kdir"
unpack "$(deb_path qemu-guest-agent "$qver")" "$qdir"

root=$out/root
rm -rf "$root"
# Merged /usr as on the host, so that ldd's paths hold in the guest.
mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,usr/lib/x86_64-linux-gnu,usr/lib64}
mkdir -p "$root"/{etc,proc,sys,dev,tmp,run,root,mnt}
ln -s usr/lib "$root/lib"
ln -s usr/lib64 "$root/lib64"
chmod 1777 "$root/tmp"
# The kernel opens the console for /init before /init mounts devtmpfs.
mknod -m 600 "$root/dev/console" c 5 1

cp /bin/busybox "$root/bin/busybox"
for applet in $("$root/bin/busybox" --list-full); do
    [ -e "$root/$applet" ] || ln -s /bin/busybox "$root/$applet"
done
install -m 755 "$guest/init" "$root/init"
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
printf 'root:x:0:\n' >"$root/etc/group"
printf '127.0.0.1 localhost\n169.254.169.254 metadata\n' >"$root/etc/hosts"

# Kernel modules, dependencies first, in the order /init loads them.
kmods=$kdir/lib/modules/$kabi
mdest=$root/lib/modules
mkdir -p "$mdest"
"$host_python" "$guest/modules.py" "$kmods" "${modules[@]}" \
    >"$mdest/load.order"
while read -r m; do
    mkdir -p "$mdest/$(dirname "$m")"
    cp "$kmods/$m" "$mdest/$m"
done <"$mdest/load.order"
cp "$kdir/boot/vmlinuz-$kabi" "$out/vmlinuz.tmp"
"$host_python" "$guest/extract-vmlinux.py" "$out/vmlinuz.tmp" "$out/vmlinux.tmp"

# copy_libs FILE...: the shared libraries (and loader) they need.
copy_libs() {
    local f lib
    for f in "$@"; do
        if ldd "$f" | grep -q 'not found'; then
            echo "build-guest: $f: missing libraries:" >&2
            ldd "$f" | grep 'not found' >&2
            exit 1
        fi
        for lib in $(ldd "$f" | awk '/=> \// {print $3} /^\t\// {print $1}'); do
            [ -e "$root$lib" ] || cp -L "$lib" "$root$lib"
        done
    done
}

cp "$qdir/usr/sbin/qemu-ga" "$root/usr/bin/qemu-ga"
copy_libs "$root/usr/bin/qemu-ga"

# Python: Debian's interpreter (hashlib, socket, zlib... are built in) and
# its standard library without what a test scenario never uses.
cp "$host_python" "$root/usr/bin/python3.11"
ln -s python3.11 "$root/usr/bin/python3"
cp -a "$py_lib" "$root/usr/lib/python3.11"
pyroot=$root/usr/lib/python3.11
rm -rf "$pyroot"/{test,idlelib,tkinter,turtledemo,ensurepip,lib2to3} \
    "$pyroot"/{pydoc_data,distutils,venv,sqlite3,curses} \
    "$pyroot"/config-3.11-x86_64-linux-gnu "$pyroot"/turtle.py \
    "$pyroot"/site-packages "$pyroot"/dist-packages
rm -f "$pyroot"/lib-dynload/{_test,_ctypes_test,xx,_tkinter,_curses,_dbm}* \
    "$pyroot"/lib-dynload/{_sqlite3,_ssl,nis,ossaudiodev,readline}.*
find "$pyroot" -name __pycache__ -prune -exec rm -rf {} +
copy_libs "$root/usr/bin/python3.11" "$pyroot"/lib-dynload/*.so
# Bytecode that is valid whatever the files' times in the guest: under
# TCG, compiling the modules at each import would cost seconds.
"$host_python" -m compileall -q -j 0 --invalidation-mode unchecked-hash \
    "$pyroot" >/dev/null

# The staged tree must work as a root of its own.
chroot "$root" /usr/bin/python3 -c \
    'import json, http.client, urllib.request, hmac, hashlib, argparse
import subprocess, socket, base64, os
hmac.new(b"k", b"m", hashlib.sha256).hexdigest()' \
    || { echo "build-guest: python3 does not run in the guest tree" >&2;
         exit 1; }
chroot "$root" /usr/bin/qemu-ga --version >/dev/null \
    || { echo "build-guest: qemu-ga does not run in the guest tree" >&2;
         exit 1; }

(cd "$root" && find . -mindepth 1 -print0 | LC_ALL=C sort -z \
    | cpio --null -o -H newc -R 0:0 --quiet) | gzip -6 >"$out/initramfs.img.tmp"
mv "$out/vmlinuz.tmp" "$out/vmlinuz"
mv "$out/vmlinux.tmp" "$out/vmlinux"
mv "$out/initramfs.img.tmp" "$out/initramfs.img"
printf '%s\n' "$inputs" >"$out/stamp"
echo "build-guest: $out/vmlinuz ($kpkg $kver)," \
     "$out/initramfs.img ($(du -h "$out/initramfs.img" | cut -f1))" >&2
