#!/bin/bash
# Link Debian's librados Python binding into a virtualenv: PyPI has none,
# and Debian's python3.11 and the venv's share the ABI.
set -euo pipefail
venv=$1
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
for so in /usr/lib/python3/dist-packages/rados.cpython-*.so; do
    ln -sf "$so" "$site/"
done
