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

"""Readahead of a lazily restarted image: a guest reading its disk in
order gets the chunks after the ones it misses fetched in the
background, in a window that doubles while the reads stay sequential
(up to ``maximum`` chunks ahead) and closes on a jump. It starts once
the guest has read ``trigger`` chunks in a row: short runs (a file of a
few chunks) are read as they are, with nothing fetched for nothing.
The fetches go through the image's own fetch path, so a chunk is
fetched once even when the guest asks for it while it is on its way,
and never over a write (mc_install).

Only misses are seen here (the core serves present chunks without
calling out), which is enough: a reader that runs through the chunks
fetched ahead misses again right after them, and that miss continues
the sequence.
"""

import concurrent.futures
import logging
import threading

LOG = logging.getLogger(__name__)


class ReadAhead(object):

    def __init__(self, image, trigger=8, initial=32, maximum=64, batch=4,
                 workers=8):
        self.image = image
        self.trigger = trigger
        self.initial = initial
        self.maximum = maximum
        self.batch = batch
        self.lock = threading.Lock()
        self.window = 0
        self.last = None            # the last chunk the reader missed
        self.streak = None          # where the current sequence began
        self.issued_to = -1         # chunks up to this one were issued
        self.pool = concurrent.futures.ThreadPoolExecutor(
            workers, thread_name_prefix='blobcr-readahead')
        self.issued = 0             # chunks asked ahead (stats)
        self.stopped = False

    def missed(self, indices):
        """The guest missed ``indices``: go on ahead if that continues a
        sequence, else start over.
        """
        if not indices or self.maximum <= 0:
            return
        first, last = min(indices), max(indices)
        nchunks = self.image.header.nchunks
        with self.lock:
            if self.stopped:
                return
            # The kernel splits a large read into several FUSE requests
            # served at once: a chunk is missed again while it is on its
            # way. That continues the sequence; a jump ends it.
            sequential = self.last is not None and \
                self.streak <= first <= max(self.last, self.issued_to) + 1
            if not sequential:
                self.window = 0
                self.issued_to = last
                self.streak = first
                self.last = last
                return
            if last <= self.last:
                return                  # nothing new in this sequence
            self.last = last
            if last - self.streak + 1 < self.trigger:
                self.issued_to = max(self.issued_to, last)
                return
            self.window = min(max(2 * self.window, self.initial),
                              self.maximum)
            start = max(last, self.issued_to) + 1
            end = min(last + self.window, nchunks - 1)
            if start > end:
                return
            self.issued_to = end
            self.issued += end - start + 1
            todo = list(range(start, end + 1))
        for k in range(0, len(todo), self.batch):
            self.pool.submit(self._fetch, todo[k:k + self.batch])

    def _fetch(self, indices):
        if self.stopped or self.image._closing:
            return
        wanted = [i for i in indices if not self.image.core.is_present(i)]
        if not wanted:
            return
        try:
            self.image.fetch(wanted, reason='readahead')
        except Exception as e:
            # Best effort: the guest's own read of these chunks fetches
            # them again and reports what fails.
            LOG.warning('readahead of %s stopped at %s: %s', self.image.id,
                        wanted[0], e)

    def stop(self):
        with self.lock:
            self.stopped = True
        self.pool.shutdown(wait=True, cancel_futures=True)
