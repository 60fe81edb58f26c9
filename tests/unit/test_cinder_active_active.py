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

"""The driver in an active-active cinder-volume cluster (issue 56, item
5): it says it supports it, and refuses, at start, a cluster whose
store is local to one machine (the other services' agents would not see
its images); a RADOS store, or no cluster, starts. On the stand-ins of
test_cinder_driver_paths.py (an autospec of the agents' RPC API); the
failover itself runs against real services in
tests/integration/test_cinder_active_active.py.
"""

import pytest

from tests.unit import test_cinder_driver_paths as paths

CASES = r'''
def starting(name, where, cluster):
    """A case: check_for_setup_error with the storage agent's store at
    ``where`` (its capacity's 'backend'), in ``cluster`` or in none.
    """
    def func(d):
        d.cluster_name = cluster
        d.configuration.blobcr_agent_start_timeout = 1
        d.configuration.config_group = 'blobcr-x'
        return d.check_for_setup_error()
    answers = {('status', 'storage'): {'attached': {}}}
    if where is not None:
        answers[('capacity', 'storage')] = (
            where if isinstance(where, BaseException) else {
                'backend': where, 'total_bytes': 1, 'free_bytes': 1})
    CASES[name] = (func, answers, (), (), ())


starting('cluster_local', 'local:/srv/blobcr', 'aa')
starting('cluster_rados', 'rados:blobcr-data/ns', 'aa')
starting('cluster_silent', TIMEOUT, 'aa')
starting('alone_local', 'local:/srv/blobcr', None)


@case()
def supports(d):
    return driver.BlobCRDriver.SUPPORTS_ACTIVE_ACTIVE
'''


@pytest.fixture(scope='module')
def runs():
    return paths.run_child(CASES)


def test_the_driver_says_it_supports_active_active(runs):
    assert runs['supports']['returned'] is True


def test_a_local_store_in_a_cluster_is_refused_at_start(runs):
    calls = paths.failed(runs['cluster_local'], 'active-active needs a '
                         'store every service reaches',
                         exception='VolumeDriverException')
    assert calls == [('status', 'storage'), ('capacity', 'storage')]
    assert 'local:/srv/blobcr' in runs['cluster_local']['message']


def test_a_rados_store_in_a_cluster_starts(runs):
    assert runs['cluster_rados']['outcome'] == 'returned'
    assert paths.calls_of(runs['cluster_rados']) == [
        ('status', 'storage'), ('capacity', 'storage')]


def test_a_silent_storage_agent_fails_the_start_clearly(runs):
    paths.failed(runs['cluster_silent'], 'storage')


def test_without_a_cluster_a_local_store_starts_asking_nothing_more(runs):
    assert runs['alone_local']['outcome'] == 'returned'
    assert paths.calls_of(runs['alone_local']) == [('status', 'storage')]
