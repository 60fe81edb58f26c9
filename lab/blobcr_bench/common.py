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

"""What every ``blobcr-bench`` benchmark shares.

* :class:`Checks`: a benchmark proves that the path it names really ran.
  It counts what it means to measure (copies, waits, fetches, bytes) and
  records one check per counter; ``blobcr-bench`` exits non-zero with a
  clear message when one of them is zero, rather than print a ratio of
  noise.
* :func:`summary`: a median with its spread (p10-p90, min-max, p99).
* :class:`Log`: progress of long runs, a rate on a TTY and structured
  ``key=value`` lines otherwise.
* :class:`Pattern`: random data made before any timing, from which every
  write takes a window that no earlier write used, so that nothing
  deduplicates and no generator runs while the clock does.
"""

import math
import os
import statistics
import sys
import time

MIB = 1 << 20


class PathNotExercised(Exception):
    """A benchmark's own path did not run: its figures mean nothing."""


class Checks(object):
    """The counters that prove a benchmark's path ran."""

    def __init__(self):
        self.items = []

    def require(self, what, value, why):
        """``value`` (a count) must be positive: ``why`` says what it
        proves.
        """
        self.items.append({'what': what, 'value': value,
                           'ok': bool(value) and value > 0, 'why': why})

    def require_true(self, what, ok, why, value=None):
        self.items.append({'what': what, 'value': value, 'ok': bool(ok),
                           'why': why})

    @property
    def failed(self):
        return [c for c in self.items if not c['ok']]

    def as_list(self):
        return list(self.items)


def failure_message(bench, checks):
    lines = ['blobcr-bench %s: FAILED: the path this benchmark measures '
             'did not run, so its figures are not reported as valid:'
             % bench]
    for c in checks:
        lines.append('  %s = %s: %s' % (c['what'], c['value'], c['why']))
    return '\n'.join(lines)


def percentile(values, p):
    """Linear interpolation between closest ranks (numpy's default)."""
    ordered = sorted(values)
    if not ordered:
        return None
    k = (len(ordered) - 1) * p / 100.0
    lo, hi = int(math.floor(k)), int(math.ceil(k))
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def summary(values, digits=3):
    """Median and spread of ``values`` (None if there are none)."""
    values = [v for v in values if v is not None]
    if not values:
        return None

    def r(v):
        return round(v, digits)
    return {'median': r(statistics.median(values)),
            'p10': r(percentile(values, 10)),
            'p90': r(percentile(values, 90)),
            'p99': r(percentile(values, 99)),
            'min': r(min(values)), 'max': r(max(values)),
            'n': len(values)}


def ratio(a, b, digits=3):
    if a is None or b is None or b <= 0:
        return None
    return round(a / b, digits)


class Log(object):
    """Progress lines on stderr: plain text on a TTY, otherwise
    structured ``bench=NAME event=... key=value`` lines that a log
    collector can parse.
    """

    def __init__(self, bench, quiet=False, stream=None):
        self.bench = bench
        self.quiet = quiet
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, 'isatty') and self.stream.isatty()

    def __call__(self, text):
        self.event('note', text=text)

    def event(self, name, **fields):
        if self.quiet:
            return
        if self.tty:
            detail = ' '.join('%s=%s' % (k, _fmt(v))
                              for k, v in fields.items() if k != 'text')
            text = fields.get('text')
            line = '%s: %s%s%s' % (self.bench, name if not text else text,
                                   ' ' if detail else '', detail)
        else:
            parts = ['ts=%.3f' % time.time(), 'bench=%s' % self.bench,
                     'event=%s' % name]
            parts += ['%s=%s' % (k, _fmt(v, quote=True))
                      for k, v in fields.items()]
            line = ' '.join(parts)
        self.stream.write(line + '\n')
        self.stream.flush()

    def rate(self, label, total, unit='MiB', scale=MIB):
        return Rate(self, label, total, unit, scale)


def _fmt(value, quote=False):
    if isinstance(value, float):
        return '%.4g' % value
    text = str(value)
    if quote and (' ' in text or not text):
        return '"%s"' % text.replace('"', "'")
    return text


class Rate(object):
    """``add(n)`` as work is done: a live rate on a TTY (redrawn at most
    ten times a second), a structured line every 5 s otherwise.
    """

    def __init__(self, log, label, total, unit, scale):
        self.log = log
        self.label = label
        self.total = total
        self.unit = unit
        self.scale = scale
        self.done = 0
        self.t0 = self.last = time.monotonic()

    def add(self, n):
        self.done += n
        now = time.monotonic()
        if self.log.quiet:
            return
        if self.log.tty and now - self.last >= 0.1:
            self.last = now
            self.log.stream.write('\r%s: %s %.1f/%.1f %s (%.1f %s/s) ' % (
                self.log.bench, self.label, self.done / self.scale,
                self.total / self.scale, self.unit, self._rate(now),
                self.unit))
            self.log.stream.flush()
        elif not self.log.tty and now - self.last >= 5.0:
            self.last = now
            self.log.event('progress', what=self.label,
                           done=round(self.done / self.scale, 1),
                           total=round(self.total / self.scale, 1),
                           unit=self.unit, rate=round(self._rate(now), 1))

    def _rate(self, now):
        return self.done / self.scale / max(now - self.t0, 1e-6)

    def finish(self):
        if self.log.tty and not self.log.quiet and self.done:
            self.log.stream.write('\n')
            self.log.stream.flush()


class Pattern(object):
    """``size`` bytes of random data plus room for ``windows`` (at most
    64) shifts of 4 KiB, generated once, before any timing.

    ``block(offset, length, epoch)`` is the data to write at image
    ``offset`` in rewrite ``epoch``. An image larger than the pattern
    (up to ``laps`` times) wraps around it. Each (epoch, lap) reads the
    random data at its own 4 KiB shift, and chunk boundaries are 256 KiB
    (64 shifts) apart, so no chunk is written twice, in one epoch or in
    any ``windows // laps`` successive ones: every rewrite writes new
    chunk objects, as fresh random data would, without generating any
    while the clock runs.

    ``streams`` writers that must not share data (the variants of one
    benchmark, which a deduplicating store would otherwise let write for
    free after the first) each read their own ``size`` bytes of random
    data: ``block(..., stream=s)``. ``epochs`` is how many successive
    epochs never repeat a chunk (``windows // laps``).
    """

    SHIFT = 4096

    def __init__(self, size, laps=1, windows=60, streams=1):
        if not 0 < laps <= windows <= 64:
            raise ValueError('need 0 < laps <= windows <= 64')
        if streams < 1:
            raise ValueError('need at least one stream')
        self.size = size
        self.laps = laps
        self.windows = windows
        self.streams = streams
        self.data = os.urandom(streams * size + windows * self.SHIFT)
        self.view = memoryview(self.data)

    @property
    def epochs(self):
        return self.windows // self.laps

    def block(self, offset, length, epoch, stream=0):
        lap, inner = divmod(offset, self.size)
        if inner + length > self.size or lap >= self.laps:
            raise ValueError('block at %d: past the pattern\'s %d laps or '
                             'across a lap' % (offset, self.laps))
        if not 0 <= stream < self.streams:
            raise ValueError('stream %d of %d' % (stream, self.streams))
        start = stream * self.size + \
            ((epoch * self.laps + lap) % self.windows) * self.SHIFT
        return self.view[start + inner:start + inner + length]


def fill(path, size):
    """``path`` (made if missing) written in full with random data
    that does not dedup, and synced: a used disk, not a sparse one.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for offset in range(0, size, 1 << 20):
            os.pwrite(fd, os.urandom(min(1 << 20, size - offset)), offset)
        os.fdatasync(fd)
    finally:
        os.close(fd)
