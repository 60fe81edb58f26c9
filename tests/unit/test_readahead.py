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

"""The readahead's sequence detection, on the misses a FUSE mount
reports (the fetches themselves are tests/functional/test_mirror_io.py's).
"""

import threading
import types

from blobcr_agent.mirror import readahead


class _Image(object):
    """What ReadAhead uses of an AttachedImage; records the fetches."""

    def __init__(self, nchunks):
        self.header = types.SimpleNamespace(nchunks=nchunks)
        self.core = types.SimpleNamespace(is_present=lambda i: False)
        self._closing = False
        self.fetched = []
        self.lock = threading.Lock()

    def fetch(self, indices, reason=None):
        with self.lock:
            self.fetched.extend(indices)


TRIGGER = readahead.ReadAhead.__init__.__defaults__[0]


def _run(misses, nchunks=1024):
    image = _Image(nchunks)
    ra = readahead.ReadAhead(image)
    for indices in misses:
        ra.missed(indices)
    ra.stop()
    return ra, sorted(image.fetched)


def test_a_sequential_reader_is_read_ahead_once_it_is_long_enough():
    ra, fetched = _run([[k] for k in range(TRIGGER - 1)])
    assert fetched == []                    # a short run
    ra, fetched = _run([[k] for k in range(40)])
    # (stop() cancels what was not fetched yet)
    assert fetched and min(fetched) == TRIGGER and \
        len(fetched) <= ra.issued


def test_repeated_misses_of_a_chunk_on_its_way_continue_the_sequence():
    # 1 MiB reads split into 128 KiB requests: every 256 KiB chunk is
    # missed twice, the second time while the first fetch is running.
    _, fetched = _run([[k] for k in range(40) for _ in range(2)])
    assert fetched and min(fetched) == TRIGGER


def test_a_jump_ends_the_sequence():
    _, fetched = _run([[k] for k in range(TRIGGER - 1)] +
                      [[500 + k] for k in range(TRIGGER - 1)])
    assert fetched == []
