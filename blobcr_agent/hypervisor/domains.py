"""Which libvirt domain uses an image, and quiescing it for a checkpoint.

Quiesce modes (per request or per configuration):

* ``none``: the guest synced its file systems itself;
* ``fsfreeze``: freeze the guest's file systems through qemu-guest-agent
  (what Nova does for quiesced snapshots, ``hw_qemu_guest_agent=yes``);
* ``suspend``: pause the whole domain (the BlobCR paper's choice).

Whatever fails inside, the domain is thawed or resumed on the way out.
"""

import contextlib
import logging
from xml.etree import ElementTree

from blobcr_agent import exception

LOG = logging.getLogger(__name__)

QUIESCE_MODES = ('none', 'fsfreeze', 'suspend')


def _libvirt():
    try:
        import libvirt
    except ImportError:  # pragma: no cover - depends on the host
        raise exception.BackendUnavailable(
            'libvirt-python is not installed (tools/install-deps.sh)')
    return libvirt


class QuiesceFailed(exception.BlobCRError):
    """The guest could not be quiesced; nothing was checkpointed."""


class Hypervisor(object):

    def __init__(self, uri='qemu:///system'):
        self.uri = uri
        self._conn = None

    def connection(self):
        libvirt = _libvirt()
        if self._conn is None or not self._conn.isAlive():
            try:
                self._conn = libvirt.open(self.uri)
            except libvirt.libvirtError as e:
                raise exception.BackendUnavailable(
                    'cannot reach libvirt at %s: %s' % (self.uri, e))
        return self._conn

    @staticmethod
    def disk_sources(domain):
        """The file or block device behind every disk of a domain."""
        tree = ElementTree.fromstring(domain.XMLDesc(0))
        sources = []
        for disk in tree.findall('./devices/disk/source'):
            path = disk.get('file') or disk.get('dev')
            if path:
                sources.append(path)
        return sources

    def lookup(self, instance):
        """The domain of an instance: by UUID (Nova's instance id), else
        by name; None if it is not on this host.
        """
        libvirt = _libvirt()
        conn = self.connection()
        for find in (conn.lookupByUUIDString, conn.lookupByName):
            try:
                return find(instance)
            except libvirt.libvirtError:
                continue
        return None

    def domain_for(self, path):
        """The domain that has ``path`` as a disk, or None."""
        for domain in self.connection().listAllDomains():
            if path in self.disk_sources(domain):
                return domain
        return None

    @contextlib.contextmanager
    def quiesced(self, domain, mode):
        """Hold the domain quiet for the duration of the block."""
        if mode not in QUIESCE_MODES:
            raise exception.InvalidInput('quiesce mode must be one of %s'
                                         % ', '.join(QUIESCE_MODES))
        if mode == 'none':
            yield
            return
        libvirt = _libvirt()
        quiet, wake = ((domain.fsFreeze, domain.fsThaw) if mode == 'fsfreeze'
                       else (domain.suspend, domain.resume))
        try:
            quiet()
        except libvirt.libvirtError as e:
            raise QuiesceFailed('cannot %s domain %s: %s'
                                % (mode, domain.name(), e))
        try:
            yield
        finally:
            try:
                wake()
            except libvirt.libvirtError as e:
                LOG.error('could not undo %s of domain %s: %s', mode,
                          domain.name(), e)
                raise
