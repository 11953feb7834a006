"""``WindowPolicy``: the one object of a window's clip, output and emit policies
(operators/windows/spec.py), taken whole by every window operator, checked once when made, and
carried through a checkpoint (pickled snapshot, restore) unchanged."""

from __future__ import annotations

import ast
import pickle
from pathlib import Path

import pytest

import operators
from operators.aggregates import Count, Sum, TimeWeightedAverage
from operators.cht import to_cht
from operators.events import Cti, Insert, Retract
from operators.windows import (
    CLIP_POLICIES,
    EMIT_POLICIES,
    OUTPUT_POLICIES,
    OUTPUTS,
    CountWindowOperator,
    HoppingWindowOperator,
    ResolvedPolicy,
    SessionWindowOperator,
    SnapshotWindowOperator,
    WindowPolicy,
    count_window,
    hopping_window,
    make_window,
    session_window,
    snapshot_window,
    tumbling_window,
)
from operators.windows.final_output import FinalOutput
from operators.windows.keyed import KeyedWindowAggregate
from operators.windows.keyed_session import KeyedSessionAggregate


def test_the_vocabularies_are_written_once_with_what_each_name_means():
    assert list(CLIP_POLICIES) == ["none", "left", "right", "full"]
    assert list(OUTPUT_POLICIES) == ["window", "point_end", "clip", "keep", "compressed"]
    assert list(EMIT_POLICIES) == ["speculative", "final"]
    assert all(isinstance(v, str) and v for d in (CLIP_POLICIES, OUTPUT_POLICIES, EMIT_POLICIES)
               for v in d.values())


@pytest.mark.parametrize("kwargs,err,names", [
    ({"clip": "middle"}, ValueError, "clip='middle'.*'none', 'left', 'right', 'full'"),
    ({"output": "bogus"}, ValueError, "output='bogus'.*'window', 'point_end'"),
    ({"emit": "later"}, ValueError, "emit='later'.*'speculative', 'final'"),
    ({"clip": None}, TypeError, "clip=None"),
    ({"output": 3}, TypeError, "output=3"),
])
def test_a_bad_name_fails_when_the_policy_is_made(kwargs, err, names):
    with pytest.raises(err, match=names):
        WindowPolicy(**kwargs)


@pytest.mark.parametrize("spec,policy,arg", [
    (snapshot_window(), WindowPolicy(output="compressed"), "output"),
    (session_window(5), WindowPolicy(output="compressed"), "output"),
    (count_window(3), WindowPolicy(output="window"), "output"),
    (count_window(3), WindowPolicy(clip="left"), "clip"),
])
def test_a_policy_that_cannot_apply_to_the_window_is_refused_naming_the_argument(spec, policy,
                                                                                 arg):
    with pytest.raises(ValueError, match=rf"^{arg}="):
        policy.for_window(spec)
    with pytest.raises(ValueError, match=rf"^{arg}="):
        make_window(spec, Count(), policy=policy)


def test_for_window_fills_in_the_window_default_once():
    assert WindowPolicy().for_window(count_window(2)).output == "point_end"
    resolved = WindowPolicy().for_window(tumbling_window(5))
    assert resolved.output == "window"
    assert resolved.for_window(tumbling_window(5)) is resolved


def test_each_operator_takes_the_policy_whole_and_refuses_what_it_cannot_run():
    with pytest.raises(ValueError, match="compressed"):
        HoppingWindowOperator(hopping_window(6, 2), Count(),
                              policy=WindowPolicy(output="compressed"))
    with pytest.raises(ValueError, match="compressed"):
        SnapshotWindowOperator(hopping_window(6, 2), Count())
    with pytest.raises(ValueError, match=r"^output='window'"):
        CountWindowOperator(count_window(2), Count(), policy=WindowPolicy(output="window"))
    with pytest.raises(ValueError, match=r"^output='compressed'"):
        SessionWindowOperator(session_window(3), Count(),
                              policy=WindowPolicy(output="compressed"))
    with pytest.raises(TypeError, match="not both"):
        make_window(tumbling_window(5), Count(), policy=WindowPolicy(), clip="none")
    op = HoppingWindowOperator(tumbling_window(5), Count(), policy=WindowPolicy(clip="left"))
    assert op.policy == WindowPolicy(clip="left").resolve(tumbling_window(5))
    assert op.policy.policy == WindowPolicy("left", "window")
    assert op.clip_left and not op.clip_right


def test_a_policy_is_resolved_once_for_its_window_and_answers_what_operators_ask():
    spec = hopping_window(6, 2)
    resolved = WindowPolicy(clip="right", emit="final").resolve(spec)
    assert isinstance(resolved, ResolvedPolicy) and resolved.resolve(spec) is resolved
    assert resolved.resolve(tumbling_window(5)).spec == tumbling_window(5)
    assert (resolved.output.name, resolved.clips_left, resolved.clips_right) == (
        "window", False, True)
    assert resolved.final and resolved.final_at_end and resolved.final_row_length == 6
    point = WindowPolicy(output="point_end", emit="final").resolve(count_window(3))
    assert point.final_row_length == 1 and not point.final_at_end
    assert WindowPolicy().resolve(spec).final_row_length is None  # speculative: retracted
    compressed = WindowPolicy(output="compressed", emit="final").resolve(spec)
    assert compressed.compressed and not compressed.final_at_end
    assert compressed.final_row_length is None
    assert OUTPUTS["keep"].stamps and OUTPUTS["clip"].stamps and not OUTPUTS["window"].stamps
    assert OUTPUTS["point_end"].row_start(0, 10) == 9 and OUTPUTS["window"].row_start(0, 10) == 0


_NAMES = {n for d in (CLIP_POLICIES, OUTPUT_POLICIES, EMIT_POLICIES) for n in d}


def _compared_names(tree: ast.AST) -> list[tuple[int, str]]:
    """The policy names a module compares a value with (``==``, ``!=``, ``in``)."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        for side in (node.left, *node.comparators):
            values = side.elts if isinstance(side, (ast.Tuple, ast.Set, ast.List)) else [side]
            found += [(node.lineno, v.value) for v in values
                      if isinstance(v, ast.Constant) and v.value in _NAMES]
    return found


def test_no_policy_name_is_compared_outside_the_spec_module():
    root = Path(operators.__file__).parent
    compared = {str(path.relative_to(root)): names for path in sorted(root.rglob("*.py"))
                if path.name != "spec.py"
                and (names := _compared_names(ast.parse(path.read_text())))}
    assert compared == {}


def test_emit_final_in_the_policy_makes_the_operator_final():
    op = make_window(tumbling_window(5), Count(), policy=WindowPolicy(emit="final"), name="w")
    assert isinstance(op, FinalOutput) and op.final_at_end
    assert not make_window(snapshot_window(), Count(), policy=WindowPolicy(emit="final")
                           ).final_at_end  # type: ignore[attr-defined]
    #   a·0  b·2 | CTI 6: one final row for [0, 5), none before the CTI
    assert op.process([Insert("a", 0, 1), Insert("b", 2, 3)]) == []
    assert to_cht(op.process([Cti(6)])) == [(0, 5, 2)]


def _one_key(payload):
    return 0


EVENTS = [Insert("a", 0, 4, 1.0), Insert("b", 2, 9, 2.0), Insert("c", 6, 7, 3.0),
          Retract("b", 2, 9, 5, 2.0), Cti(5), Insert("d", 7, 12, 4.0), Insert("e", 11, 12, 5.0),
          Cti(10), Insert("f", 13, 14, 6.0), Cti(20)]

OPERATORS = {
    "hopping clip=left point_end": lambda: make_window(
        hopping_window(6, 2), TimeWeightedAverage(), policy=WindowPolicy("left", "point_end")),
    "tumbling final": lambda: make_window(tumbling_window(5), Sum(),
                                          policy=WindowPolicy(emit="final")),
    "compressed": lambda: make_window(hopping_window(6, 2), Count(),
                                      policy=WindowPolicy(output="compressed")),
    "snapshot clip=none": lambda: make_window(snapshot_window(), TimeWeightedAverage(),
                                              policy=WindowPolicy(clip="none")),
    "count final": lambda: make_window(count_window(2), Count(),
                                       policy=WindowPolicy(emit="final")),
    "session clip=right": lambda: make_window(session_window(3), TimeWeightedAverage(),
                                              policy=WindowPolicy(clip="right")),
    "keyed final": lambda: KeyedWindowAggregate(_one_key, tumbling_window(5), Count(),
                                                WindowPolicy(emit="final"), keyed=False),
    "keyed session point_end": lambda: KeyedSessionAggregate(
        _one_key, session_window(3), Count(), WindowPolicy(output="point_end"), keyed=False),
}
POINTS = [Insert(i, t, t + 1, float(i)) for i, t in enumerate((0, 1, 3, 8, 9, 15))]


@pytest.mark.parametrize("which", sorted(OPERATORS))
def test_a_checkpoint_of_a_window_operator_restores_with_its_policy(which):
    make = OPERATORS[which]
    events = POINTS[:3] + [Cti(5)] + POINTS[3:] + [Cti(20)] if "keyed" in which else EVENTS
    cut = 4
    whole = make().process(events)
    first = make()
    out = first.process(events[:cut])
    saved = pickle.loads(pickle.dumps(first.snapshot()))  # what a checkpoint stores
    again = pickle.loads(pickle.dumps(make()))  # the factory's operator, sent to an actor
    again.restore(saved)
    inner = again.inner if isinstance(again, FinalOutput) else again
    assert inner.policy == (first.inner if isinstance(first, FinalOutput) else first).policy
    out += again.process(events[cut:])
    assert to_cht(out) == to_cht(whole) and to_cht(whole)
