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

"""Chunk codec and the compress-only-when-it-pays rule."""

import hashlib
import os

import pytest

from blobcr_agent.repository import chunks
from blobcr_common import exception


def test_nothing_is_compressed_before_the_upload_speed_is_known():
    p = chunks.CompressionPolicy('auto')
    assert p.encode(b'a' * 65536)[0] == chunks.RAW
    assert p.ratio < 0.1          # but it has learnt from a probe


def test_rule_follows_the_seed_inequality():
    p = chunks.CompressionPolicy('auto')
    p.compress_bps, p.ratio = 500e6, 0.4
    # 1/C + r/U < 1/U  <=>  U < C (1 - r) = 300 MB/s
    assert p.pays(150e6)
    assert not p.pays(1000e6)


def test_auto_stops_compressing_incompressible_data_on_a_fast_link():
    p = chunks.CompressionPolicy('auto')
    tries = []
    real = p._compressor
    p._compressor = lambda: tries.append(1) or real()
    data = os.urandom(65536)
    blobs = [p.encode(data, upload_bps=2e9) for _ in range(64)]
    assert p.ratio > 0.99 and not p.pays(2e9)
    assert all(b[0] == chunks.RAW for b in blobs)
    # it only compresses the periodic probes, on a slice of the chunk
    assert len(tries) == 64 // chunks.PROBE_EVERY


def test_compressible_data_on_a_slow_link_is_compressed():
    p = chunks.CompressionPolicy('auto')
    data = b'checkpoint ' * 6000
    # 1 MB/s: the probe's measured compression speed beats it even on a
    # loaded machine (at 100 MB/s a preempted probe lost, once in CI).
    blob = p.encode(data, upload_bps=1e6)
    assert blob[0] == chunks.ZSTD and len(blob) < len(data) / 10
    name = chunks.object_name(chunks.digest(data))
    assert chunks.decode(name, blob, len(data)) == data


@pytest.mark.parametrize('mutate,why', [
    # A byte flipped (replacing it by a constant was a no-op once in
    # 256 random payloads).
    (lambda b: b[:1] + bytes([b[1] ^ 0xff]) + b[2:], 'hash'),
    (lambda b: b'\x07' + b[1:], 'codec'),
    (lambda b: b'', 'empty'),
    (lambda b: b[:-1], 'hash'),         # short: hashed before padding
    (lambda b: b + b'x', 'bytes'),
])
def test_decode_rejects_damage(mutate, why):
    # A short object is the last chunk of an image extended since, and
    # only its hash tells it from a truncated one.
    data = os.urandom(1000)
    name = hashlib.sha256(data).hexdigest()
    blob = chunks.CompressionPolicy('never').encode(data)
    assert chunks.decode(name, blob, 1000) == data
    with pytest.raises(exception.CorruptObject, match=why):
        chunks.decode(name, mutate(blob), 1000)
