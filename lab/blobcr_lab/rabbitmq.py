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

"""A real RabbitMQ broker: wrapper around tools/rabbitmq.sh.

The script runs Debian's rabbitmq-server on 127.0.0.1 with everything
(config, mnesia, logs, Erlang cookie, its own epmd) under one directory and
writes the oslo.messaging transport url to ``DIR/url``
(``rabbit://USER:PASS@127.0.0.1:PORT/``).

The fixtures over it are in tests/lab_fixtures.py.
"""

import os
import subprocess

import blobcr_lab

SCRIPT = blobcr_lab.tool("rabbitmq.sh")

URL_ENV = "BLOBCR_RABBIT_URL"
DIR_ENV = "BLOBCR_RABBIT_DIR"


class RabbitMQError(RuntimeError):
    """A rabbitmq.sh command failed or timed out; carries its output."""


def _read_int(path):
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


class RabbitMQBroker:
    """A loopback RabbitMQ broker whose state lives in ``directory``."""

    external = False

    def __init__(self, directory):
        self.directory = os.path.abspath(directory)

    def _run(self, *args, timeout):
        cmd = [SCRIPT, args[0], self.directory, *args[1:]]
        try:
            proc = subprocess.run(
                cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, timeout=timeout, check=False)
        except subprocess.TimeoutExpired as exc:
            out = (exc.stdout or b"") + (exc.stderr or b"")
            raise RabbitMQError(
                f"{' '.join(cmd)} timed out after {timeout}s:\n"
                f"{out.decode(errors='replace')}") from exc
        out = proc.stdout.decode(errors="replace")
        if proc.returncode != 0:
            raise RabbitMQError(
                f"{' '.join(cmd)} exited with {proc.returncode}:\n{out}"
                f"{proc.stderr.decode(errors='replace')}")
        return out

    def start(self, port=None, timeout=300):
        """Start the broker (no-op if it runs); return its url.

        The timeout covers a first-time apt install of rabbitmq-server.
        """
        args = ["start"] + ([str(port)] if port else [])
        return self._run(*args, timeout=timeout).strip()

    def stop(self, timeout=180):
        """Stop the broker and its epmd by pid.  Idempotent."""
        self._run("stop", timeout=timeout)

    def running(self, timeout=30):
        """True if the broker runs and answers AMQP."""
        try:
            self._run("status", timeout=timeout)
        except RabbitMQError:
            return False
        return True

    def ctl(self, *args, timeout=60):
        """rabbitmqctl ``args`` against this broker; its output."""
        return self._run("ctl", *args, timeout=timeout)

    @property
    def url(self):
        """The oslo.messaging transport url (``rabbit://...``)."""
        with open(os.path.join(self.directory, "url")) as f:
            return f.read().strip()

    @property
    def pid(self):
        """Pid of the broker's Erlang VM (beam.smp), or None."""
        return _read_int(os.path.join(self.directory, "pid"))

    @property
    def epmd_pid(self):
        """Pid of the epmd started for this broker, or None."""
        return _read_int(os.path.join(self.directory, "epmd.pid"))


def private_broker(workdir, log):
    """A broker of one benchmark's own, under ``workdir`` (started)."""
    broker = RabbitMQBroker(os.path.join(workdir, "rabbitmq"))
    log(f"starting RabbitMQ in {broker.directory}")
    broker.start()
    return broker


class ExternalBroker:
    """A broker we did not start (``BLOBCR_RABBIT_URL``): url only."""

    external = True
    directory = None
    pid = None
    epmd_pid = None

    def __init__(self, url):
        self.url = url
