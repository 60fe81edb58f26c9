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

"""Shared live prefetch hints (mirror/hints.py) between mirrors of one
host, on both stores: clones of a group checkpoint's members restart
together; what the first one's guest reads, the second fetches ahead,
its own content (not the first's), and its guest then reads it without
waiting for the repository. An image restarting from a version of no
group, and hints that are not a list of chunk indexes, get nothing.

Between hosts, hints go to the hosts listed in the store as restarting
members of the group, and a host listed late gets what was said before
it came. The RPC casts between real agents are run by the scale
benchmark's test (tests/integration/test_scale_bench.py).
"""

import random
import threading
import time

from blobcr_agent.mirror import hints
from blobcr_agent.mirror import image as image_mod
from blobcr_agent.repository import groups

CHUNK = 64 * 1024
NCHUNKS = 48


def _member(repo, rng, name, group):
    image_id = repo.create_image(name, NCHUNKS * CHUNK,
                                 chunk_size=CHUNK).id
    content = {i: rng.randbytes(CHUNK) for i in range(NCHUNKS)}
    number = repo.commit(image_id, content)
    if group:
        groups.tag(repo, image_id, number, group, 2, project='p1')
    clone = repo.clone(image_id, number).id
    return clone, b''.join(content[i] for i in range(NCHUNKS))


def _wait(predicate, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def test_members_restarting_together_prefetch_each_others_reads(
        repo, tmp_path):
    seed = random.randrange(1 << 30)
    print('seed', seed)
    rng = random.Random(seed)
    hub = hints.HintHub()
    fast_id, _ = _member(repo, rng, 'rank-0', 'job-7')
    slow_id, slow_content = _member(repo, rng, 'rank-1', 'job-7')
    lone_id, _ = _member(repo, rng, 'lone', None)
    attached = [image_mod.AttachedImage(repo, i, None, str(tmp_path / i),
                                        hints=hub, readahead_chunks=0)
                for i in (fast_id, slow_id, lone_id)]
    fast, slow, lone = attached
    try:
        assert fast.hint_scope == slow.hint_scope == \
            groups.record_name('job-7', 'p1')
        assert lone.hint_scope is None
        # Scattered runs, as a restarting rank reads them.
        order = rng.sample(range(NCHUNKS), NCHUNKS // 2)
        others = [i for i in range(NCHUNKS) if i not in order]
        # The slow one's guest has started (a follower fetches for an
        # image whose guest reads), at a chunk of its own.
        first = others.pop()
        slow.read(first * CHUNK, 1)
        assert _wait(lambda: slow.hint_follower.active)
        for index in order:
            fast.read(index * CHUNK, CHUNK)
        assert _wait(lambda: slow.hint_follower.hinted >= set(order)), \
            'the slow member never prefetched the fast one\'s reads'
        for index in order:
            assert slow.read(index * CHUNK, CHUNK) == \
                slow_content[index * CHUNK:(index + 1) * CHUNK]
        stats = slow.stats()
        assert stats['fetched_by'].get('hint') == len(order) * CHUNK
        assert stats['fetched_by'].get('read', 0) == CHUNK    # its first
        assert stats['hints_received'] >= len(order)
        assert fast.stats()['hints_published'] == len(order)
        # What the slow one got by hint it does not send back.
        slow.hints._publishers[slow.id].flush()
        assert slow.stats()['hints_published'] == 1     # its first read
        # Its own reads past the hints are published.
        extra = others.pop()
        slow.read(extra * CHUNK, 1)
        assert _wait(lambda: fast.core.is_present(extra))
        assert lone.fetched_chunks == 0
        assert not any(lone.core.is_present(i) for i in order + [first])
        # A forged or broken message is dropped whole.
        for bad in ('x', [1, 'a'], [-1], [True], list(range(5000))):
            assert hub.receive(slow.hint_scope, bad) == 0
        # Out-of-range indexes are ignored, the rest fetched.
        before = slow.fetched_chunks
        missing = next(i for i in range(NCHUNKS)
                       if not slow.core.is_present(i))
        assert hub.receive(slow.hint_scope, [NCHUNKS + 5, missing]) == 2
        assert _wait(lambda: slow.core.is_present(missing))
        assert slow.fetched_chunks == before + 1
    finally:
        for a in attached:
            a.close(30)
    assert not hub._scopes and not hub._publishers


def test_hinted_fetches_racing_guest_writes_lose_no_write(repo, tmp_path):
    """Hints for chunks the guest is writing at the same moment, from
    several threads: a hinted fetch is never installed over a write
    (every page reads what was last written to it, the rest what the
    version held).
    """
    seed = random.randrange(1 << 30)
    print('seed', seed)
    rng = random.Random(seed)
    hub = hints.HintHub()
    _member(repo, rng, 'rank-0', 'job-9')
    image_id, content = _member(repo, rng, 'rank-1', 'job-9')
    slow = image_mod.AttachedImage(repo, image_id, None,
                                   str(tmp_path / 'slow'), hints=hub,
                                   readahead_chunks=0)
    model = bytearray(content)
    lock = threading.Lock()
    try:
        # Its guest has started: its follower fetches.
        slow.read(0, 1)
        assert _wait(lambda: slow.hint_follower.active)

        def writer(k):
            wrng = random.Random(seed + k)
            for _ in range(40):
                index = wrng.randrange(NCHUNKS)
                page = wrng.randrange(CHUNK // 4096)
                data = wrng.randbytes(4096)
                offset = index * CHUNK + page * 4096
                with lock:      # the model in the order of the writes
                    slow.write(offset, data)
                    model[offset:offset + 4096] = data
        threads = [threading.Thread(target=writer, args=(k,))
                   for k in range(3)]
        for t in threads:
            t.start()
        for _ in range(10):
            hub.receive(slow.hint_scope, rng.sample(range(NCHUNKS), 16))
        for t in threads:
            t.join()
        assert _wait(lambda: not slow.hint_follower.queue)
        time.sleep(0.2)         # the last hinted batch lands
        assert slow.read(0, NCHUNKS * CHUNK) == bytes(model)
        assert slow.stats()['fetched_by'].get('hint')
    finally:
        slow.close(30)


def test_a_read_of_one_chunk_of_a_hinted_batch_waits_for_that_chunk(
        repo, tmp_path, monkeypatch):
    """A guest read of chunk A, fetched as part of a hinted batch whose
    chunk B is slow: it returns once A is installed, not when the whole
    batch is (the repository's reads are held by the test).
    """
    rng = random.Random(5)
    image_id, content = _member(repo, rng, 'rank-0', None)
    a = image_mod.AttachedImage(repo, image_id, None, str(tmp_path / 'a'),
                                prefetch=False, readahead_chunks=0)
    go_a, go_b = threading.Event(), threading.Event()
    fetch = repo.fetch

    def held_fetch(header, number, indices=None, times=None):
        # Chunk 3 first (once go_a is set), the rest once go_b is: the
        # store's own order differs (RADOS answers as it likes).
        got = dict(fetch(header, number, indices, times))
        go_a.wait(30)
        if 3 in got:
            yield 3, got.pop(3)
        go_b.wait(30)
        yield from got.items()
    monkeypatch.setattr(a.repo, 'fetch', held_fetch)
    batch = threading.Thread(target=a.fetch, args=([3, 7], 'hint'))
    read_done = threading.Event()
    try:
        batch.start()
        assert _wait(lambda: 3 in a._fetching)
        reader = threading.Thread(
            target=lambda: (a.fetch_missed([3]), read_done.set()))
        reader.start()
        time.sleep(0.1)
        go_a.set()
        assert read_done.wait(5), \
            'the read of chunk 3 waited for chunk 7 of its batch'
        assert a.read(3 * CHUNK, CHUNK) == content[3 * CHUNK:4 * CHUNK]
    finally:
        go_a.set()
        go_b.set()
        batch.join()
        reader.join()
        assert a.close(30)


def test_a_chunk_goes_out_of_a_host_once_and_not_when_heard_first(
        repo, tmp_path):
    """Two hosts' hubs, each other's ``remote`` (in process: the RPC
    cast between real agents is the scale benchmark test's), two members
    on each. A chunk index leaves a host once, whichever of its members
    reads it, and never from a host that heard it first: what a host
    receives grows with the chunks read, not with the members or hosts
    that read them.
    """
    rng = random.Random(11)
    hubs = {'a': hints.HintHub(), 'b': hints.HintHub()}
    hubs['a'].remote = lambda scope, chunks, hosts: \
        hubs['b'].receive(scope, chunks)
    hubs['b'].remote = lambda scope, chunks, hosts: \
        hubs['a'].receive(scope, chunks)
    members = {}
    for name in ('a1', 'a2', 'b1', 'b2'):
        image_id, _ = _member(repo, rng, 'rank-' + name, 'job-3')
        members[name] = image_mod.AttachedImage(
            repo, image_id, None, str(tmp_path / name),
            hints=hubs[name[0]], readahead_chunks=0)

    def flush_all():
        for m in members.values():
            m.hints._publishers[m.id].flush()

    def published():
        return sum(m.stats()['hints_published'] for m in members.values())
    try:
        order = rng.sample(range(NCHUNKS), NCHUNKS // 2)
        for index in order:
            members['a1'].read(index * CHUNK, CHUNK)
        flush_all()
        assert published() == len(order)
        heard = hubs['b'].totals()['remote_messages']
        assert heard >= 1
        # The other member here, and both there, read the same chunks
        # later: nothing more goes out.
        for name in ('a2', 'b1', 'b2'):
            for index in order:
                members[name].read(index * CHUNK, CHUNK)
        flush_all()
        assert published() == len(order)
        assert hubs['b'].totals()['remote_received'] == len(order)
        assert hubs['b'].totals()['remote_messages'] == heard
        assert hubs['a'].totals()['remote_received'] == 0
        # A chunk first read there goes out of there once, to here.
        extra = next(i for i in range(NCHUNKS) if i not in order)
        for name in ('b2', 'b1'):
            members[name].read(extra * CHUNK, CHUNK)
        flush_all()
        assert published() == len(order) + 1
        assert hubs['a'].totals()['remote_received'] == 1
        assert hubs['a'].totals()['remote_messages'] == 1
        assert _wait(lambda: members['a1'].core.is_present(extra))
    finally:
        for m in members.values():
            m.close(30)


def test_a_member_prefetches_once_its_guest_reads(repo, tmp_path):
    """Hints for a member whose guest has not read yet wait in its
    queue (its prefetch would only slow the members reading now); its
    first read starts them, and they go ahead of its guest.
    """
    rng = random.Random(13)
    hub = hints.HintHub()
    members = [image_mod.AttachedImage(
        repo, _member(repo, rng, 'rank-%d' % k, 'job-5')[0], None,
        str(tmp_path / str(k)), hints=hub, readahead_chunks=0)
        for k in range(2)]
    first, later = members
    try:
        order = rng.sample(range(NCHUNKS), NCHUNKS // 2)
        for index in order:
            first.read(index * CHUNK, CHUNK)
        first.hints._publishers[first.id].flush()
        assert later.hint_follower.received == len(order)
        time.sleep(0.3)
        assert later.fetched_chunks == 0, 'prefetched before its guest read'
        start = order[0]
        later.read(start * CHUNK, 1)
        assert _wait(lambda: later.hint_follower.hinted >= set(order[1:]))
        assert later.stats()['fetched_by'].get('hint') == \
            (len(order) - 1) * CHUNK
    finally:
        for m in members:
            m.close(30)


def test_hints_go_to_the_hosts_of_the_group_only(repo, tmp_path,
                                                 monkeypatch):
    """Three hosts' hubs on one store, each listing itself when a member
    of a scope attaches there (hints.Listeners); ``remote`` delivers to
    the hosts it is given, in process. Host c restarts a member of
    another group: it hears nothing of this one. Host b's member
    attaches after a's guest read: b gets all of it at a's next look
    (its publisher's refresh), then each new read once.
    """
    monkeypatch.setattr(hints, 'REFRESH', 0.0)
    rng = random.Random(5)
    hubs = {}
    for name in 'abc':
        hubs[name] = hints.HintHub(listeners=hints.Listeners(repo, name))
    sent = []

    def remote_of(source):
        def remote(scope, chunks, hosts):
            assert hosts is not None and source not in hosts
            sent.append((source, tuple(hosts), len(chunks)))
            for host in hosts:
                hubs[host].receive(scope, chunks)
        return remote
    for name in 'abc':
        hubs[name].remote = remote_of(name)
    a_id, _ = _member(repo, rng, 'rank-a', 'job-l')
    b_id, b_content = _member(repo, rng, 'rank-b', 'job-l')
    c_id, _ = _member(repo, rng, 'rank-c', 'job-other')
    members = {}
    try:
        for host, image_id in (('a', a_id), ('c', c_id)):
            members[host] = image_mod.AttachedImage(
                repo, image_id, None, str(tmp_path / host),
                hints=hubs[host], readahead_chunks=0)
        order = rng.sample(range(NCHUNKS), 10)
        for index in order:
            members['a'].read(index * CHUNK, CHUNK)
        members['a'].hints._publishers[members['a'].id].flush()
        # No other host restarts a member of job-l yet.
        assert sent == []
        members['b'] = image_mod.AttachedImage(
            repo, b_id, None, str(tmp_path / 'b'), hints=hubs['b'],
            readahead_chunks=0)
        members['a'].hints._publishers[members['a'].id].flush()
        assert sent == [('a', ('b',), len(order))]
        assert hubs['b'].totals()['remote_received'] == len(order)
        # b's guest reads; what it fetched by hint is its own content.
        members['b'].read(order[0] * CHUNK, CHUNK)
        assert _wait(lambda: all(members['b'].core.is_present(i)
                                 for i in order))
        index = order[1]
        assert members['b'].read(index * CHUNK, CHUNK) == \
            b_content[index * CHUNK:(index + 1) * CHUNK]
        # A new first read on a goes to b alone, once.
        extra = next(i for i in range(NCHUNKS) if i not in order)
        members['a'].read(extra * CHUNK, CHUNK)
        members['a'].hints._publishers[members['a'].id].flush()
        assert sent[-1] == ('a', ('b',), 1)
        # b said nothing of its own (it read what it heard): it sent
        # nothing, not even back to a; c heard nothing.
        assert [s for s in sent if s[0] != 'a'] == []
        assert hubs['c'].totals()['remote_received'] == 0
        assert hubs['c'].totals()['remote_messages'] == 0
    finally:
        for m in members.values():
            m.close(30)


def test_a_store_that_cannot_list_the_hosts_keeps_those_known(
        repo, tmp_path, monkeypatch, caplog):
    """The listeners cannot be read any more (the store is down): the
    hosts known go on hearing, the hub counts each failed look and says
    so once, not at every look.
    """
    monkeypatch.setattr(hints, 'REFRESH', 0.0)
    rng = random.Random(9)
    hubs = {n: hints.HintHub(listeners=hints.Listeners(repo, n))
            for n in 'ab'}
    heard = []
    hubs['a'].remote = lambda scope, chunks, hosts: heard.append(
        (tuple(hosts), len(chunks)))
    hubs['b'].remote = lambda scope, chunks, hosts: None
    a_id, _ = _member(repo, rng, 'rank-a', 'job-d')
    b_id, _ = _member(repo, rng, 'rank-b', 'job-d')
    members = [image_mod.AttachedImage(repo, a_id, None, str(tmp_path / 'a'),
                                       hints=hubs['a'], readahead_chunks=0),
               image_mod.AttachedImage(repo, b_id, None, str(tmp_path / 'b'),
                                       hints=hubs['b'], readahead_chunks=0)]
    publisher = hubs['a']._publishers[a_id]
    try:
        members[0].read(0, CHUNK)
        publisher.flush()
        assert _wait(lambda: heard and heard[-1] == (('b',), 1))

        def down(scope):
            raise RuntimeError('store unreachable')
        monkeypatch.setattr(hubs['a'].listeners, 'hosts', down)
        caplog.clear()
        for index in (1, 2, 3):
            members[0].read(index * CHUNK, CHUNK)
            publisher.flush()
        assert _wait(lambda: sum(n for h, n in heard if h == ('b',)) == 4)
        assert hubs['a'].totals()['remote_errors'] >= 3
        said = [r for r in caplog.records if 'not read' in r.getMessage()]
        assert len(said) == 1
    finally:
        for m in members:
            m.close(30)
