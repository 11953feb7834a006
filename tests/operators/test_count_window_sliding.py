"""Count windows of Min and Max: new windows take their results from a sliding extreme over
the distinct times (``CountWindowOperator._sliding``) instead of one ``compute`` per window.
The fast path must send exactly the messages of the general path (same payload objects: the
first of equal keys wins, e.g. ``1.0`` before ``np.float64(1.0)``) and the reference's CHT.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from operators.aggregates import Max, Min
from operators.cht import to_cht
from operators.events import Cti, Insert, Retract
from operators.windows import CountWindow
from operators.windows.count import CountWindowOperator
from tests import reference_count as ref
from tests.kit import PROPERTY, assert_equivalent

#: values whose keys tie across types (1, 1.0, np.float64(1.0); 0.0 and -0.0) and NaN
VALUES = st.sampled_from([0, 1, 2, 1.0, 2.0, -0.0, 0.0, np.float64(1.0), np.float64(2.0),
                          np.int64(1), True, math.nan, -1.5])


@st.composite
def batches(draw):
    """Batches of mostly in-order events (a few at each time, some out of order within the
    batch, a retraction now and then), a CTI after each batch at the lowest time to come."""
    n_events = draw(st.integers(0, 60))
    t = 0
    events = []
    for i in range(n_events):
        t += draw(st.sampled_from([0, 0, 1, 1, 1, 2]))
        events.append((f"e{i}", t, draw(VALUES)))
    cuts = sorted(draw(st.lists(st.integers(0, n_events), max_size=6)))
    out, prev = [], 0
    live: list = []
    for cut in [*cuts, n_events]:
        chunk = events[prev:cut]
        order = draw(st.permutations(range(len(chunk)))) if draw(st.booleans()) else None
        msgs: list = [Insert(eid, s, s + 5, {"v": v})
                      for eid, s, v in (chunk if order is None else [chunk[j] for j in order])]
        live.extend(chunk)
        if live and draw(st.integers(0, 4)) == 0:
            eid, s, v = live.pop(draw(st.integers(0, len(live) - 1)))
            floor = out[-1][-1].time if out else 0
            if s >= floor:  # a retraction of an event not yet frozen by a CTI
                msgs.append(Retract(eid, s, s + 5, s, {"v": v}))
        nxt = events[cut][1] if cut < n_events else t + 1
        msgs.append(Cti(nxt))
        out.append(msgs)
        prev = cut
    return out


def _run(udm, n, stream, sliding):
    op = CountWindowOperator(CountWindow(n, "start"), udm)
    assert op.sliding, "Min and Max over count windows take the sliding path"
    op.sliding = sliding
    out = []
    for batch in stream:
        out.extend(op.process(batch))
    return out


@PROPERTY
@given(stream=batches(), n=st.integers(1, 5), which=st.sampled_from([Max, Min]))
def test_sliding_extreme_sends_what_the_general_path_sends(stream, n, which):
    fast = _run(which("v"), n, stream, sliding=True)
    general = _run(which("v"), n, stream, sliding=False)
    assert repr(fast) == repr(general)
    flat = [m for batch in stream for m in batch]
    assert_equivalent(fast, ref.count_window(to_cht(flat), n, "start", which("v"), "aggregate"))


def test_the_sliding_path_calls_no_compute_per_window():
    # in-order readings, one batch: 100 windows of 30, found with no compute call at all
    class Spy(Max):
        calls = 0

        def compute(self, values):
            Spy.calls += 1
            return super().compute(values)

    # (a subclass may change compute: it keeps the general path)
    assert not CountWindowOperator(CountWindow(3, "start"), Spy("v")).sliding
    msgs = [Insert(i, i, i + 1, {"v": (i * 37) % 11}) for i in range(129)] + [Cti(200)]
    op = CountWindowOperator(CountWindow(30, "start"), Max("v"))
    out = op.process(msgs)
    assert [m.payload for m in out if isinstance(m, Insert)] == [
        max((i * 37) % 11 for i in range(w, w + 30)) for w in range(100)]


def test_a_missing_value_still_names_itself():
    import pytest

    from operators.errors import OperatorError

    op = CountWindowOperator(CountWindow(2, "start"), Max("v"))
    with pytest.raises((OperatorError, TypeError), match="None"):
        op.process([Insert(1, 1, 2, {"v": 1}), Insert(2, 2, 3, {"v": None}),
                    Insert(3, 3, 4, {"v": 2}), Cti(9)])
