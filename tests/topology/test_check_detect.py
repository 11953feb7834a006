"""``cedar check`` on pattern queries (issue 37 item 7): ``detect`` and ``not_followed_by`` run
every way the engine may run them (arrival order, batching, restore, ``group_apply``
partitions) and ``detect`` also with ``emit="final"`` against its speculative output; a
pattern whose measures or predicates depend on how they are called is caught and shrunk."""

from __future__ import annotations

import itertools
import random

import pytest

from topology import AdvanceTime, CheckFailed, Count, Stream, check
from topology.building import nodes as n
from topology.seeing.checker import _final, _has, _rewrite

#: two symbols' prices, a tick every 10 ticks each, in a seeded random walk
_rng = random.Random(37)
ROWS: list[dict] = []
for _t in range(60):
    for _sym in ("X", "Y"):
        ROWS.append({"ts": _t * 10 + (_sym == "Y"), "sym": _sym, "px": _rng.randint(1, 9)})
ADVANCE = AdvanceTime(every=12)


def falling(p, m):
    return p["px"] < (m["B"] or m["A"])[-1]["px"]


def rising(p, m):
    return p["px"] > (m["C"] or m["B"])[-1]["px"]


def v_bottoms(s):
    """A fall then a rise, per symbol: every predicate reads only the match so far."""
    return s.detect("A B+ C+", {"B": falling, "C": rising}, within=80, key="sym",
                    measures=lambda m: (m["A"][0]["sym"], min(p["px"] for p in m["B"])))


def test_a_pattern_query_gives_the_same_cht_every_way():
    report = check(v_bottoms, ROWS, start="ts", advance=ADVANCE, ray=False)
    assert report.ok, report.describe()
    assert {"batches", "restored", "final", "columns"} <= set(report.runs)
    assert "final" not in report.skipped
    assert len(v_bottoms(Stream.from_rows(ROWS, start="ts")).collect(runtime="inline")) > 3


def bottoms_per_group(s):
    return s.group_apply("sym", lambda g: g.detect(
        "A B+ C+", {"B": falling, "C": rising}, within=80,
        measures=lambda m: m["A"][0]["px"]), partitions=2)


def test_under_group_apply_and_beside_an_absence_too():
    def quiet(s):
        # a tick after which no V-bottom of its symbol starts within 50 ticks
        return s.not_followed_by(bottoms_per_group(s), within=50,
                                 on=(lambda p: p["sym"], lambda p: p[0]))

    report = check(quiet, ROWS, start="ts", advance=ADVANCE, ray=False)
    assert report.ok, report.describe()
    assert {"partitions", "final", "restored"} <= set(report.runs)


def test_an_absence_after_a_detect():
    def unconfirmed(s):
        bottoms = bottoms_per_group(s)
        return bottoms.not_followed_by(bottoms, within=50, on=(lambda p: p[0], lambda p: p[0]))

    assert check(unconfirmed, ROWS, start="ts", advance=ADVANCE, ray=False).ok


def _emits(root: n.Node, kind: type[n.Node]) -> list[str]:
    """The ``emit`` of every node of ``kind`` in the tree under ``root``."""
    found: list[str] = []

    def look(x: n.Node) -> dict:
        if isinstance(x, kind):
            found.append(x.emit)  # type: ignore[attr-defined]
        return {}

    _rewrite(root, look)
    return found


def test_the_final_run_makes_every_detect_final_wherever_it_is():
    s = Stream.from_rows(ROWS, start="ts")
    q = s.group_apply(lambda p: p["sym"], lambda g: g.detect("A B+", within=5)).not_followed_by(
        s.detect("A", within=5).tumbling_window(10).aggregate(Count()), within=5)
    final = _rewrite(q._node, _final)
    assert _emits(q._node, n.Detect) == ["speculative", "speculative"]
    assert _emits(final, n.Detect) == ["final", "final"]
    assert _emits(final, n.Window) == ["final"]
    assert _has(q._node, n.NotFollowedBy)


_calls = itertools.count()


def numbered(m):
    """Order-dependent on purpose: a match numbered by how many matches were measured
    before it (a speculative run measures again on every correction)."""
    return next(_calls)


def numbered_bottoms(s):
    return s.detect("A B+ C+", {"B": falling, "C": rising}, within=80, key="sym",
                    measures=numbered)


def test_a_measures_function_counting_its_calls_is_caught():
    with pytest.raises(CheckFailed) as failed:
        check(numbered_bottoms, ROWS, start="ts", advance=ADVANCE, ray=False, shrink_s=10)
    report = failed.value.report
    assert report.reproduction is not None and report.minimal is not None
    assert len(report.minimal) < len(ROWS)
    # the speculative run measures a match again on each correction, the final run once
    assert "final" in report.differences


_last: dict[str, int] = {}


def remembers(p, m):
    """Hidden state on purpose: "rising" against the last price this predicate was called
    with, not against the match so far (the rows come to it in arrival order)."""
    before = _last.get(p["sym"], p["px"])
    _last[p["sym"]] = p["px"]
    return p["px"] > before


def rises_by_memory(s):
    return s.detect("A B+ C+", {"B": falling, "C": remembers}, within=80, key="sym",
                    measures=lambda m: len(m["C"]))


def test_a_predicate_with_hidden_state_is_caught_and_shrunk():
    _last.clear()
    report = check(rises_by_memory, ROWS, start="ts", advance=ADVANCE, ray=False,
                   raise_on_difference=False, shrink_s=20)
    assert not report.ok
    assert report.minimal is not None and len(report.minimal) <= 6, report.minimal
    assert "def test_rises_by_memory_does_not_depend_on_how_it_runs" in str(report.reproduction)
    assert report.minimal_difference  # what differed, or that the state outlives a run


def test_without_a_window_or_detect_final_is_skipped_and_says_why():
    report = check(lambda s: s.where(lambda r: r["px"] > 3), ROWS, start="ts", ray=False,
                   variants=["final"])
    assert report.skipped == {"final": "the query has no window and no detect"}


def test_the_chart_patterns_example_passes_check():
    """examples/chart_patterns.py's query over its ticks in the order they arrive (some minutes
    late, within the CTI's delay): the same matches every way, final or speculative."""
    import datetime as dt
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "examples" / "chart_patterns.py"
    spec = importlib.util.spec_from_file_location("chart_patterns", path)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    rows = [{"ts": (r["ts"] - epoch) // dt.timedelta(microseconds=1), "symbol": r["symbol"],
             "px": r["px"]} for r in example.ticks()]
    report = check(example.query, rows, start="ts", ray=False,
                   advance=AdvanceTime(every=30, delay=4 * example.MINUTE))
    assert report.ok, report.describe()
    assert "final" in report.runs
