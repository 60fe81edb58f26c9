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

* a per-instance token, handed to the guest through Nova vendordata
  (blobcr-vendordata) and sent as ``X-BlobCR-Token`` with
  ``X-Instance-ID``: ``2.<expires>.<mac>``, where ``expires`` is a Unix
  time in whole seconds and ``mac`` the hex HMAC-SHA256 of the instance
  id and ``expires`` under a key that is itself the HMAC-SHA256 of the
  host's name under the secret (:func:`make_token`). A token is good for
  one instance, on the host Nova runs it on (the agent checks with its
  own ``[agent] host``: the name is not in the token, which a guest
  reads, as Nova hides it from users), until it expires. Agents check
  it against the current secret and the previous ones still configured
  (rotation with an overlap); blobcr-vendordata signs with the current
  one. The token of releases before, ``HMAC-SHA256(secret, instance
  id)``, is refused: it names no host and never expires (issue 54,
  finding 6);
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
import time

from blobcr_common import exception

INSTANCE_ID = re.compile(r'[\x20-\x7e]{1,64}')
# A project id scopes group ids and images (Keystone's are 32 hex digits).
PROJECT_ID = re.compile(r'^[A-Za-z0-9_.:-]{1,64}$')
# A token of this form: version 2, its expiry, its MAC (as bytes: the
# header's value is checked as ASCII bytes).
TOKEN = re.compile(rb'2\.([0-9]{1,12})\.([0-9a-f]{64})')
# How long blobcr-vendordata's tokens live unless configured.
DEFAULT_LIFETIME = 3600


def sign(secret, instance_id):
    """The HMAC-SHA256 of an instance id, in hex: the signature of
    Neutron's metadata proxy (no token: tokens are :func:`make_token`'s).
    """
    return hmac.new(secret.encode(), instance_id.encode(),
                    hashlib.sha256).hexdigest()


def _host_key(secret, host):
    """The key of ``host``'s tokens: derived from the secret and the
    host's name, so that a token made for one host is no token at
    another.
    """
    return hmac.new(secret.encode(), b'blobcr-host-key\x00' +
                    host.encode(), hashlib.sha256).digest()


def _token_mac(secret, instance_id, host, expires):
    return hmac.new(_host_key(secret, host), b'blobcr-token\x002\x00' +
                    instance_id.encode() + b'\x00' + b'%d' % expires,
                    hashlib.sha256).hexdigest()


def make_token(secret, instance_id, host, expires):
    """The token of ``instance_id`` running on ``host``, good until
    ``expires`` (a Unix time, whole seconds), signed with ``secret``.
    """
    if not host:
        raise ValueError('a token is made for a host')
    expires = int(expires)
    if not 0 <= expires < 10 ** 12:
        raise ValueError('expires: a Unix time')
    mac = _token_mac(secret, instance_id, host, expires)
    return '2.%d.%s' % (expires, mac)


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
    """Checks the requests of the agent of ``host`` (its ``[agent]
    host``, the name Nova knows it by): tokens signed with
    ``host_secret`` or one of ``previous_secrets``, Neutron's signatures
    with ``metadata_secret``. ``clock``: the time now (a Unix time).
    """

    def __init__(self, host_secret=None, metadata_secret=None, host=None,
                 previous_secrets=(), clock=time.time):
        if not host_secret and not metadata_secret:
            raise ValueError('at least one secret is needed')
        previous = [s for s in previous_secrets or () if s]
        if previous and not host_secret:
            raise ValueError('previous secrets without a current one')
        self.host_secret = host_secret
        self.metadata_secret = metadata_secret
        self.host = host
        # Newest first: a token of the current secret is found first.
        self.token_secrets = [s for s in [host_secret] + previous if s]
        self.clock = clock

    def token_for(self, instance_id, host=None, lifetime=DEFAULT_LIFETIME):
        """The token a guest must present (vendordata hands it out): of
        ``instance_id`` on ``host`` (by default this one's), good for
        ``lifetime`` seconds, signed with the current secret.
        """
        return make_token(self.host_secret, instance_id, host or self.host,
                          int(self.clock()) + int(lifetime))

    def _token_matches(self, given, instance_id):
        """Whether ``given`` (ASCII bytes) is a token of ``instance_id``
        on this host, not expired, under one of the secrets.
        """
        if not given or not self.host or not self.token_secrets:
            return False
        match = TOKEN.fullmatch(given)
        if match is None:
            return False
        expires = int(match.group(1))
        if expires <= self.clock():
            return False
        found = False
        for secret in self.token_secrets:
            # Every secret is tried: the time taken does not say which.
            found |= hmac.compare_digest(
                match.group(2), _token_mac(secret, instance_id, self.host,
                                           expires).encode('ascii'))
        return found

    def instance(self, headers):
        """The authenticated instance id (a str), or None."""
        instance_id = _header(headers, 'X-Instance-ID')
        if instance_id is None:
            return None
        instance_id = instance_id.decode('ascii')
        if not INSTANCE_ID.fullmatch(instance_id):
            return None
        if self._token_matches(_header(headers, 'X-BlobCR-Token'),
                               instance_id):
            return instance_id
        if _matches(_header(headers, 'X-Instance-ID-Signature'),
                    self.metadata_secret, instance_id):
            return instance_id
        return None
