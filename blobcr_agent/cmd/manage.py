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

"""blobcr-manage: operate the checkpoint repository from the shell.

Examples::

    blobcr-manage import disk.raw base
    blobcr-manage tree
    blobcr-manage clone base@1 restart-1
    blobcr-manage export base@2 /tmp/v2.raw        # --overwrite to replace
    blobcr-manage verify base@2
    blobcr-manage obsolete base 1 && blobcr-manage gc

Commands on the images mirrored by this host's agent go through its
admin socket (``[agent] admin_socket``, or ``--admin-socket``)::

    blobcr-manage attach base@2 --instance vm-1    # prints the file path
    blobcr-manage checkpoint base --wait-stable    # version id, downtime
    blobcr-manage detach base                      # --force: VM running
    blobcr-manage status

The backend comes from the configuration file (``--config-file``) and can
be overridden with ``--backend``, ``--store`` and ``--ceph-conf``.
"""

import json
import os
import socket
import sys

from oslo_config import cfg
from oslo_log import log as logging

from blobcr_agent import conf as blobcr_conf
from blobcr_agent import control
from blobcr_agent import progress
from blobcr_agent.repository import gc
from blobcr_agent.repository import repository
from blobcr_agent.repository import scrub
from blobcr_agent.repository import treeview
from blobcr_common import exception

CONF = blobcr_conf.CONF
LOG = logging.getLogger(__name__)


def parse_ref(text, need_version=False):
    """``IMAGE`` or ``IMAGE@VERSION`` -> (image, version or None)."""
    image, sep, version = text.rpartition('@')
    if not sep or not version.isdigit():
        if need_version:
            raise exception.InvalidInput(
                '%r: expected IMAGE@VERSION, e.g. base@2' % text)
        return text, None
    return image, int(version)


def _print(data):
    print(json.dumps(data, indent=2, sort_keys=True, default=str))


def do_import(repo, args):
    header, number = repo.import_file(
        args.file, args.image_name, chunk_size=args.chunk_size,
        fanout=args.fanout, progress=progress.Progress('import'))
    v = header.version(number)
    result = {'image': header.id, 'name': header.name, 'version': number,
              'size': header.size, 'chunks_stored': v.chunks,
              'bytes_stored': v.stored_bytes}
    if args.json:
        _print(result)
    else:
        print('imported %s as image %s version %d (%d chunks, %d bytes '
              'stored)' % (args.file, header.id, number, v.chunks,
                           v.stored_bytes))


def do_create(repo, args):
    header = repo.create_image(args.image_name, args.size, args.chunk_size,
                               args.fanout)
    print(header.id)


def do_export(repo, args):
    image, version = parse_ref(args.ref)
    path = os.path.abspath(args.file)
    if _agent_running(args):
        # The agent waits for a version it is still persisting.
        with _agent(args, EXPORT_TIMEOUT + AGENT_MARGIN) as agent:
            number = agent.call('export', image=image, version=version,
                                path=path, timeout=EXPORT_TIMEOUT,
                                overwrite=args.overwrite)['version']
    else:
        number = repo.export(image, version, path,
                             progress=progress.Progress('export'),
                             overwrite=args.overwrite)
    print('exported %s version %d to %s' % (image, number, path))


# -- commands on the agent's admin socket ----------------------------------

# Seconds to wait for an answer of the agent; a call that waits on the
# agent's side (wait_stable, export) gets its own wait plus AGENT_MARGIN.
AGENT_TIMEOUT = 600
AGENT_MARGIN = 30
EXPORT_TIMEOUT = 600


class AgentClient(control.Client):
    what = 'the blobcr-agent admin socket'

    def call(self, op, **args):
        try:
            return super().call(op, **args)
        except socket.timeout:
            raise exception.BackendUnavailable(
                'no answer from %s at %s within %s s'
                % (self.what, self.path, self._sock.gettimeout()))
        except OSError as e:
            raise exception.BackendUnavailable(
                'lost %s at %s: %s' % (self.what, self.path, e))


def _socket_path(args):
    return args.admin_socket or CONF.agent.admin_socket


def _agent_running(args):
    return os.path.exists(_socket_path(args))


def _agent(args, timeout=AGENT_TIMEOUT):
    return AgentClient(_socket_path(args), timeout=timeout)


def do_attach(args):
    image, version = parse_ref(args.ref)
    with _agent(args) as agent:
        result = agent.call('attach', image=image, version=version,
                            instance=args.instance, project=args.project,
                            block_device=args.block_device)
    if args.json:
        _print(result)
    else:
        print(result.get('device') or result['path'])


def do_group(args):
    with _agent(args) as agent:
        result = agent.call('group_state', group=args.group,
                            project=args.project)
    if args.json:
        _print(result)
        return
    print('group %s of %s: %d of %d members, %s' % (
        result['group'], result['project'] or '(no project)',
        len(result['versions']), result['members'],
        'complete' if result['complete'] else 'not complete'))
    for v in sorted(result['versions'].values(), key=lambda v: v['name']):
        print('  %s  %s  v%d  %s' % (v['image'], v['name'], v['version'],
                                     v['state']))


def do_detach(args):
    with _agent(args) as agent:
        result = agent.call('detach', image=args.image,
                            discard=args.discard, force=args.force)
    if args.json:
        _print(result)
    else:
        print('detached %s' % result['image'])


def do_checkpoint(args):
    timeout = AGENT_TIMEOUT
    if args.wait_stable:
        timeout = max(timeout, args.timeout + AGENT_MARGIN)
    with _agent(args, timeout) as agent:
        result = agent.call('checkpoint', image=args.image,
                            quiesce=args.quiesce, group=args.group,
                            members=args.members, project=args.project)
        if args.wait_stable:
            result['state'] = agent.call('wait_stable', image=args.image,
                                         version=result['version'],
                                         timeout=args.timeout)
    if args.json:
        _print(result)
    else:
        print('version %d  downtime %.1f ms  (guest held %.1f ms, %d chunks, '
              'quiesce %s)%s'
              % (result['version'], result['downtime_ms'], result['held_ms'],
                 result['chunks'], result['quiesce'],
                 '  ' + result['state'] if 'state' in result else ''))
    if args.wait_stable and result['state'] != 'stable':
        print('blobcr-manage: error: version %d is %s'
              % (result['version'], result['state']), file=sys.stderr)
        return 1


def _budget(limit):
    return '%s checkpoints / %s MiB' % (limit['versions'] or 'no cap',
                                        limit['bytes'] >> 20 or 'no cap')


def do_status(args):
    with _agent(args) as agent:
        result = agent.call('status')
    if args.json:
        _print(result)
        return
    print('agent on %s, mount %s, proxy %s'
          % (result['host'], result['mountpoint'], result['proxy'] or 'off'))
    restart = result.get('restart')
    if restart:
        keeps = restart['restart_keeps_disks']
        print('restart_keeps_disks: %s (kernel %s, FUSE protocol %s): %s'
              % ('unknown' if keeps is None else str(keeps).lower(),
                 restart['kernel'], restart['fuse_protocol'] or '-',
                 restart['why']))
    guest = result.get('guest_checkpoints')
    if guest:
        limits = guest['limits']
        print('guest checkpoints: newest %s kept per image (and %s groups), '
              '%d obsoleted; budget %s per image, %s per project, %s '
              'groups per project; refused %d (image), %d (project), '
              '%d (groups)'
              % (guest['kept'] or 'all', guest['groups_kept'] or 'all',
                 guest['obsoleted'],
                 _budget(limits['image']), _budget(limits['project']),
                 guest['groups_per_project'] or 'no cap',
                 guest['refused']['image'], guest['refused']['project'],
                 guest['refused']['groups']))
        for project, usage in sorted(guest['usage'].items()):
            others = usage.get('other_hosts') or {
                'versions': 0, 'bytes': 0, 'hosts': 0}
            print('  project %s: %d checkpoints, %d MiB written, %d '
                  'images here; %d checkpoints, %d MiB on %d other '
                  'host(s), as they last published'
                  % (project, usage['versions'], usage['bytes'] >> 20,
                     usage['images'], others['versions'],
                     others['bytes'] >> 20, others['hosts']))
    for image_id, a in sorted(result['attached'].items()):
        print('  %s  %s  attached from v%s, last v%s, %d dirty chunks, '
              'instances: %s'
              % (image_id, a['path'], a['attached_version'] or '-',
                 a['last_version'] or '-', a['dirty'],
                 ', '.join(a['instances']) or '-'))


def do_list(repo, args):
    headers = repo.images()
    if args.json:
        _print([treeview.summary(h) for h in headers])
        return
    for h in headers:
        s = treeview.summary(h)
        print('%s  %-24s %10s  %d versions, newest stable: %s'
              % (h.id, h.name, treeview.human(h.size), len(h.versions),
                 s['newest_stable'] or '-'))


def do_tree(repo, args):
    headers = repo.images()
    if args.image:
        root = repo.image(args.image)
        headers = [h for h in headers
                   if h.id == root.id or treeview.descends(h, root, headers)]
    if args.json:
        _print(treeview.as_dicts(headers))
    else:
        print(treeview.render(headers), end='')


def do_clone(repo, args):
    image, version = parse_ref(args.ref)
    header = repo.clone(image, version, args.image_name)
    if args.json:
        _print(treeview.summary(header))
    else:
        print(header.id)


def do_obsolete(repo, args):
    repo.obsolete(args.image, args.versions)
    print('marked obsolete: %s' % ', '.join(str(v) for v in args.versions))


def do_delete(repo, args):
    repo.delete_image(args.image)
    print('deleted %s (space is freed by the next gc: the agents run it '
          'every [repository] gc_interval, or "blobcr-manage gc")'
          % args.image)


def do_take_over(repo, args):
    result = repo.take_over(args.image, args.why)
    if args.json:
        _print(result)
    else:
        print('%s taken over (epoch %d): its former host can publish no '
              'version of it any more; pending versions failed: %s'
              % (args.image, result['epoch'],
                 ', '.join(map(str, result['failed'])) or 'none'))


def do_gc(repo, args):
    report = gc.collect_exclusive(repo, grace=args.grace,
                                  pending_timeout=args.pending_timeout)
    if args.json:
        _print(report.as_dict())
    else:
        print('gc: deleted %d chunks and %d node packs, freed %s; %d live '
              'chunks; %d pending versions marked failed'
              % (report.chunks_deleted, report.packs_deleted,
                 treeview.human(report.bytes_freed), report.live_chunks,
                 report.versions_failed))


def do_pins(repo, args):
    found = repo.pins(args.host)
    if args.json:
        _print(found)
        return
    for p in found:
        print('%s  v%d (%s)  host %s  holder %s' % (
            p['image'], p['version'], p['state'], p.get('host'),
            p.get('holder')))


def do_release_pins(repo, args):
    released = repo.release_pins(args.host, image=args.image)
    if args.json:
        _print(released)
    else:
        print('released %d pins of host %s' % (len(released), args.host))


def do_verify(repo, args):
    image, version = parse_ref(args.ref)
    report = scrub.verify(repo, image, version,
                          progress=progress.Progress('verify', unit='chunks'))
    if args.json:
        _print(report.as_dict())
    else:
        print('%s version %d: %d chunks checked, %s'
              % (report.image, report.version, report.chunks_checked,
                 'OK' if report.ok else '%d PROBLEMS' % len(report.problems)))
        for p in report.problems:
            print('  %s %s (chunks %s): %s' % (p.kind, p.name, p.chunks,
                                               p.error))
    return 0 if report.ok else 1


def _size(text):
    units = {'K': 1 << 10, 'M': 1 << 20, 'G': 1 << 30, 'T': 1 << 40}
    text = text.strip().upper().rstrip('IB')
    try:
        if text and text[-1] in units:
            return int(float(text[:-1]) * units[text[-1]])
        return int(text)
    except ValueError:
        raise exception.InvalidInput('%r is not a size' % text)


def add_parsers(subparsers):
    def command(name, func, help_text, agent_only=False):
        p = subparsers.add_parser(name, help=help_text)
        p.set_defaults(func=func, agent_only=agent_only)
        if not agent_only:
            p.add_argument('--backend', choices=['local', 'rados'],
                           help='override [repository] backend')
            p.add_argument('--store', help='override [local_store] path')
            p.add_argument('--ceph-conf', help='override [rados] conffile')
        p.add_argument('--admin-socket',
                       help='override [agent] admin_socket')
        p.add_argument('--json', action='store_true',
                       help='print machine-readable JSON')
        return p

    p = command('attach', do_attach, 'mirror IMAGE[@VERSION] on this host '
                'through the agent; prints the raw file to give the VM',
                agent_only=True)
    p.add_argument('ref', metavar='IMAGE[@VERSION]')
    p.add_argument('--instance', help='the instance that will use it (may '
                   'then request checkpoints from inside)')
    p.add_argument('--project', help='the instance\'s project: the scope '
                   'of the group ids its guest uses')
    p.add_argument('--block-device', action='store_true',
                   help='also a loop device over the file (direct I/O), '
                        'and print it instead: what stock Nova opens for '
                        'a \'local\' connection')
    p = command('detach', do_detach, 'stop mirroring an image',
                agent_only=True)
    p.add_argument('image')
    p.add_argument('--discard', action='store_true',
                   help='drop writes made since the last checkpoint')
    p.add_argument('--force', action='store_true',
                   help='detach even while a running domain uses it')
    p = command('checkpoint', do_checkpoint, 'checkpoint an attached image '
                '(quiesce, COMMIT, resume)', agent_only=True)
    p.add_argument('image')
    p.add_argument('--quiesce', choices=['none', 'fsfreeze', 'suspend'],
                   help='override [agent] quiesce')
    p.add_argument('--group', help='global checkpoint id')
    p.add_argument('--members', type=int,
                   help='number of images in the group')
    p.add_argument('--project', help='the project whose group it is '
                   '(default: the scope of callers without a project)')
    p.add_argument('--wait-stable', action='store_true',
                   help='wait until the version is persisted')
    p.add_argument('--timeout', type=int, default=600,
                   help='seconds --wait-stable waits')
    p = command('group', do_group, 'the state of a global checkpoint: '
                'its members and their newest versions', agent_only=True)
    p.add_argument('group')
    p.add_argument('--project', help='the project whose group it is')
    command('status', do_status, 'what the agent of this host serves',
            agent_only=True)

    p = command('import', do_import, 'import a raw file as a new image')
    p.add_argument('file')
    p.add_argument('image_name', metavar='NAME')
    p.add_argument('--chunk-size', type=_size)
    p.add_argument('--fanout', type=int)
    p = command('create', do_create, 'create an empty image')
    p.add_argument('image_name', metavar='NAME')
    p.add_argument('size', type=_size)
    p.add_argument('--chunk-size', type=_size)
    p.add_argument('--fanout', type=int)
    p = command('export', do_export,
                'write IMAGE[@VERSION] to a raw file')
    p.add_argument('ref', metavar='IMAGE[@VERSION]')
    p.add_argument('file')
    p.add_argument('--overwrite', action='store_true',
                   help='replace FILE if it exists')
    command('list', do_list, 'list images')
    p = command('tree', do_tree,
                'show versions, parents and clones as a tree')
    p.add_argument('image', nargs='?')
    p = command('clone', do_clone, 'CLONE IMAGE[@VERSION] into a new image')
    p.add_argument('ref', metavar='IMAGE[@VERSION]')
    p.add_argument('image_name', metavar='NAME', nargs='?')
    p = command('obsolete', do_obsolete, 'mark versions obsolete')
    p.add_argument('image')
    p.add_argument('versions', type=int, nargs='+')
    p = command('delete', do_delete, 'delete an image (all its versions)')
    p.add_argument('image')
    p = command('take-over', do_take_over, 'fence the host an image is '
                'attached on (lost for good): its agent can publish nothing '
                'more, and the image can be attached elsewhere from its '
                'newest stable version')
    p.add_argument('image')
    p.add_argument('--why', default='taken over by an operator',
                   help='recorded in the failed versions and the log')
    p = command('gc', do_gc, 'delete objects no live version references')
    p.add_argument('--grace', type=int,
                   help='override [repository] gc_grace (seconds)')
    p.add_argument('--pending-timeout', type=int,
                   help='override [repository] pending_timeout (seconds)')
    p = command('pins', do_pins, 'versions that mirrors keep (attached '
                'versions and last checkpoints), by host')
    p.add_argument('--host', help='only the pins of this host')
    p = command('release-pins', do_release_pins, 'release the pins of a '
                'host gone for good (its mirrors must not be serving)')
    p.add_argument('--host', required=True)
    p.add_argument('--image', help='only the pins on this image')
    p = command('verify', do_verify,
                're-read and check every chunk of a version')
    p.add_argument('ref', metavar='IMAGE[@VERSION]')


def main(argv=None):
    command_opt = cfg.SubCommandOpt('command', title='commands',
                                    handler=add_parsers)
    CONF.register_cli_opt(command_opt)
    logging.register_options(CONF)
    # A command line tool: progress lines yes, the repository's own
    # INFO chatter only with --debug.
    logging.set_defaults(default_log_levels=logging.get_default_log_levels() +
                         ['blobcr_agent.repository=WARN'])
    # Logs go to stderr: stdout is the command's result (--json).
    CONF.set_default('use_stderr', True)
    try:
        CONF(sys.argv[1:] if argv is None else argv, project='blobcr',
             prog='blobcr-manage')
    except cfg.Error as e:
        sys.exit('blobcr-manage: %s' % e)
    logging.setup(CONF, 'blobcr')
    args = CONF.command
    if args.agent_only:
        try:
            return args.func(args) or 0
        except (exception.BlobCRError, OSError) as e:
            print('blobcr-manage: error: %s' % e, file=sys.stderr)
            return 1
    blobcr_conf.override_store(CONF, args.backend, args.store,
                               args.ceph_conf)
    try:
        repo = repository.Repository.from_conf(CONF)
    except exception.BlobCRError as e:
        print('blobcr-manage: error: %s' % e, file=sys.stderr)
        return 1
    try:
        return args.func(repo, args) or 0
    except (exception.BlobCRError, OSError) as e:
        print('blobcr-manage: error: %s' % e, file=sys.stderr)
        return 1
    finally:
        repo.close()


if __name__ == '__main__':
    sys.exit(main())
