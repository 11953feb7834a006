"""``topology.check`` / ``cedar check``: a user's query run every way the engine may run it,
the same CHT each time; an order-dependent query caught, shrunk and printed as a test."""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap

import pytest
from hypothesis import given

from operators.cht import to_cht, validate
from tests.kit import PROPERTY, physical_streams
from topology import (
    MAX_TIME,
    AdvanceTime,
    CheckFailed,
    Count,
    Cti,
    IncrementalAggregate,
    Insert,
    Retract,
    Sum,
    check,
)
from topology.seeing.checker import REPRODUCTION_HEAD, _shuffle

ROWS = [{"ts": (t * 7) % 50, "k": t % 4, "v": t} for t in range(60)]


class LastAdded(IncrementalAggregate):
    """Order-dependent on purpose: the payload that arrived last in the window."""

    def initial_state(self):
        return None

    def add(self, state, values):
        return values[-1]

    def remove(self, state, values):
        return state

    def result(self, state):
        return state


def last_per_window(s):
    return s.select(lambda r: r["v"]).tumbling_window(10).aggregate(LastAdded())


def per_key(s):
    return s.group_apply(lambda r: r["k"],
                         lambda g: g.hopping_window(10, 5).aggregate(Sum("v")), partitions=2)


def test_a_temporal_query_gives_the_same_cht_every_way():
    report = check(per_key, ROWS, start="ts", advance=AdvanceTime(every=15), ray=False)
    assert report.ok
    assert {"batches", "partitions", "restored", "final", "columns"} <= set(report.runs)
    # three seeds, and every CTI period's events in reverse
    assert sum(v.startswith("shuffled") for v in report.runs) == 4
    assert "shuffled (reversed)" in report.runs
    assert report.skipped == {"ray": "ray=False", "interleaved": (
        "the source has no per-key progress (AdvanceTime(per_key=...))")}


def test_an_arrival_order_dependent_udm_is_caught_and_shrunk():
    with pytest.raises(CheckFailed) as failed:
        check(last_per_window, ROWS, start="ts", advance=AdvanceTime(every=20), ray=False)
    report = failed.value.report
    assert any(v.startswith("shuffled") for v in report.differences)
    # two rows in one window arriving in the other order is all it takes
    assert report.minimal is not None and len(report.minimal) == 2
    assert report.minimal[0]["ts"] // 10 == report.minimal[1]["ts"] // 10
    assert "only in actual" in str(failed.value)


def test_the_minimal_input_keeps_no_row_the_failure_does_not_need():
    """Issue 41 item 14: ddmin stopped at 5 rows here (removing any one of the 3 rows before
    the pair moves the CTIs AdvanceTime(every=3) makes, so no single removal kept the
    failure); two rows in one window, swapped, are all it takes."""
    rng = random.Random(7)
    rows = [{"ts": rng.randrange(200), "v": t} for t in range(200)]
    with pytest.raises(CheckFailed) as failed:
        check(last_per_window, rows, start="ts", advance=AdvanceTime(every=3), ray=False)
    small = failed.value.report.minimal
    assert small is not None and len(small) == 2, small
    assert small[0]["ts"] // 10 == small[1]["ts"] // 10


def test_the_reproduction_runs_and_fails_the_same_way():
    with pytest.raises(CheckFailed) as failed:
        check(last_per_window, ROWS, start="ts", advance=AdvanceTime(every=20), ray=False)
    text = failed.value.report.reproduction
    assert text is not None and "from tests.topology.test_checker import last_per_window" in text
    scope: dict = {}
    exec(compile(text, "<reproduction>", "exec"), scope)
    test = next(v for k, v in scope.items() if k.startswith("test_"))
    with pytest.raises(CheckFailed):
        test()


calls = {"n": 0}


def every_other(p):
    """Depends on how many calls came before: on the batches, not on the events."""
    calls["n"] += 1
    return calls["n"] % 2 == 0


def test_a_call_count_dependent_predicate_is_caught():
    def q(s):
        return s.where(every_other).tumbling_window(10).aggregate(Count())

    report = check(q, ROWS, start="ts", ray=False, raise_on_difference=False,
                   variants=["batches", "shuffled"], shrink_s=5)
    assert not report.ok and report.reproduction is not None


def test_messages_with_retractions_and_edges():
    """A physical stream as data: an edge closed later, a lifetime corrected, a full
    retraction; shuffled between its CTIs, restored half-way, on every way the same."""
    msgs = [Insert("a", 0, MAX_TIME, 1), Insert("b", 2, 9, 2), Insert("c", 3, 4, 3), Cti(2),
            Retract("a", 0, MAX_TIME, 12, 1), Insert("d", 5, 6, 4), Retract("b", 2, 9, 7, 2),
            Retract("c", 3, 4, 3, 3), Cti(8), Insert("e", 8, 20, 5), Cti(20)]
    report = check(lambda s: s.snapshot_window().aggregate(Sum()), msgs, ray=False)
    assert report.ok and "restored" in report.runs


@PROPERTY
@given(physical_streams())
def test_shuffling_keeps_a_valid_stream_with_the_same_cht(msgs):
    out = _shuffle(msgs, random.Random(len(msgs)))
    validate(out)
    assert sorted(map(repr, to_cht(out))) == sorted(map(repr, to_cht(msgs)))
    assert [m for m in out if type(m).__name__ == "Cti"] == \
        [m for m in msgs if type(m).__name__ == "Cti"]


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="variants"):
        check(per_key, ROWS, start="ts", variants=["sideways"])
    with pytest.raises(TypeError, match="query"):
        check(42, ROWS, start="ts")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="start"):
        check(per_key, ROWS)


@pytest.mark.ray
def test_on_ray_too(ray_session):
    report = check(per_key, ROWS, start="ts", variants=["ray"])
    assert report.ok and "ray" in report.runs


def test_the_command_line(tmp_path):
    script = tmp_path / "myquery.py"
    script.write_text(textwrap.dedent("""
        from topology import AdvanceTime, IncrementalAggregate

        class LastAdded(IncrementalAggregate):
            def initial_state(self):
                return None
            def add(self, state, values):
                return values[-1]
            def remove(self, state, values):
                return state
            def result(self, state):
                return state

        def query(s):
            return s.select(lambda r: r["v"]).tumbling_window(10).aggregate(LastAdded())

        data = [{"ts": (t * 7) % 50, "v": t} for t in range(60)]
        CHECK = {"start": "ts", "advance": AdvanceTime(every=20)}
    """))
    run = subprocess.run([sys.executable, "-m", "topology.app.cli", "check", str(script),
                          "--no-ray"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stderr
    assert "from myquery import query" in run.stdout
    repro = run.stdout.split(REPRODUCTION_HEAD)[1]
    (tmp_path / "test_repro.py").write_text(repro)
    # plain python runs it too (`pip install .[viz]` has no pytest) and fails the same way
    plain = subprocess.run([sys.executable, str(tmp_path / "test_repro.py")],
                           capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert plain.returncode == 1 and "CheckFailed" in plain.stderr, plain.stderr
    again = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            str(tmp_path / "test_repro.py")], capture_output=True, text=True,
                           cwd=tmp_path, timeout=300)
    assert "CheckFailed" in again.stdout and again.returncode == 1
    good = tmp_path / "counts.py"
    good.write_text("from topology import Count\n"
                    "def query(s):\n"
                    "    return s.tumbling_window(10).aggregate(Count())\n"
                    "data = [{'ts': t % 37} for t in range(100)]\n"
                    "CHECK = {'start': 'ts'}\n")
    ok = subprocess.run([sys.executable, "-m", "topology.app.cli", "check", str(good), "--no-ray"],
                        capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0 and "all with the same CHT" in ok.stdout, ok.stdout + ok.stderr


def test_the_command_line_says_what_to_add_when_check_lacks_the_start(tmp_path):
    """Issue 41 item 14: rows without CHECK = {"start": ...} gave a raw traceback."""
    script = tmp_path / "nostart.py"
    script.write_text("from topology import Count\n"
                      "def query(s):\n"
                      "    return s.tumbling_window(10).aggregate(Count())\n"
                      "data = [{'v': t, 'ts': t % 37} for t in range(10)]\n")
    run = subprocess.run([sys.executable, "-m", "topology.app.cli", "check", str(script),
                          "--no-ray"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert 'CHECK = {"start": "ts"}' in run.stderr and "nostart.py" in run.stderr
    script.write_text(script.read_text() + "CHECK = {'strat': 'ts'}\n")
    typo = subprocess.run([sys.executable, "-m", "topology.app.cli", "check", str(script),
                           "--no-ray"],
                          capture_output=True, text=True, timeout=300)
    assert typo.returncode == 2 and "Traceback" not in typo.stderr, typo.stderr
    assert "'strat'" in typo.stderr
