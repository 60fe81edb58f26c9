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

# The agent's own user, as a host that runs it unprivileged needs it
# (doc/source/install.rst, "An unprivileged agent"), for the tests that
# run it so (tests/functional/test_unprivileged_agent.py):
#   - the system user "blobcr" (BLOBCR_AGENT_USER), and the other
#     services' users, one each (tools/service-users.sh);
#   - user_allow_other in /etc/fuse.conf, so that a mount made through
#     fusermount3 by that user lets root (QEMU, losetup) in;
#   - a sudoers rule that lets it start the privileged daemon from the
#     virtualenv VENV through blobcr-privsep-helper, which takes no
#     argument but a root-owned configuration file, the context and the
#     socket path (the lab's configuration files vary per test).
#   bash tools/agent-user.sh VENV
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
venv=$(cd "${1:?usage: agent-user.sh VENV}" && pwd)
user=${BLOBCR_AGENT_USER:-blobcr}

. "$top/tools/lib/apt.sh"
ensure_packages sudo fuse3

if ! id -u "$user" >/dev/null 2>&1; then
    useradd --system --user-group --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin "$user"
fi
bash "$top/tools/service-users.sh" >/dev/null
touch /etc/fuse.conf
sed -i -e '$a\' /etc/fuse.conf      # a last line ended, before one is added
if ! grep -qx 'user_allow_other' /etc/fuse.conf; then
    echo 'user_allow_other' >> /etc/fuse.conf
fi
# One file per virtualenv (each clone has its own), named so that sudo
# reads it (no dot in the name).
rule=/etc/sudoers.d/blobcr-agent-$(echo -n "$venv" | md5sum | cut -c1-12)
staged=$(mktemp)
echo "$user ALL=(root) NOPASSWD: $venv/bin/blobcr-privsep-helper" > "$staged"
visudo -cqf "$staged"
install -m 0440 "$staged" "$rule"
rm -f "$staged"
echo "agent-user: $user may start $venv/bin/blobcr-privsep-helper ($rule)" >&2
