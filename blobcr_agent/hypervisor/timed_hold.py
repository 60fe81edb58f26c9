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

"""Holds of a guest that outlast one call: phase one of a group
checkpoint across hosts.

A group checkpoint whose members run on several hosts is consistent
across them only if every member's guest is held still before any member
COMMITs. The caller (the Cinder driver) holds each member on its host,
checkpoints each, then releases each. A hold lives in a thread of its own
(``Hypervisor.quiesced`` counts its holders per thread) and ends at
``release`` or, if the caller never comes back, after its timeout: a
guest is never left paused by a caller that died.

A checkpoint of the image in the same quiesce mode meanwhile joins the
hold (``Hypervisor.quiesced`` shares a hold of the same mode) and does
not resume the guest when it ends; the release does.
"""

import logging
import threading
import time

from blobcr_common import exception

LOG = logging.getLogger(__name__)
MAX_TIMEOUT = 600


class TimedHold(object):
    """``context`` (a quiesce context manager) entered in a thread until
    :meth:`release` or ``timeout`` seconds.
    """

    def __init__(self, image, context, timeout, on_end):
        self.image = image
        self.context = context
        self.timeout = timeout
        self.on_end = on_end
        self.expired = False
        self.held_ms = None
        self._entered = threading.Event()
        self._release = threading.Event()
        self._error = None
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name='hold-%s' % image)

    def start(self):
        """Enter the hold; raises what the quiesce raised."""
        self._thread.start()
        self._entered.wait()
        if self._error is not None:
            raise self._error

    def _run(self):
        try:
            self.context.__enter__()
        except BaseException as e:
            self._error = e
            self._entered.set()
            self.on_end(self)
            return
        began = time.monotonic()
        self._entered.set()
        try:
            if not self._release.wait(self.timeout):
                self.expired = True
                LOG.warning('hold of %s not released after %s s: resuming '
                            'the guest', self.image, self.timeout)
        finally:
            self.held_ms = (time.monotonic() - began) * 1e3
            try:
                self.context.__exit__(None, None, None)
            finally:
                self.on_end(self)

    def release(self):
        self._release.set()
        self._thread.join()


class HoldTable(object):
    """The timed holds of one agent, one per image at most."""

    def __init__(self):
        self._lock = threading.Lock()
        self._holds = {}

    def hold(self, image, context, timeout):
        if not isinstance(timeout, (int, float)) or \
                not 0 < timeout <= MAX_TIMEOUT:
            raise exception.InvalidInput('a hold lasts 0-%d s'
                                         % MAX_TIMEOUT)
        held = TimedHold(image, context, timeout, self._ended)
        with self._lock:
            if image in self._holds:
                raise exception.InvalidInput('image %s is held already'
                                             % image)
            self._holds[image] = held
        held.start()
        return held

    def _ended(self, held):
        with self._lock:
            if self._holds.get(held.image) is held:
                del self._holds[held.image]

    def get(self, image):
        """The hold of ``image`` under way, or None."""
        with self._lock:
            return self._holds.get(image)

    def release(self, image):
        """The ended hold, or None if there was none (or it expired)."""
        with self._lock:
            held = self._holds.get(image)
        if held is not None:
            held.release()
        return held
