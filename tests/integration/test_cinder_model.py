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

"""The Cinder driver's operations as a randomized walk checked against a
model (tests/cinder_model.py says what it does and what is not real),
on real agents over the session's RabbitMQ and the local store, run in
a process of its own (tests/cinder_model_run.py).

CI runs a bounded budget on both stores: on the local store
BLOBCR_MODEL_SEEDS walks (default 4: fewer steps than that miss a
rare kind of step too often) of BLOBCR_MODEL_STEPS steps (default
120), on the micro Ceph cluster BLOBCR_MODEL_RADOS_SEEDS (default 1)
of as many steps; seeds from BLOBCR_MODEL_SEED (default:
new ones, printed). The walks overlap requests and play Nova's flows
with paused agents (tests/cinder_model_overlap.py); the storage agent
and one compute agent run in PID namespaces of their own.
BLOBCR_MODEL_BACKEND=local or rados runs one store only. tools/soak.sh
runs walks for hours. A failure names its seed; replay it with::

    BLOBCR_MODEL_SEED=<seed> BLOBCR_MODEL_SEEDS=1 \\
        .venv/bin/pytest tests/integration/test_cinder_model.py -k local
"""

import json
import os
import random
import subprocess
import sys

import pytest

SEEDS = {'local': ('BLOBCR_MODEL_SEEDS', '4'),
         'rados': ('BLOBCR_MODEL_RADOS_SEEDS', '1')}


@pytest.mark.parametrize('store', ['local', 'rados'])
def test_cinder_flows_against_the_model(store, rabbitmq_url, tmp_path,
                                        request, capsys):
    env = os.environ
    if env.get('BLOBCR_MODEL_BACKEND', store) != store:
        pytest.skip('BLOBCR_MODEL_BACKEND=%s' % env['BLOBCR_MODEL_BACKEND'])
    seed = env.get('BLOBCR_MODEL_SEED') or \
        str(random.SystemRandom().randrange(1 << 31))
    hours = float(env.get('BLOBCR_MODEL_HOURS', '0'))
    name, default = SEEDS[store]
    command = [sys.executable, '-m', 'tests.cinder_model_run',
               '--transport-url', rabbitmq_url, '--workdir', str(tmp_path),
               '--seed', seed,
               '--seeds', env.get(name, default),
               '--steps', env.get('BLOBCR_MODEL_STEPS', '120'),
               '--hours', str(hours)]
    if store == 'rados':
        command += ['--ceph-conf',
                    request.getfixturevalue('ceph_cluster').conffile]
    with capsys.disabled():
        done = subprocess.run(command, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True,
                              timeout=1800 + hours * 3600)
        print('\n' + done.stdout)
    # The walks' lines and the failure, with its traceback, come last.
    assert done.returncode == 0, done.stdout[-6000:]
    summary = json.loads(done.stdout.split('MODEL-SUMMARY ', 1)[1])
    # The walks reached what they claim to test (a replay of one short
    # walk need not).
    if summary['steps'] < 300:
        return
    for name in ('write', 'snapshot', 'clone', 'delete_snapshot', 'detach',
                 'gc', 'kill_agent', 'kill_in_persist', 'migrate',
                 'overlap_snapshot', 'overlap_detach', 'overlap_clone',
                 'nova_move', 'evacuate'):
        assert summary['counts'].get(name), 'no %s step ran' % name
    assert summary['overlapped'], 'no two requests were in flight together'


def _scenario(name, rabbitmq_url, tmp_path):
    done = subprocess.run(
        [sys.executable, '-m', 'tests.cinder_model_run', '--transport-url',
         rabbitmq_url, '--workdir', str(tmp_path), '--seed', '32',
         '--scenario', name], stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-6000:]
    return json.loads(done.stdout.split('MODEL-SUMMARY ', 1)[1])


def test_resize_with_a_paused_source_agent(rabbitmq_url, tmp_path):
    """tests/cinder_model_overlap.py resize_with_a_paused_source: the
    driver must not give up a live host whose agent missed its probes.
    """
    summary = _scenario('resize-paused-source', rabbitmq_url, tmp_path)
    assert summary['counts'].get('nova_refused') == 1, summary


@pytest.mark.skipif(not os.path.exists('/dev/loop-control'),
                    reason='no loop devices here')
def test_a_local_connection_is_the_agents_loop_device(
        rabbitmq_url, tmp_path):
    """tests/cinder_model_overlap.py local_connection."""
    _scenario('local-connection', rabbitmq_url, tmp_path)
