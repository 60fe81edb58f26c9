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

"""Progress of long operations: a bar on a TTY, log lines otherwise."""

import logging
import sys
import time

LOG = logging.getLogger(__name__)


class Progress(object):
    """``start(total)``, ``advance(n)`` any number of times, ``finish()``."""

    def __init__(self, label, stream=None, unit='B', log_every=5.0):
        self.label = label
        self.stream = stream or sys.stderr
        self.unit = unit
        self.tty = hasattr(self.stream, 'isatty') and self.stream.isatty()
        self.log_every = log_every
        self.total = 0
        self.done = 0

    def start(self, total):
        self.total = max(int(total), 0)
        self.done = 0
        self._t0 = self._last = time.monotonic()

    def advance(self, n):
        self.done += n
        now = time.monotonic()
        if self.tty and now - self._last >= 0.1:
            self._last = now
            self._draw(now)
        elif not self.tty and now - self._last >= self.log_every:
            self._last = now
            LOG.info('%s: %d/%d %s (%.1f %s/s)', self.label, self.done,
                     self.total, self.unit, self._rate(now), self._rate_unit)

    @property
    def _rate_unit(self):
        return 'MB' if self.unit == 'B' else self.unit

    def _rate(self, now):
        rate = self.done / max(now - self._t0, 1e-6)
        return rate / 1e6 if self.unit == 'B' else rate

    def _draw(self, now):
        frac = min(self.done / self.total, 1.0) if self.total else 1.0
        width = 30
        bar = '#' * int(frac * width) + '-' * (width - int(frac * width))
        self.stream.write('\r%s [%s] %5.1f%% %.1f %s/s ' % (
            self.label, bar, 100 * frac, self._rate(now), self._rate_unit))
        self.stream.flush()

    def finish(self):
        now = time.monotonic()
        if self.tty:
            self.done = max(self.done, self.total)
            self._draw(now)
            self.stream.write('\n')
            self.stream.flush()
        else:
            LOG.info('%s: done, %d %s in %.2f s', self.label, self.done,
                     self.unit, now - self._t0)
