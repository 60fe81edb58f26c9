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

"""Cinder volume driver for BlobCR.

``volume_driver = blobcr_cinder.driver.BlobCRDriver``

A volume is a BlobCR image (``volume-<id>``), a snapshot is one of its
versions, and a volume made from a snapshot or another volume is a CLONE:
no data is copied. The driver touches neither RADOS nor FUSE: every
operation is an RPC call to a blobcr-agent.

* Detached volumes are served by the agent of ``blobcr_agent_host`` (by
  default the agent beside this cinder-volume): their content is their
  image's newest version.
* An attached volume's content is in the mirror of the agent on the
  host it is attached to (the connector's host, recorded by Cinder as the
  attachment's ``attached_host``): a snapshot is a CHECKPOINT there,
  taken live, with the guest held still as the volume type's
  ``blobcr:quiesce`` extra spec says.

A snapshot turns ``available`` once its version is persisted (stable);
its metadata records the image, version, parent version, bytes written
and, for checkpoints, the ack and held times.
"""

import contextlib
import socket
import time

from cinder.common import constants
from cinder import context as cinder_context
from cinder import exception
from cinder.i18n import _
from cinder.image import image_utils
from cinder import interface
from cinder import objects
from cinder.volume import driver
from cinder.volume import volume_utils
from oslo_log import log as logging
import oslo_messaging as messaging
from oslo_serialization import jsonutils
from oslo_utils import units

from blobcr_cinder import compute_hosts
from blobcr_cinder import groups
from blobcr_cinder import manage
from blobcr_cinder import options
from blobcr_cinder import refs
from blobcr_cinder import specs
from blobcr_common import exception as agent_exception
from blobcr_common.rpc import api as agent_api

LOG = logging.getLogger(__name__)

GiB = units.Gi
# Version.made_by of the versions the driver makes for itself.
MADE_BY = 'cinder'
# Versions made only to hold a detached volume's content.
SUPERSEDED = (MADE_BY, 'revert', 'kept')
# The storage agent's probe at cinder-volume's start; a detach's probes
# are [backend] blobcr_alive_probe_timeout and blobcr_retry_probe_timeout.
ALIVE_PROBE_TIMEOUT = 10
# Between two probes of a storage agent that is not up yet at start.
START_PROBE_EVERY = 2

# The agent's served_ms is rounded, and measured on another clock than
# its received_at: an answer's travel this far below zero is rounding.
CLOCK_SLACK_MS = 1.0


def _travel_ms(sent_at, answered_at, result):
    """Where an agent call's time went outside the agent: the request's
    travel (sent to received) and the answer's (served to answered), in
    ms, when the agent says when it received it (a host sharing this
    clock: the same machine, or NTP's error on top); {} otherwise.
    """
    received_at = result.pop('received_at', None)
    if received_at is None or result.get('served_ms') is None:
        return {}
    request = (received_at - sent_at) * 1e3
    answer = (answered_at - sent_at) * 1e3 - request - result['served_ms']
    if request < 0 or answer < -CLOCK_SLACK_MS:
        return {}           # the two clocks differ: nothing to tell
    return {'request_ms': request, 'answer_ms': max(answer, 0.0)}


@interface.volumedriver
class BlobCRDriver(manage.ManageMixin, groups.GroupsMixin,
                   driver.VolumeDriver):
    """Volumes as BlobCR images: live incremental snapshots, clones."""

    VERSION = '1.0.0'
    # Third-party CI wiki name (required by Cinder's driver registry).
    CI_WIKI_NAME = 'BlobCR_CI'
    # Cinder's own name for volumes served as a file on the host.
    STORAGE_PROTOCOL = constants.FILE
    # Any cinder-volume of a cluster may serve any volume of the backend:
    # the driver keeps nothing between calls (the store and the agents
    # do), and each service reaches every agent over RPC. Only a shared
    # store (RADOS) can be served so: check_for_setup_error refuses a
    # local one in a cluster.
    SUPPORTS_ACTIVE_ACTIVE = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.configuration.append_config_values(options.blobcr_opts)
        self.api = None

    @staticmethod
    def get_driver_options():
        return options.blobcr_opts

    # -- set-up ------------------------------------------------------------

    def do_setup(self, context):
        # The global CONF: oslo.messaging's options (transport_url) are
        # registered there by cinder-volume.
        self.api = agent_api.AgentAPI(
            transport_url=self.configuration.blobcr_transport_url or None,
            timeout=self.configuration.blobcr_rpc_timeout)

    @property
    def storage_host(self):
        return self.configuration.blobcr_agent_host or \
            volume_utils.extract_host(self.host, 'host').split('@')[0]

    def check_for_setup_error(self):
        """The storage agent answers: asked again every START_PROBE_EVERY
        seconds for up to blobcr_agent_start_timeout, so that a
        cinder-volume started first initializes once the agent is up
        (Cinder's own reinit_driver_count gives a few seconds only).
        """
        deadline = time.monotonic() + \
            self.configuration.blobcr_agent_start_timeout
        with self._agent_errors(self.storage_host, 'status'):
            while True:
                try:
                    self.api.status(self.storage_host,
                                    timeout=ALIVE_PROBE_TIMEOUT)
                    break
                except messaging.MessagingTimeout:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise
                    LOG.warning('the BlobCR agent of host %s does not '
                                'answer yet: asking again for %d s more',
                                self.storage_host, left)
                    time.sleep(min(START_PROBE_EVERY, left))
        if self.cluster_name:
            self._refuse_local_store_in_cluster()

    def _refuse_local_store_in_cluster(self):
        """Active-active needs every service of the cluster to reach the
        same store: a local one is on one machine only, and the other
        services' storage agents would not see its images.
        """
        with self._agent_errors(self.storage_host, 'capacity'):
            where = self.api.capacity(self.storage_host)['backend']
        if where.startswith('local:'):
            raise exception.VolumeDriverException(message=_(
                'BlobCR backend %(backend)s is in cluster %(cluster)s, but '
                'its store is local to %(host)s (%(where)s): active-active '
                'needs a store every service reaches (the RADOS backend); '
                'run it without [DEFAULT] cluster') % {
                    'backend': self.configuration.config_group,
                    'cluster': self.cluster_name, 'host': self.storage_host,
                    'where': where})

    def _agent_for(self, host):
        """The agent that serves connections to ``host``: this backend's
        storage agent for the machine cinder-volume runs on, else the
        agent named ``host``. Cinder's own attachments (a generic
        migration's copy, a backup there) name that machine by its host
        name, as os-brick does, and where several BlobCR stores are
        served from one machine, each backend's storage agent is the one
        of its store.
        """
        if host and host == socket.gethostname():
            return self.storage_host
        return host

    def _call(self, host, method, *args, **kwargs):
        """An agent call, its errors as the exceptions Cinder expects."""
        with self._agent_errors(host, method, args):
            return getattr(self.api, method)(host, *args, **kwargs)

    def _no_answer(self, method, target):
        """The error for a call to the storage agent that timed out: an
        agent that is down says so (status raises); one that answers is
        slow, and the operation may still finish.
        """
        self._call(self.storage_host, 'status')
        return exception.VolumeBackendAPIException(
            data=_('the BlobCR agent of host %(host)s did not finish '
                   '%(method)s of %(target)s within blobcr_rpc_timeout; it '
                   'may still finish: try again')
            % {'host': self.storage_host, 'method': method,
               'target': target})

    @contextlib.contextmanager
    def _agent_errors(self, host, method, args=()):
        try:
            yield
        except messaging.MessagingTimeout:
            raise exception.VolumeBackendAPIException(
                data=_('the BlobCR agent of host %(host)s does not answer '
                       '(%(method)s): is blobcr-agent running there with '
                       'RPC enabled?') % {'host': host, 'method': method})
        except agent_exception.Busy as e:
            raise exception.VolumeIsBusy(volume_name='%s (%s)' % (
                args[0] if args else '', e))
        except (agent_exception.ImageNotFound,
                agent_exception.VersionNotFound,
                agent_exception.VersionNotStable,
                agent_exception.InvalidInput) as e:
            raise exception.VolumeBackendAPIException(
                data=_('%(method)s on %(host)s: %(error)s')
                % {'method': method, 'host': host, 'error': e})
        except (agent_exception.BlobCRError, messaging.MessagingException) \
                as e:
            raise exception.VolumeBackendAPIException(
                data=_('BlobCR %(method)s on %(host)s failed: %(error)s')
                % {'method': method, 'host': host, 'error': e})

    # -- where a volume is ------------------------------------------------

    @staticmethod
    def _image_of(volume):
        if not volume.provider_id:
            raise exception.VolumeBackendAPIException(
                data=_('volume %s has no BlobCR image (provider_id)')
                % volume.id)
        return volume.provider_id

    def _attached_host(self, volume):
        """The host whose agent mirrors the volume, or None."""
        hosts = {self._agent_for(a.attached_host)
                 for a in (volume.volume_attachment or [])
                 if a.attach_status == 'attached' and a.attached_host}
        if len(hosts) > 1:
            raise exception.VolumeBackendAPIException(
                data=_('volume %(id)s is attached on several hosts '
                       '(%(hosts)s): BlobCR volumes are not multi-attach')
                % {'id': volume.id, 'hosts': sorted(hosts)})
        return hosts.pop() if hosts else None

    def _migrating_instance(self, volume, source):
        """The instance attached on ``source`` when every other
        attachment of the volume is a pending one of that same instance
        (what Nova's live migration makes); else None. Read from the
        database: the volume Cinder passes may predate the attachment
        being connected.
        """
        attachments = objects.VolumeAttachmentList.get_all_by_volume_id(
            cinder_context.get_admin_context(), volume.id)
        there = {a.instance_uuid for a in attachments
                 if a.attach_status == 'attached' and
                 self._agent_for(a.attached_host) == source}
        pending = {a.instance_uuid for a in attachments
                   if a.attach_status not in ('attached', 'detached')}
        if len(there) == 1 and None not in there and pending == there:
            return there.pop()
        return None

    # -- volumes -----------------------------------------------------------

    def create_volume(self, volume):
        specs.checked(volume.volume_type)               # refuse bad specs
        specs.refuse_encrypted(volume)
        image = self._call(self.storage_host, 'create_image',
                           refs.image_name(volume), volume.size * GiB)
        LOG.info('volume %s is BlobCR image %s', volume.id, image['id'])
        return {'provider_id': image['id']}

    def delete_volume(self, volume):
        if not volume.provider_id:
            return          # its create failed before an image existed
        try:
            self.api.delete_image(self.storage_host, volume.provider_id)
        except agent_exception.ImageNotFound:
            LOG.info('image %s of volume %s is already gone',
                     volume.provider_id, volume.id)
        except agent_exception.InvalidInput as e:
            raise exception.VolumeIsBusy(volume_name='%s (%s)'
                                         % (volume.name, e))
        except messaging.MessagingTimeout:
            raise self._no_answer('delete_image', volume.provider_id)

    def extend_volume(self, volume, new_size):
        self._call(self.storage_host, 'extend_image', self._image_of(volume),
                   new_size * GiB)

    def create_cloned_volume(self, volume, src_vref):
        """A clone of the source's current content: its newest version
        if it is detached; if attached, a live checkpoint, cloned and
        then forgotten (the clone keeps what it shares with it).
        """
        specs.refuse_encrypted(volume)
        image = self._image_of(src_vref)
        if self._attached_host(src_vref) is None:
            return self._clone(volume, image, None, src_vref.size)
        version = self._snapshot_version(src_vref)['version']
        try:
            return self._clone(volume, image, version, src_vref.size)
        finally:
            self._call(self.storage_host, 'delete_snapshot', image, version)

    def create_volume_from_snapshot(self, volume, snapshot):
        specs.refuse_encrypted(volume)
        image, version = refs.parse_snapshot_id(snapshot.provider_id)
        return self._clone(volume, image, version, snapshot.volume_size)

    def _clone(self, volume, image, version, source_size):
        clone = self._call(self.storage_host, 'clone', image, version,
                           refs.image_name(volume))
        if volume.size > source_size:
            try:
                self._call(self.storage_host, 'extend_image', clone['id'],
                           volume.size * GiB)
            except exception.CinderException:
                self._forget_image(clone['id'])
                raise
        return {'provider_id': clone['id']}

    def _forget_image(self, image):
        try:
            self.api.delete_image(self.storage_host, image)
        except Exception as e:
            LOG.warning('could not delete image %s after a failure: %s',
                        image, e)

    # -- snapshots ---------------------------------------------------------

    def _snapshot_version(self, volume, quiesce=None):
        """A new version with the volume's current content, persisted."""
        result = self._take_version(volume, self._attached_host(volume),
                                    quiesce=quiesce)
        self._wait_stable(result['host'], result['image'], result['version'])
        return result

    def _take_version(self, volume, host, quiesce=None, **group):
        """A new version with the volume's current content, not waited
        for: a checkpoint on ``host`` where it is attached (as a member
        of ``group``, if given; held still in mode ``quiesce``, default
        the volume type's), a copy where it is not (host None).
        """
        image = self._image_of(volume)
        if host is None:
            result = self._call(self.storage_host, 'snapshot', image)
            result.update(host=self.storage_host)
            return result
        quiesce = quiesce or self._quiesce_of(volume)
        started, sent_at = time.monotonic(), time.time()
        # Labelled: the sync service registers only unlabelled
        # checkpoints (the guest's); this one is Cinder's own.
        result = self._call(host, 'checkpoint', image, quiesce=quiesce,
                            rpc_timeout=self.configuration.blobcr_rpc_timeout,
                            label=MADE_BY, **group)
        result.update(host=host, ack_ms=(time.monotonic() - started) * 1e3)
        result.update(_travel_ms(sent_at, time.time(), result))
        return result

    def _quiesce_of(self, volume):
        """How a checkpoint of ``volume`` holds its guest still: as its
        type says, else blobcr_default_quiesce.
        """
        return specs.quiesce_of(volume.volume_type,
                                self.configuration.blobcr_default_quiesce)

    def _take_members(self, host, snapshots, group, members, held=()):
        """[(snapshot, checkpoint)] of ``snapshots``' volumes, all
        attached on ``host``, as members of ``group`` in one call
        (agent API 1.14; each guest released once COMMITted), not
        waited for; all or none. The images in ``held`` were held in
        phase one: the agent fails them if their hold ended meanwhile.
        """
        started, sent_at = time.monotonic(), time.time()
        images = [self._image_of(s.volume) for s in snapshots]
        results = self._call(
            host, 'checkpoint_members',
            [{'image': image, 'quiesce': self._quiesce_of(s.volume),
              'project': s.volume.project_id, 'held': image in held}
             for s, image in zip(snapshots, images)],
            group, members, rpc_timeout=self.configuration.blobcr_rpc_timeout,
            label=MADE_BY)
        ack_ms = (time.monotonic() - started) * 1e3
        answered_at = time.time()
        if [r.get('image') for r in results] != images:
            raise exception.VolumeBackendAPIException(
                data=_('checkpoint_members on %(host)s answered for '
                       '%(got)s, not %(asked)s')
                % {'host': host, 'asked': images,
                   'got': [r.get('image') for r in results]})
        for result in results:
            result.update(host=host, ack_ms=ack_ms)
            result.update(_travel_ms(sent_at, answered_at, result))
        return list(zip(snapshots, results))

    def _wait_stable(self, host, image, version):
        # In slices of blobcr_rpc_timeout: an agent that dies while it
        # waits never answers, and one wait of blobcr_snapshot_timeout
        # would leave the snapshot 'creating' that long. A slice that
        # gets no answer asks the agent's status (an error if it does
        # not answer: it is down) and waits again (it restarted, and
        # its recovery resumes or fails the version).
        timeout = self.configuration.blobcr_snapshot_timeout
        deadline = time.monotonic() + timeout
        while True:
            left = max(1, int(deadline - time.monotonic()))
            piece = min(left, self.configuration.blobcr_rpc_timeout)
            try:
                state = self._call(host, 'wait_stable', image, version,
                                   timeout=piece)
            except exception.VolumeBackendAPIException as e:
                if not isinstance(e.__context__, messaging.MessagingTimeout):
                    raise
                LOG.warning('no answer from %s while waiting for version '
                            '%d of %s: asking whether it is up', host,
                            version, image)
                self._call(host, 'status')
                state = 'pending'
            if state != 'pending' or piece >= left:
                break
        if state == 'failed':
            listed = self._call(self.storage_host, 'list_versions', image)
            reason = next((v['error'] for v in listed['versions']
                           if v['version'] == version), None)
            raise exception.VolumeBackendAPIException(
                data=_('version %(version)d of image %(image)s failed: '
                       '%(reason)s')
                % {'version': version, 'image': image,
                   'reason': reason or _('no reason recorded')})
        if state != 'stable':
            raise exception.VolumeBackendAPIException(
                data=_('version %(version)d of image %(image)s is '
                       '%(state)s after %(timeout)d s, not stable')
                % {'version': version, 'image': image, 'state': state,
                   'timeout': timeout})

    def create_snapshot(self, snapshot):
        result = self._snapshot_version(snapshot.volume,
                                        quiesce=specs.quiesce_asked(snapshot))
        return self._snapshot_model(snapshot, result)

    def _snapshot_model(self, snapshot, result):
        image = result['image']
        listed = self._call(self.storage_host, 'list_versions', image)
        version = next(v for v in listed['versions']
                       if v['version'] == result['version'])
        meta = {'image': image, 'version': version['version'],
                'parent': version['parent'],
                'bytes_written': version['stored_bytes'],
                'chunks_written': version['chunks'],
                'created': refs.iso(version['created'])}
        if version['group']:
            meta['group'] = version['group']['id']
        if version.get('made_by'):
            meta['made_by'] = version['made_by']
        for key in ('host', 'ack_ms', 'served_ms', 'member_ms', 'request_ms',
                    'answer_ms', 'held_ms', 'guest_held_ms', 'downtime_ms',
                    'quiesce', 'group_hold_ms'):
            if result.get(key) is not None:
                meta[key] = result[key]
        if result.get('phases_ms'):
            # Where the agent's part went ("admit=0.4 lookup=0.0 ...",
            # ms): what a slow member of a group snapshot waited behind.
            meta['phases_ms'] = ' '.join(
                '%s=%.1f' % kv for kv in result['phases_ms'].items())
        metadata = dict(snapshot.metadata or {})
        metadata.update({specs.META + k: ('%.1f' % v
                                          if isinstance(v, float) else str(v))
                         for k, v in meta.items()})
        return {'provider_id': refs.version_ref(image, version['version']),
                'metadata': metadata}

    def delete_snapshot(self, snapshot):
        if not snapshot.provider_id:
            return          # its create failed before a version existed
        image, version = refs.parse_snapshot_id(snapshot.provider_id)
        try:
            self.api.delete_snapshot(self.storage_host, image, version)
        except (agent_exception.ImageNotFound,
                agent_exception.VersionNotFound):
            LOG.info('version %d of image %s is already gone', version,
                     image)
        except agent_exception.InvalidInput as e:
            raise exception.SnapshotIsBusy(snapshot_name='%s (%s)'
                                           % (snapshot.name, e))
        except messaging.MessagingTimeout:
            raise self._no_answer('delete_snapshot', snapshot.provider_id)

    def revert_to_snapshot(self, context, volume, snapshot):
        image, version = refs.parse_snapshot_id(snapshot.provider_id)
        if image != self._image_of(volume):
            raise exception.InvalidSnapshot(
                reason=_('snapshot %(snapshot)s is not of volume '
                         '%(volume)s')
                % {'snapshot': snapshot.id, 'volume': volume.id})
        self._call(self.storage_host, 'revert', image, version)
        self._forget_superseded(volume)

    # -- attach ------------------------------------------------------------

    def ensure_export(self, context, volume):
        pass

    def create_export(self, context, volume, connector):
        pass

    def remove_export(self, context, volume):
        pass

    def initialize_connection(self, volume, connector, **kwargs):
        """Attach the image on the connector's host: its agent mirrors it
        and Nova opens the mirror's raw file.
        """
        host = self._agent_for((connector or {}).get('host'))
        if not host:
            raise exception.InvalidConnectorException(
                missing='host (the compute host whose BlobCR agent '
                        'serves the volume)')
        elsewhere = self._attached_host(volume)
        migrate_from = None
        if elsewhere not in (None, host):
            if self._migrating_instance(volume, elsewhere) is None:
                raise exception.VolumeBackendAPIException(
                    data=_('volume %(id)s is attached on %(there)s: a '
                           'BlobCR volume is mirrored on one host at a '
                           'time; only its own instance live-migrating can '
                           'connect it on %(host)s')
                    % {'id': volume.id, 'there': elsewhere, 'host': host})
            # Nova's live migration (pre_live_migration on the
            # destination, the guest still writing on the source): the
            # destination's mirror waits for the source's handoff
            # (blobcr_agent/mirror/handoff.py).
            migrate_from = elsewhere
        instance = next((a.instance_uuid for a in
                         (volume.volume_attachment or [])
                         if a.instance_uuid and
                         a.attach_status != 'detached'), None)
        kind = self.configuration.blobcr_connection_type
        # The type's durability (agent API 1.15), for a live migration's
        # destination too: the mirror started there keeps it.
        attached = self._call(
            host, 'attach', self._image_of(volume), instance=instance,
            project=volume.project_id if instance else None,
            migrate_from=migrate_from, block_device=kind == 'local',
            durability=specs.durability_of(volume.volume_type))
        # 'local': stock Nova's LibvirtVolumeDriver and os-brick's
        # LocalConnector open a block device (the agent's loop device
        # over the mirror file, <disk type='block'>); 'blobcr': Nova's
        # LibvirtBlobCRVolumeDriver and os-brick's BlobCRConnector
        # (blobcr_nova; devstack/patches/ register them); 'gpfs': their
        # GPFS classes, which open the plain file (<disk type='file'>).
        return {'driver_volume_type': kind,
                'data': {'device_path': attached.get('device') or
                         attached['path'],
                         'name': refs.image_name(volume),
                         'blobcr_image': attached['image'],
                         'blobcr_host': host,
                         'blobcr_epoch': attached.get('epoch', 0),
                         'access_mode': 'rw',
                         'discard': False}}

    def terminate_connection(self, volume, connector, **kwargs):
        """Checkpoint what the guest wrote since the last checkpoint,
        then detach: a detached volume's content is its newest version.
        This runs inside Cinder's attachment_delete, an RPC call bounded
        by rpc_response_timeout: the agent returns once the image is off
        its mount and the final checkpoint persists in the background
        (agent API 1.7). Until it is stable every operation on the volume
        (an attach on any host, a snapshot, a clone, a delete) waits for
        it in the agent, bounded by its [agent] settle_timeout.
        """
        host = self._agent_for((connector or {}).get('host')) or \
            self._attached_host(volume)
        if not host:
            LOG.info('volume %s: no host to detach from', volume.id)
            return
        image = self._image_of(volume)
        status = self._probe(volume, host, image)
        if status is None:
            return
        attached = status['attached'].get(image)
        if attached is None:
            return
        if attached.get('dirty', 1):
            self._call(host, 'checkpoint', image, quiesce='none',
                       label=MADE_BY)
        self._call(host, 'detach', image, force=kwargs.get('force', False),
                   background=True)
        self._forget_superseded(volume)

    def _probe(self, volume, host, image):
        """The status of ``host``'s agent before a detach from it, or
        None once the host was given up (its claim fenced, the volume
        its newest stable version). An agent that misses the short probe
        is given up only on evidence that its host is down:

        * an operator fenced it already (``blobcr-manage take-over``:
          the image's epoch moved past the attachment's);
        * Nova reports that host's compute service down or forced down
          (compute_hosts: what Nova's evacuate itself waits for).

        Otherwise it may be slow, not lost (an agent restart, a broker
        failover, Nova's resize or shelve on a live host make the same
        calls as an evacuation): it gets blobcr_retry_probe_timeout more to
        answer (the whole detach must fit in Cinder's RPC timeout, 60 s
        by default), then the detach fails with what to do, and nothing
        is lost. A ``force`` detach follows the same rule.
        """
        try:
            return self.api.status(
                host, timeout=self.configuration.blobcr_alive_probe_timeout)
        except messaging.MessagingTimeout:
            pass
        epoch = self._call(self.storage_host, 'list_versions',
                           image).get('epoch', 0)
        if epoch > self._attached_epoch(volume, host):
            LOG.warning('volume %s: host %s was fenced (image %s epoch %d); '
                        'detached without it', volume.id, host, image, epoch)
            return None
        down = compute_hosts.nova_says_down(host)
        if down:
            # A live migration rolled back with its destination down (Nova
            # deletes the destination's attachment): the guest runs on the
            # source, which holds the image, and a take-over, image-wide,
            # would fence it there. Only that source agent's own word
            # spares the take-over: the records alone would let a stale or
            # forged attachment leave a dead writer unfenced (both hosts'
            # records read 'attached' during a migration).
            holder = self._live_holder(volume, host, image)
            if holder:
                LOG.warning('volume %s: host %s is down (%s) but the image '
                            'is attached and written on %s: detached '
                            'without taking it over', volume.id, host, down,
                            holder)
                return None
            self._give_up_host(volume, host, image, down)
            return None
        try:
            return self.api.status(
                host, timeout=self.configuration.blobcr_retry_probe_timeout)
        except messaging.MessagingTimeout:
            raise exception.VolumeBackendAPIException(
                data=_('the BlobCR agent of host %(host)s does not answer '
                       'and Nova does not report that host down: volume '
                       '%(volume)s stays attached there, nothing was lost; '
                       'try again once the agent answers. If the host is '
                       'lost, have Nova report it down (openstack compute '
                       'service set --down) or run "blobcr-manage '
                       'take-over %(image)s", then detach again (the '
                       'writes since its last stable version are lost)')
                % {'host': host, 'volume': volume.id, 'image': image})

    def _live_holder(self, volume, host, image):
        """The other host whose agent itself says it holds ``image``
        attached for the instance ``host``'s attachment was for: not
        arriving by a handoff, or arrived (the handoff done: the guest
        runs there); None if no candidate holds it. Candidates are the
        hosts of the volume's other attachments of that instance (read
        from the database, as _attached_epoch). A candidate that does
        not answer fails the detach: it may be the live writer, slow or
        restarting, and a take-over would fence its guest.
        """
        records = objects.VolumeAttachmentList.get_all_by_volume_id(
            cinder_context.get_admin_context(), volume.id)
        mine = {a.instance_uuid for a in records
                if a.attached_host and self._agent_for(a.attached_host) ==
                host}
        others = sorted({
            self._agent_for(a.attached_host) for a in records
            if a.attach_status == 'attached' and a.attached_host and
            a.instance_uuid in mine and
            self._agent_for(a.attached_host) != host})
        silent = []
        for other in others:
            try:
                attached = self.api.status(
                    other,
                    timeout=self.configuration.blobcr_alive_probe_timeout
                ).get('attached', {})
            except messaging.MessagingTimeout:
                silent.append(other)
                continue
            held = attached.get(image)
            incoming = held.get('incoming') if held is not None else None
            if held is not None and (not incoming or incoming.get('done')):
                return other
        if silent:
            raise exception.VolumeBackendAPIException(
                data=_('host %(host)s is down, but the BlobCR agent of '
                       '%(other)s, where the same instance has volume '
                       '%(volume)s attached too, does not answer: it may be '
                       'the one writing it, so %(host)s is not taken over; '
                       'nothing was lost. Try again once it answers, or '
                       'run "blobcr-manage take-over %(image)s" if no guest '
                       'writes the volume any more') % {
                    'host': host, 'other': ', '.join(silent),
                    'volume': volume.id, 'image': image})
        return None

    def _give_up_host(self, volume, host, image, why):
        """Fence ``host``'s claim on the volume (Repository.take_over:
        its agent, if it comes back, can publish nothing): the volume
        becomes its newest stable version.
        """
        taken = self._call(self.storage_host, 'take_over', image,
                           'detach from %s: %s, and its agent does not '
                           'answer' % (host, why))
        LOG.warning('volume %s: host %s given up (%s); the volume is '
                    'version %s of image %s (epoch %d)', volume.id, host,
                    why, taken['version'], image, taken['epoch'])

    def _attached_epoch(self, volume, host):
        """The image epoch the attachment on ``host`` was made in (its
        connection info; 0 for attachments made before it was kept).
        """
        for a in objects.VolumeAttachmentList.get_all_by_volume_id(
                cinder_context.get_admin_context(), volume.id):
            if self._agent_for(a.attached_host) == host and \
                    a.connection_info:
                info = a.connection_info
                if isinstance(info, str):
                    info = jsonutils.loads(info)
                return (info.get('data') or {}).get('blobcr_epoch', 0)
        return 0

    def _forget_superseded(self, volume):
        """Obsolete the versions the driver made only to hold a detached
        volume's content (a detach's last checkpoint, a revert, a copy
        kept for a deleted snapshot) once a newer stable version holds
        it, so that attach/detach cycles do not keep every old state.
        Snapshots, guest checkpoints and clones' origins are kept (GC
        keeps what clones share anyway). Skipped while a snapshot of the
        volume is being made: its version is not in Cinder's records yet.
        """
        image = self._image_of(volume)
        ctxt = cinder_context.get_admin_context()
        snapshots = objects.SnapshotList.get_all_for_volume(ctxt, volume.id)
        if any(s.status == 'creating' for s in snapshots):
            return
        kept = {s.provider_id for s in snapshots}
        try:
            listed = self.api.list_versions(self.storage_host, image)
            # The head is the volume's content; it is the version that
            # turned stable last, not the highest number. An agent that
            # does not name it gets nothing obsoleted.
            head = listed.get('head')
            if head is None:
                return
            old = [v['version'] for v in listed['versions']
                   if v['state'] == 'stable' and v['version'] != head
                   and v['made_by'] in SUPERSEDED and not v['clones']
                   and refs.version_ref(image, v['version']) not in kept]
            if old:
                self.api.obsolete(self.storage_host, image, old)
                LOG.info('volume %s: versions %s of image %s superseded',
                         volume.id, old, image)
        except Exception as e:
            # Only space: the next detach or revert tries again.
            LOG.warning('volume %s: could not obsolete superseded versions '
                        'of image %s: %s', volume.id, image, e)

    # -- types -------------------------------------------------------------

    def retype(self, context, volume, new_type, diff, host):
        """Change a volume's type in place. Cinder asks only when the
        new type stays on this backend and adds no encryption; no data
        moves. ``blobcr:quiesce`` is read at each snapshot, so it takes
        effect at the next one. ``blobcr:durability`` is the mirror's,
        chosen when it starts: an attached volume keeps its durability
        until it is attached again (a detach and attach, or a live
        migration to another host); a detached one takes the new one at
        its next attach. Whether the store keeps ``cluster`` (not the
        local store) only the agent knows: an attach there is refused.
        An invalid BlobCR spec fails the retype (InvalidVolumeType) and
        the volume keeps its type.
        """
        specs.checked(new_type)
        specs.refuse_encrypted(new_type_diff=diff)
        LOG.info('volume %s retyped in place to %s', volume.id,
                 new_type.get('name'))
        return True, None

    # -- images ------------------------------------------------------------

    def copy_image_to_encrypted_volume(self, context, volume, image_service,
                                       image_id):
        # The inherited one runs os-brick's LUKS encryptor over the
        # agent's device link (specs.refuse_encrypted).
        specs.refuse_encrypted(volume)
        raise exception.InvalidVolumeType(
            reason=_('BlobCR does not support encrypted volumes yet'))

    def copy_image_to_volume(self, context, volume, image_service, image_id,
                             disable_sparse=False):
        """Glance image -> raw file in the exchange directory (qemu-img,
        not as root) -> a new version of the volume's image (only the
        chunks that are not zero are written).
        """
        with self._exchange_path(volume, 'import') as path:
            image_utils.fetch_to_raw(
                context, image_service, image_id, path,
                self.configuration.volume_dd_blocksize, size=volume.size,
                run_as_root=False, disable_sparse=disable_sparse)
            self._call(self.storage_host, 'import_file',
                       self._image_of(volume), path)

    def copy_volume_to_image(self, context, volume, image_service,
                             image_meta):
        """Upload the volume's newest stable version; an attached volume
        (``--force``, which cinder-api allows when enable_force_upload is
        set) first gets a live checkpoint on its host, and that version is
        uploaded: what the guest had written when the upload was asked.
        """
        image = self._image_of(volume)
        version = None
        if self._attached_host(volume):
            version = self._snapshot_version(volume)['version']
            LOG.info('volume %s is attached: uploading its live checkpoint, '
                     'version %d of image %s', volume.id, version, image)
        with self._exchange_path(volume, 'export') as path:
            self._call(self.storage_host, 'export', image, version, path,
                       timeout=self.configuration.blobcr_snapshot_timeout)
            image_utils.upload_volume(context, image_service, image_meta,
                                      path, run_as_root=False)

    @contextlib.contextmanager
    def _exchange_path(self, volume, what):
        """A new file's path in the directory shared with the agent of
        blobcr_agent_host (made if missing); the file is removed after.
        """
        import os  # the only file work of the driver
        directory = self.configuration.blobcr_exchange_dir
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, '%s-%s-%d.raw' % (
            what, volume.id, time.time_ns()))
        try:
            yield path
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    # -- stats -------------------------------------------------------------

    def _update_volume_stats(self):
        backend_name = self.configuration.safe_get('volume_backend_name')
        stats = {
            'volume_backend_name': backend_name or 'BlobCR',
            'vendor_name': 'BlobCR for OpenStack',
            'driver_version': self.VERSION,
            'storage_protocol': self.STORAGE_PROTOCOL,
            'total_capacity_gb': 'unknown',
            'free_capacity_gb': 'unknown',
            'reserved_percentage':
                self.configuration.safe_get('reserved_percentage') or 0,
            'thin_provisioning_support': True,
            'thick_provisioning_support': False,
            'max_over_subscription_ratio':
                self.configuration.safe_get('max_over_subscription_ratio'),
            'multiattach': False,
            # A new volume reads zeros where never written: Cinder's
            # generic migration copies only what is not zero.
            'sparse_copy_volume': True,
            'online_extend_support': False,
            'consistent_group_snapshot_enabled': True,
            'backend_state': 'down',
        }
        try:
            room = self.api.capacity(self.storage_host)
        except Exception as e:
            LOG.warning('BlobCR capacity of %s unknown: %s',
                        self.storage_host, e)
        else:
            stats.update(
                total_capacity_gb=round(room['total_bytes'] / GiB, 2),
                free_capacity_gb=round(room['free_bytes'] / GiB, 2),
                provisioned_capacity_gb=round(
                    room['provisioned_bytes'] / GiB, 2),
                location_info=room['backend'],
                # What a lost compute host could lose at most (the age of
                # the oldest newest-stable-version of an attached volume).
                blobcr_max_exposure_s=room.get('max_exposure_s'),
                backend_state='up')
        self._stats = stats
