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

"""``blobcr-bench protect``: what protection checkpoints cost a writer.

fio writes 4 KiB blocks at random (libaio, O_DIRECT, queue depth 16)
into an image attached on a real ``blobcr-agent``, for ``--runtime``
seconds, once with ``[agent] protect_interval`` set (the agent
checkpoints the image by itself that often) and once with it at 0; the
two variants take turns, which goes first alternating from run to run.
Each variant gets a fresh agent and a fresh image, written whole first
(no fetch is measured).

``slowdown`` is IOPS without protection / IOPS with it, run by run
(median over ``--runs``); the goal is at most 1.05 at an interval of
30 s. The run fails unless the agent took protection checkpoints during
the protected runs (the path measured).
"""

import os
import tempfile

from blobcr_bench import common
from blobcr_bench import fio
from blobcr_lab import agents

JOB = fio.Job('rand-write-4k', 'randwrite', '4k')


def _one(repo, args, interval):
    agent = agents.AgentProcess(tempfile.mkdtemp(dir=args.workdir),
                                repo.backend,
                                {'agent': {'quiesce': 'none',
                                           'protect_interval': interval}})
    agent.start()
    try:
        image = agent.client.call('create_image', name='bench-protect',
                                  size=args.size)['id']
        path = agent.client.call('attach', image=image)['path']
        block = os.urandom(1 << 20)
        fd = os.open(path, os.O_WRONLY)
        try:
            for offset in range(0, args.size, len(block)):
                os.pwrite(fd, block, offset)
        finally:
            os.close(fd)
        # The fill's own checkpoint, so that protection starts from a
        # clean image in both variants.
        version = agent.client.call('checkpoint', image=image)['version']
        agent.client.call('wait_stable', image=image, version=version)
        figures = fio.run_job(path, JOB, args.size, args.runtime)
        status = agent.client.call('status')
        figures['protection_taken'] = status['protection']['taken']
        figures['exposure_s'] = status['attached'][image]['exposure_s']
        agent.client.call('detach', image=image, discard=True)
        agent.client.call('delete_image', image=image)
        return figures
    finally:
        agent.stop()


def run(repo, backend_args, args, log):
    checks = common.Checks()
    runs = []
    for k in range(args.runs):
        order = ['none', 'protect'] if k % 2 == 0 else ['protect', 'none']
        result = {}
        for variant in order:
            result[variant] = _one(repo, args, args.interval
                                   if variant == 'protect' else 0)
        runs.append(result)
        log.event('run', run=k + 1, slowdown=round(
            result['none']['iops'] / result['protect']['iops'], 3),
            protection_taken=result['protect']['protection_taken'])
    checks.require('protection checkpoints taken (min over runs)',
                   min(r['protect']['protection_taken'] for r in runs),
                   'the agent must checkpoint the image by itself during '
                   'the protected runs')
    return {'size': args.size, 'runtime_s': args.runtime,
            'interval_s': args.interval, 'runs': args.runs,
            'iops_none': common.summary([r['none']['iops'] for r in runs],
                                        1),
            'iops_protect': common.summary(
                [r['protect']['iops'] for r in runs], 1),
            'lat_ms_p99_none': common.summary(
                [r['none']['lat_ms_p99'] for r in runs]),
            'lat_ms_p99_protect': common.summary(
                [r['protect']['lat_ms_p99'] for r in runs]),
            'protection_taken': [r['protect']['protection_taken']
                                 for r in runs],
            'slowdown': common.summary(
                [r['none']['iops'] / r['protect']['iops'] for r in runs]),
            'goal': 'slowdown <= 1.05 at protect_interval 30',
            'checks': checks.as_list()}
