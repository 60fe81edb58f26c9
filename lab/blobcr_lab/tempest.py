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

"""Tempest, and cinder-tempest-plugin, against a started OpenStackStack.

Tempest is what Cinder's third-party CI runs against a backend. It lives
in a virtualenv of its own (tools/install-tempest.sh: .tempest-venv, or
$BLOBCR_TEMPEST_VENV). :func:`run` makes a Tempest workspace, uploads a
small raw image to the stack's Glance (volume-from-image tests), writes
tempest.conf from the stack (its Keystone, the admin account for dynamic
credentials, the BlobCR volume type, what the driver supports) and runs
``tempest run``; it returns the counts Tempest prints.

No Nova, Neutron or Swift here: tests that need a server are skipped by
Tempest itself (``[service_available]``); ``BLOBCR_REAL_NOVA=1`` runs
them elsewhere (tests/integration/test_guest_vm.py).
"""

import configparser
import os
import re
import subprocess
import uuid

from blobcr_lab import openstack as stack_module

TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
VOLUME_API = r'^(tempest\.api\.volume|cinder_tempest_plugin\.api\.volume)'
IMAGE_SIZE = 1 << 20


class TempestError(Exception):
    pass


def venv():
    return os.environ.get('BLOBCR_TEMPEST_VENV',
                          os.path.join(TOP, '.tempest-venv'))


def upload_image(stack, name='tempest-raw'):
    """A raw image of IMAGE_SIZE zeros in the stack's Glance; its id."""
    from keystoneauth1 import adapter
    glance = adapter.Adapter(stack.session('admin'), service_type='image',
                             interface='public',
                             region_name=stack_module.REGION)
    made = glance.post('/v2/images', json={
        'name': name, 'disk_format': 'raw', 'container_format': 'bare',
        'visibility': 'public'}).json()
    glance.put('/v2/images/%s/file' % made['id'], data=bytes(IMAGE_SIZE),
               headers={'Content-Type': 'application/octet-stream'})
    return made['id']


def write_conf(stack, path, volume_type, backend_names, image_id,
               protocol, vendor):
    """tempest.conf for the stack: only what differs from Tempest's
    defaults, each for a reason the comment gives.
    """
    admin = 'admin'
    logs = os.path.join(os.path.dirname(os.path.dirname(path)), 'logs')
    os.makedirs(logs, exist_ok=True)
    conf = configparser.ConfigParser()
    conf.read_dict({
        'DEFAULT': {'log_dir': logs, 'log_file': 'tempest.log'},
        'auth': {
            # Tempest makes a project and users per test class.
            'use_dynamic_credentials': 'true',
            'admin_username': admin,
            'admin_password': stack_module.PASSWORDS[admin],
            'admin_project_name': stack_module.PROJECTS[admin],
            'admin_domain_name': stack_module.DOMAIN,
            'default_credentials_domain_name': stack_module.DOMAIN,
            'create_isolated_networks': 'false'},
        'identity': {'uri_v3': stack.auth_url, 'auth_version': 'v3',
                     'region': stack_module.REGION,
                     'v3_endpoint_type': 'public'},
        'identity-feature-enabled': {'api_v2': 'false'},
        'service_available': {'cinder': 'true', 'glance': 'true',
                              'nova': 'false', 'neutron': 'false',
                              'swift': 'false'},
        'compute': {'image_ref': image_id, 'image_ref_alt': image_id},
        'image': {'disk_formats': 'raw'},
        'volume': {
            'catalog_type': 'block-storage',
            'region': stack_module.REGION,
            'volume_type': volume_type,
            'backend_names': ','.join(backend_names),
            'storage_protocol': protocol,
            'vendor_name': vendor,
            # Cinder's own range; tests outside it are skipped.
            'min_microversion': '3.0',
            'max_microversion': 'latest',
            'build_timeout': '300',
            'disk_format': 'raw'},
        'volume-feature-enabled': {
            'backup': 'false',              # no cinder-backup here
            'snapshot': 'true', 'clone': 'true', 'volume_revert': 'true',
            'manage_volume': 'true', 'manage_snapshot': 'true',
            'multi_backend': 'true' if len(backend_names) > 1 else 'false',
            'extend_attached_volume': 'false'},     # needs Nova
    })
    with open(path, 'w') as f:
        conf.write(f)


def run(stack, workdir, regex=VOLUME_API, volume_type=None,
        backend_names=(), protocol='file', vendor='BlobCR for OpenStack',
        concurrency=2, timeout=1800, log=None):
    """Run Tempest's tests matching ``regex``; returns
    ``{'passed': n, 'skipped': n, 'failed': n, 'output': text}``.
    """
    tempest = os.path.join(venv(), 'bin', 'tempest')
    if not os.path.exists(tempest):
        raise TempestError('%s is missing: run tools/install-tempest.sh'
                           % tempest)
    workspace = os.path.join(workdir, 'tempest')
    if not os.path.isdir(os.path.join(workspace, 'etc')):
        # Its own workspace registry, not ~/.tempest's (where a second
        # run's workspace of the same name would be refused).
        done = subprocess.run(
            [tempest, 'init', '--name', 'blobcr-%s' % uuid.uuid4().hex[:8],
             '--workspace-path', os.path.join(workdir, 'workspaces.yaml'),
             workspace], capture_output=True, text=True)
        if done.returncode:
            raise TempestError('tempest init failed:\n%s%s'
                               % (done.stdout, done.stderr))
    image_id = upload_image(stack)
    write_conf(stack, os.path.join(workspace, 'etc', 'tempest.conf'),
               volume_type or next(iter(stack.backends)),
               list(backend_names) or [volume_type], image_id, protocol,
               vendor)
    env = {k: v for k, v in os.environ.items() if not k.startswith('OS_')}
    proc = subprocess.run(
        [tempest, 'run', '--regex', regex, '--concurrency',
         str(concurrency)], cwd=workspace, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    if log:
        with open(log, 'w') as f:
            f.write(proc.stdout)
    counts = {}
    for key, label in (('passed', 'Passed'), ('skipped', 'Skipped'),
                       ('failed', 'Failed')):
        found = re.search(r'- %s: (\d+)' % label, proc.stdout)
        if not found:
            raise TempestError('tempest run printed no totals (exit %d):\n%s'
                               % (proc.returncode, proc.stdout[-4000:]))
        counts[key] = int(found.group(1))
    counts['output'] = proc.stdout
    return counts
