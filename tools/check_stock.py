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

"""Are these distributions stock? Every Python file they installed must
still hash as their wheel's RECORD says: BlobCR runs on Nova and os-brick
as packaged (issue 33), and a file edited in place (an old
tools/apply-connection-patches.sh run, a hand fix) would make the tests
pass on what no cloud runs.

    python tools/check_stock.py nova os-brick

Exits 1, naming the edited files, when one is not stock.
"""

import base64
import hashlib
from importlib import metadata
import sys


def edited_files(name):
    """The installed .py files of distribution ``name`` that no longer
    match its RECORD.
    """
    edited = []
    for entry in metadata.distribution(name).files or ():
        if not entry.hash or not str(entry).endswith('.py'):
            continue
        try:
            with open(entry.locate(), 'rb') as f:
                digest = hashlib.new(entry.hash.mode, f.read()).digest()
        except FileNotFoundError:
            edited.append('%s (missing)' % entry)
            continue
        actual = base64.urlsafe_b64encode(digest).rstrip(b'=').decode()
        if actual != entry.hash.value:
            edited.append(str(entry))
    return edited


def main(names):
    status = 0
    for name in names:
        try:
            edited = edited_files(name)
        except metadata.PackageNotFoundError:
            print('check_stock: %s is not installed' % name, file=sys.stderr)
            status = 1
            continue
        for path in edited:
            print('check_stock: %s: %s differs from what its package '
                  'installed' % (name, path), file=sys.stderr)
        status = status or int(bool(edited))
    return status


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
