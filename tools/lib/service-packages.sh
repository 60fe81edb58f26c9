# shellcheck shell=bash
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

# The Debian packages of the services the tests start themselves: the
# guests' QEMU and libvirt (tools/build-guest.sh) and RabbitMQ
# (tools/rabbitmq.sh). Those scripts install them when run alone;
# tools/install-deps.sh installs them before any test runs, so that no
# test depends on another having run a script first.
# No libvirt-daemon-system: no system libvirtd, no default network; the
# tests use qemu:///session, whose daemon the client starts on demand.
# shellcheck disable=SC2034
guest_packages=(qemu-system-x86 libvirt-daemon libvirt-daemon-driver-qemu
                libvirt-clients busybox-static cpio e2fsprogs python3.11
                libpython3.11-stdlib)
# shellcheck disable=SC2034
broker_packages=(rabbitmq-server)
# The container images of etc/container (tools/build-images.sh,
# tests/integration/test_containers.py): podman builds and runs them
# (rootful, no daemon); debootstrap makes their Debian base from the apt
# mirror, as no container registry need be reachable; runc: the runtime
# tools/lib/podman.sh picks (crun refuses hybrid cgroups).
# shellcheck disable=SC2034
container_packages=(podman runc debootstrap)
