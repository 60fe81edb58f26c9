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

"""``blobcr-bench hosts``: the broker's connection list read, and the
figures at 1,000 hosts read off round 1's samples.
"""

from blobcr_bench import many_hosts as bench
from blobcr_lab import many_hosts


class _Broker(object):
    def ctl(self, *args, **kwargs):
        assert args[:3] == ('list_connections', 'user', 'vhost')
        return 'c\tv-1\nc\tv-1\nagents\tv-1\nc\tv-2\nguest\t/\n'


def test_caller_connections_are_the_users_own():
    assert many_hosts.caller_connections(_Broker(), 'c') == \
        ['v-1', 'v-1', 'v-2']


def _sample(called, connections, rss, phase='calls', n=1):
    return {'phase': phase, 'round': n, 'called': called,
            'connections': connections, 'rss_kib': rss, 'threads': 10,
            'broker_rss_kib': None}


def test_extrapolation_fits_round_one():
    unbounded = {'samples': [_sample(None, 0, 1000, phase='start')] + [
        _sample(n, 2 * n, 1000 + 50 * n) for n in (50, 100, 150, 200)] +
        [_sample(200, 400, 99999, n=2)]}
    bounded = {'max_connections': 128, 'rss_kib': {'max': 5000},
               'threads_max': 40}
    out = bench._extrapolation(unbounded, bounded)
    assert out['connections'] == {'per_host': 2.0, 'unbounded_at': 2000,
                                  'bounded_at': 128}
    assert out['rss_kib']['per_host'] == 50.0
    assert out['rss_kib']['unbounded_at'] == 51000
    assert 'broker_rss_kib' not in out
