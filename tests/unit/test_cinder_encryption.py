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

"""Encrypted volume types are refused, clearly and before any agent is
asked (issue 54, finding 8): at create (blank, clone, from a snapshot),
manage, retype adding encryption, and a Glance image copied into an
encrypted volume (the inherited path runs os-brick's LUKS encryptor
over the agent's device link). The driver's agent API is a stand-in
that records calls: what is checked is that none is made. In a child
process: importing cinder loads eventlet.
"""

import json
import subprocess
import sys

SCENARIO = '''
import json, types, warnings
warnings.simplefilter('ignore')
from blobcr_cinder import driver

calls = []


class Agents(object):
    def __getattr__(self, name):
        def call(*args, **kwargs):
            calls.append(name)
            return {'id': 'img', 'size': 1 << 30, 'versions': []}
        return call


d = driver.BlobCRDriver.__new__(driver.BlobCRDriver)
d.api = Agents()
d._call = lambda host, method, *a, **k: calls.append(method) or {'id': 'i'}
type(d).storage_host = property(lambda self: 'storage')


def volume(key):
    return types.SimpleNamespace(
        id='v1', name='volume-v1', size=1, provider_id='img',
        encryption_key_id=key, volume_type=None, host='h@b#p')


snapshot = types.SimpleNamespace(provider_id='img@2', volume_size=1)
attempts = {
    'create': lambda v: d.create_volume(v),
    'clone': lambda v: d.create_cloned_volume(v, volume(None)),
    'from_snapshot': lambda v: d.create_volume_from_snapshot(v, snapshot),
    'manage': lambda v: d.manage_existing(v, {'source-name': 'img'}),
    'image_copy': lambda v: d.copy_image_to_encrypted_volume(
        None, v, None, 'glance-image'),
}
out = {}
for name, attempt in attempts.items():
    del calls[:]
    try:
        attempt(volume('key-1'))
        out[name] = ['accepted', list(calls), '']
    except Exception as e:
        out[name] = [type(e).__name__, list(calls), str(e)]
for name, diff in (('retype_adds', {'encryption': {'cipher': ['', 'aes']}}),
                   ('retype_plain', {'encryption': {}})):
    del calls[:]
    try:
        d.retype(None, volume(None), {'name': 't2', 'extra_specs': {}},
                 diff, None)
        out[name] = ['accepted', list(calls), '']
    except Exception as e:
        out[name] = [type(e).__name__, list(calls), str(e)]
print(json.dumps(out))
'''


def test_encrypted_types_are_refused_before_any_agent_call():
    out = subprocess.run([sys.executable, '-c', SCENARIO], check=True,
                         capture_output=True, text=True, timeout=300).stdout
    results = json.loads(out.strip().splitlines()[-1])
    for name in ('create', 'clone', 'from_snapshot', 'manage', 'image_copy',
                 'retype_adds'):
        outcome, calls, why = results[name]
        assert outcome == 'InvalidVolumeType', (name, results[name])
        assert calls == [], (name, calls)
        assert 'encrypted' in why, (name, why)
    # A retype that leaves encryption alone is still done in place.
    assert results['retype_plain'][0] == 'accepted', results['retype_plain']
