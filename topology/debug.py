"""The event-flow debugger: read a trace back, step through it, find root causes.

A trace (``collect(trace=PATH)``, see :mod:`actors.trace`) holds every message entering and
leaving every step. :class:`Recording` reads it: :meth:`Recording.flow` walks the plan step by
step (sources first) and each step's messages in the order the step saw them,
:meth:`Recording.events` filters them, and :meth:`Recording.root_cause` answers *which input
events produced this output event*, from each step's kind (``plan.json``) and the inputs the
step had received before it emitted the event:

* span operators (``where``, ``select``, ``shift``, ...) and the sink: the input event with
  the same id; ``alter_lifetime``: the id it was minted from; ``union`` and the merge of
  partitions: the id tagged with its input (:func:`operators.union.tag_id`);
* windows: the *members*, the input events alive then that belong to the output's window
  (overlap it; for count windows, start (end) in it), of the same key for a keyed window;
* ``group_apply``: the events of the output's key (members of its window when the sub-query
  is a window); joins: the left and right events with equal keys whose intersection is the
  output's lifetime (and, with the default ``select``, whose payloads it shows; with another
  ``select`` every such pair); ``anti_join``: the left event that holds it.

Causes are followed upstream through the edges to the sources, whose output events are the
readings that entered the query.

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
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from operators.events import MAX_TIME
from operators.union import tag_id

Row = dict[str, Any]


@dataclass
class Cause:
    """One event in a root-cause tree: ``row`` (an ``out`` row of ``step``) and the causes
    of it at the step's inputs (empty at a source)."""

    step: str
    row: Row
    inputs: list[Cause] = field(default_factory=list)

    def leaves(self) -> list[Row]:
        """The source events at the bottom of the tree (each once)."""
        if not self.inputs:
            return [self.row]
        seen: dict[tuple[str, Any], Row] = {}
        for c in self.inputs:
            for r in c.leaves():
                seen.setdefault((r["step"], r["id"]), r)
        return list(seen.values())

    def render(self, indent: str = "") -> str:
        """The tree as indented lines, the output first."""
        lines = [f"{indent}{self.step}  {_event_text(self.row)}"]
        for c in self.inputs:
            lines.append(c.render(indent + "    "))
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
        the sources (see the module docstring for the rule of each kind of step)."""
        step = self.step_of(step)
        row = self._out_row(step, id if isinstance(id, str) else repr(id))
        if row is None:
            row = self._out_row(step, repr(id))
        if row is None:
            raise KeyError(f"step {step!r} sent no event with id {id!r} in the trace")
        return self._cause(step, row, {})

    def _out_row(self, step: str, rid: str) -> Row | None:
        for r in self.by_step.get(step, ()):
            if r["direction"] == "out" and r["kind"] == "insert" and r["id"] == rid:
                return r
        return None

    def _cause(self, step: str, row: Row, memo: dict[tuple[str, str], Cause]) -> Cause:
        got = memo.get((step, row["id"]))
        if got is not None:
            return got
        node = Cause(step, row)
        memo[(step, row["id"])] = node
        info = self.steps.get(step, {})
        feeds = {port: src for src, port in info.get("inputs", ())}
        for port, member in self._members(step, info, row):
            src = feeds.get(port)
            up = self._out_row(src, member["id"]) if src is not None else None
            node.inputs.append(self._cause(src, up, memo) if up is not None
                               else Cause(step, member))
        return node

    def _alive(self, step: str, before: int) -> dict[int, dict[str, Row]]:
        """The input events of ``step`` alive before its message ``before`` (by port, id),
        with their current end in ``"end"``."""
        alive: dict[int, dict[str, Row]] = {}
        for r in self.by_step.get(step, ()):
            if r["seq"] >= before:
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
        return alive

    def _members(self, step: str, info: dict[str, Any], row: Row) -> list[tuple[int, Row]]:
        kind = info.get("kind")
        if kind == "source" or not info.get("inputs"):
            return []
        alive = self._alive(step, row["seq"])
        oid = row["id"]
        s, e = row["start"], row["end"]
        if kind in ("span", "sink"):
            ev = alive.get(0, {}).get(oid)
            return [(0, ev)] if ev is not None else []
        if kind == "alter_lifetime":
            return [(0, ev) for i, ev in alive.get(0, {}).items()
                    if oid == i or oid.startswith(f"FreshId({i}, ")]
        if kind == "union":
            n = len(info["inputs"])
            return [(p, ev) for p, evs in alive.items() for i, ev in evs.items()
                    if oid == _union_tag(i, p, n)]
        if kind == "window":
            evs = list(alive.get(0, {}).values())
            if info.get("keyed"):
                evs = [ev for ev in evs if ev["key"] == row["key"]]
            return [(0, ev) for ev in _window_members(info, evs, s, e)]
        if kind == "group_apply":
            evs = [ev for ev in alive.get(0, {}).values() if ev["key"] == row["key"]]
            sub = _window_of(info.get("sub", {}))
            if sub is not None:
                evs = _window_members(sub, evs, s, e)
            return [(0, ev) for ev in evs]
        if kind in ("join", "left_join", "anti_join"):
            holds = {p: [ev for ev in evs.values() if ev["start"] <= s and ev["end"] >= e]
                     for p, evs in alive.items()}
            left, right = holds.get(0, []), holds.get(1, [])
            if kind == "anti_join":
                return [(0, ev) for ev in left]
            pairs = [(lv, rv) for lv in left for rv in right if lv["key"] == rv["key"]]
            # the pair whose intersection is exactly the output's lifetime
            exact = [(lv, rv) for lv, rv in pairs if max(lv["start"], rv["start"]) == s
                     and min(lv["end"], rv["end"]) == e]
            pairs = exact or pairs
            if len(pairs) > 1 and info.get("pairs"):  # payload (l, r): the one it shows
                pairs = [(lv, rv) for lv, rv in pairs if row["payload_repr"]
                         == f"({lv['payload_repr']}, {rv['payload_repr']})"] or pairs
            if not pairs:  # a left_join's unmatched part
                return [(0, ev) for ev in left]
            seen: dict[tuple[int, str], Row] = {}
            for lv, rv in pairs:
                seen.setdefault((0, lv["id"]), lv)
                seen.setdefault((1, rv["id"]), rv)
            return list(seen.items())  # type: ignore[arg-type]
        # other steps: every input event overlapping the output
        return [(p, ev) for p, evs in alive.items() for ev in evs.values()
                if ev["start"] < e and ev["end"] > s]

    # -- text ---------------------------------------------------------------------------------
    def table(self, rows: list[Row], limit: int | None = None) -> str:
        """``rows`` as a readable table."""
        head = ("step", "dir", "port", "seq", "kind", "id", "start", "end", "new_end",
                "payload")
        body = []
        for r in rows[:limit] if limit is not None else rows:
            body.append((r["step"], r["direction"], str(r["port"]), str(r["seq"]), r["kind"],
                         r["id"] or "", _t(r["start"]), _t(r["end"]), _t(r["new_end"]),
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


def _window_of(sub: dict[str, Any]) -> dict[str, Any] | None:
    """The window of a group_apply sub-query that is a window after span operators only."""
    if sub.get("kind") == "window":
        return sub
    members = sub.get("members", ())
    for i, m in enumerate(members):
        if m.get("kind") == "window":
            return m if all(x.get("kind") == "span" for x in members[:i]) else None
    return None


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


def _window_members(info: dict[str, Any], evs: list[Row], s: int, e: int) -> list[Row]:
    """The events of ``evs`` in the window of an output ``[s, e)`` of a window step."""
    spec = info.get("spec", {})
    policy = info.get("output", "window")
    kind = spec.get("kind")
    if kind == "count":
        by = spec.get("by", "start")
        times = sorted({ev[by] if by == "start" else ev["end"] for ev in evs
                        if (ev["start"] if by == "start" else ev["end"]) <= s})
        chosen = set(times[-spec.get("n", 1):])
        return [ev for ev in evs if (ev["start"] if by == "start" else ev["end"]) in chosen]
    lo, hi = s, e
    if "size" in spec:
        size, hop = spec["size"], spec.get("hop", spec["size"])
        if policy == "point_end":
            lo, hi = e - size, e
        elif policy == "compressed":
            lo, hi = s + hop - size, s + hop
        elif policy in ("clip", "keep"):  # every window holding the output's start
            lo, hi = s - size + 1, s + size
    elif policy == "point_end":  # a snapshot window: from the endpoint before its end
        points = {t for ev in evs for t in (ev["start"], ev["end"]) if t < e - 1}
        lo, hi = (max(points) if points else s), e
    return [ev for ev in evs if ev["start"] < hi and ev["end"] > lo]


def _t(v: int | None) -> str:
    if v is None:
        return ""
    return "∞" if v == MAX_TIME else str(v)


def _short(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


def _event_text(r: Row) -> str:
    if r["kind"] == "cti":
        return f"CTI {_t(r['start'])}"
    return (f"{r['kind']} id={r['id']} [{_t(r['start'])}, {_t(r['end'])})"
            f" {_short(r['payload_repr'] or '')}")
