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

"""``blobcr-privsep-helper``: what sudo lets the agent's user run to start
the agent's privileged daemon (oslo.privsep's privsep-helper), with no
argument of that user's choosing beyond what the daemon needs:

    blobcr-privsep-helper [--config-file FILE] \
        --privsep_context blobcr_agent.privileged.default \
        --privsep_sock_path DIR/privsep.sock

The daemon's checks read the configuration (the mount point it guards,
its capabilities, its logging), so FILE (default
/etc/blobcr/blobcr.conf) must be a file of /etc/blobcr, root's and
writable by root alone, with one link, in directories that are root's
alone all the way up: not a file whose contents another user chose (a
/proc file of a process it started, a link it made). Any other
argument, a second configuration file, or a log file, is refused: a
sudoers rule cannot say that much by itself.
"""

import os
import stat
import sys

CONTEXT = 'blobcr_agent.privileged.default'
CONFIG_DIR = '/etc/blobcr'
DEFAULT_CONFIG = CONFIG_DIR + '/blobcr.conf'
SOCKET_NAME = 'privsep.sock'


class Refused(Exception):
    pass


def parse(argv):
    """(config file, socket path) from ``argv``; Refused otherwise."""
    given = {}
    args = list(argv)
    while args:
        flag = args.pop(0)
        if flag not in ('--config-file', '--privsep_context',
                        '--privsep_sock_path') or flag in given or not args:
            raise Refused('unexpected argument %r' % flag)
        given[flag] = args.pop(0)
    if given.get('--privsep_context') != CONTEXT:
        raise Refused('the context must be %s' % CONTEXT)
    sock = given.get('--privsep_sock_path', '')
    if not os.path.isabs(sock) or os.path.basename(sock) != SOCKET_NAME or \
            os.path.normpath(sock) != sock:
        raise Refused('%r is not a privsep socket path' % sock)
    config = given.get('--config-file', DEFAULT_CONFIG)
    check_root_only(config)
    return config, sock


def check_root_only(path):
    """Refused unless ``path`` is a regular file of CONFIG_DIR with one
    link, and it and every directory above it are root's and writable
    by nobody else.
    """
    if not isinstance(path, str) or path.startswith('//') or \
            os.path.normpath(path) != path or \
            not path.startswith(CONFIG_DIR + os.sep):
        raise Refused('%r is not a file of %s' % (path, CONFIG_DIR))
    here = path
    while True:
        try:
            st = os.lstat(here)
        except OSError as e:
            raise Refused('%s: %s' % (here, e.strerror))
        if stat.S_ISLNK(st.st_mode):
            raise Refused('%s is a symbolic link' % here)
        if here == path and (not stat.S_ISREG(st.st_mode) or
                             st.st_nlink != 1):
            raise Refused('%s is not a regular file with one link' % here)
        if st.st_uid != 0 or st.st_mode & 0o022:
            raise Refused('%s is not root\'s alone (uid %d, mode %o)'
                          % (here, st.st_uid, stat.S_IMODE(st.st_mode)))
        parent = os.path.dirname(here)
        if parent == here:
            return
        here = parent


def main(argv=None):
    try:
        config, sock = parse(sys.argv[1:] if argv is None else argv)
    except Refused as e:
        print('blobcr-privsep-helper: refused: %s' % e, file=sys.stderr)
        return 2
    from oslo_privsep import daemon
    sys.argv = ['privsep-helper', '--config-file', config,
                '--privsep_context', CONTEXT, '--privsep_sock_path', sock]
    return daemon.helper_main()


if __name__ == '__main__':
    sys.exit(main())
