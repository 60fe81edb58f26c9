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

"""A loop device's recorded identity compares equal to the kernel's
answer however it arrives: loop-devices.json keeps [dev, ino] as a
list, the privileged daemon's answer came back a tuple, and an agent
restarted over a dead mount whose attributes were still cached took its
own device for another process's (it left it alone: a flaky
test_loop_devices.py in CI). The daemon is a stand-in here: the
functional test drives the real one.
"""

import json

from blobcr_agent import privileged
from blobcr_agent.privileged import loop


def test_identity_is_a_list_as_the_record_keeps_it(monkeypatch):
    monkeypatch.setattr(privileged, 'as_root', lambda: False)
    monkeypatch.setattr(loop, '_loop_identity', lambda device: (50, 2))
    recorded = json.loads(json.dumps({'backing': [50, 2]}))['backing']
    assert loop.identity('/dev/loop3') == recorded
    monkeypatch.setattr(loop, '_loop_identity', lambda device: None)
    assert loop.identity('/dev/loop3') is None
