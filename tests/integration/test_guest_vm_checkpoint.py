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

"""End to end: a real VM checkpoints itself and restarts from a version.

A Debian guest boots under libvirt with TCG (tools/build-guest.sh,
blobcr_lab/guest_vm.py). Its data disk is an ext4 image attached through a
real blobcr-agent: the raw file QEMU opens is on the agent's FUSE mount.
The guest reaches the agent's checkpoint endpoint at 169.254.169.254
(slirp guestfwd to 127.0.0.1). Inside the guest: write files, run
``blobcr-checkpoint`` (the agent suspends the domain through libvirt
while it takes the snapshot), append and add more, checkpoint again
with fsfreeze through qemu-guest-agent, and try a forged token, which
must be refused. Then the VM is restarted from the first checkpoint (a
CLONE of that version, attached as a new image): the files are exactly
as they were then, the later appends rolled back.
"""

import json
import os
import pathlib
import subprocess
import time

from blobcr_agent.repository import repository
from blobcr_common import auth
from blobcr_lab.agent_rpc import committed
from blobcr_lab import agents
from blobcr_lab import guest_vm
from tests.lab_fixtures import guest_image  # noqa: F401 (fixture)
from tests.lab_fixtures import session_libvirt  # noqa: F401 (fixture)

TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
INSTANCE = 'vm-e2e-1'
SECRET = 'e2e-host-secret'

# First boot. ``blobcr-checkpoint`` is the guest package run with the
# guest's own python3 (no entry points installed in the initramfs).
FIRST_BOOT = r"""set -e
mount -t ext4 /dev/vda /mnt
mkdir -p /mnt/data
echo 'line 1, before the first checkpoint' > /mnt/data/log.txt
head -c 3000000 /dev/urandom > /mnt/data/blob.bin
cd /mnt/data && sha256sum log.txt blob.bin | sed 's/^/SUM1 /' && cd /
python3 -m blobcr_guest checkpoint --json --wait-stable \
    | sed 's/^/CK1 /'
echo 'line 2, after the first checkpoint' >> /mnt/data/log.txt
echo 'only in the second checkpoint' > /mnt/data/later.txt
head -c 100000 /dev/urandom >> /mnt/data/blob.bin
python3 -m blobcr_guest checkpoint --quiesce fsfreeze --json --wait-stable \
    | sed 's/^/CK2 /'
set +e
BLOBCR_GUEST_CONFIG=/etc/blobcr/forged.json python3 -m blobcr_guest \
    checkpoint --no-sync 2>&1 | sed 's/^/FORGED /'
echo "FORGED-EXIT $(BLOBCR_GUEST_CONFIG=/etc/blobcr/forged.json \
    python3 -m blobcr_guest checkpoint --no-sync >/dev/null 2>&1; echo $?)"
set -e
umount /mnt
"""

# Second boot, from the clone of the first checkpoint.
RESTART = r"""set -e
mount -t ext4 /dev/vda /mnt
cd /mnt/data && sha256sum log.txt blob.bin | sed 's/^/SUM2 /' && cd /
sed 's/^/LOG /' /mnt/data/log.txt
if [ -e /mnt/data/later.txt ]; then echo LATER-PRESENT; \
    else echo LATER-ABSENT; fi
umount /mnt
"""


def _lines(console, tag):
    return [line[len(tag) + 1:].strip() for line in console.splitlines()
            if line.startswith(tag + ' ')]


def _json_line(console, tag):
    found = _lines(console, tag)
    assert found, 'no %s line on the console:\n%s' % (tag, console[-3000:])
    return json.loads(found[-1])


def _sums(console, tag):
    return dict(reversed(line.split()) for line in _lines(console, tag))


def _debugfs_cat(image, path):
    # e2fsck first replays the journal, as a mount would.
    subprocess.run(['e2fsck', '-fy', image], capture_output=True,
                   timeout=120)
    return subprocess.run(['debugfs', '-R', 'cat %s' % path, image],
                          check=True, capture_output=True, timeout=60,
                          ).stdout


def _files(token, forged_token):
    def config(tok):
        return json.dumps({'endpoint': 'http://%s' % guest_vm.METADATA_IP,
                           'instance_id': INSTANCE, 'token': tok})
    return {'/etc/blobcr/guest.json': config(token),
            '/etc/blobcr/forged.json': config(forged_token),
            '/usr/lib/python3/dist-packages/blobcr_guest':
            pathlib.Path(TOP, 'blobcr-guest', 'blobcr_guest')}


def _boot(name, disk, uri, image_dir, port, files, scenario, workdir):
    files = dict(files, **{'/scenario.sh': scenario})
    workdir.mkdir()
    vm = guest_vm.GuestVM(name, disk, uri, base_dir=image_dir, files=files,
                          metadata_port=port, workdir=str(workdir))
    with vm:
        status = vm.wait_exit(timeout=400)
        console = vm.console()
    assert status == 0, console[-4000:]
    return console


def test_vm_checkpoints_itself_and_restarts_from_a_version(
        guest_image, session_libvirt, backend_factory,  # noqa: F811
        tmp_path):
    # On the local store and on the micro Ceph cluster (EC data pool).
    repo = repository.Repository(backend_factory())
    raw = str(tmp_path / 'data.raw')
    with open(raw, 'wb') as f:
        f.truncate(64 << 20)
    subprocess.run(['mkfs.ext4', '-q', '-F', raw], check=True, timeout=60)
    header, base_version = repo.import_file(raw, 'data')

    workdir = tmp_path / 'agent'
    workdir.mkdir()
    agent = agents.AgentProcess(str(workdir), repo.backend, {
        'agent': {'libvirt_uri': session_libvirt.uri,
                  'quiesce': 'suspend', 'host': 'tcg-host'},
        'proxy': {'host_secret': SECRET}})
    agent.start()
    try:
        disk = agent.client.call('attach', image='data',
                                 instance=INSTANCE)['path']
        files = _files(auth.Authenticator(SECRET, host='tcg-host').token_for(
            INSTANCE), 'f' * 64)
        t0 = time.monotonic()
        console = _boot('blobcr-ck', disk, session_libvirt.uri, guest_image,
                        agent.proxy_port(), files, FIRST_BOOT,
                        tmp_path / 'vm1')
        first_boot = time.monotonic() - t0

        ck1, ck2 = _json_line(console, 'CK1'), _json_line(console, 'CK2')
        assert ck1['state'] == ck2['state'] == 'stable'
        assert ck2['version'] == ck1['version'] + 1 > base_version
        assert _lines(console, 'FORGED-EXIT') == ['3'], console[-3000:]
        assert any('401' in line or 'unauthenticated' in line
                   for line in _lines(console, 'FORGED')), console[-3000:]
        versions = committed(repo.image(header.id).versions)
        # The forged request committed nothing; the agent quiesced the
        # domain it found by the mirror file, each way the guest asked.
        assert [v.number for v in versions] == [base_version,
                                                ck1['version'],
                                                ck2['version']]
        log = agent.log.name
        with open(log) as f:
            agent_log = f.read()
        assert 'checkpoint without' not in agent_log
        sums1 = _sums(console, 'SUM1')
        assert set(sums1) == {'log.txt', 'blob.bin'}

        # Host side: each version holds its own state of the files.
        v1_raw, v2_raw = str(tmp_path / 'v1.raw'), str(tmp_path / 'v2.raw')
        repo.export(header.id, ck1['version'], v1_raw)
        repo.export(header.id, ck2['version'], v2_raw)
        assert _debugfs_cat(v1_raw, '/data/log.txt') == \
            b'line 1, before the first checkpoint\n'
        assert _debugfs_cat(v2_raw, '/data/log.txt') == (
            b'line 1, before the first checkpoint\n'
            b'line 2, after the first checkpoint\n')
        assert _debugfs_cat(v2_raw, '/data/later.txt') == \
            b'only in the second checkpoint\n'

        # Restart from the first checkpoint: a CLONE of that version,
        # attached as a new image, booted by a new VM.
        clone = agent.client.call('clone', image='data',
                                  version=ck1['version'],
                                  name='data-restart')
        restart_disk = agent.client.call('attach', image=clone['id'],
                                         instance='vm-e2e-2')['path']
        assert restart_disk != disk
        console2 = _boot('blobcr-rs', restart_disk, session_libvirt.uri,
                         guest_image, agent.proxy_port(), files, RESTART,
                         tmp_path / 'vm2')
        assert _sums(console2, 'SUM2') == sums1
        assert _lines(console2, 'LOG') == [
            'line 1, before the first checkpoint']
        assert 'LATER-ABSENT' in console2
        # The original image still has both checkpoints intact.
        assert repo.image(header.id).version(ck2['version']).state == \
            'stable'
        print('first boot with two checkpoints: %.1f s; downtimes: '
              'suspend %.1f ms, fsfreeze %.1f ms'
              % (first_boot, ck1['downtime_ms'], ck2['downtime_ms']))
    finally:
        agent.stop()
