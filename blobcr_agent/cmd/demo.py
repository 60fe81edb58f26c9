"""blobcr-demo: the main job, end to end, on a real ext4 disk image.

1. Build a 64 MiB ext4 disk image holding a job's files and import it.
2. "Run the job" twice: each run changes files, the disk is rebuilt and
   only the chunks that differ are COMMITted (incremental versions).
3. CLONE version 1 (a restart) and COMMIT into the clone.
4. Export every version, compare it byte for byte with the expected disk,
   check it with e2fsck and read the job's state file back out of it.
5. Scrub every version, obsolete version 2, GC, and check that nothing
   the other versions or the clone need was lost.
6. Attach the disk through the FUSE mirror and checkpoint it live, three
   times, while a workload keeps writing to it; restore every checkpoint
   as a clone, attach it (lazy fetch) and compare it byte for byte with
   the disk at its checkpoint.
7. Print the version tree.

It exits non-zero on the first mismatch.
"""

import argparse
import hashlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from blobcr_agent.bench import harness
from blobcr_agent import conf as blobcr_conf
from blobcr_agent.repository import backends as backends_mod
from blobcr_agent.repository import gc
from blobcr_agent.repository import repository
from blobcr_agent.repository import scrub
from blobcr_agent.repository import treeview

DISK = 64 << 20
# Fixed so that rebuilding the file system changes only what the files
# change (the UUID and directory hash seed are otherwise random).
FS_UUID = 'b10bc0de-0000-4000-8000-000000000001'
HASH_SEED = 'b10bc0de-0000-4000-8000-000000000002'


def say(text):
    print('==> %s' % text, flush=True)


def build_disk(files, path):
    """An ext4 image whose content is ``files`` (name -> bytes)."""
    tree_dir = tempfile.mkdtemp(prefix='blobcr-demo-fs-')
    try:
        for name, data in files.items():
            full = os.path.join(tree_dir, name)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, 'wb') as f:
                f.write(data)
            os.utime(full, (1700000000, 1700000000))
        with open(path, 'wb') as f:
            f.truncate(DISK)
        subprocess.run(
            ['mkfs.ext4', '-q', '-F', '-b', '4096', '-U', FS_UUID,
             '-E', 'hash_seed=%s,root_owner=0:0,lazy_itable_init=0' %
             HASH_SEED, '-d', tree_dir, path],
            check=True, env=dict(os.environ, E2FSPROGS_FAKE_TIME='1700000000'))
    finally:
        shutil.rmtree(tree_dir)
    with open(path, 'rb') as f:
        return f.read()


def changed_chunks(old, new, chunk_size):
    """The chunks of ``new`` that differ from ``old``: what a COMMIT
    of a running VM's disk would carry.

    """
    return {i // chunk_size: new[i:i + chunk_size]
            for i in range(0, len(new), chunk_size)
            if old[i:i + chunk_size] != new[i:i + chunk_size]}


def check_export(repo, image, number, expected, workdir, state_file):
    out = os.path.join(workdir, '%s-v%d.raw' % (image[:8], number))
    repo.export(image, number, out)
    with open(out, 'rb') as f:
        got = f.read()
    if got != expected:
        sys.exit('MISMATCH: %s@%d differs from the expected disk'
                 % (image, number))
    subprocess.run(['e2fsck', '-fn', out], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    state = subprocess.run(['debugfs', '-R', 'cat /' + state_file, out],
                           check=True, capture_output=True).stdout
    os.unlink(out)
    return hashlib.sha256(got).hexdigest()[:16], state.decode().strip()


def job_files(step):
    files = {'job/input.dat': bytes(range(256)) * 4096,
             'job/state.txt': ('iteration %d\n' % step).encode()}
    for k in range(step):
        files['job/output-%d.dat' % k] = hashlib.shake_256(
            b'%d' % k).digest(3 << 20)
    return files


def run(repo, workdir):
    chunk = repo.chunk_size
    disk = os.path.join(workdir, 'disk.raw')
    say('building a 64 MiB ext4 disk image with the job\'s input')
    contents = {1: build_disk(job_files(0), disk)}
    header, v1 = repo.import_file(disk, 'demo-disk')
    image = header.id
    say('imported as image %s version %d (%d non-zero chunks of %d KiB)'
        % (image, v1, header.version(v1).chunks, chunk >> 10))

    current = contents[1]
    for step in (1, 2):
        new = build_disk(job_files(step), disk)
        changes = changed_chunks(current, new, chunk)
        number = repo.commit(image, changes)
        contents[number] = current = new
        say('job iteration %d: COMMIT of %d changed chunks -> version %d'
            % (step, len(changes), number))

    clone = repo.clone(image, v1, 'demo-restart').id
    restart_disk = build_disk(
        dict(job_files(0), **{'job/state.txt': b'restarted from v1\n'}), disk)
    repo.commit(clone, changed_chunks(contents[1], restart_disk, chunk))
    say('CLONE of version 1 as image %s, then a COMMIT into the clone'
        % clone)

    expected = [(image, n, c) for n, c in sorted(contents.items())]
    expected.append((clone, 1, contents[1]))
    expected.append((clone, 2, restart_disk))
    for img, number, content in expected:
        digest, state = check_export(repo, img, number, content, workdir,
                                     'job/state.txt')
        say('export %s@%d: identical to the expected disk (sha256 %s), '
            'e2fsck clean, state.txt says %r'
            % (img[:8], number, digest, state))
        report = scrub.verify(repo, img, number)
        if not report.ok:
            sys.exit('VERIFY FAILED: %s' % report.as_dict())
    say('every version scrubbed: all chunk hashes match')

    repo.obsolete(image, [2])
    report = gc.collect(repo, grace=0)
    say('version 2 obsolete; gc freed %s (%d chunks, %d node packs)'
        % (treeview.human(report.bytes_freed), report.chunks_deleted,
           report.packs_deleted))
    for img, number, content in expected:
        if (img, number) == (image, 2):
            continue
        check_export(repo, img, number, content, workdir, 'job/state.txt')
    say('after gc, versions 1, 3 and both clone versions still export '
        'byte-identical')
    restores = live_checkpoints(repo, image, workdir)
    print()
    print(treeview.render([repo.image(i) for i in [image, clone] + restores]),
          end='')


def live_checkpoints(repo, image, workdir):
    """Checkpoint the disk live while a workload writes to it through the
    FUSE mirror, then restore every checkpoint as a clone and compare.
    """
    say('starting blobcr-mirror; attaching the disk (chunks fetched lazily)')
    mirror = harness.MirrorProcess(
        tempfile.mkdtemp(prefix='mirror-', dir=workdir),
        harness.store_args(repo.backend)).start()
    restores = []
    try:
        path = mirror.client.call('attach', image=image)
        with open(path, 'rb') as f:
            content = bytearray(f.read())
        freeze = threading.Lock()       # what fsfreeze is to a guest
        stop = threading.Event()
        writes = [0]

        def workload():
            rng = random.Random(1)
            fd = os.open(path, os.O_RDWR)
            try:
                while not stop.is_set():
                    length = rng.choice([4096, 65536])
                    offset = rng.randrange(0, len(content) - length, 4096)
                    data = os.urandom(length)
                    with freeze:
                        os.pwrite(fd, data, offset)
                        content[offset:offset + length] = data
                    writes[0] += 1
            finally:
                os.close(fd)

        writer = threading.Thread(target=workload)
        writer.start()
        snapshots = {}
        try:
            for _ in range(3):
                time.sleep(0.5)
                with freeze:
                    expected = bytes(content)
                    result = mirror.client.call('checkpoint', image=image)
                snapshots[result['version']] = expected
                say('live CHECKPOINT -> version %d: %d chunks, %.1f ms of '
                    'downtime; the workload keeps writing (%d writes so '
                    'far)' % (result['version'], result['chunks'],
                              result['downtime_ms'], writes[0]))
        finally:
            stop.set()
            writer.join()
        for number, expected in sorted(snapshots.items()):
            state = mirror.client.call('wait_stable', image=image,
                                       version=number)
            if state != 'stable':
                sys.exit('version %d is %s' % (number, state))
            restore = repo.clone(image, number, 'restart-from-v%d' % number)
            restores.append(restore.id)
            rpath = mirror.client.call('attach', image=restore.id)
            with open(rpath, 'rb') as f:
                got = f.read()
            if got != expected:
                sys.exit('MISMATCH: restore of version %d differs from the '
                         'disk at its checkpoint' % number)
            fetched = mirror.client.call('stats', image=restore.id)
            say('restored version %d as clone %s: identical to the disk at '
                'its checkpoint (%d chunks fetched on demand)'
                % (number, restore.id[:8], fetched['fetched_chunks']))
            mirror.client.call('detach', image=restore.id)
        mirror.client.call('detach', image=image, discard=True)
    finally:
        mirror.stop()
    return restores


def main(argv=None):
    parser = argparse.ArgumentParser(prog='blobcr-demo',
                                     description=__doc__.split('\n')[0])
    parser.add_argument('--backend', choices=['local', 'rados'],
                        default='local')
    parser.add_argument('--ceph-conf', default='/etc/ceph/ceph.conf')
    parser.add_argument('--workdir', default=None,
                        help='scratch directory (default: a new temporary '
                             'one, removed at the end)')
    args = parser.parse_args(argv)
    workdir = args.workdir or tempfile.mkdtemp(prefix='blobcr-demo-')
    conf = blobcr_conf.CONF
    conf([], project='blobcr', default_config_files=[])
    blobcr_conf.override_store(conf, args.backend,
                               os.path.join(workdir, 'store'), args.ceph_conf)
    if args.backend == 'rados':
        conf.set_override('namespace', 'demo-%s' % os.urandom(4).hex(),
                          'rados')
    say('repository backend: %s' % args.backend)
    repo = repository.Repository.from_conf(
        conf, backends_mod.from_conf(conf))
    try:
        run(repo, workdir)
    finally:
        repo.close()
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    say('demo finished: every check passed')
    return 0


if __name__ == '__main__':
    sys.exit(main())
