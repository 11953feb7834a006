"""The runnable examples run as a user runs them: ``python examples/<name>.py`` in a subprocess,
and say what they should."""

from __future__ import annotations

import datetime as dt
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from topology import Stream, to_cht

REPO = Path(__file__).resolve().parents[1]


def _module(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "examples" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.spark
@pytest.mark.slow  # Spark's start and a streaming read of 7 files: ~25 s
def test_chart_patterns_finds_the_shapes_drawn_in_whatever_order_the_ticks_arrive():
    run = subprocess.run([sys.executable, "examples/chart_patterns.py"], cwd=REPO,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    out = run.stdout
    # the shapes drawn in: a V-bottom of ACME and INITECH, a head-and-shoulders of GLOBEX and
    # INITECH; times read as times
    example = _module("chart_patterns")
    lines = [line for line in out.splitlines() if line.startswith("  14:")]
    assert sorted((line.split()[3], line.split()[4]) for line in lines) == [
        ("ACME", "V-bottom"), ("GLOBEX", "head-and-shoulders"),
        ("INITECH", "V-bottom"), ("INITECH", "head-and-shoulders")], out
    assert "ticks came 2 to 3 minutes late" in out
    # ACME's false V: shown while its dip was late, retracted when the dip came
    history = out.split("as the ticks came in:")[1].splitlines()
    assert any(line.startswith("  retracted") for line in history), out
    assert "so that was no V, and it was retracted" in out
    # the matches over the ticks read in time order, with no late tick: the same lines
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    rows = sorted(({**r, "ts": (r["ts"] - epoch) // dt.timedelta(microseconds=1)}
                   for r in example.ticks()), key=lambda r: r["ts"])
    for r in rows:
        del r["arrives"]
    in_order = to_cht(example.query(Stream.from_rows(rows, start="ts")).collect(
        runtime="inline"))
    assert len(in_order) == len(lines)
    for start, end, p in in_order:
        assert any(line.startswith(f"  {example.at(start)} - {example.at(end - 1)}  "
                                   f"{p['symbol']:<8} {p['pattern']:<19} {p['detail']}")
                   for line in lines), (p, out)
