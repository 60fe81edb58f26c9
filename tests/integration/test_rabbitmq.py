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

"""oslo.messaging RPC between two processes over a real RabbitMQ.

The broker comes from the session fixture in blobcr_lab/rabbitmq.py (started by
tools/rabbitmq.sh on 127.0.0.1, or BLOBCR_RABBIT_URL).  The RPC server runs
in a subprocess (this module run with ``python -m``), with the threading
executor; the test process is the client.

Run as ``python -m tests.integration.test_rabbitmq URL`` this module is
that server: it prints ``READY <executor> <monkey-patched>`` once it
consumes, and stops when its stdin closes.
"""

import os
import re
import selectors
import subprocess
import sys
import time

from oslo_config import cfg
import oslo_messaging
from oslo_utils import eventletutils
import pytest

# The session fixtures rabbitmq_broker and rabbitmq_url come from
# blobcr_lab/rabbitmq.py, loaded once per session by tests/conftest.py.

TOPIC = "blobcr-test"
SERVER = "host-a"
TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
READY_TIMEOUT = 60


class BlobCRTestError(Exception):
    """Raised by the endpoint; its module is not an allowed remote one."""


class EchoEndpoint(object):
    target = oslo_messaging.Target(version="1.0")

    def echo(self, ctxt, value):
        return {"value": value, "server": SERVER, "pid": os.getpid()}

    def fail(self, ctxt, message):
        raise ValueError(message)

    def fail_custom(self, ctxt, message):
        raise BlobCRTestError(message)


def serve(url):
    """Run the RPC server until stdin closes (subprocess entry point)."""
    # The options live on the global cfg.CONF (a private ConfigOpts breaks
    # RPC); parse no arguments and no config files.
    cfg.CONF([], project="blobcr-test", default_config_files=[])
    transport = oslo_messaging.get_rpc_transport(cfg.CONF, url=url)
    target = oslo_messaging.Target(topic=TOPIC, server=SERVER,
                                   version="1.0")
    # executor= is deprecated in oslo.messaging 18 (threading is the
    # default unless eventlet monkey-patched the thread module), but still
    # honoured: say it explicitly.
    server = oslo_messaging.get_rpc_server(transport, target,
                                           [EchoEndpoint()],
                                           executor="threading")
    server.start()
    print("READY %s %s" % (server.executor_type,
                           eventletutils.is_monkey_patched("thread")),
          flush=True)
    sys.stdin.read()
    server.stop()
    server.wait()
    transport.cleanup()
    return 0


def _read_line(proc, timeout):
    """Read one stdout line of ``proc`` within ``timeout`` seconds."""
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    try:
        if not sel.select(timeout):
            return None
        return proc.stdout.readline().decode(errors="replace").strip()
    finally:
        sel.close()


@pytest.fixture(scope="module")
def rpc_server(rabbitmq_url, tmp_path_factory):
    log = tmp_path_factory.mktemp("rpc-server") / "server.log"
    with open(log, "wb") as errf:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.test_rabbitmq",
             rabbitmq_url],
            cwd=TOP, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=errf)
    t0 = time.monotonic()
    line = _read_line(proc, READY_TIMEOUT)
    if not line or not line.startswith("READY "):
        proc.kill()
        proc.wait()
        pytest.fail("RPC server did not start within %ss (got %r):\n%s"
                    % (READY_TIMEOUT, line, log.read_text()[-4000:]))
    print("\nRPC server subprocess ready in %.2fs" % (time.monotonic() - t0))
    proc.ready_line = line
    yield proc
    proc.stdin.close()
    try:
        rc = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail("RPC server did not stop within 30s:\n%s"
                    % log.read_text()[-4000:])
    assert rc == 0, log.read_text()[-4000:]


@pytest.fixture(scope="module")
def transport(rabbitmq_url):
    t = oslo_messaging.get_rpc_transport(cfg.CONF, url=rabbitmq_url)
    yield t
    t.cleanup()


def _client(transport, **kwargs):
    target = oslo_messaging.Target(topic=TOPIC, version="1.0")
    if hasattr(oslo_messaging, "get_rpc_client"):
        return oslo_messaging.get_rpc_client(transport, target, **kwargs)
    return oslo_messaging.RPCClient(transport, target, **kwargs)


def test_server_uses_threading_executor(rpc_server):
    assert rpc_server.ready_line == "READY threading False"
    # Importing oslo_messaging imports eventlet but must not monkey-patch.
    assert not eventletutils.is_monkey_patched("thread")


def test_call_returns_value_from_other_process(rpc_server, transport):
    client = _client(transport, timeout=30).prepare(server=SERVER)
    t0 = time.monotonic()
    reply = client.call({}, "echo", value={"a": [1, 2], "b": "x"})
    first = time.monotonic() - t0
    assert reply["value"] == {"a": [1, 2], "b": "x"}
    assert reply["server"] == SERVER
    assert reply["pid"] == rpc_server.pid != os.getpid()
    t0 = time.monotonic()
    for i in range(20):
        assert client.call({}, "echo", value=i)["value"] == i
    print("\nfirst call %.3fs, then %.1f ms per call"
          % (first, (time.monotonic() - t0) / 20 * 1000))
    # The topic alone (no server) reaches the only server too.
    assert _client(transport, timeout=30).call(
        {}, "echo", value=7)["value"] == 7


def test_call_to_unknown_server_times_out(rpc_server, transport):
    client = _client(transport).prepare(server="host-nowhere", timeout=2)
    t0 = time.monotonic()
    with pytest.raises(oslo_messaging.MessagingTimeout):
        client.call({}, "echo", value=1)
    elapsed = time.monotonic() - t0
    assert 1.5 < elapsed < 10, elapsed


def test_remote_builtin_exception_surfaces(rpc_server, transport):
    client = _client(transport, timeout=30).prepare(server=SERVER)
    with pytest.raises(ValueError, match="bad chunk size") as ei:
        client.call({}, "fail", message="bad chunk size")
    # Builtin exceptions are rebuilt as themselves, the remote traceback
    # appended to the message (other allowed types become <Name>_Remote).
    assert type(ei.value) is ValueError
    assert "Traceback" in str(ei.value)


def test_remote_unknown_exception_is_remote_error(rpc_server, transport):
    client = _client(transport, timeout=30).prepare(server=SERVER)
    with pytest.raises(oslo_messaging.RemoteError) as ei:
        client.call({}, "fail_custom", message="no such image")
    assert ei.value.exc_type == "BlobCRTestError"
    assert "no such image" in ei.value.value
    # The server is still serving after raising.
    assert client.call({}, "echo", value=3)["value"] == 3


def _listeners():
    """(local address, port, pid) of every TCP listener, from ss -ltnp."""
    out = subprocess.run(["ss", "-Hltnp"], check=True, capture_output=True,
                         text=True).stdout
    found = []
    for line in out.splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        addr, _, port = fields[3].rpartition(":")
        for pid in re.findall(r"pid=(\d+)", line):
            found.append((addr, int(port), int(pid)))
    return found


def test_broker_listens_on_loopback_only(rabbitmq_broker, rabbitmq_url):
    port = int(re.search(r"@127\.0\.0\.1:(\d+)/", rabbitmq_url).group(1))
    listeners = _listeners()
    pid = rabbitmq_broker.pid
    if pid is None:
        pids = {p for a, pt, p in listeners if pt == port}
        if not pids:
            pytest.skip("external broker: no listening pid visible")
        pid = pids.pop()
    mine = [(a, pt) for a, pt, p in listeners if p == pid]
    assert ("127.0.0.1", port) in mine, mine
    # AMQP and Erlang distribution, all on 127.0.0.1.
    assert len(mine) >= 2, mine
    assert all(a == "127.0.0.1" for a, pt in mine), mine
    rss_kb = 0
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss_kb = int(line.split()[1])
    print("\nbroker pid %d RSS %.0f MB, listening on %s"
          % (pid, rss_kb / 1024, mine))
    if rabbitmq_broker.epmd_pid:
        epmd = [(a, pt) for a, pt, p in listeners
                if p == rabbitmq_broker.epmd_pid]
        assert epmd, "epmd of the broker does not listen"
        # epmd always adds loopback: 127.0.0.1 and [::1].
        assert all(a in ("127.0.0.1", "[::1]") for a, pt in epmd), epmd


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1]))
