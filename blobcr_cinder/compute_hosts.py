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

"""Whether Nova holds a compute host for down: the only evidence, with
an operator's take-over, on which the driver gives up a host whose agent
does not answer (issue 32).

A probe that times out says nothing: Nova's resize, cold migration,
shelve-offload and unshelve make the same attachment calls as an
evacuation, on a host that is alive, and an agent restart or a busy
broker misses a probe. Nova evacuates only a host whose compute service
it reports down (or an operator forced down); the driver asks the same
question, through os-services, with the privileged ``[nova]``
credentials cinder.conf already has for Cinder's own calls to Nova (the
default policy lets only an admin list services).
"""

from cinder.compute import nova
from cinder import context
from oslo_log import log as logging

LOG = logging.getLogger(__name__)

# os-services reports forced_down from 2.11 on.
MICROVERSION = '2.11'


def nova_says_down(host):
    """Why Nova holds ``host``'s compute service for down, or None: it
    is up, Nova has no compute service there, or Nova cannot be asked
    (all the same to the caller: no evidence).
    """
    try:
        services = _compute_services(host)
    except Exception as e:
        LOG.warning('could not ask Nova whether host %s is down: %s',
                    host, e)
        return None
    for service in services:
        if getattr(service, 'forced_down', False):
            return 'Nova reports nova-compute on %s forced down' % host
        if getattr(service, 'state', 'up') == 'down':
            return 'Nova reports nova-compute on %s down' % host
    if not services:
        LOG.info('Nova has no nova-compute service on host %s', host)
    return None


def _compute_services(host):
    client = nova.novaclient(context.get_admin_context(),
                             privileged_user=True, api_version=MICROVERSION)
    return client.services.list(host=host, binary='nova-compute')
