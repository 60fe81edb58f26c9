"""Run a real blobcr-mirror process, for benchmarks and tests."""

import os
import subprocess
import sys
import time

from blobcr_agent.mirror import client


class MirrorProcess(object):
    """A blobcr-mirror process with its FUSE mount under ``workdir``."""

    def __init__(self, workdir, store_args, extra=()):
        self.workdir = workdir
        self.mount = os.path.join(self.workdir, 'mnt')
        self.cache = os.path.join(self.workdir, 'cache')
        self.control = os.path.join(self.workdir, 'control.sock')
        self.log = open(os.path.join(self.workdir, 'mirror.log'), 'ab')
        self.args = [sys.executable, '-m', 'blobcr_agent.cmd.mirror',
                     '--mount', self.mount, '--cache', self.cache,
                     '--control', self.control] + list(store_args) + \
            list(extra)
        self.proc = None

    def start(self):
        if os.path.exists(self.control):
            os.unlink(self.control)
        self.proc = subprocess.Popen(self.args, stdout=self.log,
                                     stderr=self.log)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError('blobcr-mirror exited: see %s'
                                   % self.log.name)
            if os.path.exists(self.control) and self._mounted():
                self.client = client.MirrorClient(self.control)
                return self
            time.sleep(0.05)
        raise RuntimeError('blobcr-mirror did not come up')

    def _mounted(self):
        return os.path.ismount(self.mount) or os.path.ismount(
            os.path.join(self.mount, 'versions'))

    def _unmount(self):
        for path in (os.path.join(self.mount, 'images'),
                     os.path.join(self.mount, 'versions'), self.mount):
            subprocess.run(['fusermount3', '-u', '-z', path], check=False,
                           capture_output=True)

    def kill(self):
        """SIGKILL, then clear the dead mount as an operator would."""
        self.client.close()
        self.proc.kill()
        self.proc.wait()
        self._unmount()

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        self.client.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._unmount()


def store_args(backend):
    """blobcr-mirror arguments that open the same store as ``backend``."""
    if backend.name == 'local':
        return ['--backend', 'local', '--store', backend.root]
    conf = os.path.join(os.path.dirname(backend.conffile),
                        'blobcr-%s.conf' % backend.namespace)
    with open(conf, 'w') as f:
        f.write('[rados]\nconffile = %s\nnamespace = %s\n'
                % (backend.conffile, backend.namespace))
    return ['--backend', 'rados', '--config-file', conf]
