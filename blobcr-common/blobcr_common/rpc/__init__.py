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

"""The agent's oslo.messaging RPC API: topic ``blobcr-agent``, one server
per host (``[agent] host``).

api.py is the client the Cinder driver, the Nova side and the agents
(to each other) call; the agent's side is blobcr_agent.rpc.server.
Version history of the API:

* 1.0 - attach, detach, checkpoint, state, wait_stable, clone,
  list_versions, obsolete, gc, status, export, group_state.
* 1.1 - detach(force=), export(overwrite=). A client sends 1.1 only for
  a call that uses them, so 1.0 agents still serve everything else.
* 1.2 - project= for attach, checkpoint and group_state (group ids are
  scoped by project), creator= for checkpoint; sent as 1.2 only when
  given.
* 1.3 - create_image, delete_image, extend_image, snapshot (of a detached
  image), delete_snapshot, revert, import_file, capacity: the Cinder
  driver's calls.
* 1.4 - list_images (every image with its versions and the hosts it is
  attached on): what the Cinder driver offers to manage; label= for
  checkpoint and label() (the version is the caller's, not a checkpoint
  to list).
* 1.5 - hold, release: a guest held still across calls (phase one of a
  group checkpoint over several hosts).
* 1.6 - migrate_from= for attach (an image live-migrated from another
  host, attached incoming until that host's handoff), handoff (asked by
  the destination's agent: the version that holds the source's writes,
  once its guest stopped).
* 1.7 - detach(background=): return once the image is off the mount, its
  last checkpoints persisting in the background (every host's operations
  on the image wait for them meanwhile); sent as 1.7 only when asked;
  take_over (fence a lost host's claim on an image, Cinder's force
  detach when that host's agent does not answer).
* 1.8 - hints (a fanout cast, no answer): the chunks an image restarting
  from a group checkpoint read first, for the other members restarting
  on other hosts to prefetch (mirror/hints.py). An older agent ignores
  the cast (it logs an unsupported version).
* 1.9 - block_device= for attach: a loop device over the mirror file
  (``device`` in the answer), what stock Nova and os-brick open for a
  'local' connection; sent as 1.9 only when asked.
* 1.10 - prepare_handoff (a cast, no answer): the destination's agent,
  attaching an image incoming, has the source checkpoint what its guest
  wrote so far, so that the handoff at the switch commits and persists
  only what the guest writes during the migration. Not sent to older
  agents (the version cap), which hand off as before.
* 1.11 - admit_group: phase zero of a group checkpoint across hosts (the
  Cinder driver's, before any guest is held): the member count is
  checked against the group's index once per host and remembered, so
  that the members' checkpoints do not read the index on their ack
  path. Not sent to older agents, whose members read it as before.
* 1.12 - the peer side: handoff, prepare_handoff and hints are also
  served on topic ``blobcr-agent-peer`` (server = the host), on the bus
  agents share (rpc/bus.py), and agents send them there once the cap
  allows 1.12; the control topic keeps serving them for older agents.
* 1.13 - no new call: an agent restarting members of a group lists its
  host as a listener of the group's hints in the store, and hints go to
  the hosts listed (a cast to each), not as a fanout to every agent.
  Agents do so once the cap allows 1.13 (older ones list nothing and
  would miss them); below it, the fanout as before.
* 1.14 - hold_members, checkpoint_members: a host's members of one
  group checkpoint held, then checkpointed (each released once its
  COMMIT is done), in one call per phase, all or none on that host.
  The Cinder driver sends them once the cap allows 1.14, and below it
  hold, checkpoint and release per member as before.
* 1.15 - durability= for attach (``DURABILITIES``): what a guest's flush
  of the image makes durable, its writes in the image's write-ahead log
  in the cluster or on the host's disk (the Cinder driver's
  ``blobcr:durability`` extra spec); unset, the agent's
  ``[agent] durability``. An image already attached keeps its own. Sent
  as 1.15 only when given, with ``block_device`` or ``migrate_from``
  when they are.

With ``[blobcr_bus] authenticated_peers`` (rpc/bus.py), agents make the
peer calls (handoff, prepare_handoff, hints) outside this API, through
a request/reply of their own whose messages carry their own version
(the agent's rpc/peer_wire.py); the control topic then serves no peer
call.
"""

TOPIC = 'blobcr-agent'
PEER_TOPIC = 'blobcr-agent-peer'
# Named in every target, so that callers whatever their own
# control_exchange (cinder, nova) reach the agents.
EXCHANGE = 'blobcr'
VERSION = '1.15'

# How the guest is held still while a checkpoint is taken: the agent's
# ``[agent] quiesce`` and the Cinder driver's ``quiesce`` extra spec.
QUIESCE_CHOICES = [
    ('none', 'not at all: the guest synced itself (a guest checkpoint)'),
    ('fsfreeze', 'qemu-guest-agent freezes the file systems'),
    ('suspend', 'libvirt pauses the domain (the BlobCR paper\'s choice)'),
]

# What a guest's flush of a volume makes durable: attach's durability
# (1.15) and the Cinder driver's ``durability`` extra spec; the agent
# checks it against its store (blobcr_agent/mirror/flushlog.py).
DURABILITIES = ('cluster', 'host')
