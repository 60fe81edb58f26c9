"""The agent's operations: what RPC, the admin socket and the guest
endpoint all call.

One AgentManager per host owns the mirror (attached images), the
instance table and the libvirt connection. A checkpoint holds the guest
still (none, fsfreeze or suspend), takes the snapshot (COMMIT) and
resumes it; the version is persisted in the background.
"""

import logging
import os
import threading
import time

from blobcr_agent import exception
from blobcr_agent.hypervisor import domains
from blobcr_agent.hypervisor import timed_hold
from blobcr_agent import instances as instances_mod
from blobcr_agent.mirror import service as service_mod
from blobcr_agent.repository import gc
from blobcr_agent.repository import groups
from blobcr_agent.repository import image as image_mod
from blobcr_agent.repository import treeview

LOG = logging.getLogger(__name__)

# Every operation that RPC and the admin socket expose.
OPERATIONS = ('attach', 'detach', 'checkpoint', 'state', 'wait_stable',
              'clone', 'list_versions', 'obsolete', 'gc', 'status',
              'export', 'group_state', 'create_image', 'delete_image',
              'extend_image', 'snapshot', 'revert', 'import_file',
              'capacity', 'delete_snapshot', 'handoff')
# A handoff asked to wait for the guest to stop waits this long at most
# per call (the destination asks again).
HANDOFF_WAIT_MAX = 10.0
HANDOFF_LABEL = 'migrate'


def _version_dict(v):
    return {'version': v.number, 'state': v.state, 'parent': v.parent,
            'created': v.created, 'stable_at': v.stable_at,
            'chunks': v.chunks, 'stored_bytes': v.stored_bytes,
            'error': v.error or None, 'group': v.group,
            'made_by': v.made_by or None,
            'clones': [c['image'] for c in v.clones]}


class AgentManager(object):

    def __init__(self, repo, state_path, mountpoint, host,
                 mirror_mode='selective-cow', cow_chunks=64,
                 quiesce='suspend', hypervisor=None):
        if quiesce not in domains.QUIESCE_MODES:
            raise exception.InvalidInput('unknown quiesce mode %r'
                                         % (quiesce,))
        self.repo = repo
        self.host = host
        self.state_path = os.path.abspath(state_path)
        os.makedirs(self.state_path, mode=0o700, exist_ok=True)
        self.mirror = service_mod.MirrorService(
            repo, mountpoint, os.path.join(self.state_path, 'cache'),
            mode=mirror_mode, cow_chunks=cow_chunks)
        self.instances = instances_mod.InstanceTable(
            os.path.join(self.state_path, 'instances.json'))
        self.default_quiesce = quiesce
        self.hypervisor = hypervisor
        self.holds = timed_hold.HoldTable()
        self._handoff_lock = threading.Lock()
        self.started = time.time()
        self.proxy_url = None

    @classmethod
    def from_conf(cls, conf, repo, hypervisor=None):
        if hypervisor is None:
            hypervisor = domains.Hypervisor(conf.agent.libvirt_uri)
        manager = cls(repo, conf.agent.state_path, conf.agent.mountpoint,
                      conf.agent.host, mirror_mode=conf.agent.mirror_mode,
                      cow_chunks=conf.agent.cow_chunks,
                      quiesce=conf.agent.quiesce, hypervisor=hypervisor)
        manager.mirror.handoff_timeout = conf.agent.handoff_timeout
        return manager

    # -- attach / detach -----------------------------------------------

    def set_peers(self, peers):
        """``peers``: the RPC client (rpc.api.AgentAPI) this agent asks
        other hosts' agents with (the handoff of a live migration).
        """
        self.mirror.handoff_asker = lambda source, image, wait, timeout: \
            peers.handoff(source, image, self.host, wait=wait,
                          rpc_timeout=timeout)

    def attach(self, image, version=None, instance=None, project=None,
               migrate_from=None):
        """Mirror ``image`` (from ``version``, default its newest stable
        one) and return the raw file the hypervisor opens. ``instance``
        is bound to the image once it is attached (a failed attach binds
        nothing), with its ``project`` (the scope of its groups).
        ``migrate_from``: the host the image is live-migrated from, where
        it is still attached and written; it is attached here incoming
        (mirror/handoff.py) and takes that host's last version when the
        guest starts here.
        """
        header = self.repo.image(image)
        if project is not None and instance is None:
            raise exception.InvalidInput('a project goes with an instance')
        groups.check_project(project)
        if instance is not None:
            self._check_binding(instance, header.id)
        if migrate_from is not None and (
                migrate_from == self.host or version is not None or
                not isinstance(migrate_from, str)):
            raise exception.InvalidInput(
                'an image migrates from another host, from its newest '
                'state (migrate_from %r, version %r)'
                % (migrate_from, version))
        was_attached = header.id in self.mirror.attached
        path = self.mirror.attach(header.id, version=version,
                                  incoming_from=migrate_from)
        if instance is not None:
            try:
                self.instances.bind(instance, header.id, project)
            except BaseException:
                if not was_attached:
                    self._undo_attach(header.id)
                raise
        attached = self.mirror.attached[header.id]
        return {'image': header.id, 'name': header.name, 'path': path,
                'version': attached.attached_version,
                'size': header.size}

    def _check_binding(self, instance, image_id):
        """Refuse, before attaching, what InstanceTable.bind would."""
        if not isinstance(instance, str) or not 0 < len(instance) <= 64:
            raise exception.InvalidInput('an instance id is 1-64 characters')
        other = self.instances.image_of(instance)
        if other not in (None, image_id):
            raise exception.InvalidInput(
                'instance %s already uses image %s' % (instance, other))

    def _undo_attach(self, image_id):
        try:
            self.mirror.detach(image_id, discard=True)
        except Exception as e:
            LOG.error('could not undo the attach of %s: %s', image_id, e)

    def detach(self, image, discard=False, force=False):
        """Stop mirroring ``image``. Refused while an active domain uses
        it, unless ``force``; and while writes since the last checkpoint
        exist, unless ``discard``.
        """
        header = self.repo.image(image)
        if not force and header.id in self.mirror.attached:
            self._refuse_if_in_use(header.id)
        result = self.mirror.detach(header.id, discard=discard)
        self.instances.unbind_image(header.id)
        return result

    def _refuse_if_in_use(self, image_id):
        try:
            domain = self._domain(image_id)
        except exception.BackendUnavailable as e:
            # libvirt is down (or not on this host): nothing to ask.
            LOG.warning('cannot ask libvirt whether a domain uses %s (%s): '
                        'detaching anyway', image_id, e)
            return
        if domain is not None:
            raise exception.InvalidInput(
                'domain %s is running on image %s; stop it or detach with '
                'force' % (domain.name(), image_id))

    def handoff(self, image, dest, wait=0):
        """A live migration of ``image`` to host ``dest``: once no guest
        runs on it here, commit what is left, detach it and return
        ``{'version': N}``, the version that holds every write made here
        (the destination's base, mirror/handoff.py). While a guest still
        runs on it (waited for up to ``wait`` s): ``{'running': True}``.
        BackendUnavailable while libvirt cannot tell whether one runs.
        An image not attached here: its newest stable version (handed
        off already, or released by Cinder), refused if it was handed
        off to another host; with a cache here that a restart did not
        re-attach, the image is attached again first (refused if that
        fails: its last writes are only in that cache).
        """
        header = self.repo.image(image)
        if not isinstance(dest, str) or not dest or dest == self.host:
            raise exception.InvalidInput('a handoff goes to another host')
        deadline = time.monotonic() + max(0.0, min(float(wait or 0),
                                                   HANDOFF_WAIT_MAX))
        with self._handoff_lock:
            if header.id not in self.mirror.attached:
                if not self.mirror.cached(header.id):
                    return self._handed_off(header, dest)
                LOG.warning('handoff of %s to %s: attaching it from its '
                            'cache first', header.id, dest)
                self.mirror.attach(header.id)
            while True:
                running = self._guest_running(header.id)
                if running is False:
                    break
                if time.monotonic() >= deadline:
                    if running is None:
                        raise exception.BackendUnavailable(
                            'cannot tell whether a guest still runs on '
                            'image %s on %s (libvirt does not answer): not '
                            'handing it off yet' % (header.id, self.host))
                    return {'image': header.id, 'running': True}
                time.sleep(0.05)
            started = time.monotonic()
            result = self.checkpoint(header.id, quiesce='none',
                                     label=HANDOFF_LABEL)
            version = result['version']
            self.mirror.wait_stable(header.id, version)
            # The guest is stopped (or gone): its domain may still hold
            # the file open, paused after the migration.
            self.detach(header.id, force=True)
            self.mirror.handed_off[header.id] = dest
        LOG.info('handed %s off to %s at version %s (%d chunks, %.1f ms)',
                 header.id, dest, version, result['chunks'],
                 (time.monotonic() - started) * 1000)
        return {'image': header.id, 'running': False, 'version': version,
                'chunks': result['chunks']}

    def _guest_running(self, image_id):
        """Whether a domain runs (not paused, not off) on the image;
        None when libvirt cannot tell.
        """
        try:
            domain = self._domain(image_id)
            return domain is not None and self.hypervisor.is_running(domain)
        except exception.BackendUnavailable as e:
            LOG.warning('cannot ask libvirt whether a guest runs on %s: %s',
                        image_id, e)
            return None

    # -- checkpoint --------------------------------------------------------

    def _domain(self, image_id):
        """The active domain that uses the image's mirror file, or None;
        BackendUnavailable if libvirt cannot tell.
        """
        if self.hypervisor is None:
            return None
        return self.hypervisor.domain_for(self.mirror.path_of(image_id))

    def _hold(self, image_id, mode, explicit):
        """(context manager, mode used) that keeps the guest still."""
        if mode == 'none':
            return None, 'none'
        domain = self._domain(image_id)
        if domain is None:
            if explicit:
                raise exception.InvalidInput(
                    'no running domain uses image %s: cannot %s'
                    % (image_id, mode))
            # Attached but not used by a VM (yet): nothing to hold still.
            LOG.info('no running domain uses %s: checkpoint without %s '
                     '(the configured quiesce mode)', image_id, mode)
            return None, 'none'
        return self.hypervisor.quiesced(domain, mode), mode

    def checkpoint(self, image, quiesce=None, group=None, members=None,
                   project=None, creator='operator', label=None):
        """Hold the guest still, COMMIT, resume; returns as soon as the
        snapshot is taken (the version is ``pending`` until persisted).

        ``quiesce`` asked for explicitly (fsfreeze, suspend) needs a
        running domain on the image; the configured default falls back
        to none when no domain uses it. ``group`` is one of ``project``'s
        (None: the scope of callers without a project); ``creator`` is
        recorded by the group's first member. ``label`` marks the version
        as made by its caller for its own use (Version.made_by: the Cinder
        driver's checkpoints are its snapshots or a detached volume's
        content, not checkpoints for Cinder to register); unlabelled
        checkpoints (the guest's) cost no header update here.
        """
        mode = self._mode(quiesce)
        if (group is None) != (members is None):
            raise exception.InvalidInput('group and members go together')
        if group is not None:
            groups.admit(self.repo, group, members, project)
        image_id = self.repo.image(image).id
        self.mirror.get(image_id)               # attached here?
        hold, used = self._hold(image_id, mode, explicit=bool(quiesce))
        result = self.mirror.checkpoint(image_id, hold)
        result['quiesce'] = used
        if group is not None:
            groups.tag(self.repo, image_id, result['version'], group,
                       members, project=project, creator=creator)
            result['group'] = group
        if label:
            self.repo.label(image_id, result['version'], label)
        return result

    def hold(self, image, quiesce=None, timeout=60):
        """Phase one of a group checkpoint across hosts: hold the guest
        of ``image`` still until release(image), or ``timeout`` seconds
        (hypervisor/timed_hold.py). A checkpoint in the same mode joins
        the hold. Without a domain to hold (or mode none) nothing is
        held, as a checkpoint would hold nothing either.
        """
        mode = self._mode(quiesce)
        image_id = self.repo.image(image).id
        self.mirror.get(image_id)               # attached here?
        context, used = self._hold(image_id, mode, explicit=bool(quiesce))
        if context is None:
            return {'image': image_id, 'quiesce': used, 'held': False}
        self.holds.hold(image_id, context, timeout)
        return {'image': image_id, 'quiesce': used, 'held': True}

    def release(self, image):
        image_id = self.repo.image(image).id
        held = self.holds.release(image_id)
        if held is None:
            return {'image': image_id, 'released': False}
        return {'image': image_id, 'released': True,
                'held_ms': held.held_ms, 'expired': held.expired}

    def _mode(self, quiesce):
        mode = quiesce or self.default_quiesce
        if mode not in domains.QUIESCE_MODES:
            raise exception.InvalidInput('quiesce mode must be one of %s'
                                         % ', '.join(domains.QUIESCE_MODES))
        return mode

    def state(self, image, version):
        image_id = self.repo.image(image).id
        if image_id in self.mirror.attached:
            return self.mirror.state(image_id, version)
        return self.repo.image(image_id).version(version).state

    def wait_stable(self, image, version, timeout=600):
        image_id = self.repo.image(image).id
        if image_id in self.mirror.attached:
            return self.mirror.wait_stable(image_id, version, timeout)
        return self.state(image_id, version)

    def group_state(self, group, project=None):
        return groups.state(self.repo, group, project)

    # -- repository operations ------------------------------------------

    def clone(self, image, version=None, name=None):
        return treeview.summary(self.repo.clone(image, version, name))

    def list_versions(self, image):
        header = self.repo.image(image)
        head = header.head()
        return {'image': header.id, 'name': header.name,
                'origin': header.origin,
                'head': head.number if head else None,
                'versions': [_version_dict(v) for v in header.versions]}

    def label(self, image, version, made_by):
        if not isinstance(made_by, str) or not 0 < len(made_by) <= 64:
            raise exception.InvalidInput('a label is 1-64 characters')
        self.repo.label(image, version, made_by)
        return self._version_of(self.repo.image(image).id, version)

    def obsolete(self, image, versions):
        self.repo.obsolete(image, versions)
        return self.list_versions(image)

    # -- volumes (the Cinder driver's calls, on detached images) ---------

    def create_image(self, name, size, chunk_size=None):
        """A blank volume: an image whose version 1 is all zeros, so
        that it can be snapshotted and cloned before anything is written.
        """
        header = self.repo.create_image(name, size, chunk_size=chunk_size)
        self.repo.commit(header.id, {})
        return treeview.summary(self.repo.image(header.id))

    def delete_image(self, image):
        header = self.repo.image(image)
        if header.id in self.mirror.attached:
            raise exception.InvalidInput('image %s is attached on %s: '
                                         'detach it first'
                                         % (header.id, self.host))
        self.repo.delete_image(header.id)
        return {'image': header.id, 'deleted': True}

    def extend_image(self, image, size):
        return treeview.summary(self.repo.extend(image, size))

    def _attached_hosts(self, header):
        """The hosts whose mirror holds the image (pins name them; this
        host's own attachment may not have pinned anything yet).
        """
        hosts = {p.get('host') for v in header.versions for p in v.pins}
        if header.id in self.mirror.attached:
            hosts.add(self.host)
        return sorted(hosts)

    def _refuse_if_attached(self, header, what):
        """A detached image's content is its newest stable version; an
        attached one's is in the mirror of the host that pins it.
        """
        hosts = self._attached_hosts(header)
        if hosts:
            raise exception.InvalidInput(
                'image %s is attached (on %s): %s'
                % (header.id, ', '.join(hosts), what))

    def list_images(self):
        """Every image with its versions and the hosts it is attached
        on: what the Cinder driver offers to manage.
        """
        return [dict(treeview.summary(h), attached_on=self._attached_hosts(h),
                     versions=[_version_dict(v) for v in h.versions])
                for h in self.repo.images()]

    def snapshot(self, image):
        """A new version of a detached image equal to its current
        content, sharing every chunk. An attached image is checkpointed
        instead, by the agent of its host.
        """
        header = self.repo.image(image)
        self._refuse_if_attached(header, 'checkpoint it on that host')
        number = self.repo.commit_copy(header.id, made_by='snapshot')
        return self._version_of(header.id, number)

    def revert(self, image, version):
        """Make a detached image's content equal to ``version`` again:
        a new version sharing its tree; later versions stay.
        """
        header = self.repo.image(image)
        self._refuse_if_attached(header, 'detach it before reverting it')
        number = self.repo.commit_copy(header.id, version, made_by='revert')
        return self._version_of(header.id, number)

    def delete_snapshot(self, image, version):
        """Obsolete ``version`` without losing the image's content: if it
        is the newest version (the content of the image detached, or the
        base its mirror builds on), a copy of it takes its place first.
        Clones and other versions keep what they share with it.
        """
        header = self.repo.image(image)
        v = header.version(version)
        # The copy turns stable now, so it is the head until a version
        # that turns stable later (a checkpoint in flight or registered
        # ahead, whatever its number) holds newer content.
        if header.head() is v:
            self.repo.commit_copy(header.id, v.number, made_by='kept')
        self.repo.obsolete(header.id, [v.number])
        return self.list_versions(header.id)

    def import_file(self, image, path):
        """A new version of a detached image with the content of the raw
        file ``path`` on this host (the RPC endpoint holds it to
        ``[agent] export_dir``).
        """
        if not isinstance(path, str) or not os.path.isabs(path):
            raise exception.InvalidInput('import needs an absolute path')
        header = self.repo.image(image)
        self._refuse_if_attached(header, 'detach it before writing it')
        number = self.repo.write_file(header.id, path, made_by='import')
        return self._version_of(header.id, number)

    def _version_of(self, image_id, number):
        return dict(_version_dict(self.repo.image(image_id).version(number)),
                    image=image_id)

    def capacity(self):
        """The store's room for data, and what its images provision."""
        result = self.repo.backend.capacity()
        images = self.repo.images()
        result.update(provisioned_bytes=sum(h.size for h in images),
                      images=len(images),
                      backend=self.repo.backend.describe())
        return result

    def gc(self, grace=None, pending_timeout=None):
        return gc.collect(self.repo, grace=grace,
                          pending_timeout=pending_timeout).as_dict()

    def export(self, image, version, path, timeout=600, overwrite=False):
        """Write ``image@version`` to ``path`` (absolute, on this host),
        waiting for the version to be persisted first. An existing
        ``path`` is replaced only with ``overwrite``. Any path: RPC
        callers are held to ``[agent] export_dir`` by the RPC endpoint.
        """
        if not isinstance(path, str) or not os.path.isabs(path):
            raise exception.InvalidInput('export needs an absolute path')
        if not overwrite and os.path.lexists(path):
            raise exception.InvalidInput(
                '%s exists; export with overwrite to replace it' % path)
        header = self.repo.image(image)
        if version is None:
            version = header.stable_version().number
        state = self.wait_stable(header.id, version, timeout)
        if state != image_mod.STABLE:
            raise exception.VersionNotStable(header.id, version, state)
        number = self.repo.export(header.id, version, path,
                                  overwrite=overwrite)
        return {'image': header.id, 'version': number, 'path': path,
                'size': header.size}

    def status(self):
        attached = {}
        for image_id, a in list(self.mirror.attached.items()):
            attached[image_id] = dict(
                a.stats(), path=self.mirror.path_of(image_id),
                attached_version=a.attached_version,
                instances=self.instances.instances_of(image_id))
        return {'host': self.host, 'uptime': time.time() - self.started,
                'mountpoint': self.mirror.mountpoint,
                'backend': self.repo.backend.describe(),
                'proxy': self.proxy_url,
                'default_quiesce': self.default_quiesce,
                'attached': attached}

    # -- the guest endpoint's view -----------------------------------------

    def project_of(self, instance):
        """The project of an instance hosted here: its binding's (an
        attach that named the instance says it all, None included), else
        its Nova domain's metadata. Raises BackendUnavailable when an
        unbound instance's project cannot be read from libvirt: a guest
        must not fall into the scope of callers without a project.
        """
        if self.instances.image_of(instance) is not None:
            return self.instances.project_of(instance)
        if self.hypervisor is None:
            return None
        return self.hypervisor.instance_project(instance)

    def resolve(self, instance):
        """The image an instance hosted here checkpoints, or None."""
        image_id = self.instances.image_of(instance)
        if image_id is not None and image_id in self.mirror.attached:
            return image_id
        if self.hypervisor is None:
            return None
        try:
            disks = self.hypervisor.instance_disks(instance)
        except exception.BackendUnavailable as e:
            LOG.warning('cannot ask libvirt about %s: %s', instance, e)
            return None
        if not disks:
            return None
        for image_id in list(self.mirror.attached):
            path = self.mirror.path_of(image_id)
            # The mount's real path, not a lookup of every mirror file.
            if os.path.join(os.path.realpath(os.path.dirname(path)),
                            os.path.basename(path)) in disks:
                return image_id
        return None

    # -- lifetime --------------------------------------------------------

    def wait_persists(self, timeout):
        """Wait for every background persist; the images still
        persisting after ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        left = []
        for image_id, a in list(self.mirror.attached.items()):
            if not a.wait_persisted(max(0, deadline - time.monotonic())):
                left.append(image_id)
        return left

    def _handed_off(self, header, dest):
        """The answer to a handoff of an image not attached (nor cached)
        here: its newest stable version, unless it went to another host.
        """
        went_to = self.mirror.handed_off.get(header.id)
        if went_to not in (None, dest):
            raise exception.InvalidInput(
                'image %s was handed off to %s already: it cannot go to %s '
                'too' % (header.id, went_to, dest))
        return {'image': header.id, 'running': False,
                'version': header.stable_version().number}
