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

"""Python wrapper around tools/ceph-cluster.sh for the lab.

The script starts a micro Ceph cluster (one mon, one mgr, three bluestore
OSDs) on 127.0.0.1 with all its state under one directory.  It creates an
erasure-coded pool ``blobcr-data`` (k=2, m=1) and a replicated pool
``blobcr-meta`` (size 3).
"""

import json
import os
import subprocess

import blobcr_lab

SCRIPT = blobcr_lab.tool("ceph-cluster.sh")

DATA_POOL = "blobcr-data"
META_POOL = "blobcr-meta"


class CephClusterError(RuntimeError):
    """A ceph-cluster.sh command failed or timed out; carries its output."""


class MicroCephCluster:
    """A loopback Ceph cluster whose state lives in ``directory``."""

    def __init__(self, directory):
        self.directory = os.path.abspath(directory)

    @property
    def conffile(self):
        """Path of the cluster's ceph.conf (pass it to rados.Rados)."""
        return os.path.join(self.directory, "ceph.conf")

    def _run(self, *args, timeout, env=None):
        cmd = [SCRIPT, *args, self.directory]
        try:
            proc = subprocess.run(
                cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, timeout=timeout, check=False,
                env=dict(os.environ, **(env or {})))
        except subprocess.TimeoutExpired as exc:
            out = (exc.stdout or b"").decode(errors="replace")
            raise CephClusterError(
                f"{' '.join(cmd)} timed out after {timeout}s:\n{out}") from exc
        out = proc.stdout.decode(errors="replace")
        if proc.returncode != 0:
            raise CephClusterError(
                f"{' '.join(cmd)} exited with {proc.returncode}:\n{out}")
        return out

    def start(self, timeout=300):
        """Create the cluster if needed, start daemons, wait until clean."""
        self._run("start", timeout=timeout)

    def stop(self, timeout=120):
        """Stop all daemons (SIGTERM, then SIGKILL).  Idempotent."""
        self._run("stop", timeout=timeout)

    def stop_osd(self, n, timeout=60):
        """Stop OSD ``n`` and wait until the mon reports it down."""
        self._run("stop-osd", str(n), timeout=timeout)

    def start_osd(self, n, timeout=180):
        """Start OSD ``n`` and wait until the mon reports it up."""
        self._run("start-osd", str(n), timeout=timeout)

    def wait_clean(self, timeout=120):
        """Wait until every OSD is up and every PG is active+clean."""
        # The script bounds its own wait; the subprocess timeout is a backstop.
        self._run("wait-clean", timeout=timeout + 60,
                  env={"BLOBCR_CEPH_TIMEOUT": str(max(1, int(timeout)))})

    def status(self, timeout=60):
        """Return the output of ``ceph -s``."""
        return self._run("status", timeout=timeout)


OSD_COUNTERS = ("op", "op_r", "op_w", "op_in_bytes", "op_out_bytes")


def _ceph_json(conffile, timeout, *args):
    return json.loads(subprocess.run(
        ["ceph", "-c", conffile, "--connect-timeout", "10", *args,
         "-f", "json"], capture_output=True, text=True, timeout=timeout,
        check=True).stdout)


def osd_ids(conffile, timeout=60):
    """The cluster's OSD ids."""
    return _ceph_json(conffile, timeout, "osd", "ls")


def osd_counters(conffile, timeout=60):
    """Client operations and bytes all OSDs of the cluster served since
    they started (their ``osd`` perf counters, summed): take two and
    subtract for the load of what ran in between.
    """
    total = dict.fromkeys(OSD_COUNTERS, 0)
    for osd in osd_ids(conffile, timeout):
        counters = _ceph_json(conffile, timeout, "tell", f"osd.{osd}",
                              "perf", "dump")
        for key in OSD_COUNTERS:
            total[key] += counters["osd"][key]
    return total
