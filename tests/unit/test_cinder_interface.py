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

"""Cinder's own driver interface checks, applied to the out-of-tree
driver: the compliance test Cinder runs on its in-tree drivers
(cinder/tests/compliance/test_volume_drivers.py) asks for
VolumeDriverCore; the driver also claims snapshot revert and groups.
Cinder's subclass hook only registers the class, so the methods of each
interface are also checked here to be on the driver with the
interface's parameters: a renamed or mistyped method fails.

In a child process: importing cinder loads eventlet, which the test
process is better without.
"""

import json
import subprocess
import sys

CHECK = '''
import inspect, json, warnings
warnings.simplefilter('ignore')
from cinder.interface import util, volume_driver, volume_group_driver
from cinder.interface import volume_snapshot_revert
from blobcr_cinder import driver

def mismatches(interface):
    bad = []
    for name, method in inspect.getmembers(interface, inspect.isfunction):
        if name.startswith('_'):
            continue
        if isinstance(inspect.getattr_static(driver.BlobCRDriver, name,
                                             None), property):
            continue            # (initialized, supported: Cinder's own)
        mine = getattr(driver.BlobCRDriver, name, None)
        if not callable(mine):
            bad.append(name + ': missing')
            continue
        if mine.__module__.startswith('cinder.'):
            continue            # Cinder's own base implementation
        want = list(inspect.signature(method).parameters)
        have = list(inspect.signature(mine).parameters)
        if have[:len(want)] != want and not any(
                p.kind == p.VAR_KEYWORD
                for p in inspect.signature(mine).parameters.values()):
            bad.append('%s%s, not %s' % (name, have, want))
    return bad

interfaces = (volume_driver.VolumeDriverCore,
              volume_snapshot_revert.VolumeSnapshotRevertDriver,
              volume_group_driver.VolumeGroupDriver)
print(json.dumps({
    'registered': [d.class_fqn for d in util.get_volume_drivers()],
    'conforms': {i.__name__: issubclass(driver.BlobCRDriver, i)
                 for i in interfaces},
    'mismatches': {i.__name__: mismatches(i) for i in interfaces}}))
'''


def test_driver_passes_cinder_interface_checks():
    out = subprocess.run([sys.executable, '-c', CHECK], check=True,
                         capture_output=True, text=True, timeout=120).stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert 'blobcr_cinder.driver.BlobCRDriver' in result['registered']
    assert result['conforms'] == {'VolumeDriverCore': True,
                                  'VolumeSnapshotRevertDriver': True,
                                  'VolumeGroupDriver': True}
    assert result['mismatches'] == {'VolumeDriverCore': [],
                                    'VolumeSnapshotRevertDriver': [],
                                    'VolumeGroupDriver': []}
