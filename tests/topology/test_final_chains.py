"""Windows after a window sent final stay on the column-wise path.

A hopping, tumbling or count window with ``emit="final"`` (alone or per key under ``group_apply``)
sends inserts only, each over its window (or a point at its end): their ``Node.lengths``
states their length, so a window after it (through ``to_points``, say) runs as the keyed
column-wise aggregate, as one over a point source does (Nexmark Q5: the most bids per window,
the maximum of per-auction counts). The CHT is the one of the general path: the same query
whose first window is speculative (its rows retract, so the planner must keep the general
window operator after it).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from operators.aggregates import Count, Max, Sum
from operators.cht import to_cht
from tests.kit import HEAVY
from topology import AdvanceTime, Stream


def _key(p):
    return p["k"]


def _count(p):
    return p[1]


def _query(table: pa.Table, emit: str, then: str, first: str = "hopping"):
    def window(g):  # hopping rows over their window (to points after), count rows as points
        if first == "count":
            return g.count_window(2, emit=emit)
        return g.hopping_window(10, 2, emit=emit)

    counts = (Stream.from_arrow(table, start="t", advance=AdvanceTime(every=7))
              .group_apply(_key, lambda g: window(g).aggregate(Count())))
    counts = counts.to_points() if first == "hopping" else counts
    udm = {"max": Max(_count), "sum": Sum(_count), "count": Count()}[then]
    return counts.tumbling_window(2).aggregate(udm)


@HEAVY
@given(rows=st.lists(st.tuples(st.integers(0, 60), st.integers(0, 3)), min_size=1,
                     max_size=60),
       then=st.sampled_from(["max", "sum", "count"]), first=st.sampled_from(["hopping", "count"]))
def test_a_window_after_final_rows_runs_column_wise_with_the_general_cht(rows, then, first):
    rows.sort()
    table = pa.table({"t": np.array([t for t, _ in rows], dtype=np.int64),
                      "k": np.array([k for _, k in rows], dtype=np.int64)})
    fast, general = (_query(table, "final", then, first),
                     _query(table, "speculative", then, first))
    step = "tumbling.aggregate#3" if first == "hopping" else "tumbling.aggregate#2"
    assert "as a column-wise" in _stage_line(fast, step)
    assert "as a column-wise" not in _stage_line(general, step)
    got = to_cht(fast.collect(runtime="inline", columns=True))
    assert got == to_cht(general.collect(runtime="inline", columns=True))


def _stage_line(q, step: str) -> str:
    lines = q.explain().split("stages")[1].splitlines()
    return next(line for line in lines if line.strip().startswith(step))
