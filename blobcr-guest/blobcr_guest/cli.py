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

"""``blobcr-checkpoint`` and ``blobcr-restore``: the guest's commands.

``blobcr-checkpoint`` prints ``<version> downtime_ms=<ms> ...`` (or one
JSON object with ``--json``) and exits 0. On failure it prints one line,
``blobcr-checkpoint: error: ...``, on stderr and exits with a code that
says what the caller can do about it (see EXIT_*).
"""

import argparse
import json
import sys

from blobcr_guest import client
from blobcr_guest import config
from blobcr_guest import criu
from blobcr_guest import exception

EXIT_OK = 0
EXIT_CONFIG = 1       # a configuration file is unusable
EXIT_USAGE = 2        # bad arguments (argparse's own code)
EXIT_REFUSED = 3      # the proxy refused (4xx, 507): retrying will not help
EXIT_UNAVAILABLE = 4  # unreachable, 5xx or timed out: try again later
EXIT_FAILED = 5       # the snapshot was taken but could not be persisted
EXIT_CRIU = 6         # CRIU is missing or could not dump / restore


def exit_code(error):
    """The exit code of an exception raised by the guest side."""
    if isinstance(error, exception.CheckpointError):
        return EXIT_REFUSED if error.refused else EXIT_UNAVAILABLE
    if isinstance(error, (exception.EndpointUnreachable,
                          exception.CheckpointTimeout)):
        return EXIT_UNAVAILABLE
    if isinstance(error, exception.CheckpointFailed):
        return EXIT_FAILED
    if isinstance(error, exception.CriuError):
        return EXIT_CRIU
    if isinstance(error, exception.ConfigError):
        return EXIT_CONFIG
    return EXIT_USAGE


def _connection_args(parser):
    group = parser.add_argument_group(
        'endpoint and credentials',
        'default: $BLOBCR_ENDPOINT / $BLOBCR_INSTANCE_ID / $BLOBCR_TOKEN, '
        'then the JSON file, then Nova vendordata (key "blobcr")')
    group.add_argument('--endpoint', help='proxy URL (default %s)'
                       % config.DEFAULT_ENDPOINT)
    group.add_argument('--instance-id', help='this instance id')
    group.add_argument('--token', help='the per-instance token')
    group.add_argument('--signature', help=argparse.SUPPRESS)
    group.add_argument('--config', metavar='PATH',
                       help='JSON credentials file (default $BLOBCR_GUEST_'
                            'CONFIG or %s)' % config.DEFAULT_CONFIG)
    group.add_argument('--http-timeout', type=float, default=60.0,
                       metavar='S', help='per request (default 60)')


def _criu_args(parser, restoring):
    group = parser.add_argument_group('CRIU options')
    default = None if restoring else True
    # A pair of flags by hand: argparse.BooleanOptionalAction is 3.9+.
    group.add_argument('--shell-job', dest='shell_job', action='store_true',
                       default=default,
                       help='the tree may belong to a shell session or '
                            'terminal (default: %s)'
                            % ('as dumped' if restoring else 'yes'))
    group.add_argument('--no-shell-job', dest='shell_job',
                       action='store_false', default=default,
                       help='the tree is a session of its own')
    group.add_argument('--tcp-established', action='store_true',
                       default=None if restoring else False,
                       help='dump / restore established TCP connections')
    group.add_argument('--file-locks', action='store_true',
                       default=None if restoring else False,
                       help='dump / restore file locks')
    group.add_argument('--criu-opt', action='append', default=[],
                       metavar='OPT', help='extra criu option (repeatable,'
                                           ' e.g. --criu-opt=--ext-unix-sk)')
    group.add_argument('--criu-binary', metavar='PATH',
                       help='criu executable (default: criu in PATH/sbin)')


def checkpoint_parser():
    parser = argparse.ArgumentParser(
        prog='blobcr-checkpoint',
        description='Take a checkpoint of this VM: a live snapshot of its '
                    'disk, after flushing the file-system buffers. With '
                    '--criu, dump a process tree to the disk first.')
    _connection_args(parser)
    parser.add_argument('--group', help='global checkpoint id (1-64 of '
                                        'A-Z a-z 0-9 _ . -)')
    parser.add_argument('--members', type=int,
                        help='number of VMs in the group')
    parser.add_argument('--quiesce', choices=client.QUIESCE_MODES,
                        help='how the host quiesces the VM (host default '
                             'if unset)')
    parser.add_argument('--wait-stable', action='store_true',
                        help='return once the version is persisted')
    parser.add_argument('--wait-group', action='store_true',
                        help='return once every member of --group is '
                             'persisted')
    parser.add_argument('--timeout', type=float, default=600.0,
                        metavar='S', help='for the waits (default 600)')
    parser.add_argument('--no-sync', action='store_true',
                        help="don't flush the file systems first")
    parser.add_argument('--json', action='store_true',
                        help='print one JSON object')
    parser.add_argument('--criu', type=int, metavar='PID',
                        help='dump the process tree of PID with CRIU first')
    parser.add_argument('--dir', metavar='DIR',
                        help='where the CRIU dumps go: on the disk that is '
                             'checkpointed')
    running = parser.add_mutually_exclusive_group()
    running.add_argument('--leave-running', dest='leave_running',
                         action='store_true', default=True,
                         help='continue the tree once the disk snapshot '
                              'is taken (default)')
    running.add_argument('--kill', dest='leave_running',
                         action='store_false',
                         help='kill the tree once the disk snapshot is '
                              'taken')
    _criu_args(parser, restoring=False)
    return parser


def restore_parser():
    parser = argparse.ArgumentParser(
        prog='blobcr-restore',
        description='Restore, detached, the process tree that '
                    'blobcr-checkpoint --criu dumped last into DIR.')
    parser.add_argument('--criu', required=True, metavar='DIR',
                        help='the --dir of blobcr-checkpoint')
    parser.add_argument('--json', action='store_true',
                        help='print one JSON object')
    _criu_args(parser, restoring=True)
    return parser


def _fail(prog, error, hint=''):
    sys.stderr.write('%s: error: %s%s\n' % (prog, error, hint))
    return exit_code(error)


def _parse(parser, argv):
    try:
        return parser.parse_args(argv), None
    except SystemExit as e:     # --help, or a usage error already printed
        return None, e.code if isinstance(e.code, int) else EXIT_USAGE


def checkpoint_main(argv=None):
    parser = checkpoint_parser()
    args, code = _parse(parser, argv)
    if args is None:
        return code
    prog = parser.prog
    if (args.group is None) != (args.members is None):
        return _usage(parser, '--group and --members go together')
    if args.members is not None and args.members < 1:
        return _usage(parser, '--members must be at least 1')
    if args.wait_group and not args.group:
        return _usage(parser, '--wait-group needs --group')
    if (args.criu is None) != (args.dir is None):
        return _usage(parser, '--criu PID and --dir DIR go together')
    try:
        guest = client.CheckpointClient.from_environment(
            endpoint=args.endpoint, instance_id=args.instance_id,
            token=args.token, signature=args.signature,
            config_path=args.config, timeout=args.http_timeout,
            warn=lambda message: sys.stderr.write(
                '%s: warning: %s\n' % (prog, message)))
    except (exception.GuestError, ValueError) as e:
        return _fail(prog, e)

    def take():
        return guest.checkpoint(group=args.group, members=args.members,
                                quiesce=args.quiesce, sync=not args.no_sync)

    result = {}
    snapshot_taken = False
    try:
        if args.criu is not None:
            kind = criu.filesystem_type(args.dir)
            if kind in criu.VOLATILE:
                sys.stderr.write('%s: warning: %s is on %s, which the disk '
                                 'snapshot does not hold\n'
                                 % (prog, args.dir, kind))
            # The tree stays stopped from the dump until the snapshot is
            # taken: the snapshot holds the files as the dump saw them.
            result['criu_dump'], taken = criu.checkpoint(
                args.criu, args.dir, take, leave_running=args.leave_running,
                shell_job=args.shell_job,
                tcp_established=args.tcp_established,
                file_locks=args.file_locks, extra=args.criu_opt,
                binary=args.criu_binary)
        else:
            taken = take()
        snapshot_taken = True
        result.update(version=taken.version, downtime_ms=taken.downtime_ms)
        if taken.group:
            result['group'] = taken.group
        if args.wait_stable:
            result['state'] = guest.wait_stable(taken.version,
                                                timeout=args.timeout)
        if args.wait_group:
            guest.wait_group_complete(args.group, timeout=args.timeout)
            result['group_complete'] = True
    except exception.GuestError as e:
        hint = ''
        if (isinstance(e, exception.CheckpointError) and e.status == 401
                and not guest.token and not guest.signature):
            hint = ('; no token was found: pass --token, set BLOBCR_TOKEN '
                    'or write %s' % config.DEFAULT_CONFIG)
        if (args.criu is not None and not args.leave_running and
                not snapshot_taken and
                not isinstance(e, exception.CriuError)):
            hint += '; process %d was continued, not killed' % args.criu
        return _fail(prog, e, hint)
    _print(args.json, result, ['version', 'downtime_ms', 'state', 'group',
                               'group_complete', 'criu_dump'])
    return EXIT_OK


def restore_main(argv=None):
    parser = restore_parser()
    args, code = _parse(parser, argv)
    if args is None:
        return code
    try:
        pid = criu.restore(args.criu, shell_job=args.shell_job,
                           tcp_established=args.tcp_established,
                           file_locks=args.file_locks, extra=args.criu_opt,
                           binary=args.criu_binary)
    except exception.GuestError as e:
        return _fail(parser.prog, e)
    _print(args.json, {'pid': pid, 'images': criu.images_of(args.criu)},
           ['pid', 'images'])
    return EXIT_OK


def _usage(parser, message):
    parser.print_usage(sys.stderr)
    sys.stderr.write('%s: error: %s\n' % (parser.prog, message))
    return EXIT_USAGE


def _print(as_json, result, order):
    if as_json:
        print(json.dumps(result, sort_keys=True))
        return
    first, rest = order[0], order[1:]
    print(' '.join(['%s' % result[first]] +
                   ['%s=%s' % (k, result[k]) for k in rest if k in result]))


if __name__ == '__main__':
    sys.exit(checkpoint_main())
