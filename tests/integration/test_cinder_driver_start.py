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

"""The Cinder driver's start before its storage agent's: what
cinder-volume's init_host calls (do_setup, then check_for_setup_error)
in a process of its own, as in cinder-volume (Cinder's eventlet), on the
session's real RabbitMQ, and a real blobcr-agent started seconds later.
The driver waits for it ([backend] blobcr_agent_start_timeout), where
Cinder's reinit_driver_count would leave the backend uninitialized after
a few seconds. The driver reaches the agents on the bus of its
``blobcr_transport_url``. Not the whole cinder-volume: restarting the
session's would restart every backend of every other test.
"""

import subprocess
import sys
import time

from blobcr_lab.agent_rpc import host_name
from blobcr_lab.agent_rpc import rpc_settings

# cinder-volume's calls, its driver made as tests/cinder_model_run.py
# makes it; prints the seconds check_for_setup_error took.
INIT_HOST = '''
import sys, time
from oslo_config import cfg
from tests import cinder_model_run
group, storage, url, wait = sys.argv[1:]
driver = cinder_model_run._driver(group, storage, url)
cfg.CONF.set_override('blobcr_agent_start_timeout', int(wait), group=group)
# The agents' bus is the backend's own (cinder-volume's transport_url,
# unset here, points nowhere).
cfg.CONF.set_override('blobcr_transport_url', url, group=group)
driver.do_setup(None)
print('checking', flush=True)
began = time.monotonic()
try:
    driver.check_for_setup_error()
except Exception as e:
    print('refused after %.1f s: %s' % (time.monotonic() - began, e))
    sys.exit(3)
print('%.1f' % (time.monotonic() - began))
'''


def _init_host(storage, url, wait):
    return subprocess.Popen(
        [sys.executable, '-c', INIT_HOST, 'start-%s' % storage[-6:], storage,
         url, str(wait)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)


def test_a_driver_started_first_waits_for_its_agent(
        agent_factory, local_store, rabbitmq_url):
    storage = host_name('start')
    init = _init_host(storage, rabbitmq_url, 120)
    # Its imports take seconds on a loaded machine: the agent starts
    # once the driver is checking, not before.
    assert init.stdout.readline() == 'checking\n', init.communicate()
    time.sleep(5)
    assert init.poll() is None, init.communicate()
    agent_factory(local_store.backend, rpc_settings(rabbitmq_url, storage))
    out, err = init.communicate(timeout=120)
    assert init.returncode == 0, (out, err[-3000:])
    assert float(out.split()[-1]) >= 5
    assert 'does not answer yet' in err


def test_a_driver_whose_agent_never_comes_says_so(rabbitmq_url):
    init = _init_host(host_name('never'), rabbitmq_url, 3)
    out, err = init.communicate(timeout=120)
    assert init.returncode == 3, (out, err[-3000:])
    assert 'does not answer' in out and 'blobcr-agent running' in out
