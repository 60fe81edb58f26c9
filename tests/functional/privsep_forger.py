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

"""Run as the agent's user, with the agent's configuration: ask the
agent's privileged daemon for what a compromised agent might, and print
what each request got, as JSON ({case: "allowed" or the error's class}).

    python privsep_forger.py CONFIG_FILE ROOT_LOOP_DEVICE OUTSIDE_FILE
"""

import json
import os
import sys

from blobcr_agent import conf
from blobcr_agent import privileged
from blobcr_agent.privileged import fuse
from blobcr_agent.privileged import loop


def main():
    config, device, outside = sys.argv[1:4]
    conf.CONF(['--config-file', config], project='blobcr')
    images = os.path.join(conf.CONF.agent.mountpoint, 'images')
    cases = {
        'attach a system file': (loop._attach_image_file, '/etc/shadow'),
        'attach a file outside images/': (loop._attach_image_file, outside),
        'attach through ..': (loop._attach_image_file,
                              os.path.join(images, '..', '..',
                                           os.path.basename(outside))),
        'attach images/ itself': (loop._attach_image_file, images),
        'detach a device of root': (loop._detach_image_device, device),
        'detach a disk': (loop._detach_image_device, '/dev/vda'),
        'detach a forged name': (loop._detach_image_device,
                                 '/dev/loop0 /dev/vda'),
        'read a disk': (loop._loop_identity, '/dev/vda'),
        'abort a connection not ours': (fuse._abort_own_connection, 999999),
        'abort with a string': (fuse._abort_own_connection, '1'),
    }
    got = {}
    for case, (call, arg) in cases.items():
        try:
            call(arg)
            got[case] = 'allowed'
        except Exception as e:
            got[case] = type(e).__name__
    got['uid'] = os.geteuid()
    privileged.default.stop()
    print(json.dumps(got))


if __name__ == '__main__':
    main()
