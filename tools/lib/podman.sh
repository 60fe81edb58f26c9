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

# Sourced by the tools: the podman command, in the array "podman", and
# the options of the commands that start containers (run, create, build's
# RUN steps), in "podman_limits". blobcr_lab/containers.py makes the same
# choices, for the same reasons:
# - runc, not crun (Debian's first choice): crun 1.8 refuses a host
#   whose cgroups are hybrid (v1 controllers, and one in v2), as the
#   project's CI VM's are; runc runs on v1, hybrid and v2 alike;
# - on a host whose PID 1 is not systemd (a container or a VM), podman's
#   defaults (systemd's cgroup manager, journald's events) fail: podman
#   then manages the cgroups itself and logs its events to a file;
# - without CAP_SYS_RESOURCE (the CI VM's root lacks it), the container's
#   process cannot raise its limits to podman's defaults (1048576 open
#   files, 4194304 processes): they are then this process's hard limits,
#   the processes' at most kernel.pid_max (runc failed above it there).
# shellcheck disable=SC2034
podman=(podman --runtime runc)
if [ ! -d /run/systemd/system ]; then
    podman+=(--cgroup-manager=cgroupfs --events-backend=file)
fi
podman_limits=()
capabilities=$(awk '/^CapEff:/ {print $2}' /proc/self/status)
if (( ((16#$capabilities) >> 24 & 1) == 0 )); then
    files=$(ulimit -Hn)
    processes=$(ulimit -Hu)
    pid_max=$(cat /proc/sys/kernel/pid_max)
    if [ "$processes" = unlimited ] || [ "$processes" -gt "$pid_max" ]; then
        processes=$pid_max
    fi
    podman_limits=(--ulimit "nofile=$files:$files"
                   --ulimit "nproc=$processes:$processes")
fi
