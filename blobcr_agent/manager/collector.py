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

"""Garbage collection without an operator.

Every agent runs a Collector thread: every ``[repository] gc_interval``
seconds, and a few seconds after this agent deleted a volume or a
version (:meth:`Collector.kick`), it runs one collection under the
store's ``gc`` lease (repository/gc.py), so that two never run at once;
an agent that finds the lease taken skips that turn, since the holder
collects for everyone. Objects a collection kept for being too recent
(``gc_grace``) are collected by another run once the grace has passed:
space comes back within ``gc_interval`` + grace of a delete, without an
operator.
"""

import logging
import threading
import time

from blobcr_agent.repository import gc
from blobcr_common import exception

LOG = logging.getLogger(__name__)

KICK_DELAY = 2.0        # deletes come in bursts: one run for a burst
# A collection lists and walks the whole store: after deletes, at most
# one per this many seconds (or per gc_interval, if shorter).
KICK_GAP = 30.0


class Collector(object):

    def __init__(self, repo, interval):
        self.repo = repo
        self.interval = interval
        self.holder = gc.lease_holder_name()
        self._cond = threading.Condition()
        self._next = None
        self._stopped = False
        self._thread = None
        self._running = threading.Lock()    # one run per process too
        self.runs = self.skipped = self.failures = 0
        self._last_end = None               # monotonic end of a run
        self.last = None                    # the last run, as status shows

    def start(self):
        """Collect every ``interval`` s (never if 0), and after kicks."""
        with self._cond:
            if self.interval:
                self._next = time.monotonic() + self.interval
        self._thread = threading.Thread(target=self._loop, daemon=True,
                                        name='blobcr-gc')
        self._thread.start()

    def stop(self):
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(10)

    def kick(self, delay=KICK_DELAY):
        """Something was deleted: collect within ``delay`` s, or once
        the gap after the last run has passed.
        """
        if self._last_end is not None:
            gap = min(self.interval or KICK_GAP, KICK_GAP)
            delay = max(delay, self._last_end + gap - time.monotonic())
        self._schedule(delay)

    def _schedule(self, delay):
        with self._cond:
            at = time.monotonic() + delay
            if self._next is None or at < self._next:
                self._next = at
            self._cond.notify_all()

    def _loop(self):
        while True:
            with self._cond:
                while not self._stopped and (
                        self._next is None or
                        time.monotonic() < self._next):
                    self._cond.wait(None if self._next is None else
                                    max(0, self._next - time.monotonic()))
                if self._stopped:
                    return
                self._next = (time.monotonic() + self.interval
                              if self.interval else None)
            try:
                self.run_once(background=True)
            except Exception:       # the next turn tries again
                LOG.exception('gc: the periodic collection failed')

    def run_once(self, grace=None, pending_timeout=None, background=False):
        """One collection under the lease; its report. Busy if one is
        running here or elsewhere (in the background: skipped, None).
        """
        if not self._running.acquire(blocking=False):
            if background:
                return None
            raise exception.Busy('garbage collection is running on this '
                                 'agent; try again later')
        started = time.time()
        try:
            report = gc.collect_exclusive(self.repo, self.holder, grace,
                                          pending_timeout)
        except exception.Busy as e:
            if not background:
                raise
            self.skipped += 1
            LOG.debug('gc: skipped: %s', e)
            return None
        except Exception as e:
            self.failures += 1
            self.last = {'at': started, 'error': str(e)}
            raise
        finally:
            self._last_end = time.monotonic()
            self._running.release()
        self.runs += 1
        self.last = dict(report.as_dict(), at=started,
                         seconds=round(time.time() - started, 3))
        if report.kept_recent:
            # Garbage younger than the grace: collect it once it is not.
            self._schedule(self.repo.gc_grace + KICK_DELAY)
        return report

    def status(self):
        with self._cond:
            due = None if self._next is None else \
                max(0.0, self._next - time.monotonic())
        return {'interval': self.interval, 'next_in': due,
                'runs': self.runs, 'skipped': self.skipped,
                'failures': self.failures, 'last': self.last}
