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

"""Run as the agent's user, with a configuration the agent could be
given: ask that configuration's privileged daemon for what a
compromised agent might, and print what each request got, as JSON
({case: "allowed" or the error's class}).

    python privsep_forger.py CONFIG_FILE CASES_JSON

CASES_JSON: [[case, entry point, argument], ...], the entry point one of
attach, detach, identity, abort.
"""

import json
import os
import sys

from blobcr_agent import conf
from blobcr_agent import privileged
from blobcr_agent.privileged import fuse
from blobcr_agent.privileged import loop

ENTRY_POINTS = {'attach': loop._attach_image_file,
                'detach': loop._detach_image_device,
                'identity': loop._loop_identity,
                'abort': fuse._abort_own_connection}


def main():
    config, cases = sys.argv[1], json.loads(sys.argv[2])
    conf.CONF(['--config-file', config], project='blobcr')
    got = {}
    for case, entry_point, arg in cases:
        try:
            ENTRY_POINTS[entry_point](arg)
            got[case] = 'allowed'
        except Exception as e:
            got[case] = type(e).__name__
    got['uid'] = os.geteuid()
    privileged.default.stop()
    print(json.dumps(got))


if __name__ == '__main__':
    main()
