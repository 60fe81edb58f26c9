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

"""The path-copying version tree against a dict model."""

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import pytest

from blobcr_agent.repository.backends import local
from blobcr_agent.repository import tree
from blobcr_common import exception

digests = st.one_of(st.none(), st.binary(min_size=32, max_size=32).filter(
    any))


@pytest.fixture
def store(tmp_path):
    backend = local.LocalBackend(str(tmp_path / 'store'))
    yield tree.NodeStore(backend, cache_bytes=0)   # every read hits disk
    backend.close()


def _write(store, t, root, changes):
    return _write_with(store, lambda c, w: t.update(root, c, w), changes)


@settings(max_examples=100, deadline=None)
@given(nchunks=st.integers(1, 300), fanout=st.integers(2, 9), data=st.data())
def test_versions_share_structure_and_read_back(tmp_path_factory, nchunks,
                                                fanout, data):
    backend = local.LocalBackend(str(tmp_path_factory.mktemp('s')))
    store = tree.NodeStore(backend, cache_bytes=0)
    t = tree.Tree(store, nchunks, fanout)
    root, model, history = None, {}, []
    for _ in range(data.draw(st.integers(1, 4))):
        changes = data.draw(st.dictionaries(st.integers(0, nchunks - 1),
                                            digests, max_size=20))
        root, writer = _write(store, t, root, changes)
        for index, d in changes.items():
            if d is None:
                model.pop(index, None)
            else:
                model[index] = d
        # Path copying: at most depth nodes per changed leaf.
        assert writer.nodes <= max(1, len(changes)) * t.depth
        history.append((root, dict(model)))
    for old_root, old_model in history:
        assert dict(t.items(old_root)) == old_model
        for index in range(nchunks):
            assert t.lookup(old_root, index) == old_model.get(index)
    backend.close()


def test_commit_cost_is_logarithmic(store):
    t = tree.Tree(store, 64 ** 3, 64)
    every_leaf = {i: b'\1' * 32 for i in range(0, 64 ** 3, 64)}
    root, _ = _write(store, t, None, every_leaf)
    _, writer = _write(store, t, root, {5: b'\2' * 32})
    assert writer.nodes == t.depth == 3


def test_corrupt_node_is_detected(store, tmp_path):
    t = tree.Tree(store, 100, 4)
    root, writer = _write(store, t, None, {7: b'\3' * 32})
    name = tree.pack_name(root)
    path = store.backend._path('node', name)
    raw = bytearray(open(path, 'rb').read())
    raw[40] ^= 0xff
    open(path, 'wb').write(raw)
    with pytest.raises(exception.CorruptObject):
        t.lookup(root, 7)


def test_index_out_of_range(store):
    t = tree.Tree(store, 10, 4)
    with pytest.raises(exception.InvalidInput):
        _write(store, t, None, {10: b'\1' * 32})


def _write_with(store, build, changes):
    batch = store.backend.batch()
    writer = tree.PackWriter(store, pack_max_bytes=4096, batch=batch)
    root = build(changes, writer)
    writer.close()
    batch.wait()
    return root, writer
