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

"""The Horizon panel's message catalogue (blobcr-dashboard/
blobcr_dashboard/locale/django.pot) holds every message the code and
templates mark for translation: a fresh extraction
(tools/extract_messages.py, Django's makemessages and GNU xgettext) has
no message the catalogue lacks.
"""

import os
import re
import subprocess
import sys

TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
CATALOGUE = os.path.join(TOP, 'blobcr-dashboard', 'blobcr_dashboard',
                         'locale', 'django.pot')
STRING = re.compile(r'^(msgid|msgid_plural|msgctxt)?\s*"(.*)"\s*$')


def messages(path):
    """The (msgctxt, msgid) pairs of a .pot file, the header excluded."""
    found, entry, key = set(), {}, None
    with open(path) as f:
        for line in f.read().splitlines() + ['']:
            match = STRING.match(line)
            if match and (match.group(1) or key):
                key = match.group(1) or key
                entry[key] = entry.get(key, '') + match.group(2)
                continue
            if line.startswith('msgstr'):
                key = None
                continue
            if not line.strip() and entry:
                if entry.get('msgid'):
                    found.add((entry.get('msgctxt'), entry['msgid']))
                entry, key = {}, None
    return found


def test_the_catalogue_holds_every_marked_message(tmp_path):
    fresh = tmp_path / 'django.pot'
    subprocess.run([sys.executable,
                    os.path.join(TOP, 'tools', 'extract_messages.py'),
                    '--output', str(fresh)], check=True,
                   capture_output=True)
    extracted = messages(str(fresh))
    assert len(extracted) > 20, extracted     # the extraction ran
    missing = extracted - messages(CATALOGUE)
    assert not missing, (
        'messages not in %s (run '
        '.venv/bin/python tools/extract_messages.py): %s'
        % (os.path.relpath(CATALOGUE, TOP), sorted(missing)))
