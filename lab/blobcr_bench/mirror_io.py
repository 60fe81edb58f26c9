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

"""``blobcr-bench mirror``: fio through the mirror against a C passthrough.

The image is attached and written once in full (every chunk present, so
no fetch is measured), then fio runs on ``mnt/images/<id>`` and on the
same backing file (the mirror's ``data.raw``) exposed by the plain
multi-threaded libfuse3 passthrough of native/bench, both mounted at once
and taking turns job by job; which one goes first alternates from job to
job and from run to run. ``ratio`` is mirror / passthrough (MiB/s for
the 1 MiB sequential jobs, IOPS for the 4 KiB random ones), run by run
(median and spread over ``--runs``).

Both mounts get the same options: the passthrough is mounted with the
mirror's ``allow_other,default_permissions`` (``--passthrough-options``
to change that), and the result shows what the kernel negotiated for
each (``connections``: mount options, max_background,
congestion_threshold, readahead). Each job also reports the CPU time the
serving process spent per I/O (``server_cpu_us_per_io``), from
/proc/PID/stat, which tells a cheaper server from a luckier schedule.

Before every job the backing file is written back (fdatasync), so that
the writeback of what a write job left dirty does not land on whichever
job comes next (``--no-sync-between-jobs`` to see that effect; each job
records the host's dirty page cache when it started).

The run fails if a job did no I/O or its server spent no CPU on it (the
requests did not reach that file system).

Where the host has loop devices, each run then takes the same jobs
through a loop device over the mirror file, with direct I/O, taking turns
with the file itself: the block device that stock Nova opens for a
'local' connection (the agent's, manager/loopdevs.py).
``loop_over_mirror`` is that path over the file's, run by run.
"""

import os
import subprocess
import tempfile

from blobcr_bench import common
from blobcr_bench import fio
import blobcr_lab
from blobcr_lab import agents
from blobcr_lab import loopdev


def build_passthrough(workdir):
    out = os.path.join(workdir, 'blobcr-passthrough')
    source = os.path.join(blobcr_lab.SOURCE, 'native', 'bench')
    if not os.path.exists(os.path.join(source, 'passthrough.c')):
        raise RuntimeError('native/bench is not here (%s): run from a '
                           'source tree' % source)
    subprocess.run(['make', '-s', '-C', source, 'OUT=' + out], check=True)
    return out


def _figure(job_result):
    return job_result['bw_mib_s'] if job_result['name'].startswith('seq') \
        else job_result['iops']


def run(repo, backend_args, args, log):
    workdir = args.workdir
    checks = common.Checks()
    binary = build_passthrough(workdir)
    header = repo.create_image('bench-mirror', args.size, chunk_size=256 << 10)
    repo.commit(header.id, {})
    mirror = agents.MirrorProcess(tempfile.mkdtemp(dir=workdir),
                                  backend_args).start()
    options = ['-o', args.passthrough_options] \
        if args.passthrough_options else []
    try:
        path = mirror.client.call('attach', image=header.id)
        block = os.urandom(1 << 20)
        fd = os.open(path, os.O_WRONLY)
        for offset in range(0, args.size, len(block)):
            os.pwrite(fd, block, offset)
        os.close(fd)
        backing = os.path.join(mirror.cache, header.id, 'data.raw')
        runs = []
        sync_fd = os.open(backing, os.O_RDONLY)

        def settle():
            if args.sync_between_jobs:
                os.fdatasync(sync_fd)

        with fio.PassthroughMount(binary, backing, options) as passthrough, \
                loopdev.over(path) as loop:
            connections = {'mirror': fio.connection_info(path),
                           'passthrough': fio.connection_info(
                               passthrough.path)}
            for k in range(args.runs):
                result = fio.compare(
                    {'mirror': path, 'passthrough': passthrough.path},
                    args.size, runtime=args.runtime, rotate=k,
                    servers={'mirror': mirror.proc.pid,
                             'passthrough': passthrough.proc.pid},
                    settle=settle)
                if loop:
                    result['loop_pair'] = fio.compare(
                        {'mirror': path, 'loop': loop}, args.size,
                        runtime=args.runtime, rotate=k,
                        servers={'mirror': mirror.proc.pid,
                                 'loop': mirror.proc.pid}, settle=settle)
                runs.append(result)
                log.event('run', run=k + 1, **{
                    job.replace('-', '_'): round(
                        _figure(result['mirror'][job]) /
                        _figure(result['passthrough'][job]), 3)
                    for job in result['mirror']})
        os.close(sync_fd)
        mirror.client.call('detach', image=header.id, discard=True)
    finally:
        mirror.stop()
        repo.delete_image(header.id)
    jobs = {}
    for job in runs[0]['mirror']:
        unit = 'mib_s' if job.startswith('seq') else 'iops'
        entry = {}
        for side in ('mirror', 'passthrough'):
            entry['%s_%s' % (side, unit)] = common.summary(
                [_figure(r[side][job]) for r in runs], 1)
            entry['%s_cpu_us_per_io' % side] = common.summary(
                [r[side][job]['server_cpu_us_per_io'] for r in runs], 1)
            entry['%s_lat_ms_p99' % side] = common.summary(
                [r[side][job]['lat_ms_p99'] for r in runs])
            entry['%s_dirty_kib_at_start' % side] = [
                r[side][job]['dirty_kib_at_start'] for r in runs]
            checks.require('%s on %s: I/Os (min over runs)' % (job, side),
                           min(r[side][job]['total_ios'] for r in runs),
                           'fio must complete I/O on the %s' % side)
            checks.require('%s on %s: server CPU ms (min over runs)'
                           % (job, side),
                           min(r[side][job]['server_cpu_ms'] for r in runs),
                           'the %s process must serve the requests' % side)
        entry['per_run'] = [{
            'mirror': round(_figure(r['mirror'][job]), 1),
            'passthrough': round(_figure(r['passthrough'][job]), 1),
            'first': 'mirror' if r['mirror'][job]['order'] else 'passthrough',
            'dirty_kib_at_start': [r[side][job]['dirty_kib_at_start']
                                   for side in ('mirror', 'passthrough')],
        } for r in runs]
        entry['ratio'] = common.summary(
            [_figure(r['mirror'][job]) / _figure(r['passthrough'][job])
             for r in runs])
        entry['ratio_when_mirror_first'] = common.summary(
            [_figure(r['mirror'][job]) / _figure(r['passthrough'][job])
             for r in runs if r['mirror'][job]['order']])
        entry['ratio_when_passthrough_first'] = common.summary(
            [_figure(r['mirror'][job]) / _figure(r['passthrough'][job])
             for r in runs if r['passthrough'][job]['order']])
        if 'loop_pair' in runs[0]:
            pairs = [r['loop_pair'] for r in runs]
            entry['loop_%s' % unit] = common.summary(
                [_figure(p['loop'][job]) for p in pairs], 1)
            entry['loop_over_mirror'] = common.summary(
                [_figure(p['loop'][job]) / _figure(p['mirror'][job])
                 for p in pairs])
            checks.require('%s on the loop device: I/Os (min over runs)'
                           % job, min(p['loop'][job]['total_ios']
                                      for p in pairs),
                           'fio must complete I/O on the loop device')
        jobs[job] = entry
    return {'size': args.size, 'runtime_s': args.runtime, 'runs': args.runs,
            'passthrough_options': args.passthrough_options,
            'sync_between_jobs': args.sync_between_jobs,
            'connections': connections, 'jobs': jobs,
            'loop_device': 'loop_pair' in runs[0],
            'checks': checks.as_list()}
