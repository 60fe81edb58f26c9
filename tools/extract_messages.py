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

"""Extract the Horizon panel's messages into its catalogue template,
blobcr-dashboard/blobcr_dashboard/locale/django.pot, with Django's
makemessages (GNU xgettext underneath), as Horizon plugins keep theirs
for translators.

    .venv/bin/python tools/extract_messages.py [--output FILE]

tests/unit/test_dashboard_locale.py fails when a message marked in the
code or the templates is missing from the committed catalogue.
"""

import argparse
import os
import shutil
import sys
import tempfile

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
APP = os.path.join(TOP, 'blobcr-dashboard', 'blobcr_dashboard')
CATALOGUE = os.path.join(APP, 'locale', 'django.pot')


def extract(output):
    import django
    from django.conf import settings
    from django.core.management import call_command
    if not settings.configured:
        settings.configure(USE_I18N=True)
        django.setup()
    # makemessages works in the current directory and writes a .po per
    # locale beside the .pot: run it on a copy, keep the .pot alone.
    with tempfile.TemporaryDirectory() as work:
        copy = os.path.join(work, 'blobcr_dashboard')
        shutil.copytree(APP, copy, ignore=shutil.ignore_patterns(
            'locale', '__pycache__'))
        os.mkdir(os.path.join(copy, 'locale'))
        here = os.getcwd()
        os.chdir(copy)
        try:
            call_command('makemessages', locale=['en'], domain='django',
                         keep_pot=True, verbosity=0)
        finally:
            os.chdir(here)
        with open(os.path.join(copy, 'locale', 'django.pot')) as f:
            text = f.read()
    # No creation date: the catalogue changes only when messages do.
    lines = [line for line in text.splitlines(True)
             if not line.startswith('"POT-Creation-Date:')]
    with open(output, 'w') as f:
        f.writelines(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--output', default=CATALOGUE,
                        help='where to write the catalogue (default %s)'
                        % os.path.relpath(CATALOGUE, TOP))
    args = parser.parse_args(argv)
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    extract(args.output)
    print(args.output)


if __name__ == '__main__':
    sys.exit(main())
