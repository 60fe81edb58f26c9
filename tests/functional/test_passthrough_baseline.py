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

"""The C passthrough baseline of ``blobcr-bench mirror``, really mounted.

Builds native/bench/passthrough.c with tools/build-passthrough.sh, mounts
a small backing file with it and checks that bytes written on either side
are the bytes read on the other, buffered and with O_DIRECT.
"""

import errno
import mmap
import os
import subprocess

import pytest

from blobcr_bench import fio

TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
SIZE = 4 << 20

pytestmark = pytest.mark.skipif(not os.path.exists('/dev/fuse'),
                                reason='no /dev/fuse')


@pytest.fixture(scope='module')
def binary(tmp_path_factory):
    out = str(tmp_path_factory.mktemp('passthrough') / 'blobcr-passthrough')
    subprocess.run([os.path.join(TOP, 'tools', 'build-passthrough.sh'), out],
                   check=True)
    return out


@pytest.fixture
def backing(tmp_path):
    path = str(tmp_path / 'disk.img')
    with open(path, 'wb') as f:
        f.truncate(SIZE)
    return path


def _pattern(seed, length=4096):
    return bytes((seed + i * 7) % 251 for i in range(length))


def _read_backing(path, offset, length):
    with open(path, 'rb') as f:
        f.seek(offset)
        return f.read(length)


def test_one_file_of_the_backing_size(binary, backing):
    with fio.PassthroughMount(binary, backing) as m:
        assert os.listdir(m.mountpoint) == ['disk.img']
        assert os.stat(m.path).st_size == SIZE


def test_write_through_mount_reads_from_backing(binary, backing):
    data = _pattern(1, 3 * 4096 + 100)     # unaligned length on purpose
    with fio.PassthroughMount(binary, backing) as m:
        fd = os.open(m.path, os.O_RDWR)
        try:
            assert os.pwrite(fd, data, 12345) == len(data)
        finally:
            os.close(fd)
        assert _read_backing(backing, 12345, len(data)) == data


def test_write_to_backing_reads_through_mount(binary, backing):
    data = _pattern(2, 8192)
    fd = os.open(backing, os.O_RDWR)
    try:
        os.pwrite(fd, data, 65536)
    finally:
        os.close(fd)
    with fio.PassthroughMount(binary, backing) as m:
        fd = os.open(m.path, os.O_RDONLY)
        try:
            assert os.pread(fd, len(data), 65536) == data
        finally:
            os.close(fd)


def test_o_direct_both_ways(binary, backing):
    # What fio --direct=1 and qemu -t none do: aligned buffers, O_DIRECT.
    data = _pattern(3)
    buf = mmap.mmap(-1, len(data))
    buf[:] = data
    with fio.PassthroughMount(binary, backing) as m:
        fd = os.open(m.path, os.O_RDWR | os.O_DIRECT)
        try:
            assert os.pwritev(fd, [buf], 1 << 20) == len(data)
            assert _read_backing(backing, 1 << 20, len(data)) == data

            other = _pattern(4)
            bfd = os.open(backing, os.O_WRONLY)
            try:
                os.pwrite(bfd, other, 2 << 20)
            finally:
                os.close(bfd)
            assert os.preadv(fd, [buf], 2 << 20) == len(other)
            assert bytes(buf) == other
        finally:
            os.close(fd)


def test_no_write_past_the_end(binary, backing):
    with fio.PassthroughMount(binary, backing) as m:
        fd = os.open(m.path, os.O_RDWR)
        try:
            with pytest.raises(OSError) as e:
                os.pwrite(fd, b'x' * 4096, SIZE)
            assert e.value.errno == errno.EINVAL
            # Across the end: the kernel sends the part in the last page
            # on its own, so this is a short write, as on a full disk.
            assert os.pwrite(fd, b'y' * 4096, SIZE - 100) == 100
        finally:
            os.close(fd)
    assert os.path.getsize(backing) == SIZE
    assert _read_backing(backing, SIZE - 100, 200) == b'y' * 100


def test_unmounted_and_stopped_on_exit(binary, backing):
    with fio.PassthroughMount(binary, backing) as m:
        pass
    assert m.proc.returncode == 0
    assert not fio._mounted(m.mountpoint)
    assert not os.path.exists(m.mountpoint)
