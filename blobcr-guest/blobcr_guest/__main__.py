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

"""``python3 -m blobcr_guest checkpoint|restore ...``: the commands
without an installed entry point (a guest may only have the package).
"""

import sys

from blobcr_guest import cli


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    commands = {'checkpoint': cli.checkpoint_main,
                'restore': cli.restore_main}
    if not argv or argv[0] not in commands:
        sys.stderr.write('usage: python3 -m blobcr_guest '
                         '{checkpoint,restore} [options]\n')
        return cli.EXIT_USAGE
    return commands[argv[0]](argv[1:])


if __name__ == '__main__':
    sys.exit(main())
