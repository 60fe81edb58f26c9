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

"""The agent's operations: what RPC, the admin socket and the guest
endpoint all call.

One AgentManager per host owns the mirror (attached images), the
instance table and the libvirt connection. A checkpoint holds the guest
still (none, fsfreeze or suspend), takes the snapshot (COMMIT) and
resumes it; the version is persisted in the background.

:class:`AgentManager` is the facade; each concern is a module of its
own: attachments (attach, detach), checkpoints (checkpoints, holds,
version states), member_batches (a host's members of a group
checkpoint, one call per phase), handoff (the source side of a live
migration), volumes (versions and the Cinder driver's calls), status
(the agent's status and the guest endpoint's view); collector runs
garbage collection, protection the background protection checkpoints.

May import: the mirror, the repository, the hypervisor and the instance
table; never the RPC server, the admin socket or the guest endpoint,
which call it.
"""

import os
import threading
import time

from blobcr_agent.hypervisor import domains
from blobcr_agent.hypervisor import timed_hold
from blobcr_agent import instances as instances_mod
from blobcr_agent.manager.attachments import Attachments
from blobcr_agent.manager import budget
from blobcr_agent.manager.checkpoints import Checkpoints
from blobcr_agent.manager import collector as collector_mod
from blobcr_agent.manager.handoff import Handoff
from blobcr_agent.manager import loopdevs
from blobcr_agent.manager.member_batches import MemberBatches
from blobcr_agent.manager import protection
from blobcr_agent.manager.status import Status
from blobcr_agent.manager import tagger as tagger_mod
from blobcr_agent.manager.volumes import Volumes
from blobcr_agent.mirror import service as service_mod
from blobcr_common import exception

# Every operation that RPC and the admin socket expose.
OPERATIONS = ('attach', 'detach', 'checkpoint', 'state', 'wait_stable',
              'clone', 'list_versions', 'obsolete', 'gc', 'status',
              'export', 'group_state', 'create_image', 'delete_image',
              'extend_image', 'snapshot', 'revert', 'import_file',
              'capacity', 'delete_snapshot', 'handoff', 'take_over')


class AgentManager(Attachments, Handoff, Checkpoints, MemberBatches, Volumes,
                   Status):

    def __init__(self, repo, state_path, mountpoint, host,
                 mirror_mode='selective-cow', cow_chunks=64,
                 cow_spill_mb=0, cache_reserve_mb=64, quiesce='suspend',
                 hypervisor=None,
                 gc_interval=0, settle_timeout=45.0, protect_interval=0,
                 protect_dirty_bytes=0, readahead_chunks=64,
                 delta_tracking_mb=64, restart_hints=True,
                 upload_ahead=0.0, durability='', flush_timeout=0.0,
                 guest_checkpoints_kept=0, guest_groups_kept=0,
                 guest_budget=None, guest_groups_per_project=0):
        if quiesce not in domains.QUIESCE_MODES:
            raise exception.InvalidInput('unknown quiesce mode %r'
                                         % (quiesce,))
        self.repo = repo
        self.host = host
        self.state_path = os.path.abspath(state_path)
        os.makedirs(self.state_path, mode=0o700, exist_ok=True)
        self.mirror = service_mod.MirrorService(
            repo, mountpoint, os.path.join(self.state_path, 'cache'),
            mode=mirror_mode, cow_chunks=cow_chunks,
            cow_spill_mb=cow_spill_mb, cache_reserve_mb=cache_reserve_mb,
            readahead_chunks=readahead_chunks,
            delta_tracking_mb=delta_tracking_mb,
            restart_hints=restart_hints, upload_ahead=upload_ahead,
            durability=durability, flush_timeout=flush_timeout)
        self.instances = instances_mod.InstanceTable(
            os.path.join(self.state_path, 'instances.json'))
        # Block devices over mirror files, for stock Nova's 'local'
        # connections (attach(block_device=True)).
        self.loops = loopdevs.LoopDevices(
            self.state_path, os.path.join(self.mirror.mountpoint, 'images'))
        self.default_quiesce = quiesce
        self.hypervisor = hypervisor
        self.holds = timed_hold.HoldTable()
        # Started by the agent (cmd/agent.py); kicked by deletes.
        self.collector = collector_mod.Collector(repo, gc_interval)
        # How long an operation on a detached image waits for a
        # background detach's last versions (Volumes.settle).
        self.settle_timeout = settle_timeout
        self.mirror.busy_detach_timeout = settle_timeout
        # Started by the agent too: background protection checkpoints.
        self.protector = protection.Protector(self, protect_interval,
                                              protect_dirty_bytes)
        # Guest checkpoints kept per image (0: all); how many obsoleted.
        self.guest_checkpoints_kept = guest_checkpoints_kept
        self.guest_groups_kept = guest_groups_kept
        self.guest_retired = 0
        # Their budgets (manager/budget.py) and the groups a project's
        # guests may make (repository/groups.py, count_new).
        self.guest_budget = guest_budget or budget.GuestBudget()
        self.guest_groups_per_project = guest_groups_per_project
        # The projects' counts across hosts (started by the agent).
        self.usage_publisher = budget.Publisher(self)
        # Group tags of guests' checkpoints, after their ack.
        self.tagger = tagger_mod.GroupTagger(repo)
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
                      cow_spill_mb=conf.agent.cow_spill_mb,
                      cache_reserve_mb=conf.agent.cache_reserve_mb,
                      readahead_chunks=conf.agent.readahead_chunks,
                      delta_tracking_mb=conf.agent.delta_tracking_mb,
                      restart_hints=conf.agent.restart_hints,
                      upload_ahead=conf.agent.upload_ahead_interval,
                      durability=conf.agent.durability,
                      flush_timeout=conf.agent.flush_timeout,
                      quiesce=conf.agent.quiesce, hypervisor=hypervisor,
                      gc_interval=conf.repository.gc_interval,
                      settle_timeout=conf.agent.settle_timeout,
                      protect_interval=conf.agent.protect_interval,
                      protect_dirty_bytes=conf.agent.protect_dirty_bytes,
                      guest_checkpoints_kept=conf.agent
                      .guest_checkpoints_kept,
                      guest_groups_kept=conf.agent.guest_groups_kept,
                      guest_budget=budget.GuestBudget(
                          conf.agent.guest_checkpoints_per_image,
                          conf.agent.guest_checkpoints_per_project,
                          conf.agent.guest_checkpoint_mib_per_image,
                          conf.agent.guest_checkpoint_mib_per_project),
                      guest_groups_per_project=conf.agent
                      .guest_groups_per_project)
        manager.mirror.handoff_timeout = conf.agent.handoff_timeout
        return manager
