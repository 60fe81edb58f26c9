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

# Install the real OpenStack services the integration tests drive
# (blobcr_lab/openstack.py): Keystone, Cinder and Glance from PyPI, the openstack
# CLI, keystonemiddleware, gunicorn and psycopg2, and Nova (whose libvirt
# volume drivers and vendordata client the blobcr_nova tests run in-process),
# into the project venv
# itself, since cinder-volume must import blobcr_cinder; and Debian's
# PostgreSQL server, which the harness runs privately for their databases
# (sqlite failed with "database is locked"). Idempotent: when every
# requirement is already met, neither apt nor pip runs (about 1 s).
# Then checks that the venv is still consistent and that what the rest of
# the project imports (rados, the C core, pyfuse3, oslo.messaging,
# libvirt) still loads next to the services.
#   tools/install-openstack.sh [VENV]
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
venv=${1:-${BLOBCR_VENV:-$top/.venv}}
py=$venv/bin/python
# The services and what the tests import of them: service-requirements.txt
# (tox's envs install the same file).
mapfile -t requirements < <(sed -e 's/[[:space:]]*#.*//' -e '/^[[:space:]]*$/d' \
    "$top/service-requirements.txt")

[ -x "$py" ] || { echo "install-openstack: no venv at $venv (run tools/install-deps.sh)" >&2; exit 1; }

# PostgreSQL: the harness runs its own server (initdb in a directory of its
# own, 127.0.0.1 only) and needs only the binaries. The package makes a
# default cluster and enables a system-wide service for it: when this
# script is what installs it, that service is disabled (ensure_packages
# already kept it from starting). A server installed before is left alone.
# shellcheck source=tools/lib/apt.sh
. "$top/tools/lib/apt.sh"
postgres_fresh=
dpkg-query -W -f='${Status}' postgresql 2>/dev/null | grep -q 'ok installed' \
    || postgres_fresh=1
ensure_packages --no-recommends postgresql
if [ -n "$postgres_fresh" ]; then
    update-rc.d postgresql disable >/dev/null 2>&1 || true
    if command -v deb-systemd-helper >/dev/null; then
        deb-systemd-helper disable postgresql.service >/dev/null 2>&1 || true
    fi
fi
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 \
    || { echo "install-openstack: no PostgreSQL server under /usr/lib/postgresql" >&2; exit 1; }

# Met when each requirement is installed at an allowed version (the
# dependencies were checked by pip when it installed them, and pip check
# below says if anything broke since).
requirements_met() {
    "$py" - "${requirements[@]}" <<'EOF'
import sys
from importlib import metadata

from packaging.requirements import Requirement

for spec in sys.argv[1:]:
    req = Requirement(spec)
    try:
        version = metadata.version(req.name)
    except metadata.PackageNotFoundError:
        sys.exit(1)
    if not req.specifier.contains(version, prereleases=True):
        sys.exit(1)
EOF
}

if ! requirements_met; then
    echo "install-openstack: installing ${requirements[*]} (a few minutes)" >&2
    "$venv/bin/pip" install -q "${requirements[@]}"
fi

"$venv/bin/pip" check >&2 \
    || { echo "install-openstack: the venv has conflicting requirements" >&2; exit 1; }
PYTHONWARNINGS=ignore "$py" -c 'import rados, blobcr_agent._native, cinder, keystone, glance.common.wsgi_app, glance_store' \
    || { echo "install-openstack: rados, the C core, cinder, keystone or glance does not load" >&2; exit 1; }
[ -f "$venv/etc/glance/glance-api-paste.ini" ] \
    || { echo "install-openstack: $venv/etc/glance/glance-api-paste.ini is missing" >&2; exit 1; }
PYTHONWARNINGS=ignore "$py" -c 'import nova.virt.libvirt.volume.volume, nova.virt.libvirt.volume.gpfs, nova.api.metadata.vendordata_dynamic' \
    || { echo "install-openstack: nova's libvirt volume drivers or vendordata client do not load" >&2; exit 1; }
# Nova and os-brick stay as packaged: BlobCR's default 'local' connection
# needs no edit of them, and a file edited in place (an older
# tools/apply-connection-patches.sh run) would let the tests pass on what
# no cloud runs.
"$py" "$top/tools/check_stock.py" nova os-brick \
    || { echo "install-openstack: nova or os-brick in $venv is edited (undo an older patch with: tools/apply-connection-patches.sh --revert $py)" >&2; exit 1; }
PYTHONWARNINGS=ignore "$py" -c 'import pyfuse3, oslo_messaging, libvirt, keystonemiddleware, openstackclient, psycopg2, openstack_dashboard' \
    || { echo "install-openstack: an import of the test suite broke" >&2; exit 1; }
for tool in gunicorn openstack keystone-manage cinder-manage cinder-api \
        cinder-scheduler cinder-volume glance-manage privsep-helper; do
    [ -x "$venv/bin/$tool" ] \
        || { echo "install-openstack: $venv/bin/$tool is missing" >&2; exit 1; }
done
echo "install-openstack: keystone $("$py" -c 'from importlib import metadata as m; print(m.version("keystone"))')," \
     "cinder $("$py" -c 'from importlib import metadata as m; print(m.version("cinder"))')," \
     "glance $("$py" -c 'from importlib import metadata as m; print(m.version("glance"))')," \
     "nova $("$py" -c 'from importlib import metadata as m; print(m.version("nova"))') ready" >&2
