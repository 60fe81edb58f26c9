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

"""Header compare-and-sets from many threads of one process, on both
stores: one record written by all (every increment kept, the losers of
each race told Conflict) and records of their own at the same time. On
RADOS the header ops of a process run on several ioctxs at once
(backends/rados.py: VERSIONED_IOCTXS), each op's version read from the
ioctx that ran it.
"""

import threading

from blobcr_common import exception

THREADS = 12
INCREMENTS = 15


def _increment(backend, name, conflicts):
    while True:
        found = backend.read_header(name)
        value, token = (0, None) if found is None else (int(found[0]),
                                                        found[1])
        try:
            backend.write_header(name, b'%d' % (value + 1), token)
            return
        except exception.Conflict:
            conflicts.append(name)


def test_no_increment_is_lost_under_concurrent_compare_and_sets(
        backend_factory):
    backend = backend_factory()
    conflicts, errors = [], []

    def work(k):
        try:
            for _ in range(INCREMENTS):
                _increment(backend, 'shared', conflicts)
                _increment(backend, 'own-%d' % k, conflicts)
        except Exception as e:          # reported below, not swallowed
            errors.append(e)
    threads = [threading.Thread(target=work, args=(k,))
               for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    assert int(backend.read_header('shared')[0]) == THREADS * INCREMENTS
    for k in range(THREADS):
        assert int(backend.read_header('own-%d' % k)[0]) == INCREMENTS
    # Nobody else writes one's own record: it never lost a race.
    assert all(name == 'shared' for name in conflicts)
    assert set(backend.list_headers()) >= {'shared'} | {
        'own-%d' % k for k in range(THREADS)}
