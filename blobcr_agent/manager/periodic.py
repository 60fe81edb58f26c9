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

"""A manager's background work done every few seconds on a thread of
its own, started and stopped by the agent (cmd/agent.py).
"""

import logging
import threading

LOG = logging.getLogger(__name__)


class Periodic(object):
    """``tick()`` every ``every`` seconds while ``enabled``; an error in
    one is logged and counted (``errors``), the next tries again.
    """

    def __init__(self, name, every):
        self.name = name
        self.every = every
        self.errors = 0
        self._stop = threading.Event()
        self._thread = None

    @property
    def enabled(self):
        return True

    def start(self):
        if not self.enabled or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._loop, daemon=True,
                                        name=self.name)
        self._thread.start()

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)

    def _loop(self):
        while not self._stop.wait(self.every):
            try:
                self.tick()
            except Exception:
                self.errors += 1
                LOG.exception('%s: the next tick tries again', self.name)

    def tick(self):
        raise NotImplementedError
