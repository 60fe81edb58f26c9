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

"""What an unprivileged agent asks root for, through oslo.privsep.

The agent runs as a user of its own (doc/source/agent.rst, "Privileges").
Four things need root: setting up and detaching the loop devices that
stock Nova attaches (manager/loopdevs.py), reading what a loop device
loops over, and aborting a dead FUSE connection. Each is an entry point
(loop.py, fuse.py) that checks, in the privileged daemon and against
the daemon's own configuration (root's, under /etc/blobcr: see
cmd/privsep_helper.py) and the kernel's view, that it touches only this
agent's mount: never a path, device or connection the caller merely
names.

Mounting needs none of it: libfuse mounts through the setuid fusermount3
when it is not root (``user_allow_other`` in /etc/fuse.conf lets guests'
QEMU reach the files).

An agent that runs as root calls the same operations in its own process
(``as_root()``): a daemon would add a process and nothing else.
"""

import logging
import os

from oslo_privsep import capabilities
from oslo_privsep import priv_context

from blobcr_agent import conf
from blobcr_common import exception

CONF = conf.CONF
LOG = logging.getLogger(__name__)
SECTION = conf.PRIVILEGED_SECTION

default = priv_context.PrivContext(
    __name__,
    cfg_section=SECTION,
    pypath=__name__ + '.default',
    # Loop devices and mounting fusectl (CAP_SYS_ADMIN); the mirror's
    # files are root's, mode 0600, and /dev/loop* is root:disk.
    capabilities=[capabilities.CAP_SYS_ADMIN,
                  capabilities.CAP_DAC_OVERRIDE],
)


def as_root():
    """Whether this process is root, and so needs no privileged daemon."""
    return os.geteuid() == 0


def start():
    """At the agent's start: the daemon, if this agent is not root, so
    that a missing sudoers rule is an error now, not at a guest's attach.
    """
    if as_root():
        LOG.info('running as root: no privileged daemon')
        return
    LOG.info('running as uid %d: loop devices and FUSE aborts go through '
             'the privileged daemon ([%s])', os.geteuid(), SECTION)
    try:
        default.start()
    # What the helper's failure raises varies (FailedToDropPrivileges,
    # OSError, a closed channel): all mean the same to an operator.
    except Exception as e:
        raise exception.BackendUnavailable(
            'cannot start the privileged daemon (%s): is privsep-helper '
            'allowed to this user by sudoers ([%s] helper_command)?'
            % (e, SECTION))
