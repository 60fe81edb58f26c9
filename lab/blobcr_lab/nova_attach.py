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

"""Volumes attached the way Nova attaches them, for tests and the Cinder
demo: Cinder's attachments API with the user's token and a service
token, a connector naming the compute host; the connection info names
the file the hypervisor would open.
"""

import os
import time
import uuid

from blobcr_lab import openstack as stack_module


def as_nova(stack, user='demo'):
    """The Cinder API as Nova calls it for a user: the user's token plus
    a service token (Cinder checks with Nova, absent here, before it lets
    anyone else delete a connected attachment).
    """
    from keystoneauth1 import adapter
    from keystoneauth1 import service_token
    from keystoneauth1 import session
    auth = service_token.ServiceTokenAuthWrapper(
        stack.session(user).auth, stack.session('cinder').auth)
    return adapter.Adapter(session.Session(auth=auth),
                           service_type='block-storage', interface='public',
                           region_name=stack_module.REGION)


class Attachment(object):
    """A volume attached to a compute host the way Nova attaches one."""

    MICROVERSION = '3.44'

    def __init__(self, stack, volume_id, host, user='demo', instance=None):
        self.api = as_nova(stack, user)
        self.instance = instance or str(uuid.uuid4())
        body = {'attachment': {
            'volume_uuid': volume_id, 'instance_uuid': self.instance,
            'connector': {'host': host, 'platform': 'x86_64',
                          'os_type': 'linux', 'multipath': False,
                          'mountpoint': '/dev/vdb', 'initiator': None}}}
        made = self.api.post('/attachments', json=body,
                             microversion=self.MICROVERSION).json()
        self.id = made['attachment']['id']
        self.connection = made['attachment']['connection_info']
        self.api.post('/attachments/%s/action' % self.id,
                      json={'os-complete': None},
                      microversion=self.MICROVERSION)

    @property
    def path(self):
        """What Nova opens: the agent's loop device ('local'), or the
        mirror file itself (the file types).
        """
        return self.connection['device_path']

    @property
    def size(self):
        return size_of(self.path)

    def detach(self):
        self.api.delete('/attachments/%s' % self.id,
                        microversion=self.MICROVERSION)


def wait_reopenable(path, timeout=30):
    """Until ``path`` (what Nova opens) is there again after its agent
    restarted, as for Nova's hard reboot: a 'local' connection's link
    names a new loop device once the new agent's mount serves; a mirror
    file is back once the image is re-attached. False on timeout.
    """
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def size_of(path):
    """The size of a file or a block device (whose os.path.getsize is
    0), as the host sees it.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.lseek(fd, 0, os.SEEK_END)
    finally:
        os.close(fd)


def write_at(path, offset, data):
    """Write ``data`` at ``offset`` of an attachment's file and fsync it,
    as a guest's write and flush.
    """
    with open(path, 'r+b') as f:
        f.seek(offset)
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
