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

"""The request a call to an agent belongs to, across the RPC.

The caller (cinder-volume, nova-compute, blobcr-manage) passes its
current oslo.context request ids as the RPC context; the agent makes it
the current context of the thread serving the call, so that oslo.log
prints the caller's request id on every line the call logs, and an
operator can follow one Cinder request into the agent's log.
"""

from oslo_context import context as oslo_context
import oslo_messaging as messaging


def outgoing():
    """The RPC context of a call made now: the current request's ids."""
    current = oslo_context.get_current()
    if current is None:
        return {}
    return {'request_id': current.request_id,
            'global_request_id': current.global_request_id}


class RequestContextSerializer(messaging.NoOpSerializer):
    """Agent side: the context of each call becomes the thread's current
    oslo.context (a new one, with a request id of its own, if the caller
    sent none).
    """

    def deserialize_context(self, context):
        context = context or {}
        made = oslo_context.RequestContext(
            request_id=context.get('request_id'),
            global_request_id=context.get('global_request_id'),
            overwrite=True)
        return made.to_dict()
