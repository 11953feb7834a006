"""Tracing: the messages entering and leaving every step of a query, written as parquet.

``collect(trace=...)`` and ``deploy(name, trace=...)`` take a ``topology.Trace`` (a
:class:`TraceSettings`) or just a directory path. Each step then owns a :class:`Recorder` (in
its actor on Ray, in the process inline) that keeps one row per message it sees: inserts,
retractions and CTIs on each input port (direction ``"in"``) and in the output (``"out"``), and
the dead letters the step made. Rows are written as parquet parts under ``PATH/parts/`` (one or
more per step: no call leaves the actor for tracing), and the plan (steps, their kinds and
parameters, edges) as ``PATH/plan.json``. :mod:`topology.seeing.debug` reads them back.

A row holds ``step, direction, port, seq`` (per step, one counter for both directions, so an
output's ``seq`` tells which inputs came before it), ``batch`` (per step, the number of the
call that recorded the row: the inputs of one ``process`` call, its dead letters and its
output share one; the debugger reads a step's state between batches, where its output
answers all of its input so far), ``wall`` (seconds since the epoch, one per
batch), ``kind`` (``insert``/``retract``/``cti``/``dead_letter``), ``id`` (the id's repr),
``start, end, new_end`` (ticks; null where the kind has none), ``payload`` (JSON text; values
JSON cannot hold are written as their repr), ``payload_repr``, ``key`` (the repr of the
group or join key at the steps that key their input: group_apply, joins) and ``note`` (a
dead letter's reason).

Bounds keep a trace small: ``steps`` (which steps), ``start``/``end`` (events overlapping
``[start, end)``; CTIs inside it), ``where`` (a predicate of the payload; a payload it cannot
take is not recorded; CTIs are always kept) and ``limit`` (the first N rows per step and
direction).

    >>> TraceSettings("out/trace", steps=["where#1"], limit=100).limit
    100
"""

from __future__ import annotations

import itertools
import json
import os
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from operators.columns import expand
from operators.events import Cti, Insert, Retract
from operators.processor import Processor

from .files import atomic_path
from .reprs import safe_repr

#: Rows a recorder keeps in memory before it writes a parquet part.
PART_ROWS = 65_536

COLUMNS = ("step", "direction", "port", "seq", "batch", "wall", "kind", "id", "start", "end",
           "new_end", "payload", "payload_repr", "key", "note")


@dataclass(frozen=True)
class TraceSettings:
    """Where and what to trace (see the module docstring); ``topology.Trace`` adds
    ``open(path)``, which reads one back."""

    path: str
    steps: tuple[str, ...] | None = None
    start: int | None = None
    end: int | None = None
    where: Callable[[Any], bool] | None = None
    limit: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.path, (str, os.PathLike)) or not str(self.path):
            raise TypeError(f"Trace: path must be a directory path, got {self.path!r}")
        object.__setattr__(self, "path", os.path.abspath(os.fspath(self.path)))
        if self.steps is not None:
            object.__setattr__(self, "steps", tuple(self.steps))
        if self.limit is not None and (not isinstance(self.limit, int) or self.limit < 1):
            raise ValueError(f"Trace: limit must be an int >= 1 (rows per step and direction), "
                             f"got {self.limit!r}")
        if self.where is not None and not callable(self.where):
            raise TypeError(f"Trace: where must be a predicate of the payload, "
                            f"got {self.where!r}")

    @staticmethod
    def of(trace: TraceSettings | str | os.PathLike[str] | None) -> TraceSettings | None:
        """``trace=`` as the runtimes take it: a Trace, a directory path, or None (off)."""
        if trace is None or isinstance(trace, TraceSettings):
            return trace
        return TraceSettings(os.fspath(trace))

    def traces(self, step: str) -> bool:
        return self.steps is None or step in self.steps or step.split("[")[0] in self.steps


def json_text(payload: Any) -> str:
    """``payload`` as JSON text; what JSON cannot hold becomes its repr (never fails)."""
    try:
        return _JSON.encode(payload)
    except (TypeError, ValueError):  # e.g. keys that are not strings, circular values
        return json.dumps(safe_repr(payload))


_JSON = json.JSONEncoder(default=safe_repr, sort_keys=True)


class Recorder:
    """The rows of one step; :meth:`flush` writes them as one parquet part."""

    def __init__(self, trace: TraceSettings, step: str, proc: Processor | None = None) -> None:
        self.trace = trace
        self.step = step
        #: the key function of each input port (:meth:`Processor.key_functions`), or None
        self.keys = None if proc is None else proc.key_functions()
        #: outputs (key, payload) (group_apply, keyed window): the key is the first item
        self.keyed_out = proc is not None and proc.keyed_output()
        #: the rows kept, one tuple of :data:`COLUMNS` each
        self.rows: list[tuple[Any, ...]] = []
        self.seq = itertools.count()
        #: the number of the current batch (see the module docstring)
        self.batch = -1
        self.counts = {"in": 0, "out": 0}
        self.parts = 0
        self.tag = uuid.uuid4().hex[:8]

    def record(self, direction: str, port: int, msgs: Iterable[Any],
               new_batch: bool = True) -> None:
        """Record a batch (a Columns batch event by event); ``new_batch=False`` records it
        in the current batch (what :meth:`process` does with a call's output)."""
        if new_batch:
            self.batch += 1
        t = self.trace
        limit = t.limit
        wall = time.time()
        lo = t.start
        hi = t.end
        m: Any  # one of Insert, Retract, Cti, told apart by type() on this hot path
        for m in expand(msgs):
            if limit is not None and self.counts[direction] >= limit:
                return
            kind = type(m)
            if kind is Cti:
                if (lo is not None and m.time < lo) or (hi is not None and m.time >= hi):
                    continue
                self._add(direction, port, wall, "cti", None, m.time, None, None, None)
                continue
            if kind is Insert:
                s, e, ne = m.start, m.end, None
                far = e
            elif kind is Retract:
                s, e, ne = m.start, m.end, m.new_end
                far = max(e, ne)
            else:
                continue
            if (lo is not None and far <= lo) or (hi is not None and s >= hi):
                continue
            if t.where is not None:
                try:
                    if not t.where(m.payload):
                        continue
                except Exception:  # noqa: BLE001 - a payload it cannot take: not chosen
                    continue
            self._add(direction, port, wall, "insert" if kind is Insert else "retract", m.id,
                      s, e, ne, m.payload)

    def process(self, proc: Any, batch: Any, port: int, inputs: bool = True) -> list[Any]:
        """``proc.process(batch, port)``, recording the batch (unless ``inputs`` is False: a
        rows source's input is rows, not messages), the dead letters it made and its output."""
        self.batch += 1
        if inputs:
            self.record("in", port, batch, new_batch=False)
        seen = len(proc.dead_letters)
        out = proc.process(batch, port)
        dead = proc.dead_letters
        if len(dead) > seen:
            self.dead_letters(list(dead)[seen:])
        if out:
            self.record("out", 0, out, new_batch=False)
        return out

    def dead_letters(self, letters: Iterable[Any]) -> None:
        """Record dead letters (the step's ``dead_letters`` records) as ``in`` rows."""
        wall = time.time()
        limit = self.trace.limit
        for d in letters:
            if limit is not None and self.counts["in"] >= limit:
                return
            item = getattr(d, "item", getattr(d, "message", d))
            reason = getattr(d, "reason", "")
            payload = getattr(item, "payload", item) if isinstance(item, tuple) else item
            self._add("in", 0, wall, "dead_letter", getattr(item, "id", None),
                      _time(item, "start"), _time(item, "end"), None, payload, note=str(reason))

    def _add(self, direction: str, port: int, wall: float, kind: str, eid: Any,
             start: int | None, end: int | None, new_end: int | None, payload: Any,
             note: str | None = None) -> None:
        self.counts[direction] += 1
        key = None
        if kind in ("insert", "retract"):
            key = self._key(direction, port, payload)
        cti = kind == "cti"
        self.rows.append((
            self.step, direction, port, next(self.seq), self.batch, wall, kind,
            None if cti else safe_repr(eid), start, end, new_end,
            None if cti else json_text(payload), None if cti else safe_repr(payload), key,
            note))
        if len(self.rows) >= PART_ROWS:
            self.flush()

    def _key(self, direction: str, port: int, payload: Any) -> str | None:
        try:
            if direction == "in" and self.keys is not None:
                fn = self.keys[port] if port < len(self.keys) else self.keys[0]
                return safe_repr(fn(payload))
            if direction == "out" and self.keyed_out and isinstance(payload, tuple):
                return safe_repr(payload[0])
        except Exception:  # noqa: BLE001 - the operator reports a key that fails
            return None
        return None

    def flush(self) -> str | None:
        """Write the rows kept so far as one parquet part; returns its path (None: none)."""
        if not self.rows:
            return None
        import pyarrow as pa
        import pyarrow.parquet as pq

        schema = trace_schema()
        columns = zip(*self.rows)
        table = pa.table({c: pa.array(v, type=schema.field(c).type)
                          for c, v in zip(COLUMNS, columns)}, schema=schema)
        folder = os.path.join(self.trace.path, "parts")
        os.makedirs(folder, exist_ok=True)
        safe = "".join(ch if ch.isalnum() or ch in "-_.#[]" else "_" for ch in self.step)
        path = os.path.join(folder, f"{safe}-{self.tag}-{self.parts:05d}.parquet")
        with atomic_path(path, durable=False) as tmp:  # a trace is not worth an fsync a part
            pq.write_table(table, tmp)
        self.parts += 1
        self.rows = []
        return path


def _time(item: Any, field: str) -> int | None:
    v = getattr(item, field, None)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def trace_schema() -> Any:
    """The Arrow schema of a trace's rows."""
    import pyarrow as pa

    return pa.schema([
        ("step", pa.string()), ("direction", pa.string()), ("port", pa.int32()),
        ("seq", pa.int64()), ("batch", pa.int64()), ("wall", pa.float64()), ("kind", pa.string()),
        ("id", pa.string()), ("start", pa.int64()), ("end", pa.int64()),
        ("new_end", pa.int64()), ("payload", pa.string()), ("payload_repr", pa.string()),
        ("key", pa.string()), ("note", pa.string()),
    ])

__all__ = ["COLUMNS", "Recorder", "TraceSettings", "json_text", "trace_schema"]
