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

"""Who is asking: authentication of instances at the checkpoint endpoint.

Two ways, as in ARCHITECTURE §5:

* a per-instance token, ``HMAC-SHA256(host secret, instance id)`` in hex,
  handed to the guest (later through Nova vendordata) and sent as
  ``X-BlobCR-Token`` with ``X-Instance-ID``;
* the headers Neutron's metadata proxy adds: ``X-Instance-ID`` and
  ``X-Instance-ID-Signature = HMAC-SHA256(shared secret, instance id)``.

Comparisons are constant-time, of bytes. A request that proves neither is
refused, and so is one whose instance id is not 1-64 printable ASCII
characters, whose credentials are not ASCII, or that repeats one of these
headers: the HTTP parser hands over header values as Latin-1 text, which
``hmac.compare_digest`` cannot compare when they are not ASCII.
"""

import hashlib
import hmac
import re

from blobcr_common import exception

INSTANCE_ID = re.compile(r'[\x20-\x7e]{1,64}')
# A project id scopes group ids and images (Keystone's are 32 hex digits).
PROJECT_ID = re.compile(r'^[A-Za-z0-9_.:-]{1,64}$')


def sign(secret, instance_id):
    """The HMAC-SHA256 of an instance id, in hex."""
    return hmac.new(secret.encode(), instance_id.encode(),
                    hashlib.sha256).hexdigest()


def check_project(project):
    """Raise InvalidInput unless ``project`` is None or a project id."""
    if project is not None and (not isinstance(project, str) or
                                not PROJECT_ID.match(project)):
        raise exception.InvalidInput(
            'project: 1-64 letters, digits, . _ : -')


def _header(headers, name):
    """The one value of a header as ASCII bytes; None if it is missing,
    repeated or not ASCII.
    """
    get_all = getattr(headers, 'get_all', None)
    if get_all is not None:
        values = get_all(name) or []
        if len(values) != 1:
            return None
        value = values[0]
    else:
        value = headers.get(name)
    if not isinstance(value, str) or not value or not value.isascii():
        return None
    return value.encode('ascii')


def _matches(given, secret, instance_id):
    return bool(given and secret) and hmac.compare_digest(
        given, sign(secret, instance_id).encode('ascii'))


class Authenticator(object):

    def __init__(self, host_secret=None, metadata_secret=None):
        if not host_secret and not metadata_secret:
            raise ValueError('at least one secret is needed')
        self.host_secret = host_secret
        self.metadata_secret = metadata_secret

    def token_for(self, instance_id):
        """The token a guest must present (vendordata hands it out)."""
        return sign(self.host_secret, instance_id)

    def instance(self, headers):
        """The authenticated instance id (a str), or None."""
        instance_id = _header(headers, 'X-Instance-ID')
        if instance_id is None:
            return None
        instance_id = instance_id.decode('ascii')
        if not INSTANCE_ID.fullmatch(instance_id):
            return None
        if _matches(_header(headers, 'X-BlobCR-Token'), self.host_secret,
                    instance_id):
            return instance_id
        if _matches(_header(headers, 'X-Instance-ID-Signature'),
                    self.metadata_secret, instance_id):
            return instance_id
        return None
