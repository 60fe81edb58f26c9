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

"""Small JSON state files of the agent (its instance table, its loop
devices): read whole, replaced whole and synced, so that a crash leaves
the old file or the new one.
"""

import json
import os

from blobcr_common import exception


def load(path, what):
    """The object in ``path`` ({} if there is none); CorruptObject if it
    does not parse as a JSON object.
    """
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        return {}
    except ValueError as e:
        raise exception.CorruptObject(what, path, str(e))
    if not isinstance(data, dict):
        raise exception.CorruptObject(what, path, 'not a JSON object')
    return data


def save(path, data):
    """Replace ``path`` with ``data``, mode 0600: they name the host's
    instances and images, which are no other local user's business.
    """
    tmp = path + '.tmp'
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                           0o600), 'w') as f:
        os.fchmod(f.fileno(), 0o600)    # a .tmp a crash left
        json.dump(data, f, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
