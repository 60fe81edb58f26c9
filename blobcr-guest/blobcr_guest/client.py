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

"""Ask the host's checkpointing proxy for a disk snapshot of this VM.

The proxy answers as soon as the snapshot is taken (the version id), then
persists it in the background; ``state`` and ``wait_stable`` follow it to
"stable". Only the standard library is used: this runs inside guests
that have nothing but python3.
"""

import collections
import email.utils
import http.client
import json
import os
import re
import socket
import time
import urllib.parse

from blobcr_guest import config
from blobcr_guest import exception

QUIESCE_MODES = ('none', 'fsfreeze', 'suspend')
_GROUP = re.compile(r'^[A-Za-z0-9_.-]{1,64}$')

# The errors, here too, so that callers need one import.
GuestError = exception.GuestError
ConfigError = exception.ConfigError
CheckpointError = exception.CheckpointError
EndpointUnreachable = exception.EndpointUnreachable
CheckpointTimeout = exception.CheckpointTimeout
CheckpointFailed = exception.CheckpointFailed

# held_ms (how long the guest was kept still) last, with a default: older
# agents do not send it. (namedtuple's defaults= needs Python 3.7; guests
# may have 3.6.)
Checkpoint = collections.namedtuple(
    'Checkpoint', ['version', 'downtime_ms', 'group', 'held_ms'])
Checkpoint.__new__.__defaults__ = (None,)


class CheckpointClient(object):
    """One instance talking to its host's checkpointing proxy.

    ``token`` is the per-instance token (Nova vendordata);
    ``signature`` the Neutron metadata signature of the instance id.
    Without either, a 401 is what to expect unless a metadata proxy on
    the way adds them.

    ``refresh``: a function that reads vendordata again (its ``blobcr``
    entry), for a fresh token once the proxy refuses the one held (401:
    tokens expire and are bound to the instance's host) or once it says
    it has expired; the request is then sent again, once, if the token
    found is another one of this instance.
    """

    def __init__(self, endpoint=config.DEFAULT_ENDPOINT, instance_id=None,
                 token=None, signature=None, timeout=60.0, retries=3,
                 backoff=1.0, max_backoff=10.0, refresh=None):
        url = urllib.parse.urlsplit(endpoint)
        if url.scheme not in ('http', 'https') or not url.hostname:
            raise ValueError('endpoint must be an http(s) URL: %r'
                             % endpoint)
        self.endpoint = endpoint
        self._url = url
        self.instance_id = instance_id
        self.token = token
        self.signature = signature
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.refresh = refresh

    @classmethod
    def from_environment(cls, endpoint=None, instance_id=None, token=None,
                         signature=None, config_path=None, warn=None,
                         **kwargs):
        """A client whose credentials are discovered (see config.py);
        ``warn(message)`` is told of a credentials file that was ignored.
        """
        found = config.discover(endpoint=endpoint, instance_id=instance_id,
                                token=token, signature=signature,
                                config_path=config_path, warn=warn)
        kwargs.setdefault('refresh', config.refresher())
        return cls(found.endpoint, found.instance_id, found.token,
                   found.signature, **kwargs)

    # -- the API ----------------------------------------------------------

    def checkpoint(self, group=None, members=None, quiesce=None, sync=True):
        """Take a snapshot of this VM's disk -> ``Checkpoint``.

        ``sync`` flushes the guest's file-system buffers first, so the
        snapshot holds what was written before the call.
        """
        body = {}
        if (group is None) != (members is None):
            raise ValueError('group and members go together')
        if group is not None:
            if not isinstance(group, str) or not _GROUP.match(group):
                raise ValueError('group: 1-64 letters, digits, . _ -')
            if type(members) is not int or members < 1:
                raise ValueError('members: a positive number')
            body.update(group=group, members=members)
        if quiesce is not None:
            if quiesce not in QUIESCE_MODES:
                raise ValueError('quiesce: one of %s'
                                 % ', '.join(QUIESCE_MODES))
            body['quiesce'] = quiesce
        if sync:
            os.sync()
        reply = self._request('POST', '/v1/checkpoint', body)
        try:
            return Checkpoint(int(reply['version']),
                              reply.get('downtime_ms'), reply.get('group'),
                              reply.get('held_ms'))
        except (KeyError, TypeError, ValueError):
            raise exception.CheckpointError(
                502, 'the proxy sent no version: %.200r' % (reply,))

    def state(self, version):
        """``pending``, ``stable`` or ``failed``."""
        return self._request('GET', '/v1/checkpoint/%d' % version)['state']

    def wait_stable(self, version, timeout=600.0, poll=0.5):
        """Wait until ``version`` is persisted; raise if it failed."""
        deadline = time.monotonic() + timeout
        while True:
            state = self.state(version)
            if state == 'stable':
                return state
            if state == 'failed':
                raise exception.CheckpointFailed(
                    'version %d failed: it could not be persisted' % version,
                    version)
            if time.monotonic() + poll > deadline:
                raise exception.CheckpointTimeout(
                    'version %d still %s after %gs' % (version, state,
                                                       timeout))
            time.sleep(poll)

    def group_state(self, group):
        """The proxy's view of a group: members, versions, complete."""
        return self._request('GET', '/v1/group/%s'
                             % urllib.parse.quote(group, safe=''))

    def wait_group_complete(self, group, timeout=600.0, poll=0.5):
        """Wait until every member's version of ``group`` is stable."""
        deadline = time.monotonic() + timeout
        while True:
            state = self.group_state(group)
            if state.get('complete'):
                return state
            versions = state.get('versions') or {}
            failed = sorted(i for i, v in versions.items()
                            if v.get('state') == 'failed')
            if failed:
                raise exception.CheckpointFailed(
                    'group %s: the versions of %s failed'
                    % (group, ', '.join(failed)))
            if time.monotonic() + poll > deadline:
                if 'stable' in state:   # what a member may see: counts
                    progress = '%s of %s members stable' % (
                        state['stable'], state.get('members'))
                else:
                    progress = '%d of %s members checkpointed' % (
                        len(versions), state.get('members'))
                raise exception.CheckpointTimeout(
                    'group %s not complete after %gs (%s)'
                    % (group, timeout, progress))
            time.sleep(poll)

    # -- HTTP -------------------------------------------------------------

    def _headers(self):
        headers = {'Accept': 'application/json'}
        if self.instance_id:
            headers['X-Instance-ID'] = self.instance_id
        if self.token:
            headers['X-BlobCR-Token'] = self.token
        if self.signature:
            headers['X-Instance-ID-Signature'] = self.signature
        return headers

    def _renew_token(self):
        """Read vendordata again; True if it gave another token of this
        instance (now held), False otherwise (nothing changes).
        """
        if self.refresh is None or not self.token:
            return False
        entry = self.refresh() or {}
        token, instance = entry.get('token'), entry.get('instance_id')
        if not isinstance(token, str) or not token or token == self.token:
            return False
        if instance != self.instance_id:
            return False        # another instance's, or none named
        self.token = token
        return True

    def _request(self, method, path, body=None):
        """One call, retried politely while the proxy says 429, and
        once with a fresh token if the one held was refused.
        """
        if config.expired(self.token):
            self._renew_token()
        status, reply = self._exchange(method, path, body)
        if status == 401 and self._renew_token():
            status, reply = self._exchange(method, path, body)
        if 200 <= status < 300 and isinstance(reply, dict):
            return reply
        if isinstance(reply, dict) and isinstance(reply.get('error'), str):
            message = reply['error']
        elif 200 <= status < 300:
            status, message = 502, 'the proxy sent no JSON object'
        else:
            message = 'the proxy answered %d %s' % (
                status, http.client.responses.get(status, ''))
        raise exception.CheckpointError(status, message)

    def _exchange(self, method, path, body):
        """``(status, reply)`` of one call, retried while 429."""
        payload = None
        headers = self._headers()
        if body is not None:
            payload = json.dumps(body).encode()
            headers['Content-Type'] = 'application/json'
        delay = self.backoff
        for attempt in range(self.retries + 1):
            status, reply, retry_after = self._send(method, path, headers,
                                                    payload)
            if status == 429 and attempt < self.retries:
                # The limit is a token bucket: waiting refills it.
                wait = retry_after if retry_after is not None else delay
                time.sleep(min(wait, self.max_backoff))
                delay = min(delay * 2, self.max_backoff)
                continue
            break
        return status, reply

    def _send(self, method, path, headers, payload):
        url = self._url
        cls = (http.client.HTTPSConnection if url.scheme == 'https'
               else http.client.HTTPConnection)
        conn = cls(url.hostname, url.port, timeout=self.timeout)
        where = '%s://%s' % (url.scheme, url.netloc)
        try:
            try:
                conn.connect()
            except (OSError, http.client.HTTPException) as e:
                # A connect timeout is an unreachable host, not a slow one.
                raise exception.EndpointUnreachable(
                    'cannot reach the checkpointing proxy at %s: %s'
                    % (where, _why(e)))
            try:
                conn.request(method, url.path.rstrip('/') + path,
                             body=payload, headers=headers)
                response = conn.getresponse()
                data = response.read()
            except socket.timeout:
                raise exception.CheckpointTimeout(
                    'no answer from %s within %gs to %s %s%s'
                    % (where, self.timeout, method, path,
                       ' (the checkpoint may still have been taken)'
                       if method == 'POST' else ''))
            except (OSError, http.client.HTTPException) as e:
                raise exception.EndpointUnreachable(
                    'the connection to %s failed: %s' % (where, _why(e)))
        finally:
            conn.close()
        try:
            reply = json.loads(data) if data else None
        except (ValueError, UnicodeDecodeError):
            reply = None
        return (response.status, reply,
                _retry_after(response.getheader('Retry-After')))


def _why(error):
    if isinstance(error, socket.timeout):
        return 'timed out'
    return str(error) or type(error).__name__


def _retry_after(value):
    """Seconds from a Retry-After header (a number or an HTTP date)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - time.time())
