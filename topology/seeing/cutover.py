"""Upgrades, proven: the output of a query restored into a changed one, checked against a
from-scratch run of the changed one (``cedar upgrade NEW.py --savepoint PATH --check``).

``deploy(new, restore=PATH)`` gives each step of the new query a state the savepoint holds
(:func:`topology.running.upgrades.match`: unchanged, or the same step with something
upstream of it changed) or a fresh one. Whether the restored query then says what the new
query says is a question about data, and :func:`check_upgrade` answers it on the data: a
restorable savepoint's sources can be read again from their beginning (lists, Arrow tables,
parquet: :func:`topology.running.savepoints.check` requires it), so the *retained input* is
that data, read again. Two runs of the new query, inline, in the savepoint's batches:

* **from scratch**: every source read from its beginning, every step new;
* **upgraded**: every step with the state ``match`` gives it (the savepoint's step's
  processor snapshot; a new processor where it starts fresh), the sources read from their
  beginning with the savepoint's ``rounds`` batches of each skipped, as the restored deploy
  does (:meth:`~topology.running.deploy._SupervisedJob.feeds_from`).

**The output from the cut-over.** At the cut the old query's output had reached a CTI ``C``
(its sink's): the output at times before ``C`` was final, and the rows alive at ``C`` (end
at or after it) were still open to retraction. Those alive rows are in the savepoint (the
sink's state, :meth:`~operators.publish.Publish.alive_snapshot`), so what a reader of the
output holds from the cut-over on is one valid stream: the alive rows and ``Cti(C)``, then
the upgraded run's output. Its CHT, keeping the rows that *reach past* ``C`` (end > C), is
the upgraded side; the from-scratch run's CHT rows that reach past ``C`` are the other. Rows
ending at or before ``C`` lie wholly in time the old query's output had made final before
the cut: no upgrade can change them, and they are left out (else any change of a stateless
step, a ``select`` adding a field, would "differ" in rows the new query never emitted).
A row that reaches past ``C`` is compared whole, its start and payload as the old query
emitted them if it was alive at the cut: that is what a reader holds.

Why this is the right line: for an unchanged query the full output's CHT is exactly the
final rows from before the cut (end < C: a CTI forbids later inserts or retractions to touch
them) plus the CHT of the alive rows continued by the restored run, so the two sides are
equal whenever the query is deterministic. A "keeps its state" step whose upstream changed
holds what the *old* upstream let through before the cut; where the new upstream would have
let through other rows, its windows open at the cut (and anything downstream) come out
otherwise than from scratch, and the check shows those rows. An upgraded run whose output
does not continue the old one validly (a CTI that goes back, a retraction of a row the old
query emitted with another payload) differs too, and says why.

    >>> from topology.running.upgrades import Fate
    >>> print(UpgradeCheck([Fate("where#1", "starts fresh", None, "new")], equal=True,
    ...                    cut=5, clock="ticks", compared=(3, 3)).verdict())
    equal: the upgraded query's output from the cut-over (its CTI at the cut, 5, on: the 3 rows
    ending after it) is a from-scratch run's of the new query over the same input
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from operators.cht import InvalidStream, Row, row_key, to_cht, validate
from operators.events import Message
from operators.payloads import freeze
from topology.building.times import show_row, show_time
from topology.running.upgrades import KEEPS, REFUSED, Fate, dropped, table

if TYPE_CHECKING:
    from operators.publish import Publish
    from topology.planning.dag import DagProcessor
    from topology.planning.plan import Plan
    from topology.stream import Stream

#: Rows shown of each side of a difference.
SHOWN = 8


@dataclasses.dataclass
class UpgradeCheck:
    """What :func:`check_upgrade` found: each step's :class:`Fate` (which state it reused),
    ``equal`` (None: not run, a step is refused), the cut's output CTI ``cut`` (ticks) and
    the query's ``clock``, ``compared`` (rows reaching past the cut: upgraded, from
    scratch), the ``difference`` as people read it, the savepoint's steps ``not_restored``
    and its ``record``."""

    fates: list[Fate]
    equal: bool | None
    cut: int = 0
    clock: str | None = None
    compared: tuple[int, int] = (0, 0)
    difference: str | None = None
    #: False when the upgraded run's output does not continue the old output validly
    valid: bool = True
    not_restored: list[str] = dataclasses.field(default_factory=list)
    record: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.equal is True

    def reused(self) -> str:
        """Which step took which state, one line per step (the fates' table)."""
        return table(self.fates)

    def verdict(self) -> str:
        """The check's outcome in a sentence (and the first differing rows)."""
        if self.equal is None:
            refused = ", ".join(f.step for f in self.fates if f.verdict == REFUSED)
            return f"not checked: {refused} refused (a restore would not start)"
        at = show_time(self.cut, self.clock)
        span = f"its CTI at the cut, {at}, on: the {{}} rows ending after it"
        if self.equal:
            return (f"equal: the upgraded query's output from the cut-over "
                    f"({span.format(self.compared[0])}) is a from-scratch run's of the new "
                    f"query over the same input")
        if not self.valid:
            return (f"DIFFERENT: the upgraded query's output from the cut-over ({at} on) is "
                    f"not a valid continuation of what the old query had emitted:\n"
                    f"{self.difference}")
        lines = [f"DIFFERENT: the upgraded query's output from the cut-over ({at} on: "
                 f"{self.compared[0]} rows ending after it) is not a from-scratch run's of "
                 f"the new query ({self.compared[1]} rows)", str(self.difference)]
        kept = [f for f in self.fates if f.verdict == KEEPS and f.step != "sink"]
        if kept:
            lines.append(
                "kept the old query's state though a step upstream of them changed: "
                + ", ".join(f.step for f in kept) + ". Their state is what the old "
                "upstream let through before the cut; from scratch the new upstream lets "
                "through other rows: the rows shown mix the two. Deploy without restore= to "
                "start afresh if that is wrong for your readers")
        return "\n".join(lines)

    def describe(self) -> str:
        """The fates, then the verdict: what ``cedar upgrade --check`` prints."""
        lines = [self.reused()]
        if self.not_restored:
            lines.append("not restored (no step of the new query takes its state): "
                         + ", ".join(self.not_restored))
        return "\n".join([*lines, self.verdict()])


def check_upgrade(stream: Stream, location: str, *, fuse: bool | str = False) -> UpgradeCheck:
    """Restore the savepoint at ``location`` into ``stream`` (the new query, as it will be
    deployed, with ``fuse``) inline and check that its output from the cut-over equals a
    from-scratch run of ``stream`` over the same input (see the module docstring).

    Returns an :class:`UpgradeCheck` (``equal`` None when a step is refused: nothing ran).
    Raises ValueError when there is no savepoint at ``location`` or a source cannot be read
    again from its beginning (then there is no retained input to check on)."""
    from actors import checkpoint as ck
    from actors.savepoints import load_record
    from topology.running.savepoints import one_shot
    from topology.running.upgrades import match

    location = ck.normalize(location)
    record = load_record(location)
    plan = stream.plan(fuse)
    fates = match(plan, record, location)
    report = UpgradeCheck(fates, None, clock=plan.clock, record=record,
                          not_restored=dropped(record, fates))
    if any(f.refused for f in fates):
        return report
    for step in plan.sources:
        why = one_shot(plan, step)
        if why is not None:
            raise ValueError(f"check_upgrade: source {step!r} cannot be read again from its "
                             f"beginning: {why}; the check needs the input (and so does "
                             f"deploy(..., restore=)): give it a list, an Arrow table or "
                             f"parquet files")
    before, report.cut = cut_output(location, record)
    scratch = _after(to_cht(_run(plan, record["batch_size"])), report.cut)
    upgraded_out = _run(plan, record["batch_size"], restore=(location, record, fates))
    try:
        validate(before + upgraded_out, name="the output from the cut-over")
        upgraded = _after(to_cht(before + upgraded_out), report.cut)
    except InvalidStream as exc:
        report.equal, report.valid = False, False
        report.difference = (f"  {exc}\n  (the old rows alive at the cut, then the restored "
                             f"run's output: a reader of the output gets this stream)")
        return report
    report.compared = (len(upgraded), len(scratch))
    report.difference = difference(upgraded, scratch, plan.clock)
    report.equal = report.difference is None
    return report


def cut_output(location: str, record: dict[str, Any]) -> tuple[list[Message], int]:
    """What a reader of the old query's output holds open at the cut: the rows alive at the
    sink's CTI (as Inserts, by start) then that CTI (:meth:`Publish.alive_snapshot
    <operators.publish.Publish.alive_snapshot>` of the sink's state in the savepoint), and
    the CTI (ticks)."""
    from actors import checkpoint as ck
    from actors.savepoints import step_location
    from operators.publish import Publish

    sink = Publish("sink")
    sink.restore(ck.load(step_location(location, record["sink"]))["proc"])
    return sink.alive_snapshot(), sink.cti


def _after(rows: list[Row], cut: int) -> list[Row]:
    """The CHT rows that reach past ``cut`` (end > cut)."""
    return [r for r in rows if r[1] > cut]


def _run(plan: Plan, batch_size: int,
         restore: tuple[str, dict[str, Any], list[Fate]] | None = None) -> list[Message]:
    """Run ``plan`` inline to the end of its sources, one batch of each in turn (as
    :func:`topology.running.inline.drive`). With ``restore`` = (location, record, fates)
    each step takes the state its fate names and the sources skip the ``rounds`` fed before
    the cut, as the restored deploy does; returns the output messages."""
    from topology.planning.dag import DagProcessor
    from topology.running.inline import close_feeds, source_batches

    dag = DagProcessor(plan, inline_sink=True)
    skip = 0 if restore is None else restore[1]["rounds"]
    feeds = [source_batches(plan, s, batch_size, skip) for s in dag.inputs]
    try:
        if restore is None:
            return _drive(dag, feeds)
        location, _, fates = restore
        sink = _restore(dag, location, fates)
        out = _drive(dag, feeds)
        return out if sink is None else sink.process(out)
    finally:
        close_feeds(feeds)


def _restore(dag: DagProcessor, location: str, fates: Sequence[Fate]) -> Publish | None:
    """Each step of ``dag`` takes the processor state of the savepoint's step its fate
    names. The sink passes its input on here (the old sink's rows are :func:`cut_output`);
    a sink restored ``upgraded`` (:func:`~topology.running.upgrades.upgraded_sink`) is
    returned, for the output to pass through it as the deployed query's does."""
    from actors import checkpoint as ck
    from actors.savepoints import step_location
    from operators.publish import Publish
    from topology.running import upgrades

    made = upgrades.made_states(dag.plan, location, list(fates))
    sink = None
    for f in fates:
        if dag.plan.stages[f.step].role == "sink":
            if f.step in made:
                sink = Publish(f.step)
                sink.restore(made[f.step]["proc"])
        elif f.step in made:
            dag.procs[f.step].restore(made[f.step]["proc"])
        elif f.old is not None:
            dag.procs[f.step].restore(ck.load(step_location(location, f.old))["proc"])
    return sink


def _drive(dag: DagProcessor, feeds: list[Any]) -> list[Message]:
    from operators.feeds import END, round_robin

    out: list[Message] = []
    ended = 0
    for round_ in round_robin(feeds):
        for port, batch in round_:
            if batch is not END:
                out.extend(dag.process(batch, port))
            else:
                ended += 1
                if ended < len(feeds):
                    out.extend(dag.end_input(port))
    return out + dag.finish()


def difference(upgraded: list[Row], scratch: list[Row], clock: str | None) -> str | None:
    """None when the two lists of CHT rows are equal as multisets (payloads compared to 9
    digits, as :func:`operators.cht.cht_diff`), else the rows only in each, the first
    :data:`SHOWN` of each shown as people read them (:func:`show_row`)."""
    a = Counter((s, e, freeze(p, 9)) for s, e, p in upgraded)
    b = Counter((s, e, freeze(p, 9)) for s, e, p in scratch)
    if a == b:
        return None
    shown = {(s, e, freeze(p, 9)): (s, e, p) for s, e, p in [*upgraded, *scratch]}

    def side(rows: Counter[Any], what: str) -> list[str]:
        listed = sorted((shown[k] for k in rows.elements()), key=row_key)
        lines = [f"  only in {what} ({len(listed)}):"]
        lines += [f"    {show_row(s, e, repr(p), clock)}" for s, e, p in listed[:SHOWN]]
        if len(listed) > SHOWN:
            lines.append(f"    ... and {len(listed) - SHOWN} more")
        if not listed:
            lines.append("    (none)")
        return lines

    return "\n".join(side(a - b, "the upgraded run's output (old rows alive at the cut, then "
                                 "the restored run's)")
                     + side(b - a, "the from-scratch run's output"))
