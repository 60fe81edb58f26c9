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

"""The agents' RPC API version the docs name is the code's
(``blobcr_common.rpc.VERSION``): cinder.rst's upgrade range once said
1.13 when the API was 1.15 (issue 56 item 10).
"""

import os
import re

from blobcr_common import rpc

DOCS = os.path.join(os.path.dirname(__file__), '..', '..', 'doc', 'source')


def _read(name):
    with open(os.path.join(DOCS, name)) as f:
        return ' '.join(f.read().split())


def test_cinder_rst_upgrade_range_ends_at_the_current_version():
    ranges = re.findall(r'versioned \(1\.0 to (\d+\.\d+)', _read('cinder.rst'))
    assert ranges == [rpc.VERSION]


def test_agent_rst_rpc_api_names_the_current_version():
    assert re.findall(r'RPC API =+ Version (\d+\.\d+)',
                      _read('agent.rst')) == [rpc.VERSION]
