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

"""A multiattach volume type is refused by the driver itself, clearly and
before any agent is asked (issue 56 item 4), where Cinder's scheduler
let one through (no CapabilitiesFilter): at create, at a retype to such
a type, and at attach. Cinder's own refusal (the backends report
multiattach False, so no BlobCR backend passes the scheduler) is shown
with the real services in tests/integration/test_nova_volume_flows.py.
The driver's agent API is a stand-in that records calls. In a child
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
d = driver.BlobCRDriver.__new__(driver.BlobCRDriver)
d._call = lambda host, method, *a, **k: calls.append(method) or {
    'id': 'img', 'image': 'img', 'path': '/m/img', 'epoch': 0}
d.configuration = types.SimpleNamespace(blobcr_connection_type='local')
type(d).storage_host = property(lambda self: 'storage')


def kind(value):
    specs = {'volume_backend_name': 'blobcr-rados'}
    if value is not None:
        specs['multiattach'] = value
    return types.SimpleNamespace(name='t', extra_specs=specs)


def volume(value):
    return types.SimpleNamespace(
        id='v1', name='volume-v1', size=1, provider_id='img',
        encryption_key_id=None, volume_type=kind(value), host='h@b#p',
        project_id='p', volume_attachment=[])


connector = {'host': 'compute-1'}
attempts = {
    'create': lambda v: d.create_volume(v),
    'attach': lambda v: d.initialize_connection(v, connector),
    'retype': lambda v: d.retype(
        None, volume(None), {'name': 't2', 'extra_specs': dict(
            v.volume_type.extra_specs)}, {}, None),
}
out = {}
for value in ('<is> True', '<is>  true', '<is> False', 'True', None):
    for name, attempt in attempts.items():
        del calls[:]
        try:
            attempt(volume(value))
            out['%s %s' % (name, value)] = ['accepted', list(calls), '']
        except Exception as e:
            out['%s %s' % (name, value)] = [type(e).__name__, list(calls),
                                            str(e)]
print(json.dumps(out))
'''


def test_multiattach_types_are_refused_before_any_agent_call():
    out = subprocess.run([sys.executable, '-c', SCENARIO], check=True,
                         capture_output=True, text=True, timeout=300).stdout
    results = json.loads(out.strip().splitlines()[-1])
    for name in ('create', 'attach', 'retype'):
        for value in ('<is> True', '<is>  true'):
            outcome, calls, why = results['%s %s' % (name, value)]
            assert outcome == 'InvalidVolumeType', (name, value, outcome,
                                                    why)
            assert calls == [], (name, calls)
            assert 'not multi-attach' in why, why
            assert 'one host for one server at a time' in why, why
        # What Cinder does not take for multiattach (only "<is> True"
        # is), nor does the driver.
        for value in ('<is> False', 'True', 'None'):
            outcome, calls, why = results['%s %s' % (name, value)]
            assert outcome == 'accepted', (name, value, outcome, why)
    assert results['create None'][1] == ['create_image']
    assert results['attach None'][1] == ['attach']
