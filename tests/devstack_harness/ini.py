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

"""iniset and iniget as devstack's inc/ini-config documents them, for the
harness's functions.sh (devstack's own shell library cannot be had from a
package registry, so this is a re-implementation, not a copy).

    python3 ini.py set FILE SECTION OPTION VALUE
    python3 ini.py get FILE SECTION OPTION

set: the file is created if missing; a missing section is appended at the
end; a missing option is added as the first line of its section; an
existing one has its value replaced in place; the rest of the file,
comments included, is kept. As in devstack, the value goes through an
unquoted ``echo``: runs of white space become one space, and an empty
section or option name does nothing.
get: the value of the first ``OPTION =`` line of SECTION, or nothing.
"""

import os
import re
import sys

SECTION = re.compile(r'^\[([^\[\]]+)\]')


def _option(name):
    return re.compile(r'^%s[ \t]*=[ \t]*(.*)$' % re.escape(name))


def _read(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return f.read().splitlines()


def get(path, section, option):
    current = None
    match_option = _option(option)
    for line in _read(path):
        header = SECTION.match(line)
        if header:
            current = header.group(1)
            continue
        if current == section:
            found = match_option.match(line)
            if found:
                return found.group(1)
    return None


def set_(path, section, option, value):
    if not section or not option:
        return
    value = ' '.join(value.split())
    lines = _read(path)
    match_option = _option(option)
    start = None
    for i, line in enumerate(lines):
        header = SECTION.match(line)
        if header and header.group(1) == section:
            start = i
            break
    if start is None:
        lines += ['', '[%s]' % section]
        start = len(lines) - 1
    end = len(lines)
    for i in range(start + 1, len(lines)):
        if SECTION.match(lines[i]):
            end = i
            break
    for i in range(start + 1, end):
        if match_option.match(lines[i]):
            lines[i] = '%s = %s' % (option, value)
            break
    else:
        lines.insert(start + 1, '%s = %s' % (option, value))
    with open(path, 'w') as f:
        f.write('\n'.join(lines) + '\n')


def main(argv):
    if len(argv) == 5 and argv[0] == 'set':
        set_(*argv[1:])
        return 0
    if len(argv) == 4 and argv[0] == 'get':
        value = get(*argv[1:])
        if value is not None:
            print(value)
        return 0
    sys.stderr.write('usage: ini.py set FILE SECTION OPTION VALUE | '
                     'get FILE SECTION OPTION\n')
    return 2


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
