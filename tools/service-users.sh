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

# The Unix users of BlobCR's services, one per service, as the units of
# etc/systemd name them (User=, and Group= the user's own group), made
# the way install.rst makes them (issue 54, finding 2: no service reads
# another's credentials, and none but the agent's passes its admin
# socket's uid check). With --conf-dir DIR, each configuration file a
# unit names (--config-file) that DIR holds, by its base name, is given
# to root and the service's group, mode 0640: the service reads it and
# cannot change it, no other service's user reads it.
#   bash tools/service-users.sh [--conf-dir DIR]
# Prints "SERVICE USER GROUP" for each unit. tools/agent-user.sh runs it
# (the tests' users); tests/functional/test_admin_socket.py runs it too.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
conf_dir=
if [[ ${1:-} == --conf-dir ]]; then
    conf_dir=${2:?usage: service-users.sh [--conf-dir DIR]}
fi

for unit in "$top"/etc/systemd/*.service; do
    service=$(basename "$unit" .service)
    user=$(sed -n 's/^User=//p' "$unit")
    group=$(sed -n 's/^Group=//p' "$unit")
    if [[ -z $user || $group != "$user" ]]; then
        echo "service-users: $unit: User= and Group= must name the service's own user and group" >&2
        exit 1
    fi
    if ! id -u "$user" >/dev/null 2>&1; then
        useradd --system --user-group --no-create-home \
            --home-dir /nonexistent --shell /usr/sbin/nologin "$user"
    fi
    if [[ -n $conf_dir ]]; then
        read -r -a argv <<<"$(sed -n 's/^ExecStart=//p' "$unit")"
        for ((i = 0; i + 1 < ${#argv[@]}; i++)); do
            [[ ${argv[i]} == --config-file ]] || continue
            conf=$conf_dir/${argv[i + 1]##*/}
            if [[ -f $conf ]]; then
                chown "root:$group" "$conf"
                chmod 0640 "$conf"
            fi
        done
    fi
    echo "$service $user $group"
done
