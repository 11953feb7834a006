"""Upgrades, proven (issue 39, item 3): the restored query's output from the cut-over checked
against a from-scratch run of the new query (``cedar upgrade NEW.py --savepoint P --check``).

    old query:  rows ─ where(v >= 0) ─ group_apply(k: tumbling(1000) sum of v, final) ─ sink
    rows:       r0 ... r(k) |cut| r(k+1) ... r(n-1)          (taken once, on Ray)
    check:      from scratch:  new query over r0 ... r(n-1)
                upgraded:      new query, each step's state from the savepoint as `match`
                               maps it, fed r(k+1) ... r(n-1)
                compared:      the rows reaching past the old output's CTI at the cut C
                               (the old rows alive at C, then the upgraded run's) ==
                               the from-scratch rows reaching past C

    the same query                      → every step unchanged       → equal
    a select added after the window     → it starts fresh            → equal
    where(v < 1000): the same rows pass → the window keeps its state → equal
    where(v < 5):    fewer rows pass    → the window keeps its state → DIFFERENT: the windows
                                          open at the cut hold the old where's rows
"""

from __future__ import annotations

import os
import textwrap

import pytest

from operators.cht import to_cht
from tests.deploy.test_savepoint import inserted, rows, slow
from tests.deploy.test_upgrade import cut, new_pred, query
from topology.running.upgrades import FRESH, KEEPS, UNCHANGED
from topology.seeing.cutover import check_upgrade, cut_output, difference


def few(r):
    return r["v"] < 5


def doubled(s):
    """the old query with a select after the window adding a field: (key, sum, 2 * sum)"""
    return s.select(lambda r: (r[0], r[1], 2 * r[1]))


@pytest.fixture(scope="module")
def savepoint(ray_session, tmp_path_factory) -> tuple[str, list]:
    """A savepoint of the old query taken on Ray a third of the way in, and the output the
    old query delivered before the cut."""
    where = tmp_path_factory.mktemp("upgrade-check")
    point = str(where / "savepoint")
    before = cut("upc", str(where / "ckpt"), point)
    return point, before


def verdicts(report) -> dict[str, str]:
    return {f.step: f.verdict for f in report.fates}


def test_the_same_query_gives_the_same_output_from_the_cut_over(savepoint):
    report = check_upgrade(query(rows()), savepoint[0])
    assert set(verdicts(report).values()) == {UNCHANGED}
    assert report.ok and report.compared[0] == report.compared[1] > 0, report.describe()
    assert "equal: the upgraded query's output from the cut-over" in report.describe()


def test_a_select_added_after_the_window_starts_fresh_and_is_equal(savepoint):
    report = check_upgrade(doubled(query(rows())), savepoint[0])
    fates = verdicts(report)
    assert fates["select#3"] == FRESH and fates["group_apply#2"] == UNCHANGED
    assert fates["sink"] == KEEPS
    assert report.ok, report.describe()


def test_a_where_that_lets_the_same_rows_through_keeps_the_window_and_is_equal(savepoint):
    report = check_upgrade(query(rows(), new_pred), savepoint[0])
    assert verdicts(report)["group_apply#2"] == KEEPS and verdicts(report)["where#1"] == FRESH
    assert report.ok, report.describe()


def test_a_where_that_lets_fewer_rows_through_differs_and_the_check_says_where(savepoint):
    """The window keeps the old where's rows; from scratch it never saw them: the windows
    open at the cut differ (one per key), the later ones are equal."""
    report = check_upgrade(query(rows(), few), savepoint[0])
    assert verdicts(report)["group_apply#2"] == KEEPS
    assert report.equal is False, report.describe()
    said = report.describe()
    assert "DIFFERENT" in said and "only in the from-scratch run's output (7)" in said, said
    open_at_cut = f"[{report.cut}, {report.cut + 1_000})"
    assert said.count(open_at_cut) == 14, said  # 7 keys, on each side
    assert "kept the old query's state though a step upstream of them changed: " \
           "group_apply#2" in said, said


@pytest.mark.slow  # ~10 s: a restore deployed
def test_the_upgraded_side_is_what_a_deployed_restore_delivers(savepoint, tmp_path):
    """The rows the check puts on the upgraded side (the old rows alive at the cut, then the
    restored run's) are those of a real restore into the changed query on Ray."""
    point, before = savepoint
    report = check_upgrade(query(rows(), few), point)
    again = query(slow(), few).deploy("upc-few", checkpoint_dir=str(tmp_path / "c"),
                                      restore=point)
    try:
        assert again.wait(60)
        after = again.output()
    finally:
        again.stop()
    got = inserted(before) + inserted(after)
    assert max(got.values()) == 1 and before and after
    alive, at = cut_output(point, report.record)
    assert at == report.cut
    deployed = [r for r in to_cht(alive + after) if r[1] > at]
    scratch = [r for r in to_cht(query(rows(), few).collect(runtime="inline")) if r[1] > at]
    assert difference(deployed, scratch, "ticks") == report.difference


def script(body: str) -> str:
    return textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.getcwd()!r})
        from tests.deploy.test_savepoint import rows
        from tests.deploy.test_upgrade import old_pred, query
        from tests.deploy.test_upgrade_check import few
        stream = {body}
        """)


def test_cedar_upgrade_check_prints_the_fates_and_the_verdict(savepoint, tmp_path, capsys):
    from topology.app.cli import main

    new = tmp_path / "new.py"
    new.write_text(script("query(rows(), old_pred)"))
    capsys.readouterr()
    assert main(["upgrade", str(new), "--savepoint", savepoint[0], "--check"]) == 0
    said = capsys.readouterr().out
    assert "unchanged" in said and "equal: the upgraded query's output" in said, said
    new.write_text(script("query(rows(), few)"))
    assert main(["upgrade", str(new), "--savepoint", savepoint[0], "--check"]) == 1
    said = capsys.readouterr().out
    lines = {line.split()[0]: line for line in said.splitlines() if line.strip()}
    assert "keeps its state" in lines["group_apply#2"], said
    assert "DIFFERENT" in said and "only in the upgraded run's output" in said, said
    new.write_text(script("query(rows(), old_pred, size=2_000)"))  # refused: not run
    assert main(["upgrade", str(new), "--savepoint", savepoint[0], "--check"]) == 1
    said = capsys.readouterr().out
    assert "refused: group_apply#2" in said and "check on the input" not in said, said
