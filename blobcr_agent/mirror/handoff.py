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

"""An image attached for an incoming live migration, until its handoff.

In a live migration (Nova's, through Cinder) the destination attaches
the image while the guest still writes on the source: the destination
QEMU opens the file when it starts, long before the switch. Its mirror
cannot take its base version then, since the source's last writes are
not committed yet. So it is *incoming*: every request on its file
passes a gate (native/fuseloop.c, ``pass_gate``) first:

* a read while the source's guest still runs can only be the
  destination QEMU's own (opening the file, probing O_DIRECT alignment):
  it is answered from the version the mirror was attached from, without
  installing anything, so nothing stale stays behind;
* any other request (a write; a read once the source's guest stopped: the
  guest now runs here) waits for the *handoff*: the source commits what
  is left and detaches (manager.handoff), and this mirror takes that
  version as its base (AttachedImage.rebase). Then the gate opens for
  good and requests go straight to the core.

Why this is safe: QEMU stops the guest on the source (libvirt sees it
paused) before the destination resumes it, and the source's handoff
waits until its guest does not run. Reads answered before the handoff
installed nothing, so no chunk of the older base is left present.

``ask(wait, timeout)`` asks the source (RPC ``handoff``, the answer
awaited at most ``timeout`` s) and returns ``{'running': True}`` while
its guest runs (after waiting up to ``wait`` s for it to stop), else
``{'version': N}``. It raises when the source cannot answer: unreachable,
or unable to tell whether its guest still runs (its libvirt down). A
read then waits as a write does: it may be the guest's, already here.
"""

import errno
import logging
import threading
import time

from blobcr_common import exception

LOG = logging.getLogger(__name__)

POLL = 2.0      # each ask waits at most this long on the source
# ...and its answer (a commit and persist there) at most this much more,
# within the request's own deadline.
ANSWER = 30.0


class Incoming(object):

    def __init__(self, attached, source, ask, timeout=120.0):
        self.attached = attached
        self.source = source
        self._ask = ask
        self.timeout = timeout
        self._lock = threading.Lock()
        self.done = threading.Event()
        self.on_done = None             # called once the gate is open
        self.version = None             # the source's final version
        self.early_reads = 0            # answered from the old base
        self.waited_ms = None           # the first waiting request's wait
        self.source_phases = None       # where the source spent it
        self.source_chunks = None       # what its last commit held
        self.error = None

    def gate(self, offset, length, writing):
        """None (go on to the core), or the bytes of an early read."""
        if self.done.is_set():
            return None
        started = time.monotonic()
        with self._lock:
            if self.done.is_set():
                return None
            if not writing:
                reply = self._try(0, started + self.timeout)
                if reply is not None and reply.get('running'):
                    self.early_reads += 1
                    return self.attached.read_base(offset, length)
                if reply is not None:
                    self._finish(reply, started)
                    return None
            self._wait(started)
        return None

    def _try(self, wait, deadline):
        """The source's answer, or None if it could not be asked or did
        not answer before ``deadline``.
        """
        left = deadline - time.monotonic()
        try:
            return self._ask(wait, max(1.0, min(wait + ANSWER, left)))
        except Exception as e:
            self.error = str(e)
            LOG.warning('incoming %s: cannot ask %s for the handoff: %s',
                        self.attached.id, self.source, e)
            return None

    def _wait(self, started):
        """Until the source hands the image off (or the timeout: EIO)."""
        deadline = started + self.timeout
        while True:
            if self.attached._closing:
                # Detached (a migration called off): its detach waits
                # for this request.
                raise OSError(errno.EIO, 'image %s is being detached'
                              % self.attached.id)
            left = deadline - time.monotonic()
            if left <= 0:
                LOG.error('incoming %s: no handoff from %s in %.0f s (%s): '
                          'the guest gets EIO here; its writes are on %s',
                          self.attached.id, self.source, self.timeout,
                          self.error or 'its guest still runs', self.source)
                raise OSError(errno.EIO, 'no handoff from %s' % self.source)
            reply = self._try(min(POLL, left), deadline)
            if reply is None:
                time.sleep(min(0.2, max(0, left)))
            elif not reply.get('running'):
                self._finish(reply, started)
                return

    def _finish(self, reply, started):
        version = reply['version']
        self.source_phases = reply.get('phases')
        self.source_chunks = reply.get('chunks')
        try:
            self.attached.rebase(version)
        except exception.BlobCRError as e:
            LOG.error('incoming %s: cannot take version %s of %s: %s',
                      self.attached.id, version, self.source, e)
            raise OSError(errno.EIO, str(e))
        self.version = version
        self.waited_ms = (time.monotonic() - started) * 1000
        self.done.set()
        if self.on_done is not None:
            self.on_done()
        LOG.info('HANDOFF image=%s source=%s version=%s waited_ms=%.1f '
                 'early_reads=%d', self.attached.id, self.source, version,
                 self.waited_ms, self.early_reads)

    def status(self):
        return {'source': self.source, 'done': self.done.is_set(),
                'version': self.version, 'early_reads': self.early_reads,
                'waited_ms': self.waited_ms,
                'source_phases': self.source_phases,
                'source_chunks': self.source_chunks}
