"""actors/subscriptions.py without Ray: composed queries' buffers and driver pulls."""

from __future__ import annotations

from actors.subscriptions import Subscriptions
from operators.events import Cti, Insert

A, B, C = Insert("a", 1, 2, "x"), Insert("b", 2, 3, "y"), Cti(3)


def test_a_subscriber_gets_everything_emitted_after_it_subscribed():
    r = Subscriptions()
    r.buffer([A])  # nobody listens yet
    first = r.subscribe("t1", handle="h1", port=0)
    r.buffer([B])
    second = r.subscribe("t2", handle="h2", port=1)
    r.buffer([C])
    ready, waiting = r.due(flush=True, size=100)
    assert [(t.dst, t.handle, t.port, msgs) for t, msgs in ready] == [
        ("t1", "h1", 0, [B, C]), ("t2", "h2", 1, [C])]
    assert not waiting and (first, second) == tuple(r.targets())
    assert r.due(flush=True, size=100) == ([], False)  # sent buffers are emptied


def test_a_partial_buffer_waits_until_it_is_full_or_flushed():
    r = Subscriptions()
    r.subscribe("t", handle=None, port=0)
    r.buffer([A])
    assert r.due(flush=False, size=2) == ([], True)
    r.buffer([B, C])
    ready, waiting = r.due(flush=False, size=2)
    assert [msgs for _, msgs in ready] == [[A, B, C]] and not waiting


def test_unsubscribe_and_drop_forget_a_subscriber():
    r = Subscriptions()
    r.subscribe("t1", handle=None, port=0)
    gone = r.subscribe("t2", handle=None, port=0)
    assert r.drop(gone) and not r.drop(gone)
    assert r.unsubscribe("t1") and not r.unsubscribe("t1")
    r.buffer([A])
    assert r.targets() == [] and r.due(flush=True, size=1) == ([], False)


def test_pulls_queue_output_until_taken():
    r = Subscriptions()
    assert not r.hand_out([A])  # nobody pulls: nobody to wake
    p1 = r.open_pull([A])       # a snapshot to start with
    p2 = r.open_pull([])
    assert p1 != p2 and r.waiting(p1) and not r.waiting(p2)
    assert r.hand_out([B]) and not r.hand_out([])
    assert r.take(p1) == [A, B] and r.take(p2) == [B]
    assert r.waiting(p1) is False and r.take(p1) == []
    r.close_pull(p1)
    assert r.waiting(p1) is None and r.take(p1) == []
    r.hand_out([C])
    assert r.take(p2) == [C]
