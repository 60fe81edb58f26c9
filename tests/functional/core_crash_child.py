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

"""A child process for test_core_crash_points: drives a mirror core
through pipelined checkpoints (the case of issue 19's finding 3) with
the core's crash points armed by BLOBCR_CORE_CRASH_AT, and prints the index
of every step before it starts it, then ``done`` and the crash points
it passed.

    python -m tests.functional.core_crash_child DIR
"""

import sys

from blobcr_agent import _native

CHUNK = 4096
NCHUNKS = 6

# (what, first chunk, last chunk). The second COMMIT freezes chunks that
# the first one still needs from the copy-on-write buffer. The take is
# not journaled: recovery requeues that chunk too (the mirror file
# still holds it: never written since).
STEPS = [
    ('write', 0, 3),
    ('commit', 0, 0),
    ('take', 0, 0),
    ('write', 2, 4),
    ('commit', 0, 0),
    ('write', 3, 5),
]


def content(step, index):
    """What write step ``step`` puts into chunk ``index``."""
    return bytes([16 * (step + 1) + index]) * CHUNK


def open_mirror(directory):
    return _native.Mirror(directory, NCHUNKS * CHUNK, CHUNK,
                          'selective-cow', cow_chunks=NCHUNKS)


def main(directory):
    mirror = open_mirror(directory)
    for step, (what, first, last) in enumerate(STEPS):
        print(step, flush=True)
        if what == 'write':
            mirror.write(first * CHUNK, b''.join(
                content(step, i) for i in range(first, last + 1)))
        elif what == 'commit':
            mirror.commit()
        else:
            mirror.take()
    print('done', _native.crash_points(), flush=True)


if __name__ == '__main__':
    main(*sys.argv[1:])
