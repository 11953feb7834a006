"""A ``detect`` step's partial matches and ended candidate runs as people read them: the lines
``why`` prints and the JSON the web view's why panel shows (:class:`operators.detect_seeing.
DetectView`, gathered by :func:`topology.running.progress.detect_views`), times as times and
durations with their units where the query's clock is timestamps.

    >>> from operators.detect_seeing import DetectView, Ended, Partial
    >>> v = DetectView("detect#2", "A B+ C", 10, (Partial("'k1'", (("A", 1), ("B", 2)), 3,
    ...     ((1, "'e0'"), (2, "'e1'"), (3, "'e2'")), 11, False, 1),), 1, 1,
    ...     (Ended("'k2'", 1, "'e3'", "event", 2, "'e4'", 11),))
    >>> print("\\n".join(detect_lines(v, "ticks")))  # doctest: +NORMALIZE_WHITESPACE
    detect#2: detect 'A B+ C' within 10: 1 partial match (the oldest; 1 key holds rows)
      key 'k1': A B B so far, events 'e0' at 1, 'e1' at 2, 'e2' at 3; deadline 11
    detect#2: candidate runs that ended without a match (the last 1):
      key 'k2': the run from 'e3' at 1 ended at event 'e4' at 2: it fit none of the symbols
      the run expected there
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

from operators.detect_seeing import END_OF_INPUT, EVENT, RETRACTION, DetectView, Ended, Partial
from topology.building.times import show_duration, show_time

#: Ended candidate runs a ``why`` report lists per detect step (the newest; the web view's
#: JSON has all that are kept).
ENDED_LISTED = 10
#: A symbol bound more times in a row than this shows as ``B×n``.
RUN_SPELLED = 3

Tz = str | _dt.tzinfo | None


def symbols_text(p: Partial) -> str:
    """The symbols a partial match has bound, in order: ``A B B``, ``A B×40 C``."""
    return " ".join(" ".join([s] * n) if n <= RUN_SPELLED else f"{s}×{n}"
                    for s, n in p.symbols) or "nothing"


def partial_text(p: Partial, clock: str | None, tz: Tz = None) -> str:
    """One partial match: its key, the symbols bound, its events and its deadline."""
    t = _times(clock, tz)
    shown = [f"{i} at {t(s)}" for s, i in p.events]
    if p.bound > len(p.events):
        half = len(shown) // 2
        shown[half:half] = [f"… {p.bound - len(shown)} more …"]
    events = f", events {', '.join(shown)}" if shown else ""
    state = "a match so far that may still extend" if p.matched else "so far"
    more = f" ({p.open_runs} open runs in this key)" if p.open_runs > 1 else ""
    key = f"key {p.key}: " if p.key else ""
    return f"{key}{symbols_text(p)} {state}{events}; deadline {t(p.deadline)}{more}"


def ended_text(e: Ended, clock: str | None, tz: Tz = None) -> str:
    """One candidate run that ended without a match, and what ended it."""
    t = _times(clock, tz)
    run = f"{'key ' + e.key + ': ' if e.key else ''}the run from {e.first_id} at " \
          f"{t(e.first_start)}"
    if e.cause == EVENT:
        return (f"{run} ended at event {e.by} at {t(e.at)}: it fit none of the symbols the "
                f"run expected there")
    if e.cause == RETRACTION:
        return f"{run} ended when event {e.by} at {t(e.at)}, which it had bound, was deleted"
    if e.cause == END_OF_INPUT:
        return (f"{run} ended with the input: it still wanted rows before its deadline "
                f"{t(e.deadline)}")
    return (f"{run} ended at CTI {t(e.at)}, past its deadline {t(e.deadline)}: it still "
            f"wanted rows")


def detect_lines(v: DetectView, clock: str | None, tz: Tz = None) -> list[str]:
    """The lines ``why`` prints of one detect step."""
    head = f"{v.step}: detect {v.pattern!r} within {show_duration(v.within, clock)}"
    n = len(v.partials)
    keys = f"{v.keys:,} key{'' if v.keys == 1 else 's'} {'holds' if v.keys == 1 else 'hold'} rows"
    lines = [f"{head}: {n or 'no'} partial match{'' if n == 1 else 'es'}"
             + (f" (the oldest; {keys})" if n else f" ({keys})")]
    lines += [f"  {partial_text(p, clock, tz)}" for p in v.partials]
    if v.ended:
        listed = v.ended[-ENDED_LISTED:]
        lines.append(f"{v.step}: candidate runs that ended without a match (the last "
                     f"{len(listed)}):")
        lines += [f"  {ended_text(e, clock, tz)}" for e in listed]
    return lines


def detect_dict(v: DetectView, clock: str | None, tz: Tz = None) -> dict[str, Any]:
    """One detect step as the web view's JSON: the raw ticks, and beside them the times as
    people read them (``*_shown``) and each line's ``text``."""
    t = _times(clock, tz)
    return {
        "step": v.step, "pattern": v.pattern, "within": v.within,
        "within_shown": show_duration(v.within, clock), "keys": v.keys, "looked": v.looked,
        "text": detect_lines(v, clock, tz),
        "partials": [{
            "key": p.key, "symbols": symbols_text(p), "bound": p.bound,
            "events": [{"start": s, "start_shown": t(s), "id": i} for s, i in p.events],
            "deadline": p.deadline, "deadline_shown": t(p.deadline), "matched": p.matched,
            "open_runs": p.open_runs, "text": partial_text(p, clock, tz)} for p in v.partials],
        "ended": [{
            "key": e.key, "first_start": e.first_start, "first_shown": t(e.first_start),
            "first_id": e.first_id, "cause": e.cause, "at": e.at, "at_shown": t(e.at),
            "by": e.by, "deadline": e.deadline, "deadline_shown": t(e.deadline),
            "text": ended_text(e, clock, tz)} for e in v.ended],
    }


def _times(clock: str | None, tz: Tz) -> Any:
    def t(x: int | None) -> str:
        return show_time(x, clock, tz)
    return t
