"""The native mirror core against a model, without FUSE.

Random interleavings of writes, COMMITs and persister takes: every chunk
the persister takes must hold exactly the content it had at the COMMIT,
whatever was written since; reads always return the current image. A
write that would wait (non-blocking mode) makes the test take a chunk
first, as the persister thread would.
"""

import os

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import pytest

from blobcr_agent import _native

CHUNK = 4096
NCHUNKS = 12
SIZE = NCHUNKS * CHUNK - 100          # a short last chunk
MODES = ['selective-cow', 'live-cow', 'live-precopy', 'offline']

op = st.one_of(
    st.tuples(st.just('write'), st.integers(0, SIZE - 1),
              st.integers(1, 2 * CHUNK), st.integers(1, 255)),
    st.tuples(st.just('commit')),
    st.tuples(st.just('take')),
    st.tuples(st.just('read'), st.integers(0, SIZE - 1),
              st.integers(0, 3 * CHUNK)),
)


@pytest.mark.parametrize('mode', MODES)
@settings(max_examples=150, deadline=None)
@given(ops=st.lists(op, max_size=60), data=st.data())
def test_taken_chunks_hold_their_commit_content(tmp_path_factory, mode, ops,
                                                data):
    directory = str(tmp_path_factory.mktemp('m'))
    m = _native.Mirror(directory, SIZE, CHUNK, mode, 2)
    for c in range(NCHUNKS):        # as if fetched: every chunk present
        m.install(c, bytes(min(CHUNK, SIZE - c * CHUNK)))
    image = bytearray(SIZE)
    snapshot = None
    untaken = set()

    def take():
        item = m.take()
        if item is None:
            return False
        index, content = item
        assert index in untaken
        untaken.discard(index)
        assert content == snapshot[index * CHUNK:(index + 1) * CHUNK]
        return True

    for step in ops:
        if step[0] == 'write':
            _, offset, length, fill = step
            length = min(length, SIZE - offset)
            payload = bytes([fill]) * length
            while True:
                try:
                    assert m.write(offset, payload, True) == length
                    break
                except _native.BusyError:
                    if not take():       # a held (offline) snapshot
                        m.release_hold()
            image[offset:offset + length] = payload
        elif step[0] == 'commit':
            while untaken:               # the previous one, persisted
                assert take()
            if snapshot is not None:
                m.snapshot_done(True)
            count = m.commit(mode == 'offline')
            snapshot = bytes(image)
            untaken = set(m.snapshot_chunks())
            assert count == len(untaken)
        elif step[0] == 'take' and untaken:
            take()
        elif step[0] == 'read':
            _, offset, length = step
            assert m.read(offset, length) == bytes(image[offset:offset +
                                                         length])
    while untaken:
        assert take()
    assert m.take() is None
    m.close()


def test_state_survives_a_reopen(tmp_path):
    """The state file is what a restarted agent finds after SIGKILL."""
    directory = str(tmp_path)
    m = _native.Mirror(directory, 4 * CHUNK, CHUNK)
    assert m.write(0, b'x' * CHUNK) == CHUNK
    m.commit()
    m.write(CHUNK, b'y' * CHUNK)
    del m                                # no close(): like a crash
    again = _native.Mirror(directory, 4 * CHUNK, CHUNK)
    assert again.snapshot_chunks() == [0]
    assert again.stats()['dirty'] == 1
    assert again.read(0, CHUNK) == b'x' * CHUNK
    assert again.recovery() == {'snapshot': 1, 'untaken': 1, 'lost': 0}
    again.close()


def test_bad_arguments_are_refused(tmp_path):
    with pytest.raises(ValueError):
        _native.Mirror(str(tmp_path), 0, CHUNK)
    with pytest.raises(ValueError):
        _native.Mirror(str(tmp_path), CHUNK, CHUNK, 'no-such-mode')
    m = _native.Mirror(str(tmp_path), 2 * CHUNK, CHUNK)
    with pytest.raises(ValueError):
        m.write(2 * CHUNK - 1, b'ab')
    with pytest.raises(ValueError):
        m.install(0, b'short')
    with pytest.raises(OSError):
        _native.Mirror(os.path.join(str(tmp_path), 'missing', 'dir'),
                       CHUNK, CHUNK)
    m.close()
