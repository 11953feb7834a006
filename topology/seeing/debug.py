"""The event-flow debugger: read a trace back, step through it, find root causes.

A trace (``collect(trace=PATH)``, see :mod:`actors.recorder`) holds every message entering and
leaving every step. :class:`Recording` reads it: :meth:`Recording.flow` walks the plan step by
step (sources first) and each step's messages in the order the step saw them,
:meth:`Recording.events` filters them, and :meth:`Recording.root_cause` answers *which input
events produced this output event*, from each step's kind (``plan.json``) and its inputs.

**When.** A step's output answers all of its input only between batches (a trace numbers
each step's batches). An output event is read with the step's inputs at one such point: at
the end of the trace if it is still alive there, else just before the batch that deleted it.
So an input shortened in the very batch that made the output is seen shortened, and a
window whose members changed while its result did not is explained by its members now.

**Which inputs**, by the kind of step:

* span operators (``where``, ``select``, ``shift``, ...) and the sink: the input event with
  the same id; ``alter_lifetime``: the id it was minted from; ``union`` and the merge of
  partitions: the id tagged with its input (:func:`operators.union.tag_id`);
* windows: the *members*, the input events that belong to the output's window (overlap it;
  for count and session windows, start (end) in it), of the same key for a keyed window; the
  window is :func:`operators.windows.window_of.window_of` of the step's spec and output policy;
* ``group_apply``: the events of the output's key, and of those the one its sub-query kept
  (span operators: the same id) or the members of its window;
* joins: the left and right events with equal keys whose intersection is the output's
  lifetime (and, with the default ``select``, whose payloads it shows; with another
  ``select`` every such pair); ``anti_join`` and a left or full outer join's unmatched part:
  the left (right) event that holds it;
* ``late()``: the late event itself, where the cause ends (its producer refused it, and
  never sent it downstream), ``import_ctis`` the event of its input 0 (its leader
  gives only CTIs); ``scan``: the input event at the output's start (its state holds what
  the events before made of it); ``distinct``: the events of the interval's payload (of its
  key, with ``key=``) inside it; ``detect``: the rows of the match, the events that start in
  it (of the key of its first row, with ``key=``); ``not_followed_by``: the event of input 0
  it reports (what did not follow has no event).

Each kind of step names its rule in :data:`CAUSE_RULES`; a kind without one (a trace of an
older cedar) gets every input event overlapping the output, and says so.

Causes are followed upstream through the edges to the sources, whose output events are the
readings that entered the query. A cause that may miss inputs says why in
:attr:`Cause.incomplete` (and ``cedar debug --cause`` in ``incomplete:`` lines): a trace bounded
by ``Trace(start=, end=)`` that cuts a window's range, by ``where=``, by a ``limit=`` a step
reached, by ``steps=`` that left a step on the way out; a group_apply sub-query that filters
or moves lifetimes before its window (it is not traced); a step with no rule.

    >>> import tempfile
    >>> from topology import Stream
    >>> from operators.events import Insert, Cti
    >>> from operators.aggregates import Count
    >>> path = tempfile.mkdtemp()
    >>> q = Stream.from_events([Insert(i, i, i + 1, i) for i in range(6)] + [Cti(6)])
    >>> _ = q.tumbling_window(3).aggregate(Count()).collect(runtime="inline", trace=path)
    >>> rec = Recording.open(path)
    >>> out = rec.events(step="sink", kind="insert")[0]
    >>> sorted(r["id"] for r in rec.root_cause("sink", out["id"]).leaves())
    ['0', '1', '2']
"""

from __future__ import annotations

import ast
import glob
import json
import numbers
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from operators.events import MAX_TIME
from operators.union import tag_id
from operators.windows.window_of import in_window, spec_from_dict, window_of
from topology.building.times import show_time

Row = dict[str, Any]


@dataclass
class Cause:
    """One event in a root-cause tree: ``row`` (an ``out`` row of ``step``) and the causes
    of it at the step's inputs (empty at a source)."""

    step: str
    row: Row
    inputs: list[Cause] = field(default_factory=list)
    #: why the tree may miss inputs (a bounded trace, a step without a rule); set on the root
    incomplete: list[str] = field(default_factory=list)
    #: ``"timestamps"`` when the sources' times came from timestamps: shown as UTC times
    clock: str | None = None

    @property
    def complete(self) -> bool:
        """True when the trace held everything this cause needs."""
        return not self.incomplete

    def leaves(self) -> list[Row]:
        """The source events at the bottom of the tree (each once)."""
        if not self.inputs:
            return [self.row]
        seen: dict[tuple[str, Any], Row] = {}
        for c in self.inputs:
            for r in c.leaves():
                seen.setdefault((r["step"], r["id"]), r)
        return list(seen.values())

    def render(self, indent: str = "", clock: str | None = None) -> str:
        """The tree as indented lines, the output first (times as UTC times when the sources'
        times came from timestamps, else ticks)."""
        clock = clock or self.clock
        lines = [f"{indent}{self.step}  {_event_text(self.row, clock)}"]
        for c in self.inputs:
            lines.append(c.render(indent + "    ", clock))
        lines += [f"{indent}incomplete: {why}" for why in self.incomplete]
        return "\n".join(lines)


class Recording:
    """A recorded trace: the plan (``steps``) and the rows (``rows``, by step and seq)."""

    def __init__(self, meta: dict[str, Any], rows: list[Row]) -> None:
        self.meta = meta
        self.steps: dict[str, dict[str, Any]] = meta["steps"]
        order = {s: i for i, s in enumerate(self.steps)}
        self.rows = sorted(rows, key=lambda r: (order.get(r["step"], len(order)), r["seq"]))
        self.by_step: dict[str, list[Row]] = {}
        for r in self.rows:
            self.by_step.setdefault(r["step"], []).append(r)
        self._indexes: dict[str, _StepIndex] = {}

    @staticmethod
    def open(path: str) -> Recording:
        """Read the trace written under ``path``."""
        import pyarrow.parquet as pq

        plan = os.path.join(path, "plan.json")
        if not os.path.exists(plan):
            raise FileNotFoundError(f"{path!r} holds no trace (no plan.json); record one with "
                                    f"collect(trace={path!r}) or deploy(name, trace=...)")
        with open(plan, encoding="utf-8") as f:
            meta = json.load(f)
        rows: list[Row] = []
        for part in sorted(glob.glob(os.path.join(path, "parts", "*.parquet"))):
            rows.extend(pq.read_table(part).to_pylist())
        return Recording(meta, rows)

    # -- stepping and filtering ---------------------------------------------------------------
    def step_of(self, name: str) -> str:
        """The step called ``name`` (an exact step id, or the one that starts with it)."""
        if name in self.steps:
            return name
        hits = [s for s in self.steps if s.startswith(name)]
        if len(hits) == 1:
            return hits[0]
        raise KeyError(f"no step {name!r} in the trace; its steps: {', '.join(self.steps)}")

    def events(self, step: str | None = None, direction: str | None = None,
               kind: str | None = None, start: int | None = None, end: int | None = None,
               key: str | None = None, id: Any = None) -> list[Row]:
        """The rows matching every filter given: ``step``, ``direction`` (``in``/``out``),
        ``kind``, a time range (events overlapping ``[start, end)``, CTIs inside it), ``key``
        (the recorded group/join key's repr, or its text) and ``id`` (the id's repr, or a value
        whose repr it is)."""
        rows = self.by_step.get(self.step_of(step), []) if step is not None else self.rows
        ids = None if id is None else {id if isinstance(id, str) else repr(id), repr(id)}
        keys = None if key is None else {key, repr(key)}
        out = []
        for r in rows:
            if direction is not None and r["direction"] != direction:
                continue
            if kind is not None and r["kind"] != kind:
                continue
            if ids is not None and r["id"] not in ids:
                continue
            if keys is not None and r["key"] not in keys:
                continue
            if start is not None or end is not None:
                lo = MIN if start is None else start
                hi = MAX_TIME if end is None else end
                if r["kind"] == "cti":
                    if not lo <= r["start"] < hi:
                        continue
                else:
                    s, e = _span(r)
                    if s is None or not (s < hi and e > lo):
                        continue
            out.append(r)
        return out

    def flow(self, step: str | None = None) -> Iterator[tuple[str, Row]]:
        """Every recorded message, operator by operator in plan order (sources first), each
        step's messages in the order the step saw and sent them."""
        for s in self.steps if step is None else [self.step_of(step)]:
            for r in self.by_step.get(s, []):
                yield s, r

    # -- root cause ---------------------------------------------------------------------------
    def root_cause(self, step: str, id: Any) -> Cause:
        """The tree of input events that produced output event ``id`` of ``step``, down to
        the sources (see the module docstring for the rule of each kind of step). Its
        :attr:`Cause.incomplete` says why it may miss inputs (a bounded trace), if it may."""
        step = self.step_of(step)
        row = self._out_row(step, id if isinstance(id, str) else repr(id))
        if row is None:
            row = self._out_row(step, repr(id))
        if row is None:
            raise KeyError(f"step {step!r} sent no event with id {id!r} in the trace")
        gaps: list[str] = []
        node = self._cause(step, row, {}, gaps)
        if self.bounds.get("where") is not None:
            gaps.append(f"the trace kept only the payloads its where={self.bounds['where']} "
                        f"chose: inputs it did not choose are missing")
        node.incomplete = list(dict.fromkeys(gaps))
        node.clock = self.clock
        return node

    @property
    def clock(self) -> str | None:
        """``"timestamps"`` when the sources' times came from timestamps (``plan.json``)."""
        return self.meta.get("clock")

    @property
    def bounds(self) -> dict[str, Any]:
        """The trace's bounds (``Trace(steps=, start=, end=, where=, limit=)``)."""
        return self.meta.get("bounds") or {}

    def _index(self, step: str) -> _StepIndex:
        got = self._indexes.get(step)
        if got is None:
            got = self._indexes[step] = _StepIndex(self.by_step.get(step, []))
        return got

    def _out_row(self, step: str, rid: str) -> Row | None:
        hist = self._index(step).out.get(rid)
        return hist[0] if hist else None

    def _cause(self, step: str, row: Row, memo: dict[tuple[str, str], Cause],
               gaps: list[str]) -> Cause:
        got = memo.get((step, row["id"]))
        if got is not None:
            return got
        idx = self._index(step)
        at, life = idx.as_of(row)
        node = Cause(step, life)
        memo[(step, row["id"])] = node
        info = self.steps.get(step, {})
        limit = self.bounds.get("limit")
        if limit is not None and max(idx.counts.values(), default=0) >= limit:
            gaps.append(f"step {step!r} was traced up to limit={limit} rows only: later "
                        f"inputs are missing")
        feeds = {port: src for src, port in info.get("inputs", ())}
        if info.get("kind") == "late":
            feeds = {}  # its producer refused the events: they entered the query here
        for port, member in self._members(step, info, life, at, gaps):
            src = feeds.get(port)
            up = self._out_row(src, member["id"]) if src is not None else None
            if up is not None:
                node.inputs.append(self._cause(src, up, memo, gaps))  # type: ignore[arg-type]
                continue
            if src is not None and src not in self.by_step:
                gaps.append(f"step {src!r} was not traced (Trace(steps=...)): the cause stops "
                            f"at the input of {step!r}")
            elif src is not None:
                gaps.append(f"step {src!r} sent no event {member['id']} in the trace")
            node.inputs.append(Cause(step, member))
        return node

    def _check_region(self, step: str, lo: int, hi: int, gaps: list[str]) -> None:
        """Note a gap when the trace's time bounds cut ``[lo, hi)``, where ``step``'s members
        of an output lie."""
        b = self.bounds
        start, end = b.get("start"), b.get("end")
        if (start is not None and lo < start) or (end is not None and hi > end):
            c = self.clock
            gaps.append(f"the trace kept only events overlapping [{_t(start, c)}, {_t(end, c)}) "
                        f"(start={start}, end={end}): the inputs of {step!r} in "
                        f"[{_t(lo, c)}, {_t(hi, c)}) outside it are missing")

    def _members(self, step: str, info: dict[str, Any], row: Row, at: float,
                 gaps: list[str]) -> list[tuple[int, Row]]:
        """The input events (by port) that made ``row``, the output as it stood at ``at``,
        from the inputs as they stood then."""
        kind = info.get("kind")
        if kind == "source" or not info.get("inputs"):
            return []
        rule = CAUSE_RULES.get(kind or "")
        if rule is not None:
            return getattr(self, rule)(step, info, row, at, gaps)
        # a step with no rule: every input event overlapping the output
        alive = self._index(step).alive(at)
        s, e = row["start"], row["end"]
        what = info.get("node", info.get("class", kind))  # (class: traces before nodes)
        gaps.append(f"step {step!r} ({what}) has no cause rule: every input event overlapping "
                    f"its output is shown")
        self._check_region(step, s, e, gaps)
        return [(p, ev) for p, evs in alive.items() for ev in evs.values()
                if ev["start"] < e and ev["end"] > s]

    # -- the cause rules (CAUSE_RULES: a step's kind -> its rule) -------------------------------
    def _by_id(self, step: str, info: dict[str, Any], row: Row, at: float,
               gaps: list[str]) -> list[tuple[int, Row]]:
        """The input event the output keeps (the same id, the id it was minted from, the id
        a union tagged); of an ``import_ctis``, on its input 0 only (its leader gives CTIs)."""
        kind, oid = info["kind"], row["id"]
        idx = self._index(step)
        found = []
        for port, iid in idx.same_id(kind, oid, len(info["inputs"])):
            if kind == "import_ctis" and port != 0:
                continue
            ev = idx.input_at(port, iid, at)
            if ev is not None:
                found.append((port, ev))
        if not found:
            gaps.append(f"step {step!r} has no input event for its output {oid} in the trace")
        return found

    def _by_window(self, step: str, info: dict[str, Any], row: Row, at: float,
                   gaps: list[str]) -> list[tuple[int, Row]]:
        evs = list(self._index(step).alive(at).get(0, {}).values())
        if info.get("keyed"):
            evs = [ev for ev in evs if ev["key"] == row["key"]]
        members = self._window_members(step, info, evs, row["start"], row["end"], gaps)
        return [(0, ev) for ev in members]

    def _by_group(self, step: str, info: dict[str, Any], row: Row, at: float,
                  gaps: list[str]) -> list[tuple[int, Row]]:
        alive = self._index(step).alive(at)
        return [(0, ev) for ev in self._group_members(step, info, alive, row, gaps)]

    def _by_pair(self, step: str, info: dict[str, Any], row: Row, at: float,
                 gaps: list[str]) -> list[tuple[int, Row]]:
        return _join_members(info["kind"], info, self._index(step).alive(at), row)

    def _by_start(self, step: str, info: dict[str, Any], row: Row, at: float,
                  gaps: list[str]) -> list[tuple[int, Row]]:
        """A scan's output is a point at the start of the input event its ``step`` was
        given (its state holds what the events before made of it)."""
        evs = self._index(step).alive(at).get(0, {}).values()
        return [(0, ev) for ev in evs if ev["start"] == row["start"]]

    def _by_rows(self, step: str, info: dict[str, Any], row: Row, at: float,
                 gaps: list[str]) -> list[tuple[int, Row]]:
        """A detect match ``[first start, last start + 1)``: the rows it matched, the input
        events that start in it (contiguous rows); with ``key=``, of the key whose events
        start at both its first and its last start -- of those, when several keys do, the
        keys whose events' payloads the match's payload shows (the default measures: each
        row's payload), else all of them."""
        s, e = row["start"], row["end"]
        inside = [ev for ev in self._index(step).alive(at).get(0, {}).values()
                  if s <= ev["start"] < e]
        if info.get("keyed"):
            of: dict[Any, list[Row]] = {}
            for ev in inside:
                of.setdefault(ev["key"], []).append(ev)
            keys = [k for k, evs in of.items() if {s, e - 1} <= {ev["start"] for ev in evs}]
            shown = row.get("payload_repr") or ""
            named = [k for k in keys if all(ev["payload_repr"] in shown for ev in of[k])]
            keys = named or keys
            inside = [ev for ev in inside if ev["key"] in keys]
        return [(0, ev) for ev in inside]

    def _by_absence(self, step: str, info: dict[str, Any], row: Row, at: float,
                    gaps: list[str]) -> list[tuple[int, Row]]:
        """An absence: the input 0 event it reports, at ``start - within`` with its payload
        (what did not follow it has no event)."""
        at_start = row["start"] - info.get("within", 0)
        evs = [ev for ev in self._index(step).alive(at).get(0, {}).values()
               if ev["start"] == at_start]
        return [(0, ev) for ev in [e for e in evs if e["payload_repr"] == row["payload_repr"]]
                or evs]

    def _by_payload(self, step: str, info: dict[str, Any], row: Row, at: float,
                    gaps: list[str]) -> list[tuple[int, Row]]:
        """A distinct interval: the input events of its payload (of its key, with ``key=``:
        the key of the event whose payload it carries) that lie inside it."""
        s, e = row["start"], row["end"]
        inside = [ev for ev in self._index(step).alive(at).get(0, {}).values()
                  if ev["start"] >= s and ev["end"] <= e]
        mine = [ev for ev in inside if ev["payload_repr"] == row["payload_repr"]]
        if info.get("keyed") and mine:
            mine = [ev for ev in inside if ev["key"] == mine[0]["key"]]
        return [(0, ev) for ev in mine]

    def _group_members(self, step: str, info: dict[str, Any], alive: dict[int, dict[str, Row]],
                       row: Row, gaps: list[str]) -> list[Row]:
        """A group_apply's members of ``row``: its key's input events, and among them what
        its sub-query makes of them: the same event (an output id is ``(instance, sub-query
        id)``) or a window's members."""
        evs = [ev for ev in alive.get(0, {}).values() if ev["key"] == row["key"]]
        sub = info.get("sub", {})
        members = sub.get("members", [sub]) if sub.get("kind") in ("span", "chain") else [sub]
        inner = _inner_id(row["id"])
        w = next((i for i, m in enumerate(members) if m.get("kind") == "window"), None)
        if all(m.get("kind") == "span" for m in members) and inner is not None:
            return [ev for ev in evs if ev["id"] == inner]
        s, e = row["start"], row["end"]
        if w is not None and all(m.get("kind") == "span" for i, m in enumerate(members)
                                 if i != w):
            # what the span nodes around the window declare (plan.json, Node.trace_info)
            if not all(m.get("keeps_time") for i, m in enumerate(members) if i != w):
                gaps.append(f"the sub-query of {step!r} moves lifetimes around its window "
                            f"(not traced): its members are approximate")
            elif any(m.get("drops") for m in members[:w]):
                gaps.append(f"the sub-query of {step!r} filters before its window (not "
                            f"traced): the members shown may include events it dropped")
            return self._window_members(step, members[w], evs, s, e, gaps)
        gaps.append(f"the sub-query of {step!r} is not traced and has no cause rule: every "
                    f"event of its key overlapping the output is shown")
        return [ev for ev in evs if ev["start"] < e and ev["end"] > s]

    def _window_members(self, step: str, info: dict[str, Any], evs: list[Row], s: int,
                        e: int, gaps: list[str]) -> list[Row]:
        """The events of ``evs`` (the inputs alive, of the row's group) that are members of
        the window that made output ``[s, e)`` of window ``info`` (:func:`window_of`)."""
        try:
            spec = spec_from_dict(info.get("spec", {}))
        except (ValueError, KeyError, TypeError):
            gaps.append(f"step {step!r} has a window this debugger does not know "
                        f"({info.get('spec')!r}): every input event overlapping its output is "
                        f"shown")
            self._check_region(step, s, e, gaps)
            return [ev for ev in evs if ev["start"] < e and ev["end"] > s]
        output = info.get("output")
        w = window_of(spec, output, s, e, [(ev["start"], ev["end"]) for ev in evs])
        found = [ev for ev in evs if in_window(spec, (w.lo, w.hi), ev["start"], ev["end"])]
        if not w.exact:
            gaps.append(f"the output policy {output!r} of {step!r} does not say which window "
                        f"made [{_t(s, self.clock)}, {_t(e, self.clock)}): the members of every "
                        f"window that may have are shown")
        # a member need not overlap the window (a count window by end): look for it too
        self._check_region(step, min([w.lo, *(ev["start"] for ev in found)]), w.hi, gaps)
        return found

    # -- text ---------------------------------------------------------------------------------
    def table(self, rows: list[Row], limit: int | None = None) -> str:
        """``rows`` as a readable table."""
        head = ("step", "dir", "port", "seq", "kind", "id", "start", "end", "new_end",
                "payload")
        body = []
        c = self.clock
        for r in rows[:limit] if limit is not None else rows:
            body.append((r["step"], r["direction"], str(r["port"]), str(r["seq"]), r["kind"],
                         r["id"] or "", _t(r["start"], c), _t(r["end"], c), _t(r["new_end"], c),
                         _short(r["note"] if r["kind"] == "dead_letter" else
                                r["payload_repr"] or "")))
        widths = [max([len(h)] + [len(b[i]) for b in body]) for i, h in enumerate(head)]
        lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths))]
        lines += ["  ".join(c.ljust(w) for c, w in zip(b, widths)) for b in body]
        if limit is not None and len(rows) > limit:
            lines.append(f"... {len(rows) - limit} more (raise --limit)")
        return "\n".join(lines)

    def summary(self) -> str:
        """One line per step: its kind, description and message counts in and out."""
        lines = []
        for step, info in self.steps.items():
            rows = self.by_step.get(step, [])
            n_in = sum(r["direction"] == "in" for r in rows)
            n_out = sum(r["direction"] == "out" for r in rows)
            ins = ", ".join(f"{s}:{p}" for s, p in info.get("inputs", ()))
            lines.append(f"{step:<28} {info.get('kind', '?'):<13} in {n_in:>6}  out {n_out:>6}"
                         f"  {info.get('describe', '')}" + (f"  ← {ins}" if ins else ""))
        return "\n".join(lines)


MIN = -(2**63)


def _span(r: Row) -> tuple[int | None, int]:
    if r["start"] is None:
        return None, 0
    e = r["end"] if r["new_end"] is None else max(r["end"], r["new_end"])
    return r["start"], e


_FRESH = re.compile(r"^FreshId\((.*), \d+\)$")
_INSTANCE = re.compile(r"^\(\d+, (.*)\)$")


def _inner_id(oid: str) -> str | None:
    """The sub-query's id in a group_apply output id ``(instance, id)`` (reprs)."""
    m = _INSTANCE.match(oid)
    return m.group(1) if m else None


class _StepIndex:
    """One step's rows indexed for root causes.

    A step's output answers all of its input so far only *between* batches (the rows of one
    ``process`` call share a ``batch``: its inputs, then its output). So an output event is
    read, with the step's inputs, at one such point: at the end of the trace if it is still
    alive there, else just before the batch that deleted it (an event inserted and deleted
    in one batch is read as it was inserted). A point is a ``seq``: the rows before it."""

    def __init__(self, rows: list[Row]) -> None:
        self.rows = rows
        self.out: dict[str, list[Row]] = {}
        self.inp: dict[int, dict[str, list[Row]]] = {}
        self.counts = {"in": 0, "out": 0}
        self.batch_of: dict[int, int] = {}
        self.first_seq: dict[int, int] = {}
        batch, last_dir = -1, "out"
        for r in rows:
            self.counts[r["direction"]] = self.counts.get(r["direction"], 0) + 1
            b = r.get("batch")
            if b is None:  # a trace written before batches were recorded: runs of in, out
                if r["direction"] == "in" and last_dir == "out":
                    batch += 1
                last_dir = r["direction"]
                b = batch
            self.batch_of[r["seq"]] = b
            self.first_seq.setdefault(b, r["seq"])
            if r["kind"] not in ("insert", "retract"):
                continue
            if r["direction"] == "out":
                self.out.setdefault(r["id"], []).append(r)
            else:
                self.inp.setdefault(r["port"], {}).setdefault(r["id"], []).append(r)
        self._alive: dict[float, dict[int, dict[str, Row]]] = {}
        self._tags: dict[str, list[tuple[int, str]]] | None = None

    def as_of(self, row: Row) -> tuple[float, Row]:
        """The point at which to read output event ``row`` (its insert), and the event as
        it stood then (its end after the retractions before that point)."""
        life = [r for r in self.out.get(row["id"], ()) if r["seq"] >= row["seq"]]
        at: float = INF_SEQ
        for r in life[1:]:
            if r["kind"] == "insert":  # the id was inserted again: a new life
                break
            if r["new_end"] == r["start"]:
                b = self.batch_of[r["seq"]]
                at = row["seq"] if b == self.batch_of[row["seq"]] else self.first_seq[b]
                break
        now = dict(row)
        for r in life[1:]:
            if r["kind"] != "retract" or r["seq"] >= at:
                break
            now["end"] = r["new_end"]
        return at, now

    def alive(self, at: float) -> dict[int, dict[str, Row]]:
        """The input events alive at point ``at``, by port and id (their end as then)."""
        got = self._alive.get(at)
        if got is not None:
            return got
        alive: dict[int, dict[str, Row]] = {}
        for r in self.rows:
            if r["seq"] >= at:
                break
            if r["direction"] != "in":
                continue
            port = alive.setdefault(r["port"], {})
            if r["kind"] == "insert":
                port[r["id"]] = dict(r)
            elif r["kind"] == "retract":
                ev = port.get(r["id"])
                if ev is not None:
                    if r["new_end"] == r["start"]:
                        del port[r["id"]]
                    else:
                        ev["end"] = r["new_end"]
        self._alive[at] = alive
        return alive

    def input_at(self, port: int, iid: str, at: float) -> Row | None:
        """Input event ``iid`` of ``port`` as it stood at point ``at`` (None: not alive)."""
        ev: Row | None = None
        for r in self.inp.get(port, {}).get(iid, ()):
            if r["seq"] >= at:
                break
            if r["kind"] == "insert":
                ev = dict(r)
            elif ev is not None:
                if r["new_end"] == r["start"]:
                    ev = None
                else:
                    ev["end"] = r["new_end"]
        return ev

    def same_id(self, kind: str, oid: str, n_inputs: int) -> list[tuple[int, str]]:
        """The input ids (by port) that output id ``oid`` of a step of ``kind`` keeps: the
        same id, the id a FreshId was minted from, the id a union tagged."""
        if kind == "union":
            if self._tags is None:
                self._tags = {}
                for port, by_id in self.inp.items():
                    for iid in by_id:
                        self._tags.setdefault(_union_tag(iid, port, n_inputs), []).append(
                            (port, iid))
            return self._tags.get(oid, [])
        ids = [oid]
        if kind == "alter_lifetime":
            m = _FRESH.match(oid)
            if m:
                ids.append(m.group(1))
        return [(p, i) for p in range(n_inputs) for i in ids if i in self.inp.get(p, {})]


#: The point after every row of a step (its end of trace).
INF_SEQ = float("inf")

#: The cause rule of each kind of step (:attr:`topology.building.nodes.Node.trace_kind`, ``kind`` in
#: ``plan.json``): the :class:`Recording` method that finds the input events of an output.
#: Every node type's kind has one (tests/topology/test_node_facts.py).
CAUSE_RULES: dict[str, str] = {
    "span": "_by_id", "sink": "_by_id", "alter_lifetime": "_by_id", "union": "_by_id",
    "late": "_by_id", "import_ctis": "_by_id",
    "window": "_by_window", "group_apply": "_by_group",
    "join": "_by_pair", "left_join": "_by_pair", "anti_join": "_by_pair",
    "full_outer_join": "_by_pair",
    "scan": "_by_start", "distinct": "_by_payload", "detect": "_by_rows",
    "not_followed_by": "_by_absence",
}


def _join_members(kind: str, info: dict[str, Any], alive: dict[int, dict[str, Row]],
                  row: Row) -> list[tuple[int, Row]]:
    """A join's members of output ``row``: the left and right events with equal keys whose
    intersection is its lifetime (and whose payloads it shows, with the default select); a
    left join's unmatched part and an anti-join's output: the left event that holds it."""
    s, e = row["start"], row["end"]
    pay = row["payload_repr"] or ""
    shows = bool(info.get("pairs"))
    left = [ev for ev in alive.get(0, {}).values() if ev["start"] <= s and ev["end"] >= e]
    if kind == "anti_join":
        return [(0, ev) for ev in [lv for lv in left if lv["payload_repr"] == pay] or left]
    right = [ev for ev in alive.get(1, {}).values() if ev["start"] <= s and ev["end"] >= e]
    pairs = [(lv, rv) for lv in left for rv in right if lv["key"] == rv["key"]
             and max(lv["start"], rv["start"]) == s and min(lv["end"], rv["end"]) == e]
    if shows and len(pairs) > 1:  # payload (l, r): the one it shows
        pairs = [(lv, rv) for lv, rv in pairs
                 if pay == f"({lv['payload_repr']}, {rv['payload_repr']})"] or pairs
    if kind in ("left_join", "full_outer_join"):
        # its ids are a union's of the join (input 0) and the unmatched parts (1: the left's,
        # 2: the right's, full outer join only)
        part = _part(row["id"], 2 if kind == "left_join" else 3)
        part = (0 if pairs else 1) if part is None else part
        if part == 1:
            own = [lv for lv in left if pay.startswith(f"({lv['payload_repr']}, ")]
            return [(0, lv) for lv in (own if shows and own else left)]
        if part == 2:
            own = [rv for rv in right if pay.endswith(f", {rv['payload_repr']})")]
            return [(1, rv) for rv in (own if shows and own else right)]
    seen: dict[tuple[int, str], Row] = {}
    for lv, rv in pairs:
        seen.setdefault((0, lv["id"]), lv)
        seen.setdefault((1, rv["id"]), rv)
    return [(port, ev) for (port, _), ev in seen.items()]


def _part(id_repr: str, n_inputs: int) -> int | None:
    """The input of the union that tagged output id ``id_repr`` (:func:`_union_tag`), or
    None when the id does not say."""
    if id_repr.lstrip("-").isdigit():
        return int(id_repr) % n_inputs
    m = re.match(r"^\((\d+), ", id_repr)
    return int(m.group(1)) if m else None


def _union_tag(id_repr: str, port: int, n_inputs: int) -> str:
    """The repr of a union's output id for the input id whose repr is ``id_repr`` (what a
    trace holds): a number is tagged by :func:`~operators.union.tag_id`, any other id ``x``
    becomes ``(port, x)``."""
    try:
        value = ast.literal_eval(id_repr)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        value = None  # not a literal: a FreshId, an object
    if isinstance(value, numbers.Number):
        return repr(tag_id(value, port, n_inputs))
    return f"({port}, {id_repr})"


def _t(v: int | None, clock: str | None = None) -> str:
    """A time for people (:func:`topology.building.times.show_time`): ``∞``, a UTC time (ISO 8601)
    when the sources' times came from timestamps, else the tick."""
    return show_time(v, clock)


def _short(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


def _event_text(r: Row, clock: str | None = None) -> str:
    if r["kind"] == "cti":
        return f"CTI {_t(r['start'], clock)}"
    return (f"{r['kind']} id={r['id']} [{_t(r['start'], clock)}, {_t(r['end'], clock)})"
            f" {_short(r['payload_repr'] or '')}")
