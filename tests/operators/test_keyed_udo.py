"""The keyed window UDO (the planner's fast path for ``group_apply(key, hopping window →
apply(udo))`` over points: :class:`~operators.windows.keyed.KeyedWindowAggregate` with
``kind="apply"``) against the general ``GroupApply`` of a hopping window operator.

Random point sources (disorder within the CTI bounds, equal starts, several keys, count-based
CTIs) are ingested column-wise and fed to both operators in the same steps: column batches,
events one Insert at a time, column batches several at a time (merged), and column and row
batches mixed. After every step the fast path's rows so far must be the general path's
(speculative: the same CHT; final: never retracted, never behind), its output CTI never
later than the general path's, and at the end exactly the general path's CHT, across a
pickled snapshot/restore. UDOs whose result depends on the order of their values see them as
the general path gives them: by start, equal starts in arrival order.
"""

from __future__ import annotations

import pickle
import random
import warnings
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.cht import row_key, to_cht, validate
from operators.columns import Columns, expand
from operators.errors import OperatorError
from operators.events import MIN_TIME, Cti, Insert, Retract
from operators.group_apply import GroupApply
from operators.ingress import AdvanceTime, Ingress
from operators.udm import Operator, TimeSensitiveOperator, field_getter
from operators.windows import WindowPolicy, hopping_window, make_window, tumbling_window
from operators.windows.keyed import KeyedWindowAggregate, supports
from tests.kit import HEAVY, PROPERTY
from tests.reference_windows import window as reference_window
from topology.app import demo


class FirstThree(Operator):
    """Order-dependent, several rows: the first three values with their place."""

    def compute(self, values: list[Any]) -> list[Any]:
        return [(i, v["v"]) for i, v in enumerate(values[:3])]


class Repeats(Operator):
    """Equal rows in one window (a multiset), changing with every value added."""

    def compute(self, values: list[Any]) -> list[Any]:
        return [len(values) % 2] * (len(values) % 4)


class Stamps(TimeSensitiveOperator):
    """A time-sensitive UDO: its own stamps, which window/point_end rows drop."""

    def compute(self, events: list[tuple[int, int, Any]], window: Any) -> list[Any]:
        return [(s, e, (s - window.start, p["v"])) for s, e, p in events[-2:]]


def _last_two(values: list[Any]) -> list[Any]:
    """A plain function as a UDO: order-dependent."""
    return [v["v"] for v in values[-2:]]


UDOS = {"spikes": lambda: demo.SpikeDetector(k=1.0, min_readings=3),
        "first3": FirstThree, "repeats": Repeats, "stamps": Stamps,
        "function": lambda: _last_two}
#: UDOs whose rows do not depend on the order of equal starts (which a CHT cannot say)
ORDER_FREE = {"spikes", "repeats"}
KEYS = {"field": "k", "mod": lambda r: r["k"] % 3, "text": lambda r: f"k{r['k']}"}


@st.composite
def point_sources(draw):
    n = draw(st.integers(1, 600))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    t = np.arange(n, dtype=np.int64) // draw(st.sampled_from([1, 3, 10])) \
        - rng.integers(0, draw(st.integers(1, 40)), n)
    v = (rng.integers(0, 4, n).astype(np.float64) if draw(st.booleans())
         else rng.random(n) * 10)  # equal values (ties for the UDO) or not
    cols = {"t": t, "k": rng.integers(0, draw(st.integers(1, 6)), n), "ts": t, "kwh": v,
            "v": v}
    cut = sorted(set(draw(st.lists(st.integers(1, max(1, n - 1)), max_size=3))))
    return [{k: c[a:b] for k, c in cols.items()} for a, b in zip([0, *cut], [*cut, n])]


def _mixed(stream: list[Any], seed: int) -> list[list[Any]]:
    """``stream`` in steps of 1 to 4 messages, half of its column batches as rows."""
    rng = random.Random(seed)
    msgs: list[Any] = []
    for m in stream:
        if type(m) is Columns and rng.random() < 0.5:
            msgs += list(expand([m]))
        else:
            msgs.append(m)
    steps, i = [], 0
    while i < len(msgs):
        k = rng.randint(1, 4)
        steps.append(msgs[i:i + k])
        i += k
    return steps


def _last_cti(out: list[Any]) -> int:
    return max((m.time for m in out if type(m) is Cti), default=MIN_TIME)


def run_both(fast_factory, general, steps, restore_at, emit, expected_end):
    """Feed ``steps`` to a fresh fast operator and to ``general``; check them after each."""
    op, out, gen_out = fast_factory(), [], []
    for i, step in enumerate(steps):
        if i == restore_at:
            state = pickle.loads(pickle.dumps(op.snapshot()))
            op = fast_factory()
            op.restore(state)
        out += op.process(step)
        gen_out += general.process(step)
        op._check()
        if emit == "speculative":  # (final: the general path's FinalOutput holds a final
            # row until its inner CTI reaches the row's end; the fast path sends it at the
            # CTI that closes the window, and validate() below checks its CTIs)
            assert _last_cti(out) <= _last_cti(gen_out), "the fast path's CTI is ahead"
        if len(steps) <= 40:  # rows so far: not delayed (nor early) against the general path
            now, gen_now = to_cht(out), to_cht(gen_out)
            if emit == "speculative":
                assert now == gen_now, f"after step {i}"
            else:
                assert all(r in now for r in gen_now), f"after step {i}: a row is late"
                assert all(r in expected_end for r in now), f"after step {i}: not final"
    out += op.finish()
    out = list(expand(out))
    validate(out, name="keyed window UDO output")
    assert op.state_size() == 0
    if emit == "final":
        assert not any(type(m) is Retract for m in out)
    return out


@PROPERTY
@given(batches=point_sources(), size=st.integers(1, 30), hop=st.integers(1, 30),
       alignment=st.integers(-7, 7), udo=st.sampled_from(sorted(UDOS)),
       key=st.sampled_from(sorted(KEYS)), output=st.sampled_from(["window", "point_end"]),
       delay=st.integers(0, 30), every=st.sampled_from([16, 64, 256]),
       emit=st.sampled_from(["speculative", "final"]), seed=st.integers(0, 2**16),
       restore=st.booleans())
def test_keyed_udo_equals_group_apply_of_the_window(batches, size, hop, alignment, udo, key,
                                                    output, delay, every, emit, seed,
                                                    restore):
    spec = hopping_window(size, hop, alignment)
    policy = WindowPolicy(output=output, emit=emit)
    src = Ingress(start="t", advance=AdvanceTime(every=every, delay=delay))
    stream = [m for b in batches for m in src.push(b)] + src.end()
    events = list(expand(stream))

    def general():
        return GroupApply(KEYS[key], lambda: make_window(spec, UDOS[udo](), kind="apply",
                                                         policy=policy))

    reference = general()
    expected = to_cht(reference.process(events) + reference.finish())
    if udo in ORDER_FREE:  # the general path is the CHT definition applied to each key
        get = field_getter(KEYS[key])
        ctis = [m for m in events if type(m) is Cti]
        want = [(s, e, (k, r)) for k in {get(m.payload) for m in events if type(m) is Insert}
                for s, e, r in reference_window(
                    [m for m in events if type(m) is Insert and get(m.payload) == k] + ctis,
                    spec, UDOS[udo](), kind="apply", output=output)]
        assert expected == sorted(want, key=row_key)

    def fast():
        return KeyedWindowAggregate(KEYS[key], spec, UDOS[udo](), policy, kind="apply",
                                    name="kw")

    feeds = {"columns": [[m] for m in stream], "rows": [[m] for m in events],
             "merged": [stream[i:i + 4] for i in range(0, len(stream), 4)],
             "mixed": _mixed(stream, seed)}
    for feed in feeds.values():
        restore_at = len(feed) // 2 if restore else -1
        out = run_both(fast, general(), feed, restore_at, emit, expected)
        assert to_cht(out) == expected


@HEAVY
@given(batches=point_sources(), size=st.integers(1, 20), hop=st.integers(1, 20),
       udo=st.sampled_from(sorted(UDOS)), output=st.sampled_from(["window", "point_end"]),
       emit=st.sampled_from(["speculative", "final"]))
def test_one_group_equals_the_general_window(batches, size, hop, udo, output, emit):
    # what the planner runs for stream.hopping_window(...).apply(udo) over points
    spec = hopping_window(size, hop)
    policy = WindowPolicy(output=output, emit=emit)
    src = Ingress(start="t", advance=AdvanceTime(every=64, delay=5))
    stream = [m for b in batches for m in src.push(b)] + src.end()
    general = make_window(spec, UDOS[udo](), kind="apply", policy=policy)
    expected = to_cht(general.process(list(expand(stream))) + general.finish())
    op = KeyedWindowAggregate(lambda p: 0, spec, UDOS[udo](), policy, keyed=False,
                              kind="apply", name="w")
    out = []
    for msg in stream:
        out += op.process([msg])
        op._check()
    out += op.finish()
    validate(out, name="window output")
    assert to_cht(out) == expected


def test_the_udo_sees_equal_starts_in_arrival_order_across_batches():
    #   key a: ·5 "x"  then, in a later batch, ·3 "y" and ·5 "z"     tumbling_window(10)
    #   the UDO is given y (3), x (5, first to arrive), z (5)
    op = KeyedWindowAggregate("k", tumbling_window(10), _last_two, kind="apply",
                              policy=WindowPolicy(emit="final"))
    first = Columns(np.array([1]), np.array([5]), None,
                    {"k": np.array(["a"], dtype=object), "v": np.array(["x"], dtype=object)})
    op.process([first])
    out = op.process([Insert(2, 3, 4, {"k": "a", "v": "y"}),
                      Insert(3, 5, 6, {"k": "a", "v": "z"}), Cti(10)])
    assert to_cht(out) == [(0, 10, ("a", "x")), (0, 10, ("a", "z"))]


def test_an_unchanged_row_is_not_sent_again():
    # the general path's smallest difference: a spike found once stays one insert
    op = KeyedWindowAggregate("k", tumbling_window(100), FirstThree(), kind="apply")
    out = op.process([Insert(i, i, i + 1, {"k": 0, "v": float(i)}) for i in range(3)])
    assert [type(m) for m in out] == [Insert] * 3
    out = op.process([Insert(3, 50, 51, {"k": 0, "v": 9.0})])
    assert out == []
    # at 0 after the first 0: second; the first row stays, the others change
    out = op.process([Insert(4, 0, 1, {"k": 0, "v": -1.0})])
    assert [type(m) for m in out] == [Retract] * 2 + [Insert] * 2
    assert [m.payload for m in out[2:]] == [(0, (1, -1.0)), (0, (2, 1.0))]


def test_a_failing_udo_names_operator_udo_window_and_group():
    op = KeyedWindowAggregate("k", tumbling_window(5), lambda vs: [1 / 0], kind="apply",
                              name="kw")
    with pytest.raises(OperatorError, match=r"'kw'.*lambda.*\[.*group 'a'.*ZeroDivision"):
        op.process([Insert(1, 0, 1, {"k": "a"})])
    op = KeyedWindowAggregate("k", tumbling_window(5), lambda vs: 3, kind="apply", name="kw")
    with pytest.raises(OperatorError, match=r"not an iterable of payloads"):
        op.process([Insert(1, 0, 1, {"k": "a"})])


WINDOW, POINT_END = WindowPolicy(output="window"), WindowPolicy(output="point_end")


def test_what_the_planner_may_replace():
    assert supports(hopping_window(5, 1), demo.SpikeDetector(), "apply", WINDOW, "raise")
    assert supports(tumbling_window(5), _last_two, "apply", POINT_END, "raise")
    assert supports(tumbling_window(5), Stamps(), "apply", WINDOW, "raise")
    assert not supports(hopping_window(5, 1), demo.SpikeDetector(), "apply", WINDOW,
                        "dead_letter")
    assert not supports(hopping_window(5, 1), demo.SpikeDetector(), "apply", WINDOW, "raise",
                        intervals=True)
    assert not supports(tumbling_window(5), Stamps(), "apply", WindowPolicy(output="clip"),
                        "raise")
    assert not supports(hopping_window(5, 1), demo.SpikeDetector(), "apply",
                        WindowPolicy(output="compressed"), "raise")
    with pytest.raises(ValueError, match="kind='apply'"):
        KeyedWindowAggregate("k", tumbling_window(5), Stamps(), WindowPolicy(output="clip"),
                             kind="apply")


def _readings():
    data = demo.generate(meters=6, minutes=20, seed=11)
    return [r for r in data.readings if r["ts"] is not None]


@pytest.mark.parametrize("emit", ["speculative", "final"])
def test_the_planner_runs_the_demo_anomalies_keyed(emit, runtime, monkeypatch):
    """``anomalies`` of the demo, through the planner (inline and on Ray), against the same
    query inline on the general path (GroupApply of one hopping window operator per key)."""
    import topology.planning.rules as rules
    from topology import Stream

    minute = 60 * demo.TICKS_PER_S
    rows = _readings()

    def query():
        src = Stream.from_rows(rows, start="ts",
                               advance=AdvanceTime(every=200, delay=minute, policy="drop"))
        return src.group_apply(lambda r: r["meter"], lambda g: g.hopping_window(
            5 * minute, minute, emit=emit).apply(demo.SpikeDetector(k=2.0)))

    def run(rt):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (late readings dropped: counted, not lost)
            return to_cht(list(expand(query().collect(runtime=rt))))

    assert "keyed window UDO" in query().explain()
    got = run(runtime)
    with monkeypatch.context() as m:
        m.setattr(rules, "supports", lambda spec, udm, kind, *a, **k: kind != "apply"
                  and supports(spec, udm, kind, *a, **k))
        assert "keyed window UDO" not in query().explain()
        want = run("inline")
    assert len(want) > 3
    assert got == want


@pytest.mark.slow
def test_a_killed_keyed_udo_actor_recovers_same_cht(ray_session, tmp_path):
    """On Ray with checkpoints: the keyed window UDO's actor is killed mid-stream and
    restarts from its pickled state; the output is the fault-free run's, each row once."""
    from tests.reliability.test_recovery import check_exactly_once, run_with_kill
    from topology import Stream

    minute = 60 * demo.TICKS_PER_S
    rows = [r for r in demo.generate(meters=20, minutes=60, seed=5).readings
            if r["ts"] is not None]

    def query():
        src = Stream.from_rows(rows, start="ts",
                               advance=AdvanceTime(every=500, delay=minute, policy="drop"))
        return src.group_apply(lambda r: r["meter"], lambda g: g.hopping_window(
            5 * minute, minute).apply(demo.SpikeDetector(k=2.0)))

    assert "keyed window UDO" in query().explain()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (late readings dropped: counted, not lost)
        expected = query().collect(runtime="inline")
        out, _stats, recs = run_with_kill("rec-keyed-udo", query(), tmp_path, "ray",
                                         "group_apply", 4_000, epoch=1)
    assert len(to_cht(expected)) > 3
    check_exactly_once(out, expected)
    assert len(recs) == 1
