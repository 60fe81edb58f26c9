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

"""Numbered crash points at the agent's durable-state writes, for tests.

Each write that changes what a restart finds (the mirror's meta.json,
the slot of a version taken from its reservation, a line of the persist
journal, a delta pack handed to the store, an image header's compare-
and-set, the removal of a detached mirror's cache, an entry of a write-
ahead log, its seal, fold and trim) calls ``reached(site)`` once it is
done. Unless the environment asks for it, that is one test of a module
constant. With ``BLOBCR_CRASH_AT=SITE:N`` the process SIGKILLs itself
when it passes SITE for the N-th time: what a crash right after that
write leaves behind.
``BLOBCR_CRASH_COUNTS=FILE`` writes ``{site: times passed}`` to FILE at
exit, so that a sweep knows every point a scenario passes
(tests/functional/test_crash_points.py). The native core has crash
points of its own, at every store into its state files
(``BLOBCR_CORE_CRASH_AT=K``, native/core.h).
"""

import atexit
import json
import os
import signal
import threading

_AT = os.environ.get('BLOBCR_CRASH_AT')
_COUNTS_FILE = os.environ.get('BLOBCR_CRASH_COUNTS')
ENABLED = bool(_AT or _COUNTS_FILE)
# A `cluster` volume's write log (flushlog.py, writelog.py): swept by
# tests/functional/test_host_loss.py on RADOS.
LOG_SITES = ('log-appended', 'log-sealed', 'log-folded', 'log-dropped')
SITES = ('meta', 'taken', 'journal', 'pack', 'header',
         'cache-removed') + LOG_SITES

_lock = threading.Lock()
_passed = {}


def _target():
    if not _AT:
        return None
    site, _, n = _AT.partition(':')
    if site not in SITES or not n.isdigit():
        raise ValueError('BLOBCR_CRASH_AT=%s: SITE:N with SITE one of %s'
                         % (_AT, ', '.join(SITES)))
    return site, int(n)


_TARGET = _target() if ENABLED else None


def reached(site):
    """A durable write at ``site`` is done."""
    if not ENABLED:
        return
    with _lock:
        _passed[site] = _passed.get(site, 0) + 1
        hit = _TARGET == (site, _passed[site])
    if hit:
        if os.getpid() == 1:
            # A PID namespace's init ignores its own SIGKILL: die as
            # suddenly all the same (no handler, no atexit runs).
            os._exit(128 + signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)


def _write_counts():
    with open(_COUNTS_FILE, 'w') as f:
        json.dump(_passed, f)


if _COUNTS_FILE:
    atexit.register(_write_counts)
