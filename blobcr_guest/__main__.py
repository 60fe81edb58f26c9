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
