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

"""Which libvirt domain uses an image, and quiescing it for a checkpoint.

Quiesce modes (per request or per configuration):

* ``none``: the guest synced its file systems itself;
* ``fsfreeze``: freeze the guest's file systems through qemu-guest-agent
  (what Nova does for quiesced snapshots, ``hw_qemu_guest_agent=yes``);
* ``suspend``: pause the whole domain (the BlobCR paper's choice).

Only a running domain is frozen or paused, and only what the hold did is
undone on the way out, whatever fails inside: a domain an operator paused
stays paused, a guest whose file systems are frozen already (Nova's
quiesce) is held as it is and stays frozen. Holds of one domain are
shared (counted): two checkpoints of two disks of one domain at once
pause or freeze it once, and the last one out resumes or thaws it.

Only active domains count, disks are compared by their real paths, and a
libvirt error other than "no such domain" is retried once on a new
connection, then reported as BackendUnavailable.
"""

import collections
import contextlib
import logging
import os
import re
import threading
import time
from xml.etree import ElementTree

from blobcr_common import exception

LOG = logging.getLogger(__name__)
# Nova's libvirt metadata (nova/virt/libvirt/config.py), versions 1.0+.
NOVA_NAMESPACE = 'http://openstack.org/xmlns/libvirt/nova/'

QUIESCE_MODES = ('none', 'fsfreeze', 'suspend')

# Kept for callers that import it from here: it lives in
# blobcr_common.exception so that RPC callers get it as its own type.
QuiesceFailed = exception.QuiesceFailed

# libvirt keepalive: a dead daemon or a cut connection is noticed after
# about INTERVAL * (COUNT + 1) seconds instead of a hanging call.
KEEPALIVE_INTERVAL = 5
KEEPALIVE_COUNT = 3

_UUID = re.compile(r'[0-9a-fA-F-]+')

_events_lock = threading.Lock()
_events_started = False


def _libvirt():
    try:
        import libvirt
    except ImportError:  # pragma: no cover - depends on the host
        raise exception.BackendUnavailable(
            'libvirt-python is not installed (tools/install-deps.sh)')
    return libvirt


def _start_event_loop(libvirt):
    """libvirt's default event loop on a daemon thread, once per process:
    keepalive needs it. Must run before connections are opened.
    """
    global _events_started
    with _events_lock:
        if _events_started:
            return
        _events_started = True
        try:
            libvirt.virEventRegisterDefaultImpl()
        except libvirt.libvirtError as e:  # pragma: no cover
            LOG.warning('no libvirt event loop (so no keepalive): %s', e)
            return

        def run():
            while True:
                try:
                    libvirt.virEventRunDefaultImpl()
                except Exception:  # pragma: no cover - libvirt trouble
                    LOG.exception('libvirt event loop')
                    time.sleep(1)

        threading.Thread(target=run, daemon=True,
                         name='libvirt-events').start()


def _is_uuid(text):
    # What virUUIDParse takes (16 hex pairs, dashes anywhere): anything
    # else would be an "invalid UUID" error, not "no such domain".
    return (isinstance(text, str) and _UUID.fullmatch(text) is not None and
            len(text.replace('-', '')) == 32)


# What qemu-ga answers a freeze while the guest's file systems are
# frozen (qemu 6.0 and later: every command but ping, info, sync,
# status and thaw is disabled until the thaw), as libvirt reports it.
FROZEN_ALREADY = 'the agent is in frozen state'


def _frozen_already(error):
    """Whether a failed fsFreeze failed because someone else froze the
    guest already: Nova's quiesce before its create_snapshot_force of
    each volume of a server (``openstack server image create``), or an
    operator's ``virsh domfsfreeze``. Such a hold is kept as it is and
    not thawed: the thaw is the freezer's (a thaw here would end Nova's
    freeze before its other volumes' snapshots).
    """
    return FROZEN_ALREADY in str(error)


def _running_states(libvirt):
    # BLOCKED is a running domain waiting on a resource (Xen, LXC).
    return (libvirt.VIR_DOMAIN_RUNNING, libvirt.VIR_DOMAIN_BLOCKED)


class _Hold(object):
    """The shared hold of one domain."""

    def __init__(self, key, mode):
        self.key = key
        self.mode = mode
        self.count = 0
        self.threads = collections.Counter()
        self.lock = threading.Lock()    # quiet / wake of this domain
        self.ready = False              # quieted (or nothing to do)
        self.undo = False               # this hold paused or froze it
        self.closing = False            # the last one out is waking it


class Hypervisor(object):

    def __init__(self, uri='qemu:///system'):
        self.uri = uri
        self._conn = None
        self._conn_lock = threading.Lock()
        self._holds = {}
        self._holds_cond = threading.Condition()

    # -- the connection --------------------------------------------------

    def connection(self):
        libvirt = _libvirt()
        with self._conn_lock:
            if self._conn is None or not self._alive(libvirt, self._conn):
                self._conn = self._open(libvirt)
            return self._conn

    @staticmethod
    def _alive(libvirt, conn):
        try:
            return conn.isAlive() == 1
        except libvirt.libvirtError:
            return False

    def _open(self, libvirt):
        _start_event_loop(libvirt)
        try:
            conn = libvirt.open(self.uri)
        except libvirt.libvirtError as e:
            raise exception.BackendUnavailable(
                'cannot reach libvirt at %s: %s' % (self.uri, e))
        try:
            conn.setKeepAlive(KEEPALIVE_INTERVAL, KEEPALIVE_COUNT)
        except libvirt.libvirtError as e:
            # Local drivers (test://, and any without a daemon) have none.
            LOG.debug('no keepalive on %s: %s', self.uri, e)
        return conn

    def _reconnect(self):
        libvirt = _libvirt()
        with self._conn_lock:
            old, self._conn = self._conn, None
        if old is not None:
            try:
                old.close()
            except libvirt.libvirtError:
                pass
        return self.connection()

    def _ask(self, what, call):
        """``call(connection)``; a libvirt error is retried once on a new
        connection, then raised as BackendUnavailable.
        """
        libvirt = _libvirt()
        conn = self.connection()
        try:
            return call(conn)
        except libvirt.libvirtError as e:
            LOG.warning('libvirt at %s: cannot %s (%s): reconnecting',
                        self.uri, what, e)
        conn = self._reconnect()
        try:
            return call(conn)
        except libvirt.libvirtError as e:
            raise exception.BackendUnavailable(
                'libvirt at %s: cannot %s: %s' % (self.uri, what, e))

    # -- which domain ----------------------------------------------------

    @staticmethod
    def disk_sources(domain):
        """The file or block device behind every disk of a domain, as the
        domain names them.
        """
        tree = ElementTree.fromstring(domain.XMLDesc(0))
        sources = []
        for disk in tree.findall('./devices/disk/source'):
            path = disk.get('file') or disk.get('dev')
            if path:
                sources.append(path)
        return sources

    @classmethod
    def _disk_paths(cls, domain):
        return {os.path.realpath(p) for p in cls.disk_sources(domain)}

    def _find(self, conn, instance):
        libvirt = _libvirt()
        finders = [conn.lookupByName]
        if _is_uuid(instance):
            finders.insert(0, conn.lookupByUUIDString)
        for find in finders:
            try:
                return find(instance)
            except libvirt.libvirtError as e:
                if e.get_error_code() != libvirt.VIR_ERR_NO_DOMAIN:
                    raise
        return None

    def lookup(self, instance):
        """The domain of an instance: by UUID (Nova's instance id), else
        by name; None if it is not on this host.
        """
        return self._ask('look up domain %s' % instance,
                         lambda conn: self._find(conn, instance))

    def instance_disks(self, instance):
        """The real paths of the disks of an instance's domain, or None
        if it is not on this host.
        """
        def ask(conn):
            domain = self._find(conn, instance)
            return None if domain is None else self._disk_paths(domain)
        return self._ask('read the disks of domain %s' % instance, ask)

    @staticmethod
    def nova_project(domain):
        """The project Nova wrote in a domain's metadata
        (``<nova:instance><nova:owner><nova:project uuid=...>``, any
        version of Nova's namespace), or None.
        """
        tree = ElementTree.fromstring(domain.XMLDesc(0))
        for element in tree.iter():
            if element.tag.startswith('{' + NOVA_NAMESPACE) and \
                    element.tag.endswith('}project') and element.get('uuid'):
                return element.get('uuid')
        return None

    def instance_project(self, instance):
        """The project of an instance's domain as Nova recorded it, or
        None (not on this host, or not a Nova domain).
        """
        def ask(conn):
            domain = self._find(conn, instance)
            return None if domain is None else self.nova_project(domain)
        return self._ask('read the metadata of domain %s' % instance, ask)

    def is_running(self, domain):
        """Whether ``domain`` runs (not paused, shut off or gone)."""
        libvirt = _libvirt()

        def ask(conn):
            try:
                return domain.state()[0] in _running_states(libvirt)
            except libvirt.libvirtError as e:
                if e.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
                    return False
                raise
        return self._ask('read the state of domain %s' % domain.name(), ask)

    @staticmethod
    def disk_name(path):
        """``path`` as compared with a domain's disks: only its directory
        resolved (a lookup of a mirror file on the FUSE mount would keep
        it in the kernel's cache for a second after a detach).
        """
        return os.path.join(os.path.realpath(os.path.dirname(path)),
                            os.path.basename(path))

    def domain_for(self, *paths):
        """The active domain that has one of ``paths`` (an image's mirror
        file and its loop device) as a disk, or None. Disks are compared
        by real path, ``paths`` by disk_name.
        """
        libvirt = _libvirt()
        targets = {self.disk_name(path) for path in paths}

        def ask(conn):
            for domain in conn.listAllDomains(
                    libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE):
                try:
                    paths = self._disk_paths(domain)
                except libvirt.libvirtError as e:
                    if e.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
                        continue            # it went away meanwhile
                    raise
                if targets & paths:
                    return domain
            return None
        return self._ask('list the running domains', ask)

    # -- holding a domain still --------------------------------------------

    @contextlib.contextmanager
    def quiesced(self, domain, mode):
        """Hold the domain quiet for the duration of the block."""
        if mode not in QUIESCE_MODES:
            raise exception.InvalidInput('quiesce mode must be one of %s'
                                         % ', '.join(QUIESCE_MODES))
        if mode == 'none':
            yield
            return
        hold = self._join(domain, mode)
        try:
            self._quiet(hold, domain)
        except BaseException:
            self._leave(hold, domain)
            raise
        try:
            yield
        finally:
            self._leave(hold, domain)

    def _join(self, domain, mode):
        libvirt = _libvirt()
        try:
            key = domain.UUIDString()
        except libvirt.libvirtError as e:
            raise exception.QuiesceFailed('cannot %s the domain: %s'
                                          % (mode, e))
        me = threading.get_ident()
        with self._holds_cond:
            while True:
                hold = self._holds.get(key)
                if hold is None:
                    hold = self._holds[key] = _Hold(key, mode)
                    break
                # Share a hold of the same mode; a thread that holds the
                # domain already shares whatever mode it holds it in.
                if not hold.closing and (hold.mode == mode or
                                         hold.threads[me]):
                    break
                self._holds_cond.wait()
            hold.count += 1
            hold.threads[me] += 1
        return hold

    def _quiet(self, hold, domain):
        libvirt = _libvirt()
        with hold.lock:
            if hold.ready:
                return
            try:
                name = domain.name()
                state = domain.state()[0]
            except libvirt.libvirtError as e:
                raise exception.QuiesceFailed(
                    'cannot %s the domain: %s' % (hold.mode, e))
            if state not in _running_states(libvirt):
                # Paused by an operator (or not running at all): it is
                # still already, and stays as it is.
                LOG.info('domain %s is not running (state %d): held as it '
                         'is, no %s', name, state, hold.mode)
                hold.ready = True
                return
            quiet = (domain.fsFreeze if hold.mode == 'fsfreeze'
                     else domain.suspend)
            try:
                quiet()
            except libvirt.libvirtError as e:
                if hold.mode == 'fsfreeze' and _frozen_already(e):
                    LOG.info('domain %s: its file systems are frozen '
                             'already (%s): held as they are, not thawed '
                             'here', name, e)
                    hold.ready = True
                    return
                raise exception.QuiesceFailed('cannot %s domain %s: %s'
                                              % (hold.mode, name, e))
            hold.undo = hold.ready = True

    def _leave(self, hold, domain):
        me = threading.get_ident()
        with self._holds_cond:
            hold.count -= 1
            hold.threads[me] -= 1
            if not hold.threads[me]:
                del hold.threads[me]
            last = hold.count == 0
            if last:
                # New holders wait until it is woken: they must not
                # take the pause this hold is about to undo for theirs.
                hold.closing = True
        if not last:
            return
        try:
            with hold.lock:
                if hold.undo:
                    hold.undo = False
                    self._wake(domain, hold.mode)
        finally:
            with self._holds_cond:
                del self._holds[hold.key]
                self._holds_cond.notify_all()

    @staticmethod
    def _wake(domain, mode):
        libvirt = _libvirt()
        wake = domain.fsThaw if mode == 'fsfreeze' else domain.resume
        try:
            wake()
        except libvirt.libvirtError as e:
            try:
                name = domain.name()
            except libvirt.libvirtError:
                name = '?'
            LOG.error('could not undo %s of domain %s: %s', mode, name, e)
            raise exception.BackendUnavailable(
                'could not undo %s of domain %s: %s' % (mode, name, e))
