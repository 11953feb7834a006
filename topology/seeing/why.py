"""Why is there no output? An explanation of missing or unfinished output.

A query's output at time ``t`` is *final* once an output CTI has passed ``t`` (nothing before a
CTI changes any more), *speculative* while output covers ``t`` but no CTI has passed it, and
*not yet produced* while nothing covers it. An output that is not final is held back by CTIs,
and cedar can say exactly by which: a step with several inputs advances its CTI to the minimum
of its inputs' CTIs, so following, from the output step upstream, the input with the smallest
CTI reaches the one thing that holds the output back:

* a **source** whose CTI does not pass ``t``: it is idle (no rows for a while, and the rows it
  has are not yet covered by a CTI: ``AdvanceTime(idle_timeout=...)`` would move it), waiting
  for newer rows, or ended (a finished run: its final CTI is past its last event);
* a **step whose output CTI lags its input CTI**: its state holds the output back (a window or
  a session not yet closed, a ``group_apply`` partition whose groups are open);
* a **step behind its input**: its upstream step has sent a CTI past ``t`` that it has not
  processed yet (busy, batches in flight).

:func:`explain` is a pure function of a :class:`Progress` (per step: output and input CTIs,
the wall time of the last CTI advance and of the last input batch, a source's AdvanceTime and
late events with their original lifetimes, and the plan's edges) and of the output rows; it
returns an :class:`Explanation`, whose ``str()`` is the report and ``to_dict()`` the web view's
JSON. The runtimes make the Progress (:mod:`topology.running.progress`): the inline runtime from its
processors, Ray from its actors' stats, for
``collect()`` (every run: ``Collected.why(t)``) and a deployed query (``Query.why(t)``,
``cedar why NAME --at TIME``).

    >>> p = Progress(
    ...     steps={"left": StepProgress("left", cti=900), "right": StepProgress("right", cti=5),
    ...            "join": StepProgress("join", cti=5, in_ctis=(900, 5))},
    ...     inputs={"join": ((0, "left"), (1, "right"))}, output="join")
    >>> e = explain(p, 500, rows=[])
    >>> e.status, e.culprit, e.hops[0].min_from
    ('not yet produced', 'right', 'right')
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import functools
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from operators.events import MIN_TIME
from topology.building.times import (
    TIMESTAMPS,
    parse_time,
    show_duration,
    show_row,
    show_span,
    show_time,
    show_times_in,
)
from topology.planning.key_progress import PER_KEY_NOTE
from topology.running.progress import Late, Progress, StepProgress, short_payload
from topology.seeing.partials import detect_dict, detect_lines, symbols_text
from topology.seeing.slow_keys import (
    aged,
    key_reason,
    key_row,
    key_text,
    keys_dict,
    keys_lines,
)

if TYPE_CHECKING:
    from operators.detect_seeing import DetectView
    from operators.ingress import AdvanceTime


__all__ = ["Explanation", "Hop", "explain", "reach_of", "span_of"]

#: Statuses of an output (see the module docstring); FAILED: not final, and the query
#: failed (nothing more comes).
FINAL, SPECULATIVE, NOT_PRODUCED, NOT_FINAL, FAILED = (
    "final", "speculative", "not yet produced", "not final", "failed")
#: Late events listed in an explanation (the count says how many there are in all).
LATE_SHOWN = 20
#: Late events a deployed query's step sends for one explanation.
WHY_LATE_LIMIT = 1000
#: Output rows listed in an explanation.
ROWS_SHOWN = 5
#: Idle timeouts (seconds) ``why`` proposes: the largest at most half of the quiet time.
IDLE_CHOICES_S = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)
#: The kinds of advice (:attr:`Explanation.advice_kind`).
IDLE_TIMEOUT, IMPORT_CTIS = "idle_timeout", "import_ctis"


# -- what the runtimes report ---------------------------------------------------------------------
@dataclass(frozen=True)
class Hop:
    """One step on the way from the output upstream: its output CTI, each input's
    ``(port, from step, CTI)``, their minimum ``min_cti`` and the step it came from
    (``min_from``); ``holds`` says why this step itself holds its CTI behind (or None)."""

    step: str
    describe: str
    cti: int
    inputs: tuple[tuple[int, str, int], ...]
    min_cti: int | None
    min_from: str | None
    holds: str | None = None
    #: seconds (wall clock) since the step the minimum came from last advanced its CTI
    min_advanced_s: float | None = None


@dataclass(frozen=True)
class Explanation:
    """Why the output ``step`` over ``[lo, hi)`` is (not) final: ``status`` (``"final"``,
    ``"speculative"``, ``"not yet produced"``, or ``"not final"`` when the step's output is
    not kept), the step's output CTI ``cti``, the output ``rows`` covering the span, the
    ``hops`` followed upstream, the ``culprit`` step that holds the output back and ``reason``
    (a sentence), how many seconds ago the culprit last advanced (``idle_s``), the setting
    that would move an idle source (``advice``), and the ``late`` events (of the sources the
    step reads) whose original lifetimes overlap the output (``late_count`` in all)."""

    query: str
    step: str
    lo: int
    hi: int
    status: str
    cti: int
    clock: str
    tz: str | _dt.tzinfo | None
    rows: tuple[tuple[int, int, str], ...] = ()
    hops: tuple[Hop, ...] = ()
    culprit: str | None = None
    reason: str = ""
    idle_s: float | None = None
    advice: str | None = None
    late: tuple[Late, ...] = ()
    late_count: int = 0
    #: whether the step's output rows were known (the output step's are)
    known: bool = True
    #: whether output rows that became final were let go (a sink without history=True):
    #: a final time may have had output that is no longer shown
    released: bool = False
    #: the step that failed the query and its error (None: nothing failed)
    failed: tuple[str, str] | None = None
    #: ``(step, seconds)`` of each step (of those this output reads) inside one long batch:
    #: its figures are from its last report (seconds None: unknown)
    busy: tuple[tuple[str, float | None], ...] = ()
    #: what ``advice`` proposes: ``"idle_timeout"`` (an idle source's timeout moves its CTI
    #: past the output) or ``"import_ctis"`` (an input that lags another one whose events are
    #: newer, which no idle timeout moves far enough: docs/ctis.md, "CTI import")
    advice_kind: str | None = None
    #: each ``detect`` step this output reads: its oldest partial matches (per key: the
    #: symbols bound so far, the events, the deadline) and the candidate runs that ended
    #: without a match, with what ended each (docs/patterns.md#seeing-a-detect-step)
    detect: tuple[DetectView, ...] = ()
    #: the key asked about (``why(key=...)``: the output rows of that key, and its own CTI
    #: where a step finalizes each key at its own CTI); None: the whole output
    key: Any = None
    #: ``(source step, view)`` of each per-key source it reads (``AdvanceTime(per_key=...)``):
    #: its low watermark, slowest keys and keys with the most late rows
    #: (:mod:`topology.seeing.slow_keys`)
    keys: tuple[tuple[str, dict[str, Any]], ...] = ()

    def advice_line(self) -> str | None:
        """The advice as the report and the web view's panel both show it (None: none)."""
        if not self.advice:
            return None
        return f"{_ADVICE_LABEL.get(self.advice_kind or '', 'fix')}: {self.advice}"

    @property
    def final(self) -> bool:
        return self.status == FINAL

    def _t(self, t: int | None) -> str:
        return show_time(t, self.clock, self.tz)

    def _span(self, start: int, end: int) -> str:
        return show_span(start, end, self.clock, self.tz)

    def _payload(self, text: str, start: int | None, end: int | None) -> str:
        """A payload's text with its fields that hold times of its event shown as times."""
        if start is None or end is None:
            return text
        return show_times_in(text, start, end, self.clock, self.tz)

    def what(self) -> str:
        """The output asked about, as people read it."""
        of = "" if self.key is None else f" of key {self.key!r}"
        if self.hi == self.lo + 1:
            return f"{self.step} at {self._t(self.lo)}{of}"
        return f"{self.step} over [{self._t(self.lo)}, {self._t(self.hi)}){of}"

    def __str__(self) -> str:
        name = f" (query {self.query})" if self.query else ""
        lines = [f"why {self.what()}{name}: {self.status}"]
        if self.status == FINAL and self.cti < self.hi:  # (final at its key's CTI)
            lines.append(f"  {self.reason}: it will not change any more")
        elif self.status == FINAL:
            lines.append(f"  its output CTI {self._t(self.cti)} has passed it: it will not "
                         f"change any more")
        elif self.status == FAILED:
            lines.append(f"  its output CTI is {self._t(self.cti)}, and the query failed: "
                         f"no CTI will pass {self._t(self.hi - 1)}")
        else:
            lines.append(f"  its output CTI is {self._t(self.cti)}; it is final once a CTI "
                         f"passes {self._t(self.hi - 1)}")
        for s, e, p in self.rows:
            lines.append(f"  output {show_row(s, e, p, self.clock, self.tz)}")
        if self.status == FINAL and not self.rows and self.known and not self.released:
            lines.append("  no output covers it (and none will)")
        elif self.status == FINAL and self.released:
            lines.append("  output rows that became final are not kept (deploy with "
                         "history=True to keep them): those that covered it are not shown")
        if self.culprit is not None:
            lines.append(f"held back by {self.culprit}: {self.reason}")
        if self.hops:
            lines.append("through:")
            width = max(len(h.step) for h in self.hops)
            for h in self.hops:
                ins = ", ".join(f"{port} ← {up} {self._t(c)}" for port, up, c in h.inputs)
                line = f"  {h.step:<{width}}  CTI {self._t(h.cti)}"
                if h.inputs:
                    line += f"  inputs: {ins}  min {self._t(h.min_cti)} from {h.min_from}"
                    if h.min_advanced_s is not None:
                        line += f" (advanced {_seconds(h.min_advanced_s)} ago)"
                else:
                    line += "  (source)"
                if h.holds:
                    line += f"; {h.holds}"
                lines.append(line)
        for who, secs in self.busy:
            took = "" if secs is None else f" for {_seconds(secs)}"
            lines.append(f"busy: {who} has been inside one batch{took}: its figures are from "
                         f"its last report")
        if self.advice:
            lines.append(str(self.advice_line()))
        if self.late_count:
            more = (f" (the first {len(self.late)})" if len(self.late) < self.late_count
                    else "")
            lines.append(f"late events out of it: {self.late_count}{more}")
            for r in self.late:
                lines.append(f"  {r.where}: {_late_text(r, self._span, self._payload)}")
        for v in self.detect:
            lines += detect_lines(v, self.clock, self.tz)
        for source, view in self.keys:
            lines += keys_lines(source, view, self.clock, self.tz)
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """The explanation as JSON for the web view: the raw ticks and, beside them, the
        times as people read them (``*_shown``) and the report (``text``)."""
        d = dataclasses.asdict(self)
        d["what"], d["text"] = self.what(), str(self)
        d["cti_shown"] = self._t(self.cti)
        d["hops"] = [dict(dataclasses.asdict(h), cti_shown=self._t(h.cti),
                          min_shown=self._t(h.min_cti),
                          min_advanced_shown=None if h.min_advanced_s is None
                          else _seconds(h.min_advanced_s),
                          inputs=[{"port": p, "from": u, "cti": c, "shown": self._t(c)}
                                  for p, u, c in h.inputs]) for h in self.hops]
        d["rows"] = [{"start": self._t(s), "end": self._t(e), "span": self._span(s, e),
                      "payload": self._payload(p, s, e)} for s, e, p in self.rows]
        d["late"] = [dict(dataclasses.asdict(r), text=_late_text(r, self._span, self._payload))
                     for r in self.late]
        d["idle_shown"] = None if self.idle_s is None else _seconds(self.idle_s)
        d["advice_text"] = self.advice_line()
        d["busy"] = [{"step": s, "seconds": secs,
                      "shown": None if secs is None else _seconds(secs)}
                     for s, secs in self.busy]
        d["tz"] = None if self.tz is None else str(self.tz)
        d["detect"] = [detect_dict(v, self.clock, self.tz) for v in self.detect]
        d["key"] = None if self.key is None else repr(self.key)
        d["keys"] = [keys_dict(src, v, self.clock, self.tz) for src, v in self.keys]
        return _jsonable(d)


#: How the report labels each kind of advice (:attr:`Explanation.advice_kind`).
_ADVICE_LABEL = {IDLE_TIMEOUT: "idle source", IMPORT_CTIS: "lagging input"}


def _jsonable(value: Any) -> Any:
    """``value`` with tuples as lists and ticks beyond JavaScript's exact integers as strings."""
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**53:
        return str(value)
    return value


def _late_text(r: Late, span: Any, payload: Any) -> str:
    """A late event as people read it: ``dropped at 5``, ``adjusted [5, 25), sent as [20,
    25)``; ``span(start, end)`` shows a lifetime (:func:`topology.building.times.show_span`),
    ``payload(text, start, end)`` its payload."""
    text = f"{r.action} {'unknown time' if r.start is None else span(r.start, r.end)}"
    if r.sent is not None:
        text += f", sent as {span(*r.sent)}"
    return f"{text} {payload(r.payload, r.start, r.end)}"


def _seconds(s: float) -> str:
    return show_duration(round(s * 1_000_000), TIMESTAMPS)


# -- the walk ----------------------------------------------------------------------------------
def span_of(at: Any) -> tuple[int, int]:
    """``[lo, hi)`` of an output time (ticks, a datetime, an ISO-8601 string) or a window
    ``(start, end)``."""
    if isinstance(at, tuple) and len(at) == 2:
        lo, hi = parse_time(at[0]), parse_time(at[1])
        if hi <= lo:
            raise ValueError(f"why(({at[0]!r}, {at[1]!r})): a window needs end > start")
        return lo, hi
    t = parse_time(at)
    return t, t + 1


def reach_of(span: tuple[int, int], rows: Iterable[tuple[int, int, Any]]) -> tuple[int, int]:
    """The times whose late events touch the output over ``span``: the span and the output
    rows that cover it (a window's row spans its window)."""
    lo, hi = span
    for s, e, _ in rows:
        if s < span[1] and e > span[0]:
            lo, hi = min(lo, s), max(hi, e)
    return lo, hi


def explain(progress: Progress, at: Any = None, *, step: str | None = None,
            rows: Iterable[tuple[int, int, Any]] | None = None, now: float | None = None,
            tz: str | _dt.tzinfo | None = None, released: bool = False,
            key: Any = None) -> Explanation:
    """Why the output of ``step`` (default: the query's output) at ``at`` — a time (ticks, a
    datetime or an ISO-8601 string), a window ``(start, end)``, or None: the step's output
    CTI, i.e. what holds its next output — is final or not, and what holds it back.
    ``rows`` are the step's output ``(start, end, payload)`` rows when known (they decide
    between speculative and not yet produced); ``released``: rows that became final were
    let go (only the alive ones are in ``rows``); ``now`` is the wall clock (default: now).
    When the query failed, an output that is not final is ``"failed"``, held back by the
    step that failed. ``key`` asks about one key's output (the rows ``(key, payload)``) where
    a source has per-key progress: final once that key's CTI passes it when the step
    finalizes each key at its own CTI; else what holds that key back."""
    step = step or progress.output
    if step not in progress.steps:
        raise ValueError(f"why(step={step!r}): no such step; the steps are "
                         f"{', '.join(progress.steps)}")
    me = progress.steps[step]
    lo, hi = (me.cti, me.cti + 1) if at is None else span_of(at)
    if at is None and me.cti <= MIN_TIME:  # no CTI yet: its first output
        lo, hi = MIN_TIME, MIN_TIME + 1
    now = time.time() if now is None else now
    reads = progress.upstream(step)
    keyed = [(s, f.keys) for s in sorted(reads)
             if (f := progress.steps[s].source) is not None and f.keys is not None]
    if key is not None and not keyed:
        raise ValueError(f"why(key={key!r}): no source {step} reads has per-key progress; "
                         f"give its source AdvanceTime(per_key=...), or leave key out")
    covering = [] if rows is None else sorted(
        (r for r in rows if r[0] < hi and r[1] > lo
         and (key is None or _key_of(r[2]) == key)), key=lambda r: (r[0], r[1]))
    mine = None if key is None else key_row(keyed[0][1], key)
    per_key = any(PER_KEY_NOTE in progress.steps[s].describe for s in reads)
    if me.cti >= hi:
        status = FINAL
    elif per_key and mine is not None and mine["cti"] is not None and mine["cti"] >= hi:
        status = FINAL  # the key's own CTI has passed it
    elif rows is None:
        status = NOT_FINAL
    else:
        status = SPECULATIVE if covering else NOT_PRODUCED
    hops: list[Hop] = []
    culprit, reason, idle_s, advice, advice_kind = None, "", None, None, None
    failed = progress.failed()
    t = functools.partial(show_time, clock=progress.clock, tz=tz)
    if status == FINAL and me.cti < hi:
        assert mine is not None
        reason = (f"key {key!r}'s CTI {t(mine['cti'])} has passed it, and {step} finalizes "
                  f"each key at its own CTI")
    elif status != FINAL and failed is not None:
        status, culprit = FAILED, failed[0]
        reason = f"the query failed at this step, so no CTI moves any more: {failed[1]}"
    elif status != FINAL:
        hops, culprit, reason, idle_s, advice, advice_kind = _walk(progress, step, hi, now, tz)
        views = dict(keyed)
        if key is not None and per_key:  # the key's own CTI decides: the device is the culprit
            culprit = keyed[0][0]
            reason = key_reason(key, mine, keyed[0][1]["top"], hi, progress.clock, tz)
        elif culprit in views and views[culprit]["slowest"]:  # the low watermark holds it
            view = views[culprit]
            reason += (f"; its CTI is the low watermark, and the slowest "
                       f"{key_text(view['slowest'][0], view['top'], progress.clock, tz)}")
    # late events of the sources this step reads whose original lifetimes touch the output
    reach = reach_of((lo, hi), covering)
    late = [r for s in reads if (f := progress.steps[s].source) is not None
            for r in f.late if r.overlaps(*reach)]
    late.sort(key=lambda r: (r.start if r.start is not None else MIN_TIME, r.where))
    return Explanation(
        query=progress.query, step=step, lo=lo, hi=hi, status=status, cti=me.cti,
        clock=progress.clock, tz=tz,
        rows=tuple((s, e, short_payload(p)) for s, e, p in covering[:ROWS_SHOWN]),
        hops=tuple(hops), culprit=culprit, reason=reason, idle_s=idle_s, advice=advice,
        advice_kind=advice_kind,
        late=tuple(late[:LATE_SHOWN]), late_count=len(late), known=rows is not None,
        released=released and status == FINAL, failed=failed,
        busy=tuple((s, progress.steps[s].busy_s) for s in progress.steps
                   if s in reads and progress.steps[s].busy),
        detect=tuple(v for s in progress.steps if s in reads for v in progress.steps[s].detect),
        key=key, keys=tuple((s, aged(v)) for s, v in keyed))


def _key_of(payload: Any) -> Any:
    """The key of a keyed output row's payload ``(key, payload)`` (None: not keyed)."""
    return payload[0] if isinstance(payload, tuple) and len(payload) == 2 else None


def _in_ctis(progress: Progress, step: str) -> tuple[tuple[int, str, int], ...]:
    """``(port, upstream, CTI)`` of each input of ``step`` that can still hold it back (an
    input that ended while others are open holds nothing back): the operator's own input CTI
    where it keeps one, else what its upstream step has sent."""
    me = progress.steps[step]
    out = []
    ports = progress.inputs.get(step, ())
    if me.in_ended and len(me.in_ended) < len(ports) and not me.finished:
        # (a finished step's inputs have all ended, the last one unmarked: the walk compares
        # their final CTIs, as before any input could end alone)
        ports = tuple((port, up) for port, up in ports if port not in me.in_ended)
    for port, up in ports:
        sent = progress.steps[up].cti if up in progress.steps else MIN_TIME
        own = me.in_ctis[port] if me.in_ctis is not None and port < len(me.in_ctis) else None
        out.append((port, up, sent if own is None else own))
    return tuple(out)


def _walk(progress: Progress, step: str, hi: int, now: float, tz: str | _dt.tzinfo | None
          ) -> tuple[list[Hop], str | None, str, float | None, str | None, str | None]:
    """From ``step`` upstream along the smallest input CTI, to what holds the CTI below
    ``hi``: (hops, culprit, reason, seconds since the culprit last advanced, advice, its
    kind). A source that an idle timeout cannot move past ``hi`` and that lags another input
    of a step on the way (a join's reference input, idle behind its live input) is advised
    ``import_ctis``, docs/ctis.md's fix for exactly that case."""
    clock = progress.clock

    def t(x: int | None) -> str:
        return show_time(x, clock, tz)

    hops: list[Hop] = []
    cur, seen = step, set()
    while cur not in seen:
        seen.add(cur)
        me = progress.steps[cur]
        ins = _in_ctis(progress, cur)
        if not ins:  # a source
            hops.append(Hop(cur, me.describe, me.cti, (), None, None))
            reason, idle_s, advice, reach = _source_reason(progress, me, hi, now, t)
            lead = None if me.finished else _leader(hops)
            # an idle timeout cannot help when it leaves the source short of the output, and
            # is no fix for a reference input (events that last: edges, intervals) that the
            # step's other input leads by more than it can move
            lasting = me.source is not None and me.source.shape in ("edge", "interval")
            if lead is not None and (reach is None or (lead[3] > reach and (
                    reach < hi or lasting))):
                return hops, cur, reason, idle_s, _import_advice(progress, *lead, t), \
                    IMPORT_CTIS
            return hops, cur, reason, idle_s, advice, None if advice is None else IDLE_TIMEOUT
        port, up, m = min(ins, key=lambda x: (x[2], x[0]))
        holds = None
        if me.cti < m:
            held = f" (state size {me.state_size})" if me.state_size else ""
            holds = (f"its output CTI is behind its input CTI {t(m)}: its state holds the "
                     f"output back{held}")
            oldest = [p for v in me.detect for p in v.partials[:1]]
            if oldest:  # (a detect's output CTI waits for its oldest open run)
                holds += (f", its oldest partial match ({symbols_text(oldest[0])}) until its "
                          f"deadline {t(oldest[0].deadline)} or a row that ends it")
        upstream = progress.steps.get(up)
        hops.append(Hop(cur, me.describe, me.cti, ins, m, up, holds,
                        None if upstream is None else _ago(upstream.cti_wall, now)))
        if m >= hi:
            return hops, cur, (
                f"its input CTI {t(m)} has passed it, but its output CTI {t(me.cti)} has not: "
                f"its state holds output that is not final yet (state size {me.state_size}: "
                f"a window or session not closed, a partition whose groups are open, a "
                f"detect's partial match that may still grow)"), \
                _ago(me.cti_wall, now), None, None
        sent = progress.steps[up].cti if up in progress.steps else MIN_TIME
        if sent > m:
            waiting = upstream.in_flight if upstream is not None else 0
            return hops, cur, (
                f"its input {port} from {up} has sent CTI {t(sent)}, but {cur} has processed "
                f"only up to {t(m)}: it is behind its input ({waiting} batches in flight to "
                f"it, or one long batch)"), _ago(me.push_wall, now), None, None
        cur = up
    return hops, cur, "the steps feed each other in a cycle", None, None, None


def _leader(hops: list[Hop]) -> tuple[Hop, int, str, int] | None:
    """The step nearest the source on the walk (``hops``, the source last) whose inputs' CTIs
    diverge: that hop and ``(port, step, CTI)`` of its input furthest ahead; None when no
    step on the way has an input ahead of the one the walk followed."""
    for h in reversed(hops[:-1]):
        if len(h.inputs) < 2 or h.min_cti is None:
            continue
        port, up, cti = max(h.inputs, key=lambda x: (x[2], -x[0]))
        if cti > h.min_cti:
            return h, port, up, cti
    return None


def _import_advice(progress: Progress, at: Hop, port: int, leader: str, lead_cti: int,
                   t: Any) -> str:
    """``import_ctis`` advice for the input of ``at`` that the walk followed, which lags the
    input ``port`` from ``leader`` (CTI ``lead_cti``)."""
    lag, lagging = at.min_from, at.min_cti
    assert lag is not None and lagging is not None
    ahead = ("" if lagging <= MIN_TIME else
             f", {show_duration(lead_cti - lagging, progress.clock)} ahead")
    return (f"{at.step} advances with its slowest input: {lag} (CTI {t(lagging)}) lags "
            f"{leader} (CTI {t(lead_cti)}{ahead}), and an idle timeout moves {lag} no further "
            f"than one tick past its latest event. If {lag}'s events really are older (a "
            f"reference input that changes rarely, its changes applying from when they "
            f"arrive), let it take {leader}'s CTIs: {lag}.import_ctis({leader}, "
            f"policy=\"adjust\") on the streams of those steps (docs/ctis.md, \"CTI "
            f"import\"; its events behind the imported CTI are then late: see its late() "
            f"stream)")


def _ago(wall: float | None, now: float) -> float | None:
    return None if wall is None else max(0.0, now - wall)


def _source_reason(progress: Progress, me: StepProgress, hi: int, now: float,
                   t: Any) -> tuple[str, float | None, str | None, int | None]:
    """Why source ``me``'s CTI is below ``hi``, how long ago it advanced, the idle-timeout
    advice (None when an idle timeout would not help), and the CTI an idle timeout moves it
    to (one tick past its latest event; its CTI when every event is covered; None: no idle
    timeout applies, it ended or is no rows source)."""
    advanced = _ago(me.cti_wall, now)
    quiet = _ago(me.push_wall, now)
    when = ("it has never emitted a CTI" if advanced is None else
            f"its CTI {t(me.cti)} last advanced {_seconds(advanced)} ago")
    facts = me.source
    if me.finished:
        return (f"its input ended with CTI {t(me.cti)} (past its last event), so no output "
                f"at or after {t(me.cti)} becomes final; {when}"), advanced, None, None
    rows = "it has received no rows" if quiet is None else \
        f"its last rows came {_seconds(quiet)} ago"
    reason = f"its CTI does not pass {t(hi - 1)}: {when}; {rows}"
    if facts is None or facts.advance is None:
        return reason, advanced, None, None
    adv = facts.advance
    latest = facts.latest
    pending = latest is not None and latest + 1 > me.cti
    if not pending:
        return (reason + "; every event it received is covered by its CTI, so only newer "
                         "rows move it (an idle timeout would not)"), advanced, None, me.cti
    assert latest is not None
    target = latest + 1
    reach = "" if target >= hi else (f" (still short of {t(hi - 1)}: it has no event that "
                                     f"late yet)")
    if adv.idle_timeout is not None:
        return (reason + f"; its idle_timeout={adv.idle_timeout} s moves it to {t(target)} "
                         f"after {adv.idle_timeout} s without rows{reach}"), advanced, None, target
    pick = _idle_choice(quiet)
    suggested = dataclasses.replace(adv, idle_timeout=pick)
    advice = (f"{me.step} has {_advance_repr(adv)}; {_advance_repr(suggested)} would have "
              f"moved its CTI to {t(target)} (one tick past its latest event) after "
              f"{pick:g} s without rows{reach}")
    return reason + f"; events up to {t(latest)} wait for a CTI", advanced, advice, target


def _idle_choice(quiet: float | None) -> float:
    """An idle timeout that a source quiet for ``quiet`` seconds would have reached."""
    if quiet is None:
        return IDLE_CHOICES_S[0]
    fits = [c for c in IDLE_CHOICES_S if c <= quiet / 2]
    return fits[-1] if fits else IDLE_CHOICES_S[0]


def _advance_repr(adv: AdvanceTime) -> str:
    """``AdvanceTime(...)`` with only the arguments that differ from the defaults."""
    from operators.ingress import AdvanceTime

    default = AdvanceTime()
    args = [f"{f.name}={getattr(adv, f.name)!r}" for f in dataclasses.fields(adv)
            if getattr(adv, f.name) != getattr(default, f.name) or f.name == "idle_timeout"]
    return f"AdvanceTime({', '.join(args)})"


# -- the runtimes' side ---------------------------------------------------------------------------
