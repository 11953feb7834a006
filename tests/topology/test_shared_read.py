"""SharedRead: readers of one source at the same time share one pass over it, each sees the
whole sequence, and a later reader reads the source again (topology/building/shared_read.py)."""

from __future__ import annotations

import gc
import threading

import pytest

from topology.building.shared_read import SharedRead


def _counted(items: list[int]) -> tuple[SharedRead, list[int]]:
    made: list[int] = []

    def make():
        made.append(1)
        return iter(list(items))

    return SharedRead(make), made


def test_readers_in_threads_share_one_pass_and_each_sees_everything():
    shared, made = _counted(list(range(500)))
    readers = [shared() for _ in range(4)]  # joined before any reads, as held queries are
    got: list[list[int]] = [[] for _ in readers]

    def read(i):
        got[i].extend(readers[i])

    threads = [threading.Thread(target=read, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [list(range(500))] * 4
    assert len(made) == 1


def test_the_pass_holds_only_what_the_slowest_reader_has_not_taken():
    shared, made = _counted(list(range(100)))
    fast, slow = shared(), shared()
    assert [next(fast) for _ in range(10)] == list(range(10))
    current = shared._pass
    assert current is not None and len(current.held) == 10
    assert [next(slow) for _ in range(10)] == list(range(10))
    assert len(current.held) == 0 and current.base == 10
    assert list(fast) == list(range(10, 100)) and list(slow) == list(range(10, 100))
    assert len(made) == 1


def test_a_reader_after_the_pass_moved_on_reads_again():
    shared, made = _counted([1, 2, 3])
    first = shared()
    assert next(first) == 1
    late = shared()  # the pass has dropped its first item: a new read, from the beginning
    assert list(late) == [1, 2, 3] and list(first) == [2, 3]
    assert list(shared()) == [1, 2, 3]  # one run after another: each reads again
    assert len(made) == 3


def test_a_reader_dropped_unread_does_not_hold_the_pass():
    shared, _ = _counted(list(range(50)))
    reader, unread = shared(), shared()
    del unread
    gc.collect()
    assert list(reader) == list(range(50))
    assert shared._pass is not None and len(shared._pass.held) == 0


def test_a_failing_source_fails_every_reader_of_the_pass():
    def make():
        yield 1
        raise RuntimeError("the table went away")

    shared = SharedRead(make)
    a, b = shared(), shared()
    assert next(a) == 1 and next(b) == 1
    with pytest.raises(RuntimeError, match="went away"):
        next(a)
    with pytest.raises(RuntimeError, match="went away"):
        next(b)
    again = shared()  # the failed pass is not joined: a new read, which fails as well
    assert next(again) == 1
    with pytest.raises(RuntimeError, match="went away"):
        next(again)


def test_all_readers_leaving_early_stop_the_read():
    closed = []

    def make():
        try:
            yield from range(10)
        finally:
            closed.append(1)

    shared = SharedRead(make)
    a, b = shared(), shared()
    next(a)
    next(b)
    a.close()
    assert not closed  # b still reads
    b.close()
    assert closed == [1]
    assert list(shared()) == list(range(10))  # the stopped pass is not joined: a new read
