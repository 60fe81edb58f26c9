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

"""One rank of a CM1-like job, for ``blobcr-bench scale``: a process in
its host's network namespace, on its attached BlobCR volume (the raw
file the agent's FUSE mount serves, as QEMU would open it).

Disk layout (fractions of the disk, the same on every rank, as the same
file system image would place them):

* ``[0, 1/4)``: the system (binaries, libraries), from the base image;
* ``[1/2, 1/2 + 1/50)``: the rank's checkpoint file, rewritten whole at
  each iteration (1 MiB writes);
* ``[3/4, ...)``: SUMMARIES small summary files, 4 KiB each, 64 KiB
  apart.

``run``: ITERATIONS of (``--compute`` seconds of work, the checkpoint
file, the summaries, and with ``--group`` a global checkpoint through the
host's guest endpoint: POST /v1/checkpoint with the group id and member
count, as the job's ranks do). The POST blocks the rank until the ack:
its wall time is the rank's downtime. A thread then polls
/v1/group/<id> until the group is complete. Prints one JSON object.

``restart``: wait until ``--start-at`` (a UNIX time: ranks come up a
little apart), then read what CM1 reads at restart: the system runs of
``--trace`` (a JSON list of [offset, length], the same for every rank,
a little reordered per rank), its checkpoint file and summaries, 256 KiB
per read with ``--think-ms`` between reads. Prints the seconds it took.
"""

import argparse
import hashlib
import http.client
import json
import os
import random
import sys
import threading
import time

WRITE = 1 << 20
READ = 256 * 1024
SUMMARIES = 8
SUMMARY = 4096
BUSY_FOR = 120.0    # seconds a rank asks again while its agent is busy
# Before asking again after a connection the endpoint closed unread.
REFUSED_RETRY = 0.5


def layout(size):
    ckpt = (size // 2, max(READ, (size // 50) // READ * READ))
    summaries = [3 * size // 4 + k * 65536 for k in range(SUMMARIES)]
    return {'system': (0, size // 4), 'checkpoint': ckpt,
            'summaries': summaries}


class Endpoint(object):
    """The host's guest endpoint, with this instance's credentials."""

    def __init__(self, url, instance, token):
        host, _, port = url.split('//', 1)[1].rpartition(':')
        self.host, self.port = host, int(port)
        self.headers = {
            'X-Instance-ID': instance,
            'X-BlobCR-Token': token,
            'Content-Type': 'application/json'}

    def request(self, method, path, body=None, busy=None):
        """The answer's JSON. A 503 (the agent is busy: a persist ahead,
        or the rate limit) is asked again after its Retry-After, as
        blobcr-guest's client does, for BUSY_FOR seconds at most; each
        time is counted in ``busy`` (a list) if given.
        """
        deadline = time.monotonic() + BUSY_FOR
        while True:
            try:
                status, payload, retry_after = self._send(method, path,
                                                          body)
            except (ConnectionError, http.client.RemoteDisconnected):
                # Over its connection caps, the endpoint answers 503 and
                # closes without reading the body: a client still
                # sending it gets EPIPE or a reset instead of the 503.
                if time.monotonic() >= deadline:
                    raise
                status, payload, retry_after = 503, {}, REFUSED_RETRY
            if status == 503 and time.monotonic() < deadline:
                if busy is not None:
                    busy.append(retry_after)
                time.sleep(retry_after)
                continue
            if status != 200:
                raise RuntimeError('%s %s: %d %s' % (method, path, status,
                                                     payload))
            return payload

    def _send(self, method, path, body):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=300)
        try:
            data = None if body is None else json.dumps(body)
            conn.request(method, path, body=data, headers=self.headers)
            response = conn.getresponse()
            payload = json.loads(response.read() or b'{}')
            try:
                retry_after = float(response.getheader('Retry-After'))
            except (TypeError, ValueError):
                retry_after = 0.5
        finally:
            conn.close()
        return response.status, payload, min(max(retry_after, 0.05), 5.0)


def _watch_group(endpoint, group, record):
    """Poll the group's state until complete (or 300 s)."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            state = endpoint.request('GET', '/v1/group/%s' % group)
        except (OSError, RuntimeError):
            state = {}
        if state.get('complete'):
            record['complete_at'] = time.time()
            return
        time.sleep(0.05)


def run(args):
    rng = random.Random(args.seed)
    where = layout(args.size)
    endpoint = Endpoint(args.endpoint, args.instance,
                        os.environ['BLOBCR_TOKEN']) \
        if args.group else None
    fd = os.open(args.path, os.O_RDWR)
    result = {'iterations': [], 'checkpoints': []}
    watchers = []
    try:
        start = time.time()
        for it in range(args.iterations):
            t0 = time.time()
            time.sleep(args.compute)
            offset, length = where['checkpoint']
            for k in range(0, length, WRITE):
                os.pwrite(fd, rng.randbytes(min(WRITE, length - k)),
                          offset + k)
            for s in where['summaries']:
                os.pwrite(fd, rng.randbytes(SUMMARY), s)
            os.fsync(fd)
            entry = {'io_s': time.time() - t0 - args.compute}
            if endpoint is not None:
                group = '%s-%d' % (args.group, it)
                asked = time.time()
                busy = []
                reply = endpoint.request(
                    'POST', '/v1/checkpoint',
                    {'group': group, 'members': args.members}, busy=busy)
                acked = time.time()
                record = {'group': group, 'version': reply['version'],
                          'busy_retries': len(busy),
                          'asked_at': asked, 'acked_at': acked,
                          'ack_s': acked - asked,
                          'downtime_ms': reply.get('downtime_ms'),
                          'held_ms': reply.get('held_ms')}
                result['checkpoints'].append(record)
                watcher = threading.Thread(target=_watch_group,
                                           args=(endpoint, group, record))
                watcher.start()
                watchers.append(watcher)
            entry['wall_s'] = time.time() - t0
            result['iterations'].append(entry)
        result['run_s'] = time.time() - start
    finally:
        os.close(fd)
    for w in watchers:
        w.join()
    json.dump(result, sys.stdout)
    return 0


def restart_reads(size, system_runs, seed):
    """The offsets a rank reads at restart, in order."""
    rng = random.Random(seed)
    runs = [list(r) for r in system_runs]
    # Ranks load the same things in about the same order.
    for k in range(len(runs) - 1):
        if rng.random() < 0.2:
            runs[k], runs[k + 1] = runs[k + 1], runs[k]
    where = layout(size)
    offset, length = where['checkpoint']
    runs.append([offset, length])
    runs += [[s, SUMMARY] for s in where['summaries']]
    reads = []
    for offset, length in runs:
        for k in range(0, length, READ):
            reads.append((offset + k, min(READ, length - k)))
    return reads


def restart(args):
    with open(args.trace) as f:
        system_runs = json.load(f)
    reads = restart_reads(args.size, system_runs, args.seed)
    delay = args.start_at - time.time()
    if delay > 0:
        time.sleep(delay)
    fd = os.open(args.path, os.O_RDONLY)
    digest = hashlib.sha256()
    slowest = 0.0
    try:
        started = time.time()
        for offset, length in reads:
            t0 = time.perf_counter()
            digest.update(os.pread(fd, length, offset))
            slowest = max(slowest, time.perf_counter() - t0)
            time.sleep(args.think_ms / 1000.0)
        finished = time.time()
    finally:
        os.close(fd)
    json.dump({'started_at': started, 'restart_s': finished - started,
               'reads': len(reads), 'slowest_read_s': slowest,
               'sha256': digest.hexdigest()}, sys.stdout)
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    sub = parser.add_subparsers(dest='what', required=True)
    p = sub.add_parser('run')
    p.add_argument('--path', required=True)
    p.add_argument('--size', type=int, required=True)
    p.add_argument('--iterations', type=int, default=3)
    p.add_argument('--compute', type=float, default=1.0)
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--endpoint')
    p.add_argument('--instance')
    p.add_argument('--group')
    p.add_argument('--members', type=int)
    p = sub.add_parser('restart')
    p.add_argument('--path', required=True)
    p.add_argument('--size', type=int, required=True)
    p.add_argument('--trace', required=True)
    p.add_argument('--start-at', type=float, default=0.0)
    p.add_argument('--think-ms', type=float, default=2.0)
    p.add_argument('--seed', type=int, default=0)
    args = parser.parse_args(argv)
    return run(args) if args.what == 'run' else restart(args)


if __name__ == '__main__':
    sys.exit(main())
