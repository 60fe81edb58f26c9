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

"""What Nova and Cinder say about an instance and a volume: the
authority ``blobcr-nova-listener`` asks before it acts on a notification
(issue 54).

A notification proves nothing: any compute host publishes on Nova's
notification exchange, in any host's name (``publisher_id``) and with
any payload. Nova's and Cinder's APIs, asked with the listener's own
Keystone credentials (``[nova]``, keystoneauth's options; Cinder through
the same session, ``[cinder]`` its endpoint), say where an instance is
and in which state, which migration it is in, which volumes are its and
where a volume is attached. The listener's rules (listener.py) compare
the notification with these answers.

Calls, all GETs, as an admin at the base microversions (compute 2.1,
block-storage 3.0): ``/servers/{id}`` (``OS-EXT-SRV-ATTR:host``,
``OS-EXT-STS:vm_state``, ``OS-EXT-STS:task_state``, ``tenant_id``); a
deleted server is 404 there and listed by ``/servers/detail?uuid=...&
deleted=true&all_tenants=1``, with the host it was deleted on;
``/servers/{id}/os-volume_attachments``; ``/os-migrations?
instance_uuid=...``; Cinder's ``/volumes/{id}`` (``status``, and its
attached ``attachments`` with ``server_id`` and ``host_name``, which
Cinder shows an admin).
"""

import re
import urllib.parse

from keystoneauth1 import exceptions as ks_exceptions
from keystoneauth1 import loading as ks_loading

NOVA_GROUP = 'nova'
CINDER_GROUP = 'cinder'

# Nova's and Cinder's ids: anything else never reaches their URLs.
UUID = re.compile(r'^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-'
                  r'[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$')


class Refused(Exception):
    """The authority does not confirm the event, or cannot be asked."""


class NotConfigured(Exception):
    """The listener has no credentials to ask Nova with."""


def check_id(value, what):
    """``value`` if it is a UUID, else Refused."""
    if not isinstance(value, str) or not UUID.match(value):
        raise Refused('%s %r is not a UUID' % (what, value))
    return value


class Server(object):
    """Nova's record of an instance (deleted ones included)."""

    def __init__(self, body):
        self.id = body.get('id')
        self.host = body.get('OS-EXT-SRV-ATTR:host') or None
        self.vm_state = body.get('OS-EXT-STS:vm_state')
        self.task_state = body.get('OS-EXT-STS:task_state')
        self.project = body.get('tenant_id')
        self.deleted = self.vm_state == 'deleted' or \
            body.get('status') == 'DELETED'

    def __str__(self):
        return '%s%s on %s' % (
            self.vm_state,
            '' if self.task_state is None else ' (%s)' % self.task_state,
            'host %s' % self.host if self.host else 'no host')


class Authority(object):
    """GETs of Nova's and Cinder's APIs through keystoneauth adapters."""

    def __init__(self, nova, cinder):
        self.nova = nova
        self.cinder = cinder

    @classmethod
    def from_conf(cls, conf):
        """From ``[nova]`` (credentials, session, Nova's endpoint) and
        ``[cinder]`` (Cinder's endpoint), registered by
        listener_opts.register_opts.
        """
        auth = ks_loading.load_auth_from_conf_options(conf, NOVA_GROUP)
        if auth is None:
            raise NotConfigured(
                '[%s] auth_type is not set: the listener acts only on what '
                'Nova and Cinder confirm and needs credentials to ask them '
                '(an admin, such as Nova\'s own service user)' % NOVA_GROUP)
        session = ks_loading.load_session_from_conf_options(
            conf, NOVA_GROUP, auth=auth)
        return cls(
            ks_loading.load_adapter_from_conf_options(
                conf, NOVA_GROUP, session=session),
            ks_loading.load_adapter_from_conf_options(
                conf, CINDER_GROUP, session=session))

    def _get(self, adapter, service, path, key, **query):
        """The answer's ``key``, or None when it is 404."""
        if query:
            path += '?' + urllib.parse.urlencode(query)
        try:
            body = adapter.get(path, raise_exc=True).json()
        except ks_exceptions.NotFound:
            return None
        except (ks_exceptions.ClientException, ValueError) as e:
            raise Refused('%s could not be asked (GET %s): %s' % (
                service, path, e))
        if not isinstance(body, dict) or key not in body:
            raise Refused('%s answered GET %s without %r'
                          % (service, path, key))
        return body[key]

    def server(self, instance):
        """Nova's record of ``instance`` (a deleted one too), or None
        when Nova has none.
        """
        check_id(instance, 'instance')
        body = self._get(self.nova, 'Nova', '/servers/%s' % instance,
                         'server')
        if body is None:
            found = self._get(self.nova, 'Nova', '/servers/detail',
                              'servers', uuid=instance, deleted='true',
                              all_tenants='1') or []
            body = next((s for s in found if isinstance(s, dict) and
                         s.get('id') == instance), None)
            if body is None:
                return None
        return Server(body)

    def volumes_of(self, instance):
        """The volume ids Nova attaches to ``instance`` (none when it is
        gone).
        """
        check_id(instance, 'instance')
        found = self._get(self.nova, 'Nova',
                          '/servers/%s/os-volume_attachments' % instance,
                          'volumeAttachments') or []
        return {a.get('volumeId') for a in found if isinstance(a, dict)}

    def migration(self, instance):
        """Nova's newest migration of ``instance`` (a dict with
        ``source_compute``, ``dest_compute``, ``status``), or None.
        """
        check_id(instance, 'instance')
        found = [m for m in self._get(self.nova, 'Nova', '/os-migrations',
                                      'migrations',
                                      instance_uuid=instance) or []
                 if isinstance(m, dict) and m.get('instance_uuid', instance)
                 == instance]
        return max(found, key=lambda m: m.get('id') or 0, default=None)

    def volume(self, volume):
        """Cinder's record of ``volume`` (``status``, ``attachments``),
        or None when Cinder has none (deleted).
        """
        check_id(volume, 'volume')
        return self._get(self.cinder, 'Cinder', '/volumes/%s' % volume,
                         'volume')
