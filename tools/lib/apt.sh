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

# Sourced by the tools: install the Debian packages of the arguments that
# are missing, and only those (apt-get update only when one is).
#   ensure_packages [--no-recommends] PACKAGE...
# Package scripts may not start services while we install: the project
# starts its own (RabbitMQ, libvirt) on loopback, under its own data dirs,
# so a policy-rc.d refuses every start for the duration of the install.
ensure_packages() {
    local missing=() p extra=()
    if [ "${1:-}" = "--no-recommends" ]; then
        extra=(--no-install-recommends)
        shift
    fi
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null \
            | grep -q 'ok installed' || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        echo "$(basename "$0"): installing ${missing[*]}" >&2
        local policy=/usr/sbin/policy-rc.d placed=
        if [ ! -e "$policy" ]; then
            printf '#!/bin/sh\nexit 101\n' >"$policy"
            chmod 755 "$policy"
            placed=1
        fi
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${extra[@]}" \
            "${missing[@]}" >/dev/null || { [ -n "$placed" ] && rm -f "$policy"; return 1; }
        [ -n "$placed" ] && rm -f "$policy"
    fi
    return 0
}
