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

"""Delta packs (repository/chunkpacks.py) on the local store: entries
read back by reference, the index lists each entry's base, damage is
refused, and a digest that would read as a reference is packed.
"""

import hashlib
import random

from hypothesis import given
from hypothesis import strategies as st
import pytest

from blobcr_agent.repository.backends import base
from blobcr_agent.repository.backends import local
from blobcr_agent.repository import chunkpacks
from blobcr_agent.repository import repository
from blobcr_common import exception

# A base is a digest or a reference, never 32 zero bytes (no base).
bases = st.binary(min_size=32, max_size=32).filter(any)
entries = st.lists(st.tuples(st.binary(min_size=1, max_size=3000),
                             st.one_of(st.none(), bases)),
                   min_size=1, max_size=12)


def _write(backend, items, max_bytes):
    batch = backend.batch()
    writer = chunkpacks.PackWriter(batch, max_bytes)
    refs = [writer.append(blob, over) for blob, over in items]
    writer.close()
    batch.wait()
    return writer, refs


@given(items=entries, max_bytes=st.sampled_from([1, 4000, 1 << 20]))
def test_entries_read_back_and_the_index_lists_their_bases(
        tmp_path_factory, items, max_bytes):
    backend = local.LocalBackend(str(tmp_path_factory.mktemp('store')))
    writer, refs = _write(backend, items, max_bytes)
    assert all(chunkpacks.is_ref(r) for r in refs)
    packs = {chunkpacks.pack_of(r) for r in refs}
    assert writer.packs == len(packs)
    assert set(backend.list(base.CHUNK)) == packs
    for ref, (blob, _) in zip(refs, items):
        assert chunkpacks.load(backend, ref) == blob
    assert dict(chunkpacks.load_many(backend, refs)) == \
        {r: b for r, (b, _) in zip(refs, items)}
    for pack in packs:
        expected = {over for r, (_, over) in zip(refs, items)
                    if over and chunkpacks.pack_of(r) == pack}
        assert chunkpacks.read_bases(backend, pack) == expected


def test_an_index_longer_than_one_tail_read(tmp_path):
    backend = local.LocalBackend(str(tmp_path))
    rnd = random.Random(3)
    items = [(rnd.randbytes(50), rnd.randbytes(32)) for _ in range(2000)]
    _, refs = _write(backend, items, 1 << 30)
    (pack,) = {chunkpacks.pack_of(r) for r in refs}
    assert chunkpacks.read_bases(backend, pack) == {o for _, o in items}


def test_a_damaged_entry_or_trailer_is_refused(tmp_path):
    backend = local.LocalBackend(str(tmp_path))
    _, refs = _write(backend, [(b'x' * 100, None), (b'y' * 100, b'b' * 32)],
                     1 << 20)
    name = chunkpacks.pack_of(refs[0])
    path = backend._path(base.CHUNK, name)
    with open(path, 'r+b') as f:
        f.seek(10)
        f.write(b'X')
    with pytest.raises(exception.CorruptObject, match='checksum'):
        chunkpacks.load(backend, refs[0])
    assert chunkpacks.load(backend, refs[1]) == b'y' * 100
    (_, error), = chunkpacks.load_many(backend, [refs[0]])
    assert isinstance(error, exception.CorruptObject)
    with open(path, 'r+b') as f:
        f.seek(-1, 2)
        f.write(b'?')
    with pytest.raises(exception.CorruptObject, match='trailer'):
        chunkpacks.read_bases(backend, name)


def test_a_digest_is_never_read_as_a_reference():
    rnd = random.Random(5)
    for _ in range(1000):
        assert not chunkpacks.is_ref(
            hashlib.sha256(rnd.randbytes(64)).digest())
    assert chunkpacks.PackWriter.must_pack(chunkpacks.MAGIC + bytes(24))


def test_a_chunk_whose_digest_looks_like_a_reference_is_packed(
        tmp_path, monkeypatch):
    """Forced: such a digest comes once in 2**64 chunks."""
    repo = repository.Repository(local.LocalBackend(str(tmp_path)),
                                 chunk_size=8192, fanout=4, gc_grace=0)
    image = repo.create_image('img', 4 * 8192).id
    data = random.Random(1).randbytes(8192)
    real = hashlib.sha256(data).digest()
    forged = chunkpacks.MAGIC + real[8:]
    monkeypatch.setattr('blobcr_agent.repository.chunks.digest',
                        lambda d: forged if d == data else
                        hashlib.sha256(d).digest())
    number = repo.commit(image, {1: data})
    header = repo.image(image)
    t, root = repo.version_tree(header, number)
    leaf = t.lookup(root, 1)
    assert leaf != forged and chunkpacks.is_ref(leaf)
    assert repo.read(image, number, 8192, 8192) == data
    assert dict(repo.fetch(header, number)) == {1: data}
