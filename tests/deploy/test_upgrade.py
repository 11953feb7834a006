"""Upgrades (issue 39, item 3): a savepoint restored into a changed query.

    old query:  rows ─ where(v >= 0)  ─ group_apply(k: tumbling sum of v) ─ sink
    new query:  rows ─ where(v < 1000) ─ group_apply(k: tumbling sum of v) ─ sink
    rows:       r0 ... r(k) |cut| r(k+1) ... r(n-1)      every v < 13: both predicates keep
                                                          every row, before the cut and after
    1st run (old):  [-- fed, windows final before the cut emitted --] stop(savepoint=P)
    2nd run (new):  deploy(restore=P): where starts fresh (it holds no state), the keyed
                    window and the sink keep theirs, the rest of the rows fed
    output:         1st ∪ 2nd == an uninterrupted run of the new query over the same rows

The rows are chosen so that the changed predicate lets through what the old one did before
the cut: then the window's state is the new query's, and the uninterrupted run of the new
query is the right expectation. (Where a change would have let other rows through before
the cut, the window keeps the old query's state: that is what "keeps its state" means; a
restore does not check it, `cedar upgrade --check` does: tests/deploy/test_upgrade_check.py.)
A changed window size is refused naming
the step; `cedar upgrade` prints each step's fate; a fingerprint sees a function's code.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tests.deploy.test_savepoint import BATCH, N, inserted, rows, slow, wait_rows
from topology import AdvanceTime, Stream, Sum
from topology.planning.plan import own_fingerprints, step_fingerprints


def old_pred(r):
    return r["v"] >= 0


def new_pred(r):
    return r["v"] < 1_000


def query(data, pred=old_pred, size: int = 1_000, emit: str = "final") -> Stream:
    """rows ─ where(pred) ─ group_apply(k: tumbling(size) sum of v, emit final) ─ sink"""
    return Stream.from_rows(data, start="t", advance=AdvanceTime(every=BATCH)).where(
        pred).group_apply(
        lambda r: r["k"],
        lambda g: g.tumbling_window(size, emit=emit).aggregate(Sum("v")))


def cut(name: str, ckpt: str, point: str, old: Stream | None = None) -> list:
    """Deploy the old query (``old``, by default :func:`query`) over the slow rows, stop it
    with a savepoint a third of the way in; the output delivered before the cut."""
    live = (old or query(slow())).deploy(name, checkpoint_dir=ckpt, batch_size=BATCH,
                                         checkpoint_every=4)
    try:
        wait_rows(live, N // 3)
        record = live.stop(savepoint=point)
    except BaseException:
        live.stop()
        raise
    assert record is not None and 0 < record["rounds"] < N // BATCH
    return live.output()


def test_a_changed_where_restores_the_window_and_gives_the_new_querys_output(
        ray_session, tmp_path):
    ckpt, point = str(tmp_path / "ckpt"), str(tmp_path / "savepoint")
    want = inserted(query(rows(), new_pred).collect(runtime="inline"))
    before = cut("up-where", ckpt, point)
    new = query(slow(), new_pred)
    again = new.deploy("up-where", checkpoint_dir=ckpt, restore=point)
    try:
        assert again.wait(60)
        after = again.output()
    finally:
        again.stop()
    assert before and after, "the cut fell at an end: the test proves nothing"
    got = inserted(before) + inserted(after)
    assert max(got.values()) == 1 and got == want


def test_a_changed_window_size_is_refused_naming_the_step_and_cedar_upgrade_says_so(
        ray_session, tmp_path, capsys):
    from topology.app.cli import main

    ckpt, point = str(tmp_path / "ckpt"), str(tmp_path / "savepoint")
    live = query(slow()).deploy("up-size", checkpoint_dir=ckpt, batch_size=BATCH)
    try:
        wait_rows(live, BATCH * 3)
        live.stop(savepoint=point)
    except BaseException:
        live.stop()
        raise
    changed = query(slow(), size=2_000)
    step = next(s for s in changed.plan().stages if s.startswith("group_apply"))
    with pytest.raises(ValueError, match=rf"step '{step}' differs .* its state cannot be "
                                         r"rebuilt: no retained input log"):
        changed.deploy("up-size", checkpoint_dir=ckpt, restore=point)

    script = tmp_path / "new.py"
    script.write_text(upgrade_script(2_000))
    capsys.readouterr()
    assert main(["upgrade", str(script), "--savepoint", point]) == 1
    said = capsys.readouterr().out
    assert f"{step}" in said and "refused" in said and "no retained input log" in said, said
    assert "where#1" in said and "starts fresh" in said, said
    assert f"not restored (no step of the new query takes its state): where#1, {step}" in said
    script.write_text(upgrade_script(1_000))
    assert main(["upgrade", str(script), "--savepoint", point]) == 0
    said = capsys.readouterr().out
    lines = {line.split()[0]: line for line in said.splitlines()[1:] if line.strip()}
    assert "keeps its state" in lines[step] and "upstream" in lines[step], said
    assert "unchanged" in lines["from_rows#0"] and "starts fresh" in lines["where#1"], said


def upgrade_script(size: int) -> str:
    """A NEW.py for `cedar upgrade`: it defines ``stream``, the new query (here with the
    new predicate and a window of ``size``)."""
    return textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.getcwd()!r})
        from tests.deploy.test_upgrade import new_pred, query, rows
        stream = query(rows(), new_pred, size={size})
        """)


# -- fingerprints that see code ----------------------------------------------------------------
def _where(pred) -> dict[str, str]:
    return own_fingerprints(Stream.from_rows([{"t": 1, "v": 1}], start="t").where(pred).plan())


def test_a_fingerprint_sees_a_functions_body_not_its_name():
    # the same code, written twice (two lambda objects): the same fingerprint
    assert _where(lambda r: r["v"] > 3) == _where(lambda r: r["v"] > 3)
    assert _where(lambda r: r["v"] > 3) != _where(lambda r: r["v"] > 4)  # a constant
    assert _where(lambda r: r["v"] > 3) != _where(lambda r: r["w"] > 3)  # a key
    assert _where(lambda r: r["v"] > 3) != _where(lambda r: r["v"] < 3)  # an operator
    assert _where(above(3)) == _where(above(3))  # a closure cell's value: the same
    assert _where(above(3)) != _where(above(4))  # and another
    assert _where(old_pred) != _where(new_pred)


def above(limit):
    return lambda r: r["v"] > limit


def test_a_step_renamed_by_the_planner_keeps_its_own_fingerprint():
    src = Stream.from_rows([{"t": 1, "v": 1}], start="t")
    one = src.where(old_pred).plan()
    two = src.where(new_pred).where(old_pred).plan()
    assert own_fingerprints(two)["where#2"] == own_fingerprints(one)["where#1"]
    assert step_fingerprints(two)["where#2"] != step_fingerprints(one)["where#1"]


def test_fingerprints_are_the_same_in_another_process_and_hash_seed():
    code = ("from tests.deploy.test_upgrade import query, rows; "
            "from topology.planning.plan import step_fingerprints; "
            "print(step_fingerprints(query(rows(10)).plan()))")
    here = step_fingerprints(query(rows(10)).plan())
    env = dict(os.environ, PYTHONHASHSEED="4321", PYTHONPATH=os.pathsep.join(sys.path))
    there = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, check=True).stdout.strip()
    assert there == repr(here)


def test_steps_are_matched_by_fingerprint_not_by_id():
    """old:  rows ─ where#1(old) ─ group_apply#2 ─ sink
       new:  rows ─ where#1(new) ─ where#2(old) ─ group_apply#3 ─ sink
    the new where starts fresh; where#2 and group_apply#3 take where#1's and
    group_apply#2's states (their ids changed, their own fingerprints did not)."""
    from topology.running.upgrades import FRESH, KEEPS, UNCHANGED, match

    old = query(rows(10)).plan()
    record = {"fingerprints": step_fingerprints(old), "own_fingerprints": own_fingerprints(old)}
    new = Stream.from_rows(rows(10), start="t", advance=AdvanceTime(every=BATCH)).where(
        new_pred).where(old_pred).group_apply(
        lambda r: r["k"], lambda g: g.tumbling_window(1_000, emit="final").aggregate(Sum("v")))
    fates = {f.step: (f.verdict, f.old) for f in match(new.plan(), record, "unused")}
    assert fates == {"from_rows#0": (UNCHANGED, "from_rows#0"), "where#1": (FRESH, None),
                     "where#2": (KEEPS, "where#1"), "group_apply#3": (KEEPS, "group_apply#2"),
                     "sink": (KEEPS, "sink")}
    # the same plan: every step unchanged, its own state
    assert {f.verdict for f in match(old, record, "unused")} == {UNCHANGED}


@pytest.mark.slow
def test_a_step_added_upstream_renames_the_window_and_it_keeps_its_state(ray_session,
                                                                         tmp_path):
    """The restored run's window is group_apply#3; its state is group_apply#2's."""
    def new_query(data) -> Stream:
        return Stream.from_rows(data, start="t", advance=AdvanceTime(every=BATCH)).where(
            new_pred).where(old_pred).group_apply(
            lambda r: r["k"],
            lambda g: g.tumbling_window(1_000, emit="final").aggregate(Sum("v")))

    ckpt, point = str(tmp_path / "ckpt"), str(tmp_path / "savepoint")
    want = inserted(new_query(rows()).collect(runtime="inline"))
    before = cut("up-renamed", ckpt, point)
    again = new_query(slow()).deploy("up-renamed", checkpoint_dir=ckpt, restore=point)
    try:
        assert "group_apply#3" in again.steps
        assert again.wait(60)
        after = again.output()
    finally:
        again.stop()
    got = inserted(before) + inserted(after)
    assert before and after and max(got.values()) == 1 and got == want


def test_a_changed_stateful_step_starts_fresh_only_when_its_saved_state_is_empty(tmp_path):
    """A savepoint (written here by hand) whose window had seen nothing: the window with
    another size starts fresh; had it seen a row, it is refused."""
    from actors import checkpoint as ck
    from actors.savepoints import step_location
    from operators.events import Insert
    from topology.running.upgrades import FRESH, REFUSED, match

    old, new = query(rows(10)).plan(), query(rows(10), size=2_000).plan()
    record = {"fingerprints": step_fingerprints(old), "own_fingerprints": own_fingerprints(old)}
    window = next(s for s in old.stages if s.startswith("group_apply"))
    proc = old.stages[window].factory()
    ck.save(step_location(str(tmp_path), window), {"proc": proc.snapshot()})
    fates = {f.step: f for f in match(new, record, str(tmp_path))}
    assert fates[window].verdict == FRESH and "empty" in fates[window].why
    proc.process([Insert(0, 1, 2, {"t": 1, "k": 1, "v": 3})])
    ck.save(step_location(str(tmp_path), window), {"proc": proc.snapshot()})
    fates = {f.step: f for f in match(new, record, str(tmp_path))}
    assert fates[window].verdict == REFUSED and "no retained input log" in fates[window].why


@pytest.mark.slow
def test_fused_into_its_source_a_changed_where_keeps_the_source(ray_session, tmp_path):
    """fuse=True puts the where in the source's stage: the stage changed, but its source did
    not, and the where holds no state: the source's position and state are kept, the where
    starts fresh, and the output is the new query's."""
    from topology.running.savepoints import check
    from topology.running.upgrades import KEEPS, match

    ckpt, point = str(tmp_path / "ckpt"), str(tmp_path / "savepoint")
    live = query(slow()).deploy("up-fused", checkpoint_dir=ckpt, batch_size=BATCH,
                                checkpoint_every=4, fuse=True)
    try:
        wait_rows(live, N // 3)
        live.stop(savepoint=point)
    except BaseException:
        live.stop()
        raise
    before = live.output()
    new = query(slow(), new_pred)
    plan = new.plan(True)
    source = plan.sources[0]
    assert len(plan.stages[source].nodes) == 2  # (the where is in the source's stage)
    fate = {f.step: f for f in match(plan, check(plan, "up-fused", point, None), point)}
    assert (fate[source].verdict, fate[source].source_only) == (KEEPS, True)
    again = new.deploy("up-fused", checkpoint_dir=ckpt, restore=point, fuse=True)
    try:
        assert again.wait(60)
        after = again.output()
        # the source's own state went on: its row accounting counts the rows before the cut
        assert again.stats()[source]["source"]["received"] == N
    finally:
        again.stop()
    assert before and after, "the cut fell at an end: the test proves nothing"
    got = inserted(before) + inserted(after)
    assert max(got.values()) == 1 and got == inserted(query(rows(), new_pred).collect(
        runtime="inline"))


@pytest.mark.slow
def test_a_select_after_a_speculative_window_retracts_the_old_rows_as_emitted(ray_session,
                                                                              tmp_path):
    """The speculative rows alive at the cut went out with the old payloads (key, sum); the
    restored window retracts them through the new select (key, sum, 2 * sum), and the sink,
    restored ``upgraded``, sends each retraction with the payload its row was emitted with:
    the old and new outputs together are one valid stream, and every row the new query
    sends is a from-scratch run's. (A row alive at the cut that is never corrected keeps
    its old payload: `cedar upgrade --check` shows such rows.)"""
    from collections import Counter

    from operators.cht import to_cht, validate
    from operators.events import Cti, Insert, Retract

    ckpt, point = str(tmp_path / "ckpt"), str(tmp_path / "savepoint")
    # windows of 2001 ticks: whichever batch (200 rows, 2000 ticks) the cut follows, a
    # window of every key is open across it, sent speculative and corrected after the cut
    before = cut("up-spec", ckpt, point, query(slow(), size=2_001, emit="speculative"))
    new = query(slow(), size=2_001, emit="speculative").select(
        lambda r: (r[0], r[1], 2 * r[1]))
    again = new.deploy("up-spec", checkpoint_dir=ckpt, restore=point)
    try:
        assert again.wait(60)
        after = again.output()
    finally:
        again.stop()
    emitted = {m.id: m.payload for m in before if type(m) is Insert}
    retracted = [m for m in after if type(m) is Retract and m.id in emitted]
    assert retracted, "no row alive at the cut was retracted: the test proves nothing"
    assert all(m.payload == emitted[m.id] for m in retracted)
    validate(before + after)
    last = max(m.time for m in before if type(m) is Cti)
    scratch = Counter(r for r in to_cht(query(rows(), size=2_001, emit="speculative").select(
        lambda r: (r[0], r[1], 2 * r[1])).collect(runtime="inline")) if r[1] > last)
    sent = Counter(r for r in to_cht(before + after) if r[1] > last and len(r[2]) == 3)
    assert sent and sent <= scratch
