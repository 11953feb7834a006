"""The two cases of the CTI article (docs/ctis.md) as timelines.

Three rows of the article's SQL table share one start time (2010-08-10). With a CTI after
every event stamped one tick *past* the event (``delay=-1``) only the first row survives; with
the CTI *at* the event (``delay=0``) all three survive but nothing flushes them until a later
CTI: the end of input, or the idle timer the article adds for a bursty source.
"""

from __future__ import annotations

import datetime as dt

from operators.cht import to_cht, validate
from operators.events import Cti, Insert
from operators.ingress import AdvanceTime, Ingress, to_ticks

T = to_ticks(dt.datetime(2010, 8, 10))  # c2 of every row
ROWS = [{"c1": 1, "c2": dt.datetime(2010, 8, 10)},
        {"c1": 2, "c2": dt.datetime(2010, 8, 10)},
        {"c1": 3, "c2": dt.datetime(2010, 8, 10)}]


def check(src: Ingress) -> None:
    src._check()
    s = src.stats
    assert s["received"] == s["processed"] + s["dropped"] + s["adjusted"] + s["dead_lettered"]


def flushed(messages: list[object]) -> list[int]:
    """The c1 of the events a CTI has committed: those that start strictly before it."""
    times = [m.time for m in messages if type(m) is Cti]
    cti = max(times, default=None)
    return [p["c1"] for s, _, p in to_cht(messages) if cti is not None and s < cti]


def test_a_cti_one_tick_ahead_drops_the_rows_with_the_same_start():
    src = Ingress(start="c2", id="c1", advance=AdvanceTime(every=1, delay=-1, policy="adjust"))
    out = src.push(ROWS)
    #   T     T+1
    #   |c1=1|            Insert 1, then Cti(T+1) (latest start − (−1))
    #   |c1=2|  ✗         starts at T, behind the CTI T+1; a point cannot be adjusted: dropped
    #   |c1=3|  ✗         dropped as well
    #         ^ CTI
    assert out == [Insert(1, T, T + 1, ROWS[0]), Cti(T + 1)]
    assert [(x.action, x.item["c1"]) for x in src.late] == [("dropped", 2), ("dropped", 3)]
    assert all("point cannot be moved" in x.reason for x in src.late)
    assert src.stats == {"received": 3, "processed": 1, "dropped": 2, "adjusted": 0,
                         "dead_lettered": 0, "ctis": 1,
                         "timestamp_rows": 3}  # (their times were timestamps: shown as times)
    assert src.end() == []  # the CTI T+1 already covers the one event
    check(src)


def test_a_cti_at_the_event_keeps_every_row_but_flushes_none_until_later():
    src = Ingress(start="c2", id="c1", advance=AdvanceTime(every=1, delay=0))
    out = src.push(ROWS)
    #   T     T+1
    #   |c1=1|            Insert 1, Cti(T): no event is behind it
    #   |c1=2|            not behind the CTI T: kept (the CTI at T is not repeated)
    #   |c1=3|            kept
    #   ^ CTI: commits only what starts strictly before T, i.e. nothing
    assert out == [Insert(1, T, T + 1, ROWS[0]), Cti(T),
                   Insert(2, T, T + 1, ROWS[1]), Insert(3, T, T + 1, ROWS[2])]
    assert src.late == [] and src.stats["processed"] == 3
    assert flushed(out) == []
    final = src.end()
    #   T     T+1
    #   |c1=1|
    #   |c1=2|
    #   |c1=3|
    #         ^ final CTI past every event: all three flushed
    assert final == [Cti(T + 1)]
    assert flushed(out + final) == [1, 2, 3]
    validate(out + final)
    check(src)


def test_the_idle_timer_flushes_a_quiet_source_once():
    src = Ingress(start="c2", id="c1",
                  advance=AdvanceTime(every=1, delay=0, idle_timeout=0.2))
    out = src.push(ROWS, now=10.0)
    assert out[-1] == Insert(3, T, T + 1, ROWS[2]) and flushed(out) == []
    # wall clock: 10.0 burst ... 10.1 still within the timeout: nothing
    assert src.poll(10.1) == []
    # 10.0 ───── 10.25: quiet for ≥ 200 ms → CTI one tick past the latest event
    #   T     T+1
    #   |c1=1|
    #   |c1=2|
    #   |c1=3|
    #         ^ idle CTI
    idle = src.poll(10.25)
    assert idle == [Cti(T + 1)]
    assert flushed(out + idle) == [1, 2, 3]
    # still quiet: the timer does not issue the same CTI again
    assert src.poll(10.5) == [] and src.poll(60.0) == []
    # the next burst starts the cycle again: new events, a CTI at them, then the timer
    later = {"c1": 4, "c2": dt.datetime(2010, 8, 10, 0, 0, 1)}
    more = src.push([later], now=61.0)
    assert more == [Insert(4, T + 1_000_000, T + 1_000_001, later), Cti(T + 1_000_000)]
    assert src.poll(61.1) == [] and src.poll(61.3) == [Cti(T + 1_000_001)]
    assert src.end() == []  # the idle CTI already covers everything
    validate(out + idle + more + [Cti(T + 1_000_001)])
    assert src.stats["ctis"] == 4
    check(src)
