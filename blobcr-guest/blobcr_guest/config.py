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

"""Where the guest finds its endpoint and credentials.

Each setting comes from the first source that has it, in this order:

1. explicit arguments (command-line flags);
2. environment: ``BLOBCR_ENDPOINT``, ``BLOBCR_INSTANCE_ID``,
   ``BLOBCR_TOKEN`` (and ``BLOBCR_SIGNATURE``);
3. a JSON file, ``/etc/blobcr/guest.json`` or ``$BLOBCR_GUEST_CONFIG``,
   with keys ``endpoint``, ``instance_id``, ``token``;
4. the OpenStack metadata service: key ``blobcr`` of
   ``vendor_data2.json`` (Nova's vendordata provider puts
   ``endpoint``, ``instance_id`` and ``token`` there). It is asked only
   when the instance id or the token is still missing, with a short
   timeout, and ``BLOBCR_METADATA_URL`` overrides its address (empty:
   never ask).

The endpoint defaults to the link-local metadata address.

A token is good for a while only, and only on the host that runs the
instance (it names neither: ``2.<expires>.<MAC>``, the host is in the
MAC): once the agent refuses it (a 401: it expired, the instance moved,
the secret was rotated), the client reads vendordata again
(:func:`refresher`) and retries once with the token found there.

A file that exists but cannot be used (unreadable, not JSON, not an
object) is an error only when arguments and environment leave a setting
to find (the endpoint, the instance id, or a token or signature);
otherwise it is ignored with a warning.
"""

import collections
import http.client
import json
import os
import re
import sys
import time
import urllib.parse

from blobcr_guest import exception

DEFAULT_ENDPOINT = 'http://169.254.169.254'
DEFAULT_CONFIG = '/etc/blobcr/guest.json'
METADATA_URL = DEFAULT_ENDPOINT + '/openstack/latest/vendor_data2.json'
METADATA_TIMEOUT = 2.0
VENDORDATA_KEY = 'blobcr'

FIELDS = ('endpoint', 'instance_id', 'token', 'signature')
ENV = {'endpoint': 'BLOBCR_ENDPOINT',
       'instance_id': 'BLOBCR_INSTANCE_ID',
       'token': 'BLOBCR_TOKEN',
       'signature': 'BLOBCR_SIGNATURE'}

Credentials = collections.namedtuple('Credentials',
                                     FIELDS + ('sources',))
# A token's expiry, as blobcr-vendordata writes it (blobcr_common/auth.py).
_EXPIRES = re.compile(r'^2\.([0-9]{1,12})\.')


def metadata_url(environ=None):
    """Where vendordata is read: ``BLOBCR_METADATA_URL``, else the
    metadata service; '' for never.
    """
    environ = os.environ if environ is None else environ
    return environ.get('BLOBCR_METADATA_URL', METADATA_URL)


def expired(token, now=None):
    """Whether ``token`` says it expired (by this guest's clock, which
    may be off: the agent's word is the one that counts). A token of
    another form never says so.
    """
    match = _EXPIRES.match(token or '')
    return bool(match) and int(match.group(1)) <= (
        time.time() if now is None else now)


def refresher(environ=None):
    """A function that reads vendordata again, returning its ``blobcr``
    entry ({} if none), or None when there is no metadata service to
    ask.
    """
    url = metadata_url(environ)
    if not url:
        return None
    return lambda: vendordata(url)


def discover(endpoint=None, instance_id=None, token=None, signature=None,
             config_path=None, environ=None, warn=None):
    """Credentials from the sources above; ``sources`` names each one's.

    ``warn(message)`` (default: a line on stderr) is told of a file
    that was ignored because it was not needed.
    """
    environ = os.environ if environ is None else environ
    found, sources = {}, {}

    def take(values, source):
        for field in FIELDS:
            value = values.get(field)
            if field not in found and isinstance(value, str) and value:
                found[field] = value
                sources[field] = source

    take({'endpoint': endpoint, 'instance_id': instance_id, 'token': token,
          'signature': signature}, 'arguments')
    take({f: environ.get(ENV[f]) for f in FIELDS}, 'environment')
    path = config_path or environ.get('BLOBCR_GUEST_CONFIG') or \
        DEFAULT_CONFIG
    try:
        take(_read_file(path), path)
    except exception.ConfigError as e:
        if _missing(found):
            raise
        (warn or _warn)('%s (ignored: the arguments and the environment '
                        'give every setting)' % e)
    if 'instance_id' not in found or not ({'token', 'signature'} &
                                          set(found)):
        url = metadata_url(environ)
        if url:
            take(vendordata(url), url)
    if 'endpoint' not in found:
        found['endpoint'], sources['endpoint'] = DEFAULT_ENDPOINT, 'default'
    return Credentials(*(found.get(f) for f in FIELDS), sources=sources)


def _missing(found):
    """Whether a setting is still to be found: the endpoint, the
    instance id, or a credential (token or signature).
    """
    return ('endpoint' not in found or 'instance_id' not in found or
            not ({'token', 'signature'} & set(found)))


def _warn(message):
    sys.stderr.write('blobcr_guest: warning: %s\n' % message)


def _read_file(path):
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise exception.ConfigError('cannot use %s: %s' % (path, e))
    if not isinstance(data, dict):
        raise exception.ConfigError('%s must hold a JSON object' % path)
    # "signature" is not read from files: Neutron adds it, nobody stores it.
    return {k: data.get(k) for k in ('endpoint', 'instance_id', 'token')}


def vendordata(url=METADATA_URL, timeout=METADATA_TIMEOUT):
    """The ``blobcr`` entry of Nova vendordata, or {} if there is none.

    Any failure is "none": outside OpenStack there is no metadata
    service, and the other sources may be enough.
    """
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ('http', 'https') or not parts.hostname:
        return {}
    cls = (http.client.HTTPSConnection if parts.scheme == 'https'
           else http.client.HTTPConnection)
    conn = cls(parts.hostname, parts.port, timeout=timeout)
    try:
        conn.request('GET', parts.path or '/',
                     headers={'Accept': 'application/json'})
        response = conn.getresponse()
        data = response.read(1 << 20)
        if response.status != 200:
            return {}
        entry = json.loads(data).get(VENDORDATA_KEY)
    except (OSError, http.client.HTTPException, ValueError, AttributeError):
        return {}
    finally:
        conn.close()
    if not isinstance(entry, dict):
        return {}
    return {k: entry.get(k) for k in ('endpoint', 'instance_id', 'token')}
