"""``cedar debug`` and ``cedar timeline`` on a recorded trace, run through the CLI's main."""

from __future__ import annotations

import json

import pytest

from operators.aggregates import Count
from operators.events import Cti, Insert, Retract
from topology import Stream
from topology.app.cli import main

#   a [0 ──────── 4)          b [2 ─ 3)    c [5 ─────────→ ∞    d [1 ──── 9) retracted to 6
#   windows [0, 3) [3, 6) [6, 9)
EVENTS = [Insert("a", 0, 4, 1), Insert("b", 2, 3, 2), Insert("d", 1, 9, 4),
          Retract("d", 1, 9, 6, 4), Cti(5), Insert("c", 5, 2**62, 3), Insert("e", 6, 7, 5)]


@pytest.fixture
def trace(tmp_path):
    path = str(tmp_path / "trace")
    (Stream.from_events(EVENTS).where(lambda p: p != 99)
     .tumbling_window(3).aggregate(Count())).collect(runtime="inline", trace=path)
    return path


def test_summary_lists_steps_with_counts(trace, capsys):
    assert main(["debug", trace]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert [line.split()[0] for line in lines] == [
        "from_events#0", "where#1", "tumbling.aggregate#2", "sink"]
    assert "window" in lines[2] and "← where#1:0" in lines[2]


def test_listing_filters_by_step_direction_id_and_time(trace, capsys):
    assert main(["debug", trace, "--step", "where", "--direction", "in", "--id", "d"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[0].split()[:6] == ["step", "dir", "port", "seq", "kind", "id"]
    assert [r.split()[4] for r in rows[1:]] == ["insert", "retract"]
    assert main(["debug", trace, "--step", "from_events#0", "--direction", "out",
                 "--from", "5", "--to", "8", "--kind", "insert"]) == 0
    ids = [r.split()[5] for r in capsys.readouterr().out.splitlines()[1:]]
    assert ids == ["'d'", "'c'", "'e'"]  # overlapping [5, 8)
    # the same bounds as times a person types (ticks are µs since the epoch)
    assert main(["debug", trace, "--step", "from_events#0", "--direction", "out",
                 "--from", "1970-01-01T00:00:00.000005Z", "--to", "1970-01-01T00:00:00.000008",
                 "--kind", "insert"]) == 0
    assert [r.split()[5] for r in capsys.readouterr().out.splitlines()[1:]] == ids
    assert main(["debug", trace, "--limit", "2", "--step", "sink"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 4 and "more (raise --limit)" in out[-1]


def test_cause_prints_the_member_inputs(trace, capsys, tmp_path):
    from topology.seeing.debug import Recording

    rec = Recording.open(trace)
    # the final output of window [3, 6): a [0, 4), d [1, 6) and c [5, ∞) (b ended at 3)
    window = [r for r in rec.events(step="sink", direction="out", kind="insert")
              if (r["start"], r["end"]) == (3, 6)][-1]
    assert json.loads(window["payload"]) == 3
    assert main(["debug", trace, "--cause", window["id"]]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert lines[0].startswith("sink") and "[3, 6)" in lines[0]
    leaves = [line.strip() for line in lines if line.strip().startswith("from_events#0")]
    assert sorted(line.split()[2] for line in leaves) == ["id='a'", "id='c'", "id='d'"]
    assert main(["debug", trace, "--cause", "nope"]) == 2
    assert "no event with id" in capsys.readouterr().err
    assert main(["debug", str(tmp_path / "missing")]) == 2
    assert "no plan.json" in capsys.readouterr().err


def test_timeline_command_writes_the_picture(trace, tmp_path, capsys):
    out = tmp_path / "w.svg"
    assert main(["timeline", trace, "--step", "tumbling", "-o", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    assert out.read_text().count('id="window-') == 3
    png = tmp_path / "w.png"
    assert main(["timeline", trace, "--step", "tumbling", "-o", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
