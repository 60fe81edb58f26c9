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

"""blobcr-nova-listener without a broker: its options, its sample
configuration, and that every event it acts on is one nova 34 emits.
"""

import json
import logging
import subprocess
import sys

from blobcr_nova import listener


def test_events_are_novas_own():
    """Each event type is instance.<a NotificationAction of nova>.<a
    NotificationPhase>, read from nova's code (in a child: importing
    nova brings eventlet along).
    """
    code = ('import json; from nova.objects import fields as f; '
            'print(json.dumps([list(f.NotificationAction.ALL), '
            'list(f.NotificationPhase.ALL)]))')
    done = subprocess.run([sys.executable, '-W', 'ignore', '-c', code],
                          check=True, capture_output=True, text=True)
    actions, phases = json.loads(done.stdout.strip().splitlines()[-1])
    for event in listener.EVENTS:
        obj, action, phase = event.split('.')
        assert obj == 'instance' and action in actions and \
            phase in phases, event


def test_payload_fields():
    payload = {'nova_object.data': {
        'uuid': 'i-1', 'volume_id': 'v-2',
        'block_devices': [{'nova_object.data': {'volume_id': 'v-1'}},
                          {'nova_object.data': {'volume_id': None}}]}}
    data = listener._data(payload)
    assert listener._volumes(data) == ['v-1', 'v-2']
    assert listener._volumes({'block_devices': None}) == []
    assert listener._host_of('nova-compute:host-1') == 'host-1'
    assert listener._host_of('nova-compute:a:b') == 'a:b'
    assert listener._host_of('nova-compute') is None
    assert listener._data(None) == {}


class _NoAgent(object):
    def __getattr__(self, name):
        raise AssertionError('no agent call expected: %s' % name)


def test_events_ignored_or_refused_without_calling_agents(caplog):
    caplog.set_level(logging.INFO)
    conf = type('opts', (), {'migration_ttl': 60, 'agent_timeout': 1})
    handler = listener.Handler(_NoAgent(), conf)
    data = {'nova_object.data': {'uuid': 'i-1', 'host': 'h'}}
    assert handler.handle('nova-compute:h', 'instance.pause.end',
                          data) is None
    assert handler.handle('nova-compute', 'instance.delete.end',
                          data) is None
    assert 'without an instance uuid or a host' in caplog.text
    # An end without its start: the source is unknown, nothing moves.
    assert handler.handle('nova-compute:h',
                          'instance.live_migration_post.end',
                          data) == listener.MIGRATE_END
    assert 'its start was not seen' in caplog.text
    # Same-host resize: nothing to move.
    assert handler.handle('nova-compute:h', 'instance.resize_prep.start',
                          data) == listener.MIGRATE_START
    assert 'both h: nothing to move' in caplog.text
