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

"""``blobcr-vendordata``: the DynamicJSON vendordata target for Nova.

For each instance a guest asks the metadata service about, Nova's
``DynamicVendorData`` POSTs JSON (``instance-id``, ``project-id``,
``image-id``, ``user-data``, ``hostname``, ``metadata``, ``boot-roles``)
to every ``[api] vendordata_dynamic_targets`` URL, with the Keystone
token of its ``[vendordata_dynamic_auth]`` user, and puts each answer
in ``vendor_data2.json`` under the target's name. This service answers,
for the target named ``blobcr``::

    {"endpoint": "<[vendordata] endpoint_url>",
     "instance_id": "<instance-id>",
     "project_id": "<project-id>",
     "token": "2.<expires>.<hex MAC>"}

which is what the guest's ``blobcr-checkpoint`` reads there
(blobcr_guest/config.py) and what the agent's checkpoint endpoint checks
(blobcr_common/auth.py, ``[proxy] host_secret`` = ``token_secret``).

The token is good for that instance, on the host that runs it, for
``[vendordata] token_lifetime`` seconds. Nova's request does not say
which host runs the instance: the service asks Nova's API
(``[nova]``, ``OS-EXT-SRV-ATTR:host`` of ``GET /servers/{id}``) at each
request, and answers nothing unless Nova has the instance, in the
project the request names, on a host (404/409; 503 when Nova's API
cannot be asked). The endpoint stays one URL for all: by default the
metadata address, which each compute host's network forwards to its own
agent (doc/source/nova.rst). The agent of the host answers only for
instances it hosts and takes their project (the scope of their groups)
from its own records, never from the guest.

keystonemiddleware's auth_token sits in front (``[keystone_authtoken]``):
no token or an invalid one gets 401. Behind it, a token must be
confirmed, carry one of ``[vendordata] allowed_roles`` and be of one of
``allowed_users`` (Nova's ``[vendordata_dynamic_auth]`` user, by id, or
by name in ``allowed_user_domain``), else 403. Nova calls with its own
service token, not the guest's owner's, so who may fetch tokens is
Nova's user and nobody else: with a role alone (``service``) every
service account of the cloud could fetch the token of any instance
(issue 54, finding 6). Bad requests get 400/404/405/411/413; every error
is a JSON ``{"error": ...}``.

Run it with ``blobcr-vendordata --config-file
/etc/blobcr/nova-vendordata.conf`` (a threaded WSGI server of the
standard library), or under any WSGI server with
``blobcr_nova.vendordata:init_application()`` (configuration files from
``BLOBCR_VENDORDATA_CONFIG``, separated by ``;``).
"""

import json
import os
import signal
import socketserver
import sys
import threading
import time
from wsgiref import simple_server

from keystoneauth1 import loading as ks_loading
from keystonemiddleware import auth_token
from oslo_config import cfg
from oslo_log import log as oslo_log

from blobcr_common import auth
from blobcr_common import exception as agent_exception
from blobcr_nova import authority
from blobcr_nova import conf as nova_conf

LOG = oslo_log.getLogger(__name__)

DEFAULT_CONFIG = '/etc/blobcr/nova-vendordata.conf'
CONFIG_ENV = 'BLOBCR_VENDORDATA_CONFIG'
_STATUS = {200: '200 OK', 400: '400 Bad Request', 401: '401 Unauthorized',
           403: '403 Forbidden', 404: '404 Not Found',
           405: '405 Method Not Allowed', 409: '409 Conflict',
           411: '411 Length Required', 413: '413 Payload Too Large',
           500: '500 Internal Server Error',
           503: '503 Service Unavailable'}


class RequestError(Exception):
    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


class VendordataApp(object):
    """The WSGI application behind keystonemiddleware (see module doc)."""

    def __init__(self, token_secret, endpoint_url, allowed_roles=('service',),
                 max_body=262144, allowed_users=('nova',),
                 allowed_user_domain='Default',
                 token_lifetime=auth.DEFAULT_LIFETIME, nova=None,
                 clock=time.time):
        """``nova``: asked ``server(instance id)`` (an
        authority.Authority, or what answers as it does).
        """
        if not token_secret:
            raise ValueError('[vendordata] token_secret is required')
        if not endpoint_url:
            raise ValueError('[vendordata] endpoint_url is required')
        self.token_secret = token_secret
        self.endpoint_url = endpoint_url
        self.allowed_roles = {r.strip().lower() for r in allowed_roles
                              if r.strip()}
        if not self.allowed_roles:
            raise ValueError('[vendordata] allowed_roles: at least one role')
        self.allowed_users = {u.strip() for u in allowed_users if u.strip()}
        if not self.allowed_users:
            raise ValueError('[vendordata] allowed_users: at least one '
                             'user (Nova\'s [vendordata_dynamic_auth] one)')
        self.allowed_user_domain = allowed_user_domain
        if nova is None:
            raise ValueError('Nova\'s API is needed ([nova]): a token is '
                             'made for the host that runs the instance')
        self.nova = nova
        self.token_lifetime = int(token_lifetime)
        self.clock = clock
        self.max_body = max_body

    def __call__(self, environ, start_response):
        try:
            status, reply = 200, self.answer(environ)
        except RequestError as e:
            status, reply = e.status, {'error': str(e)}
        except Exception:
            LOG.exception('vendordata request failed')
            status, reply = 500, {'error': 'internal error'}
        payload = json.dumps(reply).encode()
        start_response(_STATUS[status], [
            ('Content-Type', 'application/json'),
            ('Content-Length', str(len(payload))),
            # A token: no cache on the way may keep it.
            ('Cache-Control', 'no-store')])
        return [payload]

    def _caller(self, environ):
        """Who asks, as keystonemiddleware validated it; raises 401/403."""
        if environ.get('HTTP_X_IDENTITY_STATUS') != 'Confirmed':
            raise RequestError(401, 'authentication required: a valid '
                                    'Keystone token (Nova\'s '
                                    '[vendordata_dynamic_auth] user)')
        roles = {r.strip().lower() for r in
                 environ.get('HTTP_X_ROLES', '').split(',')}
        user_id = environ.get('HTTP_X_USER_ID') or ''
        name = environ.get('HTTP_X_USER_NAME') or ''
        domains = {environ.get('HTTP_X_USER_DOMAIN_NAME'),
                   environ.get('HTTP_X_USER_DOMAIN_ID')} - {None, ''}
        user = '%s (%s, domain %s)' % (name or '?', user_id or '?',
                                       '/'.join(sorted(domains)) or '?')
        if not roles & self.allowed_roles:
            LOG.warning('vendordata refused to user %s: none of the roles '
                        '%s', user, ', '.join(sorted(self.allowed_roles)))
            raise RequestError(403, 'forbidden: the caller has none of the '
                                    'roles %s' % ', '.join(
                                        sorted(self.allowed_roles)))
        if not (user_id in self.allowed_users or
                (name in self.allowed_users and
                 self.allowed_user_domain in domains)):
            LOG.warning('vendordata refused to user %s: not one of '
                        '[vendordata] allowed_users (Nova\'s user)', user)
            raise RequestError(403, 'forbidden: only Nova\'s vendordata '
                                    'user may fetch instance tokens')
        return user

    def _body(self, environ):
        if environ.get('HTTP_TRANSFER_ENCODING'):
            raise RequestError(411, 'Transfer-Encoding is not accepted: '
                                    'send Content-Length')
        length = environ.get('CONTENT_LENGTH') or ''
        if not length.isdigit() or len(length) > 9:
            raise RequestError(411 if not length else 400,
                               'Content-Length is required' if not length
                               else 'bad Content-Length')
        length = int(length)
        if length > self.max_body:
            raise RequestError(413, 'body over %d bytes' % self.max_body)
        body = environ['wsgi.input'].read(length) if length else b''
        if len(body) != length:
            raise RequestError(400, 'the body ended early')
        try:
            request = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            raise RequestError(400, 'the body is not JSON')
        if not isinstance(request, dict):
            raise RequestError(400, 'the body must be a JSON object')
        return request

    def answer(self, environ):
        """The vendordata of one instance (a dict), or a RequestError."""
        if environ.get('PATH_INFO', '') not in ('', '/'):
            raise RequestError(404, 'no such resource: POST to /')
        if environ.get('REQUEST_METHOD') != 'POST':
            raise RequestError(405, 'POST the instance, as Nova does')
        user = self._caller(environ)
        request = self._body(environ)
        instance = request.get('instance-id')
        project = request.get('project-id')
        if not isinstance(instance, str) or \
                not auth.INSTANCE_ID.fullmatch(instance):
            raise RequestError(400, 'instance-id: 1-64 printable ASCII '
                                    'characters')
        if not authority.UUID.match(instance):
            raise RequestError(400, 'instance-id: not a UUID (Nova\'s '
                                    'instance ids are)')
        if project is None or project == '':
            raise RequestError(400, 'project-id is required')
        try:
            auth.check_project(project)
        except agent_exception.InvalidInput as e:
            raise RequestError(400, str(e))
        host = self._host_of(instance, project)
        expires = int(self.clock()) + self.token_lifetime
        LOG.info('vendordata: credentials of instance %s (project %s) on '
                 'host %s until %d for %s', instance, project, host,
                 expires, user)
        return {'endpoint': self.endpoint_url,
                'instance_id': instance,
                'project_id': project,
                'token': auth.make_token(self.token_secret, instance, host,
                                         expires)}

    def _host_of(self, instance, project):
        """The host Nova runs ``instance`` on, as Nova's API says (never
        the request); a RequestError unless Nova has it, in ``project``,
        on a host.
        """
        try:
            server = self.nova.server(instance)
        except authority.Refused as e:
            LOG.warning('vendordata: Nova\'s API could not be asked about '
                        'instance %s: %s', instance, e)
            raise RequestError(503, 'Nova\'s API could not be asked where '
                                    'the instance runs')
        if server is None or server.deleted:
            raise RequestError(404, 'Nova has no instance %s' % instance)
        if server.project != project:
            LOG.warning('vendordata: instance %s is of project %s for Nova\'s '
                        'API, not %s as asked', instance, server.project,
                        project)
            raise RequestError(409, 'the instance is not of project %s'
                               % project)
        if not server.host:
            raise RequestError(409, 'the instance runs on no host')
        return server.host


def nova_api(conf):
    """Nova's API as ``[nova]`` of ``conf`` reaches it (an
    authority.Authority; Cinder is never asked here).
    """
    plugin = ks_loading.load_auth_from_conf_options(
        conf, authority.NOVA_GROUP)
    if plugin is None:
        raise ValueError('[%s] auth_type is not set: blobcr-vendordata asks '
                         'Nova\'s API which host runs an instance (an '
                         'admin, such as Nova\'s own service user)'
                         % authority.NOVA_GROUP)
    session = ks_loading.load_session_from_conf_options(
        conf, authority.NOVA_GROUP, auth=plugin)
    return authority.Authority(ks_loading.load_adapter_from_conf_options(
        conf, authority.NOVA_GROUP, session=session), None)


def application(conf):
    """:class:`VendordataApp` for ``conf`` (a ConfigOpts already
    loaded), without Keystone's middleware.
    """
    nova_conf.register_opts(conf)
    options = conf.vendordata
    # Without a secret, that is what the refusal names first.
    nova = nova_api(conf) if options.token_secret else None
    return VendordataApp(
        options.token_secret, options.endpoint_url, options.allowed_roles,
        options.max_body, allowed_users=options.allowed_users,
        allowed_user_domain=options.allowed_user_domain,
        token_lifetime=options.token_lifetime, nova=nova)


def make_app(conf):
    """The WSGI application for ``conf`` (a ConfigOpts already loaded):
    keystonemiddleware's auth_token around :class:`VendordataApp`.
    """
    return auth_token.AuthProtocol(application(conf),
                                   {'oslo_config_config': conf})


def load_conf(args=None, default_config_files=None):
    conf = cfg.ConfigOpts()
    nova_conf.register_opts(conf)
    oslo_log.register_options(conf)
    conf(args if args is not None else [], project='blobcr',
         prog='blobcr-vendordata',
         default_config_files=default_config_files)
    return conf


def init_application():
    """For WSGI servers: configuration from ``BLOBCR_VENDORDATA_CONFIG``
    (files separated by ``;``), else /etc/blobcr/nova-vendordata.conf.
    """
    files = [f for f in os.environ.get(CONFIG_ENV, DEFAULT_CONFIG)
             .split(';') if f]
    conf = load_conf([], default_config_files=files)
    oslo_log.setup(conf, 'blobcr-vendordata')
    return make_app(conf)


class _Server(socketserver.ThreadingMixIn, simple_server.WSGIServer):
    daemon_threads = True


class _Handler(simple_server.WSGIRequestHandler):
    def log_message(self, fmt, *args):
        LOG.debug('%s %s', self.address_string(), fmt % args)


def serve(app, host, port):
    """Serve ``app`` on a thread; returns the server (``server_port``)."""
    server = simple_server.make_server(host, port, app, server_class=_Server,
                                       handler_class=_Handler)
    threading.Thread(target=server.serve_forever, daemon=True,
                     name='blobcr-vendordata').start()
    return server


def main(argv=None):
    try:
        conf = load_conf(sys.argv[1:] if argv is None else argv)
    except cfg.Error as e:
        sys.stderr.write('blobcr-vendordata: %s\n' % e)
        return 2
    oslo_log.setup(conf, 'blobcr-vendordata')
    try:
        app = make_app(conf)
    except ValueError as e:
        sys.stderr.write('blobcr-vendordata: %s\n' % e)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    server = serve(app, conf.vendordata.listen, conf.vendordata.port)
    LOG.info('blobcr-vendordata serving on %s:%d',
             conf.vendordata.listen, server.server_port)
    stop.wait()
    server.shutdown()
    server.server_close()
    return 0


if __name__ == '__main__':
    sys.exit(main())
