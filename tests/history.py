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

"""Histories of requests in flight together, checked as Jepsen's
checkers do (tests/cinder_model_overlap.py records them).

A volume written by one writer at a time is a register whose states are
the prefixes of its write log. A snapshot (or a clone, or a detach)
requested at ``inv`` and answered at ``comp`` must hold the state at
some instant between the two: every write acknowledged before ``inv``,
none asked after ``comp``, and of the writes in flight meanwhile, a
prefix (one writer: they are ordered).
"""

import hashlib
import threading
import time


class Register(object):
    """A volume's content and the writes made to it, timed (monotonic
    seconds). Writes come from one thread at a time.
    """

    def __init__(self, base):
        self.base = bytes(base)
        self.writes = []            # [offset, data, invoked, completed]

    def invoke(self, offset, data):
        self.writes.append([offset, bytes(data), time.monotonic(), None])
        return len(self.writes) - 1

    def complete(self, index):
        self.writes[index][3] = time.monotonic()

    def final(self):
        """The content with every write applied (a write never answered
        may or may not have reached the volume: see fits()).
        """
        return self._apply(bytearray(self.base), self.writes)

    @staticmethod
    def _apply(content, writes):
        for offset, data, _, _ in writes:
            content[offset:offset + len(data)] = data
        return content

    def window(self, inv, comp):
        """(lo, hi): the states a read between ``inv`` and ``comp`` may
        see are those after lo..hi writes.
        """
        lo = sum(1 for w in self.writes if w[3] is not None and w[3] < inv)
        hi = sum(1 for w in self.writes if w[2] < comp)
        return lo, max(lo, hi)

    def fits(self, got, inv, comp):
        """The number of writes after which the volume read ``got``, in
        the window of (``inv``, ``comp``); None if no instant fits.
        """
        got = bytes(got)
        lo, hi = self.window(inv, comp)
        state = self._apply(bytearray(self.base), self.writes[:lo])
        for k in range(lo, hi + 1):
            if k > lo:
                self._apply(state, self.writes[k - 1:k])
            if got[:len(state)] == state:
                return k
        return None


class Log(object):
    """Every request of a step: name, target, invoked, answered, outcome,
    for the failure's message.
    """

    def __init__(self):
        self.start = time.monotonic()
        self.entries = []
        self._lock = threading.Lock()

    def call(self, name, target, func, *args):
        entry = {'op': name, 'target': target,
                 'inv': time.monotonic() - self.start}
        with self._lock:
            self.entries.append(entry)
        try:
            entry['result'] = func(*args)
            return entry['result']
        except Exception as e:
            entry['error'] = '%s: %s' % (type(e).__name__, e)
            raise
        finally:
            entry['comp'] = time.monotonic() - self.start

    def absolute(self, entry):
        """(inv, comp) of ``entry`` on the monotonic clock."""
        return self.start + entry['inv'], self.start + entry['comp']

    def overlapping(self):
        """How many pairs of requests were in flight together."""
        done = [e for e in self.entries if 'comp' in e]
        return sum(1 for i, a in enumerate(done) for b in done[i + 1:]
                   if a['inv'] < b['comp'] and b['inv'] < a['comp'])

    def describe(self):
        return '; '.join(
            '%s %s [%.3f, %s]%s' % (
                e['op'], e['target'], e['inv'],
                '%.3f' % e['comp'] if 'comp' in e else 'open',
                ' ' + e['error'][:120] if 'error' in e else '')
            for e in self.entries)


def digest(content):
    return hashlib.sha256(bytes(content)).hexdigest()
