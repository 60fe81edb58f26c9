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

# Neutron's API for the lab's real Nova (blobcr_lab/nova.py): nova-api
# and nova-compute ask Neutron about every server's ports, even one with
# none (show, resize, shelve, delete). Neutron lives in a venv of its
# own, build/neutron-venv (neutron-lib registers flake8 checks that must
# stay out of the project venv), that sees the project venv's OpenStack
# libraries through a .pth file and adds only Neutron's own packages.
# Idempotent: nothing runs when it imports already.
#   tools/install-neutron.sh
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
venv=build/neutron-venv
if "$venv/bin/python" -c 'import neutron.wsgi' 2>/dev/null; then
    exit 0
fi
[ -x .venv/bin/python ] || { echo "install-neutron: no project venv (run tools/install-deps.sh)" >&2; exit 1; }
python3 -m venv "$venv"
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
nsite=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$site" > "$nsite/blobcr-openstack-venv.pth"
echo "install-neutron: installing neutron 29 (the release of nova 34) into $venv" >&2
"$venv/bin/pip" install -q 'neutron==29.*'
"$venv/bin/python" -c 'import neutron.wsgi' \
    || { echo "install-neutron: neutron does not load from $venv" >&2; exit 1; }
