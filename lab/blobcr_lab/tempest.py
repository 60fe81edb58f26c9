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

By default no Nova, Neutron or Swift: tests that need a server are
skipped by Tempest itself (``[service_available]``), or left out
(:data:`NEEDS_NOVA`). Backups are tested when the stack runs
cinder-backup (its ``backup_host``). With ``compute=``
(a real Nova beside the stack, blobcr_lab/nova.py: :func:`compute_settings`)
Nova is available and :data:`SERVER_TESTS` are the volume tests that
need a server: attach and detach, snapshots of attached volumes, boot
from volume (extend attached is skipped: no online extend in the
driver). Neutron's API answers but has no network (Tempest makes none:
its servers have no NIC) and no guest is reached by SSH (``[validation]
run_validation = false``: a wait for SSHABLE is a wait for ACTIVE), so
the tests that need a network or a guest's answer are skipped by
Tempest or left out (:data:`NOT_WITH_NOVA`).
"""

import configparser
import os
import re
import subprocess
import uuid

from blobcr_lab import openstack as stack_module
from blobcr_lab import tempest_workers

TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
VOLUME_API = r'^(tempest\.api\.volume|cinder_tempest_plugin\.api\.volume)'
# The volume tests that boot or attach to a server (with compute=): the
# volume API's modules that use Nova, Nova's volume API and the volume
# scenarios of Tempest and of cinder-tempest-plugin.
SERVER_TESTS = (
    r'^(tempest\.api\.volume\.(test_volumes_actions|test_volumes_extend'
    r'|test_volumes_snapshots|admin\.test_volumes_actions)\.'
    r'|tempest\.api\.compute\.volumes\.'
    r'|tempest\.scenario\.(test_volume_boot_pattern|test_stamp_pattern'
    r'|test_server_volume_attachment|test_instances_with_cinder_volumes'
    r'|test_volume_migrate_attached|test_encrypted_cinder_volumes)\.'
    r'|cinder_tempest_plugin\.scenario\.)')
# The volume API's classes that Tempest skips without Neutron (they
# boot servers: their resource_setup makes a network): CI runs them
# against the real Nova (tests/integration/test_tempest.py).
NEUTRON_CLASSES = (
    r'^tempest\.api\.volume\.(test_volumes_actions\.VolumesActionsTest'
    r'|admin\.test_volumes_actions\.VolumesActionsTest'
    r'|test_volumes_extend\.VolumesExtendAttachedTest'
    r'|admin\.test_encrypted_volumes_extend\.'
    r'EncryptedVolumesExtendAttachedTest'
    r'|test_volumes_snapshots\.VolumesSnapshotTestJSON'
    r'|test_volumes_backup\.VolumesBackupsTest'
    r'|admin\.test_snapshot_manage\.SnapshotManageAdminTest)\.')
# Of those, not run with compute=: the tests that log in to the guest by
# SSH (and so need it on a network).
NOT_WITH_NOVA = (
    r'^(tempest\.scenario\.(test_server_volume_attachment'
    r'|test_instances_with_cinder_volumes)\.'
    r'|cinder_tempest_plugin\.scenario\.(test_snapshots'
    r'|test_volume_replication|test_encrypted_volume_transfer)\.)')
# Backups, with compute=: cinder-backup connects the volume on its own
# host, the local backend's storage agent here, which cannot serve the
# RADOS volumes the real Nova's hosts use (tests/nova_fixtures.py: they
# are `cluster`, for the evacuate that loses nothing flushed). The lab
# has one cinder-backup; backups of local volumes run without Nova.
BACKUPS_ON_ANOTHER_STORE = (
    r'^tempest\.api\.volume\.(test_volumes_backup\.VolumesBackupsTest\.'
    r'|test_volumes_snapshots\.VolumesSnapshotTestJSON\.'
    r'test_snapshot_backup)')
# Tests that boot a server without asking whether Nova is there: left
# out when it is not (they fail on "Endpoint not found", not skip).
NEEDS_NOVA = (
    r'^cinder_tempest_plugin\.api\.volume\.test_volume_backup\.'
    r'VolumesBackupsTest\.test_incremental_backup')
IMAGE_SIZE = 1 << 20


class TempestError(Exception):
    pass


def venv():
    return os.environ.get('BLOBCR_TEMPEST_VENV',
                          os.path.join(TOP, '.tempest-venv'))


def upload_image(stack, name='tempest-raw', path=None):
    """A raw image in the stack's Glance, its id: the file ``path``, or
    IMAGE_SIZE zeros.
    """
    from keystoneauth1 import adapter
    glance = adapter.Adapter(stack.session('admin'), service_type='image',
                             interface='public',
                             region_name=stack_module.REGION)
    made = glance.post('/v2/images', json={
        'name': name, 'disk_format': 'raw', 'container_format': 'bare',
        'visibility': 'public'}).json()
    if path:
        with open(path, 'rb') as f:
            data = f.read()
    else:
        data = bytes(IMAGE_SIZE)
    glance.put('/v2/images/%s/file' % made['id'], data=data,
               headers={'Content-Type': 'application/octet-stream'})
    return made['id']


def compute_settings(flavor, flavor_alt=None, build_timeout=300,
                     neutron=True):
    """``compute=`` for :func:`run`: a real Nova with ``flavor`` (its id),
    as tempest.conf sections.  ``neutron``: a Neutron API is there
    (Tempest's volume tests that attach to a server ask for one, as
    nova-api does), though with no network: Tempest makes none
    (``create_isolated_networks = false``) and servers get no NIC.
    """
    return {'compute': {'flavor_ref': flavor,
                        'flavor_ref_alt': flavor_alt or flavor,
                        'build_timeout': str(build_timeout)},
            'service_available': {'neutron': str(bool(neutron)).lower()}}


def write_conf(stack, path, volume_type, backend_names, image_id,
               protocol, vendor, compute=None):
    """tempest.conf for the stack: only what differs from Tempest's
    defaults, each for a reason the comment gives.

    ``compute``: None (no Nova), or the sections that a real Nova sets
    (:func:`compute_settings`).
    """
    admin = 'admin'
    logs = os.path.join(os.path.dirname(os.path.dirname(path)), 'logs')
    os.makedirs(logs, exist_ok=True)
    conf = configparser.ConfigParser(interpolation=None)
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
        # No route to a guest (no Neutron for Tempest, servers have no
        # NIC): nothing is pinged or reached by SSH, and no keypair is
        # made for it (a test that asks Nova for one, Nova or not).
        'validation': {'run_validation': 'false'},
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
            'disk_format': 'raw',
            # A snapshot unmanaged and managed again is named by its
            # old id (blobcr_cinder/manage.py), as RBD's are.
            'manage_snapshot_ref': 'source-name,snapshot-%s'},
        'volume-feature-enabled': {
            # cinder-backup (POSIX driver) when the stack runs it.
            'backup': 'true' if stack.backup_host else 'false',
            'snapshot': 'true', 'clone': 'true', 'volume_revert': 'true',
            'manage_volume': 'true', 'manage_snapshot': 'true',
            'multi_backend': 'true' if len(backend_names) > 1 else 'false',
            'extend_attached_volume': 'false'},     # needs Nova
    })
    if compute:
        conf['service_available']['nova'] = 'true'
        conf.read_dict(compute)
        # Not 'true': the driver reports online_extend_support False,
        # and Cinder's scheduler refuses an in-use extend (NoValidBackend).
        conf['volume-feature-enabled']['extend_attached_volume'] = 'false'
        conf.read_dict({
            'compute-feature-enabled': {
                # No key manager here: no encrypted volumes.
                'attach_encrypted_volume': 'false',
                # One compute host.
                'live_migration': 'false', 'cold_migration': 'false',
                'resize': 'false',
                'vnc_console': 'false', 'spice_console': 'false',
                'serial_console': 'false',
                # Needs ports.
                'interface_attach': 'false',
                'console_output': 'true', 'snapshot': 'true'},
        })
    with open(path, 'w') as f:
        conf.write(f)


def _worker_file(list_argv, workspace, env, concurrency, costs):
    """The worker file that spreads the tests ``list_argv`` lists over
    ``concurrency`` workers by the costs of the run named ``costs``.
    """
    listed = subprocess.run(
        list_argv, cwd=workspace, env=env, text=True,
        capture_output=True, timeout=300)
    ids = [line for line in listed.stdout.splitlines()
           if re.match(r'^[A-Za-z_][\w.]*\.\w+(\[.*\])?$', line)]
    if listed.returncode or not ids:
        raise TempestError('tempest run --list-tests failed (exit %d):\n%s%s'
                           % (listed.returncode, listed.stdout[-4000:],
                              listed.stderr[-4000:]))
    bins = tempest_workers.plan(ids, concurrency,
                                tempest_workers.load_costs(costs))
    path = os.path.join(workspace, 'workers.yaml')
    tempest_workers.write(path, bins)
    return path


def run(stack, workdir, regex=VOLUME_API, volume_type=None,
        backend_names=(), protocol='file', vendor='BlobCR for OpenStack',
        concurrency=2, timeout=1800, log=None, compute=None, image=None,
        exclude=None, costs=None):
    """Run Tempest's tests matching ``regex``; returns
    ``{'passed': n, 'skipped': n, 'failed': n, 'output': text}``.

    ``compute``: tempest.conf sections of a real Nova beside the stack
    (:func:`compute_settings`); None: no Nova.  ``image``: a raw disk
    file for Tempest's image (a guest that boots: it answers a detach),
    else IMAGE_SIZE zeros.  ``exclude``: Tempest's --exclude-regex.
    ``costs``: the name of a run in tempest_costs.json, whose class
    timings spread the classes over the ``concurrency`` workers
    (:mod:`.tempest_workers`); None: stestr's own dealing.
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
    image_id = upload_image(stack, path=image)
    write_conf(stack, os.path.join(workspace, 'etc', 'tempest.conf'),
               volume_type or next(iter(stack.backends)),
               list(backend_names) or [volume_type], image_id, protocol,
               vendor, compute=compute)
    env = {k: v for k, v in os.environ.items() if not k.startswith('OS_')}
    selection = ['--regex', regex]
    if compute is None:
        exclude = '|'.join(filter(None, [exclude, NEEDS_NOVA]))
    if exclude:
        selection += ['--exclude-regex', exclude]
    argv = [tempest, 'run'] + selection + ['--concurrency', str(concurrency)]
    if costs and concurrency > 1:
        argv += ['--worker-file', _worker_file(
            [tempest, 'run', '--list-tests'] + selection, workspace, env,
            concurrency, costs)]
    proc = subprocess.run(
        argv, cwd=workspace, env=env, text=True,
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
