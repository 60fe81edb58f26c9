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

# Tempest and cinder-tempest-plugin, the suite Cinder backends are judged
# by upstream, in a virtualenv of their own (their requirements are not
# the services'): .tempest-venv, or $BLOBCR_TEMPEST_VENV. Idempotent.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
venv=${BLOBCR_TEMPEST_VENV:-$top/.tempest-venv}
TEMPEST_VERSION=47.0.0
PLUGIN_VERSION=1.23.0
if [ ! -x "$venv/bin/python" ]; then
    echo "install-tempest: creating $venv" >&2
    /usr/bin/python3 -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip
fi
"$venv/bin/pip" install -q "tempest==$TEMPEST_VERSION" \
    "cinder-tempest-plugin==$PLUGIN_VERSION"
"$venv/bin/tempest" --version >/dev/null
