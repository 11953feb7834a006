"""The column-wise ingress path against the row path it must equal, message for message.

``Ingress.push(columns)`` may send runs of events as ``Columns`` batches; expanded, its output
must be exactly what ``push(rows)`` gives for the same rows (same ids, same order, same CTIs),
with the same late records, dead letters and counters, whether the vectorised path applies
(minted ids, count-based CTIs, good times) or the columns fall back to rows.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from operators.columns import Columns, expand
from operators.events import MAX_TIME
from operators.ingress import AdvanceTime, Ingress
from tests.kit import PROPERTY

ADVANCES = st.builds(
    AdvanceTime,
    every=st.sampled_from([None, 256, 300, 1000, 5]),
    delay=st.integers(0, 40),
    policy=st.sampled_from(["drop", "adjust"]),
)


@st.composite
def column_batches(draw):
    """A few batches of rows ``{"t", "u", "k", "v"}`` with disorder (late rows) and, rarely,
    a bad end (``u <= t``), a time at the end of the axis or missing times (``None`` in an
    object column of ticks)."""
    batches = []
    base = 0
    for _ in range(draw(st.integers(1, 4))):
        n = draw(st.integers(1, 700))
        seed = draw(st.integers(0, 2**32 - 1))
        rng = np.random.default_rng(seed)
        t = base + np.arange(n, dtype=np.int64) // 2 - rng.integers(0, 60, n)
        u = t + rng.integers(1, 50, n)
        if draw(st.booleans()) and draw(st.booleans()):
            u[rng.integers(0, n)] = t[0] - 1  # an interval ending before it starts
        if draw(st.integers(0, 9)) == 0:
            t[-1] = MAX_TIME  # a point with no room on the time axis
        if draw(st.integers(0, 3)) == 0:  # rows without a time, as the Arrow readers give them
            t = t.astype(object)
            t[rng.integers(0, n, draw(st.integers(1, 20)))] = None
        batches.append({"t": t, "u": u, "k": rng.integers(0, 5, n),
                        "v": rng.random(n)})
        base += n // 2
    return batches


def _rows(batch):
    names = list(batch)
    return [dict(zip(names, vals)) for vals in zip(*(batch[k].tolist() for k in names))]


@PROPERTY
@given(batches=column_batches(), advance=ADVANCES,
       shape=st.sampled_from(["point", "interval"]))
def test_columns_ingest_exactly_like_rows(batches, advance, shape):
    end = "u" if shape == "interval" else None
    by_rows = Ingress(start="t", end=end, shape=shape, advance=advance)
    by_cols = Ingress(start="t", end=end, shape=shape, advance=advance)
    want, got = [], []
    for batch in batches:
        want += by_rows.push(_rows(batch))
        got += by_cols.push(batch)
        by_cols._check()
    want += by_rows.end()
    got += by_cols.end()
    assert list(expand(got)) == want
    assert by_cols.stats == by_rows.stats
    assert by_cols.late == by_rows.late
    assert by_cols.dead_letters == by_rows.dead_letters
    assert by_cols.snapshot() == by_rows.snapshot()


def test_good_columns_travel_as_columns():
    #   300 points, every=256: one batch of 256, the CTI, then the remaining 44
    src = Ingress(start="t", advance=AdvanceTime(every=256, delay=3))
    out = src.push({"t": np.arange(300, dtype=np.int64)})
    assert [type(m).__name__ for m in out] == ["Columns", "Cti", "Columns"]
    assert out[1].time == 255 - 3
    assert isinstance(out[0], Columns) and len(out[0]) == 256


def test_an_id_column_falls_back_to_rows():
    src = Ingress(start="t", id="k", advance=AdvanceTime(every=256))
    out = src.push({"t": np.array([1, 2]), "k": np.array([7, 7])})
    assert [m.id for m in out] == [7]
    assert "duplicate id 7" in src.dead_letters[0].reason


def test_a_few_missing_times_keep_the_columns():
    #   1,000 points, three without a time (an Arrow null): those three go to the dead letters,
    #   the others still travel as Columns, exactly as the rows would have gone
    t = np.arange(1_000, dtype=np.int64).astype(object)
    t[[10, 500, 999]] = None
    batch = {"t": t, "v": np.ones(1_000)}
    src = Ingress(start="t", advance=AdvanceTime(every=256))
    out = src.push(batch)
    assert sum(len(m) for m in out if isinstance(m, Columns)) == 997
    assert [d.item["t"] for d in src.dead_letters] == [None, None, None]
    rows = Ingress(start="t", advance=AdvanceTime(every=256))
    assert list(expand(out)) == rows.push(_rows(batch))
    assert src.stats == rows.stats


def test_the_arrow_reader_keeps_columns_around_a_null_time():
    import pyarrow as pa

    from topology.building.arrow_reader import arrow_batches

    table = pa.table({"ts": pa.array([1, None, 3], pa.int64()), "kwh": [0.5, 1.0, 1.5]})
    batch = next(arrow_batches([table], start="ts"))
    assert isinstance(batch, dict) and batch["ts"].tolist() == [1, None, 3]
    src = Ingress(start="ts")
    assert [m.payload for m in expand(src.push(batch))] == [{"ts": 1, "kwh": 0.5},
                                                           {"ts": 3, "kwh": 1.5}]
    assert len(src.dead_letters) == 1
