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

"""blobcr-agent: the per-host BlobCR service.

    blobcr-agent --config-file /etc/blobcr/blobcr.conf

It mounts the mirror (attached images are raw files under
``[agent] mountpoint``/images), serves the RPC API on topic blobcr-agent
(server = ``[agent] host``) when ``transport_url`` is set, and its peer
side (what agents ask each other) on topic blobcr-agent-peer, on
``[blobcr_bus] peer_transport_url`` if set (rpc/bus.py; with
``authenticated_peers``, rpc/peer_bus.py instead), the admin
socket of ``blobcr-manage`` (root and ``[agent] admin_group``) and, when
a secret is configured, the guest checkpoint endpoint.

On start it re-attaches every image it mirrored before and resumes the
persists a crash or a stop interrupted. SIGTERM or SIGINT: stop taking
requests, let background persists finish (``[agent] shutdown_timeout``),
unmount, exit 0.
"""

import fcntl
import logging as std_logging
import os
import signal
import sys
import threading

from oslo_config import cfg
from oslo_log import log as logging

from blobcr_agent import conf as blobcr_conf
from blobcr_agent import control
from blobcr_agent import manager as manager_mod
from blobcr_agent.manager import loopdevs
from blobcr_agent import privileged
from blobcr_agent.proxy import server as proxy_server
from blobcr_agent.repository import repository
from blobcr_agent.rpc import server as rpc_server
from blobcr_agent import sdnotify
from blobcr_agent import statedir
from blobcr_common import auth
from blobcr_common import exception

CONF = blobcr_conf.CONF
LOG = logging.getLogger(__name__)
# Seconds a stop waits for the mount to go once nothing should use it.
UNMOUNT_GRACE = 10


def _start_proxy(conf, manager):
    if not conf.proxy.enabled:
        return None
    if not (conf.proxy.host_secret or conf.proxy.metadata_proxy_shared_secret):
        LOG.warning('guest endpoint off: set [proxy] host_secret or '
                    'metadata_proxy_shared_secret')
        return None
    if conf.proxy.previous_host_secrets and not conf.proxy.host_secret:
        LOG.warning('[proxy] previous_host_secrets without host_secret: '
                    'ignored (no token is accepted)')
    authenticator = auth.Authenticator(
        conf.proxy.host_secret, conf.proxy.metadata_proxy_shared_secret,
        host=conf.agent.host,
        previous_secrets=conf.proxy.previous_host_secrets
        if conf.proxy.host_secret else ())
    proxy = proxy_server.CheckpointProxy(
        authenticator, GuestOperations(manager), rate=conf.proxy.rate,
        burst=conf.proxy.burst,
        max_body=conf.proxy.max_body, get_rate=conf.proxy.poll_rate,
        get_burst=conf.proxy.poll_burst,
        header_timeout=conf.proxy.header_timeout,
        request_timeout=conf.proxy.request_timeout,
        max_connections=conf.proxy.max_connections,
        max_per_source=conf.proxy.max_per_source,
        max_per_instance=conf.proxy.max_per_instance)
    httpd = proxy.serve(conf.proxy.listen, conf.proxy.port)
    port = httpd.server_port
    manager.proxy_url = 'http://%s:%d' % (conf.proxy.listen, port)
    with _private(os.path.join(conf.agent.state_path, 'proxy.port'),
                  os.O_WRONLY | os.O_TRUNC, 'w') as f:
        f.write('%d\n' % port)
    LOG.info('guest endpoint on %s', manager.proxy_url)
    return httpd


def _private(path, flags, mode):
    """``path`` opened, made mode 0600 if it is new (the state
    directory's files are the agent's alone: statedir.py).
    """
    return os.fdopen(os.open(path, flags | os.O_CREAT, 0o600), mode)


def _lock_state_path(path):
    """One agent per state directory: a second one would mount over the
    first and both would persist the same caches. The directory is made,
    or closed to other users (statedir.py), first.
    """
    statedir.prepare(path)
    lock = _private(os.path.join(path, 'agent.lock'),
                    os.O_RDWR | os.O_APPEND, 'a+')
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        raise exception.InvalidInput(
            'another blobcr-agent (pid %s) uses %s'
            % (lock.read().strip() or '?', path))
    lock.truncate(0)
    lock.write('%d\n' % os.getpid())
    lock.flush()
    return lock


class GroupOperations(object):
    """What members of ``[agent] admin_group`` reach through the admin
    socket: every operation, but exports and imports are held to
    ``[agent] export_dir`` as RPC callers' are (the agent writes and
    reads them as root).
    """

    def __init__(self, manager, export_dir):
        self._manager = manager
        self._export_dir = export_dir

    def __getattr__(self, op):
        return getattr(self._manager, op)

    def export(self, image, version, path, timeout=600, overwrite=False):
        path = rpc_server.confined_export_path(
            self._export_dir, path, 'exports by admin_group members')
        return self._manager.export(image, version, path, timeout=timeout,
                                    overwrite=overwrite)

    def import_file(self, image, path):
        path = rpc_server.confined_export_path(
            self._export_dir, path, 'imports by admin_group members')
        return self._manager.import_file(image, path)


class GuestOperations(object):
    """The manager as the guest endpoint sees it: a guest's group
    checkpoint is acknowledged before its membership is recorded
    (manager/tagger.py).
    """

    def __init__(self, manager):
        self._manager = manager
        # A guest's checkpoints are kept up to a budget per image (issue
        # 54, finding 3): the older ones are obsoleted, GC frees them,
        # by one thread off the guest's wait (image -> newest version).
        self._retain = {}
        self._wake = threading.Condition()
        threading.Thread(target=self._retain_loop, daemon=True,
                         name='blobcr-guest-retention').start()

    def __getattr__(self, op):
        return getattr(self._manager, op)

    def checkpoint(self, image, **kwargs):
        # Within the image's and the project's budgets (issue 54,
        # finding 3): refused before anything is taken.
        result = self._manager.checkpoint(image, tag_after_ack=True,
                                          guest=True, **kwargs)
        with self._wake:
            self._retain[image] = result['version']
            self._wake.notify()
        return result

    def _retain_loop(self):
        while True:
            with self._wake:
                while not self._retain:
                    self._wake.wait()
                image, newest = self._retain.popitem()
            try:
                self._manager.retain_guest_checkpoints(image, newest)
            except Exception:       # the next checkpoint tries again
                LOG.exception('guest checkpoints of %s: retention', image)


class Agent(object):
    """The running daemon: its servers and their orderly stop."""

    def __init__(self, conf):
        self.conf = conf
        self._lock = _lock_state_path(conf.agent.state_path)
        self.repo = repository.Repository.from_conf(conf)
        self.manager = manager_mod.AgentManager.from_conf(conf, self.repo)
        self.admin = None
        self.rpc = None
        self.httpd = None
        self._stopping = threading.Event()
        self._rpc_started = threading.Event()
        self._run_done = threading.Event()
        self._admin_inode = None
        self.parked = []
        self._had_devices = set()
        self._kept_devices = False

    def start(self):
        # The socket first: it refuses if another agent answers there,
        # before this one re-attaches anything.
        self.admin = control.serve(
            self.conf.agent.admin_socket,
            control.Dispatcher(self.manager, manager_mod.OPERATIONS),
            name='blobcr-admin', group=self.conf.agent.admin_group,
            group_dispatch=control.Dispatcher(
                GroupOperations(self.manager, self.conf.agent.export_dir),
                manager_mod.OPERATIONS))
        self._admin_inode = os.stat(self.conf.agent.admin_socket).st_ino
        if self.conf.agent.rpc_enabled:
            # Made now, started once the mount serves (nothing connects
            # yet). Other hosts' agents: the handoff of a live migration
            # (an incoming image re-attached by recover() asks it too).
            self.rpc = rpc_server.get_servers(self.conf, self.manager)
            self.manager.set_peers(rpc_server.peers_of(self.conf, self.rpc))
        # images/'s connection, if the service manager kept it: then
        # the guests' open files and loop devices go on as they were.
        stored = sdnotify.listen_fds()
        taken_over = self.manager.mirror.claim_connection(stored)
        for fds in stored.values():
            for fd in fds:
                os.close(fd)
        # Loop devices an earlier agent left over its dead mount go; the
        # images re-attached get new ones behind the same links once the
        # mount serves (run()).
        self._had_devices = self.manager.loops.recover(keep=taken_over)
        self._kept_devices = taken_over
        self.manager.mirror.recover()
        self.manager.collector.start()
        self.manager.protector.start()
        self.manager.usage_publisher.start()
        self.httpd = _start_proxy(self.conf, self.manager)
        if self.conf.agent.rpc_enabled:
            # Connecting waits for the broker: the mount, the admin socket
            # and the guest endpoint do not.
            threading.Thread(target=self._start_rpc, daemon=True,
                             name='blobcr-rpc-start').start()
        else:
            LOG.warning('RPC off ([agent] rpc_enabled = false)')

    def _start_rpc(self):
        for server in self.rpc or ():
            server.start()
        self._rpc_started.set()

    def _stop_rpc(self):
        # oslo.messaging orders stop() after start(), which retries the
        # broker forever: a server that never connected is just dropped.
        servers, self.rpc = self.rpc, None
        if servers is not None and self._rpc_started.is_set():
            for server in servers:
                server.stop()
            for server in servers:
                server.wait()

    def stop(self, signum=None, frame=None):
        """Signal handler: the stop runs on its own thread so that FUSE
        keeps serving the guests while persists drain.
        """
        if self._stopping.is_set():
            return
        self._stopping.set()
        LOG.info('stopping (signal %s)', signum)
        sdnotify.notify('STOPPING=1', 'STATUS=draining persists')
        threading.Thread(target=self._drain_and_unmount,
                         name='blobcr-stop').start()

    def _drain_and_unmount(self):
        mirror = self.manager.mirror
        try:
            if self.httpd is not None:
                self.httpd.shutdown()
            self._stop_rpc()
            self.admin.shutdown()
            self.manager.collector.stop()
            self.manager.protector.stop()
            self.manager.usage_publisher.stop()
            if not self.manager.tagger.stop(self.conf.agent.shutdown_timeout):
                LOG.warning('group tags left unrecorded: their groups stay '
                            'incomplete')
            left = self.manager.wait_persists(
                self.conf.agent.shutdown_timeout)
            for image_id in left:
                LOG.warning('persist of %s still running: it resumes from '
                            'its journal when the agent starts again',
                            image_id)
        finally:
            mirror.close_timeout = 0
            if mirror.can_hand_over():
                # The service manager keeps images/'s connection: the
                # guests wait for the next agent instead of failing.
                LOG.info('leaving %s/images to the next agent',
                         mirror.mountpoint)
                mirror.hand_over()
                if not self._run_done.wait(UNMOUNT_GRACE):
                    mirror.abort()
                return
            self.manager.loops.release_all()
            # Unmounting ends the FUSE loop in run() once no file is open
            # on the mount; a VM may still have its disk open.
            mirror.unmount()
            if not self._run_done.wait(UNMOUNT_GRACE):
                LOG.error('images still open (VMs running on them?): '
                          'aborting the mount; their I/O fails until they '
                          'are restarted on the next agent')
                mirror.abort()

    def _serving(self):
        LOG.info('agent of %s serving %s', self.conf.agent.host,
                 self.manager.mirror.mountpoint)
        # Type=notify: the unit is started once the guests' disks serve.
        sdnotify.notify('READY=1', 'STATUS=serving %d image(s) at %s' % (
            len(self.manager.mirror.attached),
            self.manager.mirror.mountpoint))
        # Not on the FUSE loop's thread: losetup opens a mirror file,
        # which that loop serves.
        threading.Thread(target=self._restore_block_devices, daemon=True,
                         name='blobcr-loop-restore').start()

    def _restore_block_devices(self):
        if self._kept_devices and not self.manager.mirror.kept.adopted:
            # The kept connection could not be served after all
            # (connection.open_loop aborted it): the devices kept over it
            # serve nothing; released, and new ones set up behind their
            # links, as after a restart without a kept connection.
            LOG.warning('the loop devices kept over the aborted FUSE '
                        'connection are replaced')
            self._had_devices |= self.manager.loops.recover(keep=False)
        self.manager.restore_block_devices(self._had_devices)

    def run(self):
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        try:
            self.manager.mirror.run(ready=self._serving)
        except Exception:
            LOG.exception('the mirror stopped')
            raise
        finally:
            self._run_done.set()
            self._stop_rpc()
            # A parked persist must not see its backend closed under it,
            # nor the interpreter's exit hooks (which refuse new work to
            # thread pools): either would fail its version.
            self.parked = self.manager.wait_persists(0)
            if not self.parked:
                self.repo.close()
            try:
                # Only our own socket: never one another agent made since.
                if os.stat(self.conf.agent.admin_socket).st_ino == \
                        self._admin_inode:
                    os.unlink(self.conf.agent.admin_socket)
            except OSError:
                pass


def main(argv=None):
    logging.register_options(CONF)
    try:
        CONF(sys.argv[1:] if argv is None else argv, project='blobcr',
             prog='blobcr-agent')
    except cfg.Error as e:
        sys.exit('blobcr-agent: %s' % e)
    logging.setup(CONF, 'blobcr-agent')
    # Before any thread starts: they inherit it.
    loopdevs.become_io_flusher()
    try:
        privileged.start()
        agent = Agent(CONF)
        agent.start()
    except (exception.BlobCRError, cfg.Error, OSError) as e:
        print('blobcr-agent: error: %s' % e, file=sys.stderr)
        return 1
    agent.run()
    if agent.parked:
        LOG.warning('exiting with %d persists parked: they resume at the '
                    'next start', len(agent.parked))
        # As if killed here: the journal resumes them. A normal exit
        # would run hooks that fail them.
        std_logging.shutdown()
        os._exit(0)
    return 0


if __name__ == '__main__':
    sys.exit(main())
