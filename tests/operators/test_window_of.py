"""``window_of`` against the window operators themselves: for random inputs, every output row's
window by :func:`~operators.windows.window_of.window_of` is the window the operator evaluated,
and its members by :func:`~operators.windows.window_of.in_window` are the events the UDM saw.

The UDMs here record what they were given in their results: a time-sensitive aggregate
returns ``(W.start, W.end, member ids)``; a time-sensitive UDO stamps one row per member
(its clipped lifetime, so that ``clip`` and ``keep`` rows are not whole windows) carrying the
same; ``compressed`` (time-insensitive UDMs only) returns the member ids. The operators' output
CHT after the last message (every row corrected to the final input) is checked against the
final input.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from operators.aggregates import Sum
from operators.cht import to_cht
from operators.events import Cti, Insert, Message, Retract
from operators.udm import Aggregate, TimeSensitiveAggregate, TimeSensitiveOperator, Window
from operators.windows import (
    CountWindow,
    HoppingWindow,
    SessionWindow,
    SnapshotWindow,
    make_window,
)
from operators.windows.keyed import KeyedWindowAggregate
from operators.windows.keyed_session import KeyedSessionAggregate
from operators.windows.spec import WindowPolicy
from operators.windows.window_of import in_window, spec_from_dict, window_of
from tests.kit import PROPERTY


class WindowAndMembers(TimeSensitiveAggregate):
    """The window it was evaluated on and the ids (payloads) of its members."""

    def compute(self, events: list[tuple[int, int, Any]], window: Window) -> Any:
        return ("window", window.start, window.end, frozenset(p for _, _, p in events))


class StampPerMember(TimeSensitiveOperator):
    """One row per member, stamped with its (clipped) lifetime, carrying the window."""

    def compute(self, events: list[tuple[int, int, Any]], window: Window) -> Any:
        ids = frozenset(p for _, _, p in events)
        return [(max(s, window.start), e, ("window", window.start, window.end, ids))
                for s, e, _ in events]


class Members(Aggregate):
    def compute(self, values: list[Any]) -> Any:
        return ("members", frozenset(values))


specs = st.one_of(
    st.builds(HoppingWindow, st.integers(1, 8), st.integers(1, 8), st.integers(-3, 3)),
    st.just(SnapshotWindow()),
    st.builds(CountWindow, st.integers(1, 4), st.sampled_from(["start", "end"])),
    st.builds(SessionWindow, st.integers(1, 6), st.one_of(st.none(), st.integers(6, 12))),
)


@st.composite
def streams(draw: Any) -> tuple[list[Message], dict[str, tuple[int, int]]]:
    """Inserts (ids "e0", "e1", ... as payloads), a few retractions, in batches; the final
    lifetimes by id."""
    n = draw(st.integers(1, 14))
    live: dict[str, tuple[int, int]] = {}
    msgs: list[Message] = []
    for i in range(n):
        s = draw(st.integers(0, 30))
        live[f"e{i}"] = (s, s + draw(st.integers(1, 8)))
        msgs.append(Insert(f"e{i}", *live[f"e{i}"], f"e{i}"))
    for eid in draw(st.lists(st.sampled_from(sorted(live)), max_size=4, unique=True)):
        s, e = live[eid]
        new = draw(st.integers(s, e - 1))
        after = next(k for k, m in enumerate(msgs) if m.id == eid and type(m) is Insert) + 1
        msgs.insert(draw(st.integers(after, len(msgs))), Retract(eid, s, e, new, eid))
        if new == s:
            del live[eid]
        else:
            live[eid] = (s, new)
    return msgs, live


def _run(op: Any, msgs: list[Message], cut: int) -> list[tuple[int, int, Any]]:
    out = op.process(msgs[:cut]) + op.process(msgs[cut:]) + op.process([Cti(100)])
    return to_cht(out)


def _check(spec: Any, output: str, rows: list[tuple[int, int, Any]],
           live: dict[str, tuple[int, int]], exact_policy: bool) -> None:
    lives = list(live.values())
    for s, e, payload in rows:
        w = window_of(spec, output, s, e, lives)
        if payload[0] == "window":
            _, ws, we, ids = payload
            if exact_policy or w.exact:
                assert w.exact, (spec, output, (s, e), w)
                assert (w.lo, w.hi) == (ws, we), (spec, output, (s, e), w, (ws, we))
            else:  # the row does not say which window: the range covers every candidate
                assert w.lo <= ws and we <= w.hi, (spec, output, (s, e), w, (ws, we))
                continue
        else:
            ids = payload[1]
        got = {i for i, (a, b) in live.items() if in_window(spec, (w.lo, w.hi), a, b)}
        assert got == set(ids), (spec, output, (s, e), w, got, ids)


@PROPERTY
@given(spec=specs, data=st.data(), stream=streams())
def test_window_of_is_the_window_the_operator_evaluated(spec: Any, data: Any,
                                                        stream: Any) -> None:
    msgs, live = stream
    cut = data.draw(st.integers(0, len(msgs)))
    outputs = ["point_end"] if isinstance(spec, CountWindow) else ["window", "point_end"]
    for output in outputs:
        op = make_window(spec, WindowAndMembers(), output=output, name="w")
        _check(spec, output, _run(op, msgs, cut), live, exact_policy=True)
    if not isinstance(spec, CountWindow):
        for output in ("clip", "keep"):
            op = make_window(spec, StampPerMember(), kind="apply", output=output, name="w")
            _check(spec, output, _run(op, msgs, cut), live, exact_policy=False)
    if isinstance(spec, HoppingWindow):
        op = make_window(spec, Members(), output="compressed", name="w")
        _check(spec, "compressed", _run(op, msgs, cut), live, exact_policy=True)


@PROPERTY
@given(spec=st.one_of(
    st.builds(HoppingWindow, st.integers(1, 8), st.integers(1, 8), st.integers(-3, 3)),
    st.builds(SessionWindow, st.integers(1, 6))),  # (the keyed path: no max_duration)
    output=st.sampled_from(["window", "point_end"]),
    starts=st.lists(st.integers(0, 30), min_size=1, max_size=20))
def test_window_of_is_the_keyed_aggregates_window(spec: Any, output: str,
                                                  starts: list[int]) -> None:
    """The column-wise keyed paths take built-in aggregates only: a Sum of ``2**i`` over
    points names the members of each row's window (bit i: event i)."""
    msgs: list[Message] = [Insert(f"e{i}", t, t + 1, {"bit": 2**i})
                           for i, t in enumerate(starts)]
    live = {f"e{i}": (t, t + 1) for i, t in enumerate(starts)}
    cls = KeyedSessionAggregate if isinstance(spec, SessionWindow) else KeyedWindowAggregate
    op = cls(lambda p: 0, spec, Sum("bit"), policy=WindowPolicy(output=output), keyed=False,
             name="k")
    rows = to_cht(op.process(msgs) + op.process([Cti(100)]))
    members = [(s, e, ("members", frozenset(f"e{i}" for i in range(len(starts)) if p >> i & 1)))
               for s, e, p in rows]
    _check(spec, output, members, live, exact_policy=True)


def test_spec_from_dict_round_trips_what_a_trace_writes() -> None:
    for spec in (HoppingWindow(10, 5, 2), HoppingWindow(4, 4), SnapshotWindow(),
                 CountWindow(3, "end"), SessionWindow(5, 20)):
        assert spec_from_dict({"kind": spec.kind, **vars(spec)}) == spec
