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

"""A stand-in for the few calls of Nova's and Cinder's APIs that
blobcr-nova-listener asks before it acts (blobcr_nova/authority.py), for
the test lanes that run no real Nova: an HTTP server on 127.0.0.1 in a
thread of the test process, which answers what the test set.

The answers are shaped as nova 34 and cinder 29 make them for an admin
at their base microversions (read in their code: nova/api/openstack/
compute/servers.py and views/servers.py, migrations.py; cinder/api/v3/
views/volumes.py): a server's ``OS-EXT-SRV-ATTR:host``,
``OS-EXT-STS:vm_state`` and ``task_state``, ``tenant_id``; a deleted
server is 404 by id and listed by ``GET /servers/detail?uuid=U&
deleted=true&all_tenants=1``; ``os-migrations?instance_uuid=U``;
``os-volume_attachments``; a volume's ``status`` and its attached
``attachments`` with ``server_id`` and ``host_name``. Nothing checks a
token (the listener's ``[nova] auth_type = none``).

:meth:`FakeAPI.after` sets what real Nova reports once an event was
genuinely emitted (the states of the compute manager at that point).
"""

import http.server
import json
import threading
import urllib.parse

STATUS = {'active': 'ACTIVE', 'stopped': 'SHUTOFF', 'shelved': 'SHELVED',
          'shelved_offloaded': 'SHELVED_OFFLOADED', 'deleted': 'DELETED',
          'resized': 'VERIFY_RESIZE'}


class FakeAPI(object):

    def __init__(self):
        self.lock = threading.Lock()
        self.servers = {}       # uuid -> dict
        self.migrations = {}    # uuid -> [dict], oldest first
        self.volumes = {}       # id -> dict
        self.requests = []      # (method, path) asked
        self._next_id = 1
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                code, body = api.answer(self.path)
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header('Content-Type', 'application/json')
                self.send_header('Content-Length', str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(('127.0.0.1', 0),
                                                     Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever,
                                       daemon=True)
        self.thread.start()
        self.url = 'http://127.0.0.1:%d' % self.httpd.server_address[1]
        self.nova_url = self.url + '/compute/v2.1'
        self.cinder_url = self.url + '/volume/v3'

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def conf(self):
        """The listener's [nova] and [cinder] sections for this API."""
        return {'nova': {'auth_type': 'none',
                         'endpoint_override': self.nova_url,
                         'timeout': '10'},
                'cinder': {'endpoint_override': self.cinder_url}}

    # -- what the test sets --------------------------------------------------

    def server(self, uuid, host, vm_state='active', task_state=None,
               project='proj-1', volumes=None):
        with self.lock:
            old = self.servers.get(uuid) or {}
            self.servers[uuid] = {
                'host': host, 'vm_state': vm_state, 'task_state': task_state,
                'project': project,
                'volumes': list(old.get('volumes', []) if volumes is None
                                else volumes)}

    def gone(self, uuid):
        """Nova has no record of it (never created, or archived)."""
        with self.lock:
            self.servers.pop(uuid, None)

    def migration(self, uuid, source, dest, status, kind='live-migration'):
        with self.lock:
            self.migrations.setdefault(uuid, []).append({
                'id': self._next_id, 'instance_uuid': uuid,
                'source_compute': source, 'dest_compute': dest,
                'source_node': source, 'dest_node': dest, 'dest_host': None,
                'status': status, 'migration_type': kind,
                'old_instance_type_id': 1, 'new_instance_type_id': 1,
                'created_at': '2026-01-01T00:00:00.000000',
                'updated_at': None})
            self._next_id += 1

    def set_migration(self, uuid, status):
        with self.lock:
            self.migrations[uuid][-1]['status'] = status

    def last_migration(self, uuid):
        with self.lock:
            return dict((self.migrations.get(uuid) or [{}])[-1])

    def volume(self, vid, status='available', attachments=()):
        """``attachments``: (server id, host) pairs, attached."""
        with self.lock:
            self.volumes[vid] = {'status': status,
                                 'attachments': list(attachments)}

    def after(self, event, host, instance, instance_host=None, volumes=(),
              project='proj-1', volume_id=None):
        """What Nova reports once ``instance.EVENT`` was emitted by
        ``host`` (``instance_host``: the payload's host, the source of a
        move's start).
        """
        was = self.servers.get(instance) or {}
        volumes = list(volumes) or was.get('volumes', [])
        last = self.last_migration(instance)
        # Cinder, for the volumes a test did not set: what Nova's calls
        # left (shelve offload makes new attachments without a host).
        for vid in volumes + ([volume_id] if volume_id else []):
            if vid not in self.volumes:
                self.volume(vid, 'reserved' if event.startswith(
                    'shelve_offload') else 'available')
        if event == 'delete.end':
            self.server(instance, host, 'deleted', project=project,
                        volumes=volumes)
        elif event == 'shelve_offload.end':
            self.server(instance, None, 'shelved_offloaded',
                        project=project, volumes=volumes)
        elif event == 'shelve.end':
            self.server(instance, host, 'shelved', project=project,
                        volumes=volumes)
        elif event == 'volume_detach.end':
            self.server(instance, host, project=project, volumes=[
                v for v in volumes if v != volume_id])
        elif event in ('live_migration_pre.start', 'resize_prep.start'):
            live = event.startswith('live')
            self.server(instance, instance_host or host,
                        task_state='migrating' if live else 'resize_prep',
                        project=project, volumes=volumes)
            # resize_prep.start comes before the destination's claim:
            # the migration names no destination yet.
            self.migration(instance, instance_host or host,
                           host if live else None,
                           'preparing' if live else 'pre-migrating',
                           'live-migration' if live else 'resize')
        elif event in ('live_migration_post.end',
                       'live_migration_post_dest.end'):
            self.server(instance, last['dest_compute'], project=project,
                        volumes=volumes)
            self.set_migration(instance, 'running')
        elif event == 'resize_finish.end':
            with self.lock:
                self.migrations[instance][-1]['dest_compute'] = host
            self.server(instance, host, 'resized', project=project,
                        volumes=volumes)
            self.set_migration(instance, 'finished')
        elif event == 'resize_revert.end':
            self.server(instance, host, project=project, volumes=volumes)
            self.set_migration(instance, 'reverted')
        elif event in ('live_migration_rollback.end',
                       'live_migration_rollback_dest.end'):
            self.server(instance, last.get('source_compute') or host,
                        project=project, volumes=volumes)
        else:
            raise ValueError('no genuine state for %s' % event)

    # -- the API -------------------------------------------------------------

    def _view(self, uuid, s):
        return {'id': uuid, 'status': STATUS.get(s['vm_state'], 'ACTIVE'),
                'tenant_id': s['project'], 'user_id': 'user-1',
                'OS-EXT-SRV-ATTR:host': s['host'],
                'OS-EXT-SRV-ATTR:hypervisor_hostname': s['host'],
                'OS-EXT-STS:vm_state': s['vm_state'],
                'OS-EXT-STS:task_state': s['task_state'],
                'OS-EXT-STS:power_state': 1}

    def answer(self, path):
        url = urllib.parse.urlsplit(path)
        query = urllib.parse.parse_qs(url.query)
        parts = url.path.strip('/').split('/')
        with self.lock:
            self.requests.append(('GET', path))
            if parts[:2] == ['compute', 'v2.1']:
                return self._nova(parts[2:], query)
            if parts[:2] == ['volume', 'v3'] and len(parts) == 4 and \
                    parts[2] == 'volumes':
                v = self.volumes.get(parts[3])
                if v is None:
                    return 404, {'itemNotFound': {
                        'code': 404, 'message': 'Volume %s could not be '
                        'found.' % parts[3]}}
                return 200, {'volume': {
                    'id': parts[3], 'status': v['status'],
                    'attachments': [{
                        'id': parts[3], 'volume_id': parts[3],
                        'attachment_id': 'att-%d' % i, 'server_id': server,
                        'host_name': host, 'device': '/dev/vdb',
                        'attached_at': '2026-01-01T00:00:00.000000'}
                        for i, (server, host) in enumerate(
                            v['attachments'])]}}
        return 404, {'error': 'not here: %s' % path}

    def _nova(self, parts, query):
        missing = 404, {'itemNotFound': {
            'code': 404, 'message': 'Instance could not be found.'}}
        if parts == ['servers', 'detail']:
            if query.get('deleted') != ['true'] or \
                    query.get('all_tenants') != ['1']:
                return 400, {'badRequest': {'message': 'unexpected query'}}
            uuid = query.get('uuid', [None])[0]
            s = self.servers.get(uuid)
            found = [self._view(uuid, s)] if s and \
                s['vm_state'] == 'deleted' else []
            return 200, {'servers': found}
        if len(parts) in (2, 3) and parts[0] == 'servers':
            s = self.servers.get(parts[1])
            if s is None or s['vm_state'] == 'deleted':
                return missing
            if len(parts) == 2:
                return 200, {'server': self._view(parts[1], s)}
            if parts[2] == 'os-volume_attachments':
                return 200, {'volumeAttachments': [
                    {'id': v, 'volumeId': v, 'serverId': parts[1],
                     'device': '/dev/vd%s' % chr(98 + i)}
                    for i, v in enumerate(s['volumes'])]}
        if parts == ['os-migrations']:
            uuid = query.get('instance_uuid', [None])[0]
            # Nova lists the newest first.
            return 200, {'migrations': list(reversed(
                self.migrations.get(uuid, [])))}
        return 404, {'itemNotFound': {'code': 404, 'message': 'no route'}}
