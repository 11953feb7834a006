"""Speculative output before CTIs on every plan, and ``emit="final"`` on every window path.

The finding: ``group_apply(key, tumbling → aggregate)`` over points ran as the keyed window
aggregate, which output nothing until a CTI passed a window, while the same query over 1-tick
intervals (the general window operator) output at once. Now both output speculatively by
default, and ``emit="final"`` gives one final row per window on both, never retracted."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.aggregates import Count, Sum
from operators.cht import to_cht, validate
from operators.events import Cti, Insert, Retract
from operators.windows import (
    count_window,
    hopping_window,
    make_window,
    snapshot_window,
    tumbling_window,
)
from operators.windows.final_output import FinalOutput
from tests.kit import PROPERTY, assert_equivalent, physical_streams
from topology import Stream
from topology.planning.dag import DagProcessor

#   key a: ·1 ·3      ·7      key b:    ·4        tumbling_window(5): no CTI until the end
EVENTS = [(1, "a", 1.0), (3, "a", 2.0), (4, "b", 5.0), (7, "a", 4.0)]


ROWS = [{"t": t, "e": t + 1, "k": k, "v": v} for t, k, v in EVENTS]


def _query(shape: str, emit: str) -> Stream:
    # points: the keyed window aggregate; 1-tick intervals: the general window per group
    src = (Stream.from_rows(ROWS, start="t") if shape == "points"
           else Stream.from_rows(ROWS, start="t", end="e", shape="interval"))
    return src.group_apply(lambda p: p["k"], lambda g: g.tumbling_window(5, emit=emit)
                           .aggregate(Sum("v")))


@pytest.mark.parametrize("emit", ["speculative", "final"])
def test_every_plan_has_the_same_liveliness(emit):
    outputs = {}
    for shape in ("points", "intervals"):
        q = _query(shape, emit)
        keyed = "keyed window aggregate" in q.explain()
        assert keyed == (shape == "points"), q.explain()
        dag = DagProcessor(q.plan(), inline_sink=True)
        before_cti = [m for row in ROWS for m in dag.process([row], 0)]
        assert not any(type(m) is Cti for m in before_cti)
        rows = [m for m in before_cti if type(m) is Insert]
        if emit == "speculative":  # every window with an event has a row, before any CTI
            assert {(r.start, r.payload[0]) for r in rows} == {(0, "a"), (0, "b"), (5, "a")}
        else:
            assert rows == []
        outputs[shape] = before_cti + dag.finish()
    assert_equivalent(outputs["points"], outputs["intervals"])
    assert to_cht(outputs["points"]) == [(0, 5, ("a", 3.0)), (0, 5, ("b", 5.0)),
                                         (5, 10, ("a", 4.0))]


@pytest.mark.parametrize("emit", ["speculative", "final"])
def test_every_plan_has_the_same_answer_through_the_runtime(runtime, emit):
    outs = {shape: _query(shape, emit).collect(runtime, batch_size=1)
            for shape in ("points", "intervals")}
    assert_equivalent(outs["points"], outs["intervals"])
    for out in outs.values():
        retracted = any(type(m) is Retract for m in out)
        assert retracted == (emit == "speculative")  # a's first window was corrected


SPECS = {"hopping": hopping_window(6, 2), "tumbling": tumbling_window(5),
         "snapshot": snapshot_window(), "count": count_window(3)}


@PROPERTY
@given(stream=physical_streams(), spec=st.sampled_from(sorted(SPECS)),
       data=st.data())
def test_final_output_is_the_speculative_cht_without_retractions(stream, spec, data):
    def build():
        return make_window(SPECS[spec], Count(), name="w")

    speculative = build().process(stream)
    at_end = spec in ("hopping", "tumbling")

    def final():
        return FinalOutput(build(), final_at_end=at_end)

    op, out, cti = final(), [], None
    cut = data.draw(st.integers(0, len(stream)), label="restore_at")
    for i, msg in enumerate(stream):
        if i == cut:
            state, op = op.snapshot(), final()
            op.restore(state)
        if type(msg) is Cti:
            cti = msg.time
        for m in op.process([msg]):
            if type(m) is Insert:  # a row is sent once its window is final
                assert cti is not None and (m.end <= cti if at_end else m.end < cti), (m, cti)
            out.append(m)
    out += op.finish()
    validate(out, name="final output")
    assert not any(type(m) is Retract for m in out)
    assert_equivalent(out, speculative)


def test_emit_is_checked():
    with pytest.raises(ValueError, match="emit='eventually'"):
        Stream.from_events([]).tumbling_window(5, emit="eventually")
