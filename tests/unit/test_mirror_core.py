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

"""The native mirror core against a model, without FUSE.

Random interleavings of writes, COMMITs and persister takes: every chunk
the persister takes must hold exactly the content it had at the COMMIT,
whatever was written since; reads always return the current image. A
write that would wait (non-blocking mode) makes the test take a chunk
first, as the persister thread would.
"""

import os
import threading

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


def _write_nonblock(m, offset, payload, persist_one):
    """A write that would wait lets the "persister" (persist_one) run."""
    while True:
        try:
            assert m.write(offset, payload, True) == len(payload)
            return
        except _native.BusyError:
            assert persist_one() is not False, \
                'a write waits with nothing in flight'


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

            def persist_one():
                if not take():           # a held (offline) snapshot
                    m.release_hold()
            _write_nonblock(m, offset, payload, persist_one)
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
    with pytest.raises(ValueError):
        _native.Mirror(str(tmp_path), CHUNK, CHUNK, spill_chunks=-1)
    m = _native.Mirror(str(tmp_path), 2 * CHUNK, CHUNK)
    with pytest.raises(ValueError):
        m.write(2 * CHUNK - 1, b'ab')
    with pytest.raises(ValueError):
        m.install(0, b'short')
    with pytest.raises(OSError):
        _native.Mirror(os.path.join(str(tmp_path), 'missing', 'dir'),
                       CHUNK, CHUNK)
    m.close()


def _race(*functions):
    """Run the functions in threads released at the same instant (each
    core call releases the GIL).
    """
    barrier = threading.Barrier(len(functions))
    errors = []

    def run(f):
        try:
            barrier.wait()
            f()
        except Exception as e:         # reported by the caller
            errors.append(e)
    threads = [threading.Thread(target=run, args=(f,)) for f in functions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_a_fetch_never_overwrites_a_whole_chunk_write(tmp_path):
    """A guest write that covers an absent chunk races the install of
    the same chunk's (older) repository content, as a lazy fetch or the
    prefetcher would: the write must win whatever the interleaving, and
    a reader meanwhile sees old or new bytes, never a hole (zeros).
    """
    big = 4 * 1024 * 1024                # a pwrite long enough to race
    for r in range(12):
        (tmp_path / str(r)).mkdir()
        m = _native.Mirror(str(tmp_path / str(r)), 2 * big, big)
        old, new = b'\x01' * big, bytes([2 + r]) * big
        seen = []

        def read():
            for _ in range(20):
                got = m.read(0, big)
                if not isinstance(got, list):
                    seen.append(set(got))
        _race(lambda: m.write(0, new), lambda: m.install(0, old), read)
        assert m.read(0, big) == new, 'round %d: the fetch won' % r
        for byte_values in seen:
            assert byte_values <= {old[0], new[0]}, byte_values
        m.close()


def test_a_failed_persist_drops_copies_in_flight(tmp_path):
    """snapshot_done(False) while writers copy chunks aside: the next
    version holds what the image held at its COMMIT, not a stale copy.
    """
    big = 2 * 1024 * 1024
    n = 4
    for r in range(12):
        (tmp_path / str(r)).mkdir()
        m = _native.Mirror(str(tmp_path / str(r)), n * big, big,
                           'selective-cow', n)
        image = bytearray(b'\x01' * (n * big))
        m.write(0, bytes(image))
        m.commit()
        payloads = [bytes([10 + r * n + c]) * 512 for c in range(n)]
        writers = [lambda c=c: m.write(c * big, payloads[c])
                   for c in range(n)]
        _race(lambda: m.snapshot_done(False), *writers)
        for c in range(n):
            image[c * big:c * big + 512] = payloads[c]
        assert m.commit() == n
        taken = {}
        while True:
            item = m.take()
            if item is None:
                break
            taken[item[0]] = item[1]
        m.snapshot_done(True)
        for c in range(n):
            assert taken[c] == bytes(image[c * big:(c + 1) * big]), \
                'round %d: chunk %d is a stale copy' % (r, c)
        m.close()


@pytest.mark.parametrize('mode', MODES)
def test_no_commit_clears_an_earlier_snapshot(tmp_path, mode):
    """Every chunk taken is not the end of a snapshot: snapshot_done is.
    A COMMIT in between (selective-cow: a second generation) must keep
    its chunks when the earlier one ends; the modes that keep one
    snapshot in flight refuse it.
    """
    m = _native.Mirror(str(tmp_path), 4 * CHUNK, CHUNK, mode)
    assert m.max_snapshots == (4 if mode == 'selective-cow' else 1)
    m.write(0, b'a' * CHUNK)
    assert m.commit() == 1
    m.release_hold()
    assert m.take()[0] == 0
    assert m.take() is None
    m.write(CHUNK, b'b' * CHUNK)
    if mode == 'selective-cow':
        assert m.commit() == 1
        assert m.take() is None          # the oldest is fully taken
        m.snapshot_done(True)
    else:
        with pytest.raises(_native.BusyError):
            m.commit()
        m.snapshot_done(True)
        assert m.commit() == 1
    assert m.take() == (1, b'b' * CHUNK)
    assert m.take() is None
    m.snapshot_done(True)
    assert m.stats()['generations'] == 0
    m.close()


pipe_op = st.one_of(
    st.tuples(st.just('write'), st.integers(0, SIZE - 1),
              st.integers(1, 2 * CHUNK), st.integers(1, 255)),
    st.tuples(st.just('commit')),
    st.tuples(st.just('take')),
    st.tuples(st.just('fail')),
    st.tuples(st.just('read'), st.integers(0, SIZE - 1),
              st.integers(0, 3 * CHUNK)),
)


@settings(max_examples=200, deadline=None)
@given(ops=st.lists(pipe_op, max_size=80),
       slots=st.integers(1, 4), spill=st.integers(0, 4))
def test_pipelined_generations(tmp_path_factory, ops, slots, spill):
    """selective-cow: COMMITs without waiting for the persister. take()
    serves the oldest generation with exactly its COMMIT content, returns
    None when it is fully taken; snapshot_done(True) ends only the
    oldest; snapshot_done(False) ends every one and makes all their
    chunks dirty again (the next COMMIT carries them); COMMIT is Busy
    with four in flight, or with the buffer full. ``spill``: buffer slots
    in the spill file, past the ``slots`` in memory.
    """
    directory = str(tmp_path_factory.mktemp('m'))
    m = _native.Mirror(directory, SIZE, CHUNK, 'selective-cow', slots,
                       spill_chunks=spill)
    for c in range(NCHUNKS):
        m.install(c, bytes(min(CHUNK, SIZE - c * CHUNK)))
    image = bytearray(SIZE)
    gens = []         # [snapshot, untaken, chunks] per generation, oldest
    #                   first: version k = version k-1 + generation k's
    #                   chunks, each with its content at its COMMIT
    dirty = set()
    stable = []           # (content of each stable version)
    version = bytes(SIZE)     # the last stable version's content

    def chunk(data, c):
        return data[c * CHUNK:(c + 1) * CHUNK]

    def take():
        """One step of the persister; False if nothing is in flight."""
        nonlocal version
        if not gens:
            assert m.take() is None
            return False
        snap, untaken, _ = gens[0]
        item = m.take()
        if item is None:
            assert not untaken, 'take() ended early: %s left' % untaken
            m.snapshot_done(True)
            version = gens.pop(0)[0]
            stable.append(version)
            return True
        index, content = item
        assert index in untaken, 'chunk %d not in the oldest' % index
        untaken.discard(index)
        assert content == chunk(snap, index)
        return True

    for step in ops:
        if step[0] == 'write':
            _, offset, length, fill = step
            length = min(length, SIZE - offset)
            payload = bytes([fill]) * length
            _write_nonblock(m, offset, payload, take)
            image[offset:offset + length] = payload
            dirty.update(range(offset // CHUNK,
                               (offset + length - 1) // CHUNK + 1))
        elif step[0] == 'commit':
            before = m.stats()
            try:
                count = m.commit()
            except _native.BusyError:
                after = m.stats()
                assert len(gens) == 4 or after['busy_full'] > \
                    before['busy_full']
                continue
            assert len(gens) < 4
            assert count == len(dirty)
            assert sorted(m.snapshot_chunks(-1)) == sorted(dirty)
            gens.append([bytes(image), set(dirty), set(dirty)])
            dirty = set()
        elif step[0] == 'take':
            take()
        elif step[0] == 'fail' and gens:
            m.snapshot_done(False)
            # The chunks of every generation in flight are dirty again:
            # the next COMMIT carries them all (checked there, exactly).
            for _, _, members in gens:
                dirty |= members
            gens = []
            assert m.stats()['dirty'] == len(dirty)
            assert m.stats()['generations'] == 0
            assert m.stats()['scheduled'] == 0
        elif step[0] == 'read':
            _, offset, length = step
            assert m.read(offset, length) == bytes(image[offset:offset +
                                                         length])
        assert m.stats()['generations'] == len(gens)
    while take():
        pass
    stats = m.stats()
    assert stats['dirty'] == len(dirty)
    assert stats['spilled'] <= stats['cow_copies']
    assert spill or not stats['spilled']
    for c in range(NCHUNKS):
        # what the mirror holds = the last stable version + the dirty
        assert c in dirty or chunk(image, c) == chunk(version, c)
    m.close()


def test_failure_after_restart_dirties_every_generation(tmp_path):
    """After a SIGKILL with several generations in flight, the parked
    ones are counted by recovery() and snapshot_done(False) makes the
    chunks of all of them dirty again, from the state files alone.
    """
    directory = str(tmp_path)
    m = _native.Mirror(directory, 4 * CHUNK, CHUNK)
    m.write(0, b'a' * CHUNK)
    assert m.commit() == 1
    m.write(0, b'b' * CHUNK)           # copied aside for generation 1
    m.write(CHUNK, b'c' * CHUNK)
    assert m.commit() == 2
    m.write(2 * CHUNK, b'd' * CHUNK)
    assert m.commit() == 1
    assert m.stats()['multi_gen'] == 1
    assert m.stats()['dirty'] == 0
    del m                                # no close(): like a crash
    again = _native.Mirror(directory, 4 * CHUNK, CHUNK)
    assert again.stats()['generations'] == 0     # parked, not served
    assert again.take() is None
    assert again.snapshot_chunks(0) == [0]
    assert again.snapshot_chunks(1) == [0, 1]
    assert again.snapshot_chunks(-1) == [2]
    # chunk 0: generation 0's copy was in memory
    assert again.recovery() == {'snapshot': 3, 'untaken': 3, 'lost': 1}
    again.snapshot_done(False)
    assert again.stats()['dirty'] == 3
    assert again.snapshot_chunks() == []
    assert again.commit() == 3
    assert again.take() is not None
    again.close()


def test_resume_keeps_the_oldest_and_dirties_the_rest(tmp_path):
    directory = str(tmp_path)
    m = _native.Mirror(directory, 4 * CHUNK, CHUNK)
    m.write(0, b'a' * CHUNK)
    m.write(CHUNK, b'a' * CHUNK)
    assert m.commit() == 2
    m.write(2 * CHUNK, b'c' * CHUNK)
    assert m.commit() == 1
    del m
    again = _native.Mirror(directory, 4 * CHUNK, CHUNK)
    assert again.recovery() == {'snapshot': 3, 'untaken': 3, 'lost': 0}
    assert again.requeue([0, 1]) == []
    assert again.resume() == 2
    assert again.stats()['dirty'] == 1          # generation 2's chunk
    assert sorted([again.take()[0], again.take()[0]]) == [0, 1]
    assert again.take() is None
    again.snapshot_done(True)
    assert again.commit() == 1
    assert again.take() == (2, b'c' * CHUNK)
    again.close()


quiet_op = st.one_of(
    st.tuples(st.just('write'), st.integers(0, SIZE - 1),
              st.integers(1, 2 * CHUNK)),
    st.tuples(st.just('commit')),
    st.tuples(st.just('mark')),
    st.tuples(st.just('ask'), st.integers(0, 20)),
)


@settings(max_examples=150, deadline=None)
@given(ops=st.lists(quiet_op, max_size=50))
def test_quiet_dirty_names_what_was_not_written_since(tmp_path_factory, ops):
    """quiet_dirty(clock of mark k): the chunks dirty now that no write
    touched after mark k (upload-ahead's "quiet for a round").
    """
    # A slot per chunk: nothing takes the snapshot's chunks between two
    # 'commit' steps, so a copy-on-write that found the buffer full
    # would wait for ever (two slots did, with three chunks written
    # after a COMMIT: --hypothesis-seed=4).
    m = _native.Mirror(str(tmp_path_factory.mktemp('q')), SIZE, CHUNK,
                       'selective-cow', NCHUNKS)
    for c in range(NCHUNKS):
        m.install(c, bytes(min(CHUNK, SIZE - c * CHUNK)))
    dirty = set()
    committed = False
    last_write = {}         # chunk -> the clock quiet_dirty gave it
    written = []            # chunk sets of the writes, in order
    marks = []              # (clock, number of writes then)
    for step in ops:
        if step[0] == 'write':
            _, offset, length = step
            length = min(length, SIZE - offset)
            m.write(offset, b'w' * length)
            chunks = set(range(offset // CHUNK,
                               (offset + length - 1) // CHUNK + 1))
            dirty |= chunks
            for c in chunks:
                last_write.pop(c, None)
            written.append(chunks)
        elif step[0] == 'commit':
            while m.take() is not None:
                pass
            if committed:
                m.snapshot_done(True)
            m.commit()
            committed = True
            dirty = set()
        elif step[0] == 'mark':
            clock, everything, _ = m.quiet_dirty()
            assert set(everything) == dirty
            marks.append((clock, len(written)))
        elif marks:
            clock, at = marks[step[1] % len(marks)]
            since = set().union(*written[at:]) if written[at:] else set()
            _, quiet, writes = m.quiet_dirty(clock)
            assert quiet == sorted(dirty - since)
            # A chunk's clock changes with a write to it, and only then.
            for c, w in zip(quiet, writes):
                assert last_write.get(c) in (None, w), (c, last_write, w)
                last_write[c] = w
    m.close()
