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

"""Group restart from the panel: blobcr-restart (blobcrclient.restart)
run as a process of its own, on the Horizon user's token, so that a
restart outlives the web worker that asked for it (workers are recycled;
a thread would die with them). The page follows the restart from the
files the process writes:

``BLOBCR_RESTART_DIR/<project>/<job>.meta``  what was asked, and the pid
``BLOBCR_RESTART_DIR/<project>/<job>.log``   blobcr-restart's progress
                                             (JSON lines, stderr)
``BLOBCR_RESTART_DIR/<project>/<job>.json``  its result (stdout), at the end

BLOBCR_RESTART_DIR (a Horizon setting) must be one directory for all the
web servers of the dashboard (shared, or one server): the default is
``blobcr-restarts`` in Horizon's LOCAL_PATH, where Horizon keeps its own
state (its secret key store), not the temporary directory, which
systemd's PrivateTmp gives each service a copy of.
"""

import dataclasses
import json
import logging
import os
import subprocess
import sys
import threading
import time
import typing
import uuid

from django.conf import settings
from django.core import exceptions
from keystoneauth1.identity import v3
from keystoneauth1 import session as ks_session
from openstack_dashboard.api import base

from blobcrclient import restart

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


def _directory(project_id):
    top = getattr(settings, 'BLOBCR_RESTART_DIR', None)
    if not top:
        local = getattr(settings, 'LOCAL_PATH', None)
        if not local:
            raise exceptions.ImproperlyConfigured(
                'BlobCR group restarts need BLOBCR_RESTART_DIR or '
                'LOCAL_PATH in Horizon\'s settings')
        top = os.path.join(local, 'blobcr-restarts')
    path = os.path.join(top, project_id)
    # Tokens pass through the environment only, but the progress names
    # the project's volumes: readable by the dashboard's user alone.
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def _env(request):
    env = {k: v for k, v in os.environ.items() if not k.startswith('OS_')}
    env.update(OS_AUTH_URL=base.url_for(request, 'identity'),
               OS_TOKEN=request.user.token.id,
               OS_PROJECT_ID=request.user.project_id)
    verify = _verify()
    if verify is False:
        env['OS_INSECURE'] = 'true'
    elif verify is not True:
        env['OS_CACERT'] = verify
    return env


def launch(request, the_plan, prefix, flavor, boot):
    """Start blobcr-restart for ``the_plan``'s group snapshot, detached
    from this worker; returns the job's name.
    """
    job = '%s-%s' % (time.strftime('%Y%m%dT%H%M%S'), uuid.uuid4().hex[:8])
    where = os.path.join(_directory(request.user.project_id), job)
    argv = [sys.executable, '-m', 'blobcrclient.restart',
            '--group', the_plan['group'],
            '--group-snapshot', the_plan['group_snapshot'],
            '--os-interface', _interface()]
    if request.user.services_region:
        argv += ['--os-region-name', request.user.services_region]
    if prefix:
        argv += ['--name-prefix', prefix]
    argv += ['--flavor', flavor] if boot else ['--no-boot']
    with open(where + '.log', 'wb') as log, \
            open(where + '.json', 'wb') as result:
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                 stdout=result, stderr=log, env=_env(request),
                                 start_new_session=True, close_fds=True)
    meta = {'job': job, 'pid': child.pid, 'group': the_plan['group'],
            'group_snapshot': the_plan['group_snapshot'],
            'members': len(the_plan['members']), 'boot': bool(boot),
            'user': request.user.username, 'started': time.time()}
    with open(where + '.meta.tmp', 'w') as f:
        json.dump(meta, f)
    os.rename(where + '.meta.tmp', where + '.meta')
    # Reap it while this worker lives; init does once it is gone.
    threading.Thread(target=child.wait, name='reap-' + job,
                     daemon=True).start()
    LOG.info('restart %s of group %s from %s started (pid %d) by %s',
             job, meta['group'], meta['group_snapshot'], child.pid,
             meta['user'])
    return job


@dataclasses.dataclass
class Job(object):
    job: str
    group_snapshot: str
    state: str                  # running, done or failed
    step: str = ''              # blobcr-restart's current step
    done: int = 0
    total: int = 0
    error: str = ''
    volumes: typing.List[str] = dataclasses.field(default_factory=list)
    started: float = 0.0

    def __str__(self):
        if self.state == 'done':
            return 'done: %d volumes' % len(self.volumes)
        if self.state == 'failed':
            return 'failed: %s' % (self.error or 'see the dashboard log')
        if self.step:
            return 'running: %s %d/%d' % (self.step, self.done, self.total)
        return 'running'


def _alive(pid, job):
    """The job's process still runs (and is not a reused pid)."""
    try:
        with open('/proc/%d/cmdline' % pid, 'rb') as f:
            return job['group_snapshot'].encode() in f.read()
    except (OSError, TypeError):
        return False


def _read(where, meta):
    job = Job(meta['job'], meta['group_snapshot'], 'running',
              total=meta.get('members', 0), started=meta.get('started', 0))
    try:
        with open(where + '.log') as f:
            lines = f.read().splitlines()
    except OSError:
        lines = []
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            job.error = line.strip() or job.error   # a traceback's end
            continue
        if event.get('error'):
            job.error = event['error']
        if event.get('event') == 'progress':
            job.step, job.done, job.total = (event['step'], event['done'],
                                             event['total'])
    try:
        with open(where + '.json') as f:
            result = json.load(f)
        job.volumes = [m['volume'] for m in result.get('members', [])]
        job.state = 'done'
    except (OSError, ValueError):
        if not _alive(meta.get('pid'), meta):
            job.state = 'failed'
    return job


def jobs(project_id):
    """The newest restart of each group snapshot of the project:
    ``{group snapshot id: Job}``.
    """
    top = _directory(project_id)
    newest = {}
    for name in sorted(os.listdir(top)):
        if not name.endswith('.meta'):
            continue
        try:
            with open(os.path.join(top, name)) as f:
                meta = json.load(f)
        except (OSError, ValueError):
            continue
        newest[meta['group_snapshot']] = (os.path.join(top, name[:-5]), meta)
    return {gs: _read(where, meta) for gs, (where, meta) in newest.items()}
