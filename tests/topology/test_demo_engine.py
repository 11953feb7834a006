"""What ``cedar demo`` needs of the engine: queries put in place first and run together
(``deploy(..., hold=True)`` then ``Query.start()``), so that the demo times their run apart
from their actors' start-up; and the fast paths its profile asked for keep their meaning."""

from __future__ import annotations

import math
import numbers
import time

import numpy as np
import pytest

from topology import AdvanceTime, Stream


def _received(query):
    return sum(s["source"].get("received", 0) for s in query.stats().values()
               if s.get("source"))


def _rows(n):
    return [{"ts": t, "v": t % 7} for t in range(n)]


@pytest.mark.ray
@pytest.mark.parametrize("fed_by", ["host", "driver"])
def test_a_held_query_takes_no_input_until_started(ray_session, fed_by):
    #   deploy(hold=True): actors up, sources idle ... start(): the whole input, to the end
    rows = _rows(500)
    data = rows if fed_by == "host" else (r for r in rows)  # a generator: this process feeds
    q = Stream.from_rows(data, start="ts", advance=AdvanceTime(every=100)).where(
        lambda r: r["v"] > 0).deploy(f"held-{fed_by}", hold=True, detached=False,
                                     history=True)
    try:
        time.sleep(1.0)
        assert _received(q) == 0 and not q.wait(timeout_s=0)
        q.start()
        assert q.wait(timeout_s=60)
        assert _received(q) == 500
        assert len(q.snapshot()) == sum(1 for r in rows if r["v"] > 0)
        q.start()  # a second start does nothing
    finally:
        q.stop()


@pytest.mark.ray
def test_a_held_query_opens_its_source_before_it_starts(ray_session):
    # deploy(hold=True) is start-up: the driver's feeder opens the source and reads its
    # first batch before deploy returns (a Spark source plans its read), but sends nothing
    # before start()
    pulled = []

    def rows():
        for r in _rows(300):
            pulled.append(r["ts"])
            yield r

    q = Stream.from_rows(rows(), start="ts").deploy("held-open", hold=True, detached=False,
                                                    history=True)
    try:
        assert pulled  # deploy returned with the first batch read
        time.sleep(0.5)
        assert _received(q) == 0 and not q.wait(timeout_s=0)
        q.start()
        assert q.wait(timeout_s=60) and _received(q) == 300 and len(q.snapshot()) == 300
    finally:
        q.stop()


def _slow(row):
    if row["ts"] == 0:
        time.sleep(3.0)
    return True


@pytest.mark.ray
def test_wait_keeps_its_timeout_while_a_step_is_busy(ray_session):
    # a step's stats answer only between batches: wait(timeout_s=0) must not wait for a
    # long batch to end to find out whether the query failed (the demo polls it)
    q = Stream.from_rows(_rows(50), start="ts").where(_slow).deploy(
        "busy-wait", detached=False, history=True)
    try:
        time.sleep(1.0)  # the where is inside its 3 s batch
        t0 = time.monotonic()
        assert not q.wait(timeout_s=0)
        assert not q.wait(timeout_s=0.2)
        assert time.monotonic() - t0 < 1.5
        assert q.wait(timeout_s=60) and len(q.snapshot()) == 50
    finally:
        q.stop()


@pytest.mark.ray
def test_hold_with_a_checkpoint_is_refused(ray_session, tmp_path):
    with pytest.raises(ValueError, match="hold=True is for queries without checkpoint_dir"):
        Stream.from_rows(_rows(3), start="ts").deploy("held-ckpt", hold=True,
                                                       checkpoint_dir=str(tmp_path))


def test_the_extreme_key_fast_path_orders_as_before():
    # Max/Min order keys: floats and ints take a short path (no ABC check); the key must be
    # the general one for every value, -0.0 below 0.0 and NaN above all included
    from operators.aggregates import _extreme_key, _tie

    def general(v):
        if isinstance(v, numbers.Real) and v != v:
            return (1, 0, 0)
        return (0, v, _tie(v))

    values = [0.0, -0.0, 1.5, -2.25, math.nan, math.inf, -math.inf, 3, 0, -7, 2**70, True,
              False, np.float64(-0.0), np.int64(3), np.float32("nan"), (1, 2.0), "a"]
    for v in values:
        assert repr(_extreme_key(v)) == repr(general(v)), v
    assert repr(sorted([1.0, math.nan, 0.0, -0.0], key=_extreme_key)) == "[-0.0, 0.0, 1.0, nan]"
