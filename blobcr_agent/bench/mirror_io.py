"""``blobcr-bench mirror``: fio through the mirror against a C passthrough.

The image is attached and written once in full (every chunk present, so
no fetch is measured), then fio runs on ``mnt/images/<id>`` and on the
same backing file (the mirror's ``data.raw``) exposed by the plain
multi-threaded libfuse3 passthrough of native/bench, both mounted at once
and taking turns job by job. ``ratio`` is mirror / passthrough (MiB/s for
the 1 MiB sequential jobs, IOPS for the 4 KiB random ones), median of
``--runs``.
"""

import os
import statistics
import subprocess
import tempfile

from blobcr_agent.bench import fio
from blobcr_agent.bench import harness

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def build_passthrough(workdir):
    out = os.path.join(workdir, 'blobcr-passthrough')
    source = os.path.join(SOURCE, 'native', 'bench')
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
    binary = build_passthrough(workdir)
    header = repo.create_image('bench-mirror', args.size, chunk_size=256 << 10)
    repo.commit(header.id, {})
    mirror = harness.MirrorProcess(tempfile.mkdtemp(dir=workdir),
                                   backend_args).start()
    try:
        path = mirror.client.call('attach', image=header.id)
        block = os.urandom(1 << 20)
        fd = os.open(path, os.O_WRONLY)
        for offset in range(0, args.size, len(block)):
            os.pwrite(fd, block, offset)
        os.close(fd)
        backing = os.path.join(mirror.cache, header.id, 'data.raw')
        runs = []
        with fio.PassthroughMount(binary, backing) as passthrough:
            for k in range(args.runs):
                result = fio.compare({'mirror': path,
                                      'passthrough': passthrough.path},
                                     args.size, runtime=args.runtime)
                runs.append(result)
                log('run %d: %s' % (k + 1, {
                    job: round(_figure(result['mirror'][job]) /
                               _figure(result['passthrough'][job]), 3)
                    for job in result['mirror']}))
        mirror.client.call('detach', image=header.id, discard=True)
    finally:
        mirror.stop()
        repo.delete_image(header.id)
    jobs = {}
    for job in runs[0]['mirror']:
        m = statistics.median(_figure(r['mirror'][job]) for r in runs)
        p = statistics.median(_figure(r['passthrough'][job]) for r in runs)
        unit = 'mib_s' if job.startswith('seq') else 'iops'
        jobs[job] = {'mirror_' + unit: round(m, 1),
                     'passthrough_' + unit: round(p, 1),
                     'ratio': round(m / p, 3)}
    return {'size': args.size, 'runtime_s': args.runtime, 'runs': args.runs,
            'jobs': jobs}
