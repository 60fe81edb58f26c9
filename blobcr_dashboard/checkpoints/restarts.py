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

"""Group restart from the panel: blobcr-restart's plan and steps
(blobcr_nova.restart), on a session of the Horizon user's token.
"""

import logging

from django.conf import settings
from keystoneauth1.identity import v3
from keystoneauth1 import session as ks_session
from openstack_dashboard.api import base

from blobcr_nova import restart

LOG = logging.getLogger(__name__)
RestartError = restart.RestartError
plan = restart.plan


def _verify():
    """TLS verification as Horizon's own API clients do it: off with
    OPENSTACK_SSL_NO_VERIFY, else against OPENSTACK_SSL_CACERT if set.
    """
    if getattr(settings, 'OPENSTACK_SSL_NO_VERIFY', False):
        return False
    return getattr(settings, 'OPENSTACK_SSL_CACERT', None) or True


def _interface():
    """keystoneauth's name of Horizon's OPENSTACK_ENDPOINT_TYPE
    (publicURL, internalURL, adminURL).
    """
    endpoint = getattr(settings, 'OPENSTACK_ENDPOINT_TYPE', None) \
        or 'publicURL'
    return endpoint[:-len('URL')] if endpoint.endswith('URL') else endpoint


def cloud_of(request):
    """blobcr-restart's Cloud acting as the request's user, through the
    endpoints and with the certificates Horizon's settings name.
    """
    auth = v3.Token(auth_url=base.url_for(request, 'identity'),
                    token=request.user.token.id,
                    project_id=request.user.project_id)
    session = ks_session.Session(auth=auth, verify=_verify())
    return restart.Cloud(session, region=request.user.services_region,
                         interface=_interface())


def run(cloud, the_plan, flavor, boot, stream):
    """The restart's steps (to run in a thread: they wait for volumes
    and servers); progress as blobcr-restart's JSON lines, logged.
    """
    try:
        made = restart.restart(cloud, the_plan, flavor,
                               restart.Progress(stream, tty=False),
                               boot=boot)
    except Exception:
        LOG.exception('restart of group %s from %s failed; progress:\n%s',
                      the_plan['group'], the_plan['group_snapshot'],
                      stream.getvalue())
        return None
    LOG.info('restart of group %s from %s: %s', the_plan['group'],
             the_plan['group_snapshot'], made)
    return made
