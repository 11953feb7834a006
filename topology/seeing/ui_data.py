"""What ``cedar ui`` shows, gathered from the running queries: :class:`Monitor` polls each
query's actors (every step's ``stats()``, the sink's manifest and its newest rows) at most once
per refresh and hands the page (:mod:`topology.seeing.ui`) one JSON-ready sample: per step its
status, rates and their recent history (a sparkline's), its output CTI and lag, whether it is
held, and the query's newest rows; and, for a step's own pages, its late events and dead
letters (:meth:`Monitor.records`) and its timeline picture (:meth:`Monitor.timeline`).

* **It stays up.** A refresh sends all its calls at once and waits for them together at most
  :data:`ANSWER_S`; a step that has not answered (one long batch holds it) shows as "not
  answering for N s" with its last known numbers, and the rest of the page keeps updating.
* **It moves little.** The sink sends only the :data:`ROWS_SHOWN` rows shown, each payload's
  repr cut to :data:`PAYLOAD_CHARS` characters in the sink's actor, whatever the table's size.
"""

from __future__ import annotations

import functools
import os
import re
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, cast

from topology.building.times import (
    TIMESTAMPS,
    parse_tz,
    running_clock,
    show_duration,
    show_reason,
    show_span,
    show_time,
    show_times_in,
)
from topology.running.registry import actor_name, hosted, list_queries, step_actor

#: Output rows shown per query.
ROWS_SHOWN = 10
#: A shown payload's repr is cut to this many characters (in the sink's actor, before it
#: travels).
PAYLOAD_CHARS = 200
#: How long one refresh waits for the steps' answers before it shows a step as "not
#: answering" (and again for the sinks' manifests: a refresh takes at most about twice this).
ANSWER_S = 1.0
#: Seconds between two samples of the running queries by ``cedar ui``'s own sampler (whether
#: or not a page is open), and how far back each step's sparkline of rates goes.
SAMPLE_S = 1.0
HISTORY_S = 180.0
#: Rate samples kept per step at most (a bound whatever the sampling; about HISTORY_S /
#: SAMPLE_S are used).
HISTORY_POINTS = 400
#: Late events / dead letters listed per step on their page (the newest).
RECORDS_SHOWN = 500
#: How long the late-events and timeline pages wait for a step's actor.
PAGE_WAIT_S = 10.0
#: A step's timeline picture draws the newest this many events that entered it (per input).
PICTURE_EVENTS = 30
#: How far back (seconds) a step's state and CTI are looked at to tell whether it is held: its
#: inputs' CTIs apart, its state growing and its CTI standing still (:meth:`Monitor._held`);
#: and how many samples, over how many seconds at least, that takes.
HELD_S = 15.0
HELD_SAMPLES = 3
HELD_MIN_S = 2.0

#: (query, what, step): what is "stats" (of step), "manifest" or "rows" (of the sink)
Key = tuple[str, str, str]


def _short(text: str, width: int = PAYLOAD_CHARS) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


def problem(exc: BaseException) -> str:
    """An error in a few words, its type and first line (Ray's messages run to pages): how
    the page, the why panel and `cedar ui` say a failed call or connection."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return _short(f"{type(exc).__name__}: {first}" if first else type(exc).__name__)


class Monitor:
    """Samples the running queries: per step its stats, and the rates since the last sample.

    Each refresh sends its calls to every actor at once and waits for them together, at most
    :data:`ANSWER_S`. A step busy in one long batch answers at once from its last report
    (``busy``) and shows as "busy in one batch"; one that has not answered by then (its
    process stuck) shows as "not answering" with its last known numbers while the other steps
    and queries update.
    A call not answered yet is not sent again: the next refreshes look whether it came (at no
    cost), so a stuck step slows no refresh after the first.
    """

    def __init__(self, answer_s: float = ANSWER_S, tz: str | None = None) -> None:
        self.answer_s = answer_s
        #: the time zone times are shown in (UTC unless given,
        # :func:`topology.building.times.parse_tz`)
        self.tz = parse_tz(tz)
        self._tz_name = tz
        self._lock = threading.Lock()
        self._last: dict[Key, tuple[float, int, int]] = {}
        self._cache: tuple[float, dict[str, Any]] | None = None
        #: calls sent and not answered yet, with when they were sent
        self._asked: dict[Key, tuple[Any, float]] = {}
        #: the last answer of each call (stats of a step, rows of a sink)
        self._known: dict[Key, Any] = {}
        #: per (query, step): (wall time, events in/s, out/s) of the last HISTORY_S seconds
        self._history: dict[tuple[str, str], deque[tuple[float, float, float]]] = {}
        #: per (query, step): (wall time, state size, output CTI) of the last HELD_S seconds
        self._growth: dict[tuple[str, str], deque[tuple[float, int, int]]] = {}

    def sample(self, max_age_s: float = 0.5) -> dict[str, Any]:
        with self._lock:
            if self._cache is not None and time.monotonic() - self._cache[0] < max_age_s:
                return self._cache[1]
            data = {"time": time.time(), "queries": self._sample(), "history_s": HISTORY_S}
            self._cache = (time.monotonic(), data)
            return data

    def _ask(self, key: Key, call: Callable[[], Any], sent: set[Key]) -> None:
        """Send ``call`` for ``key`` unless its previous call is still unanswered."""
        if key not in self._asked:
            self._asked[key] = (call(), time.monotonic())
            sent.add(key)

    def _answers(self, keys: list[Key], sent: set[Key]) -> dict[Key, tuple[str, Any]]:
        """Key -> ``("ok", answer)``, ``("error", exception)`` or ``("waiting", seconds since
        the call was sent)``, after one wait of at most ``answer_s`` for the calls ``sent`` by
        this refresh (the older ones, late already, only get a look)."""
        import ray

        keys = [k for k in keys if k in self._asked]
        if not keys:
            return {}
        refs = [self._asked[k][0] for k in keys]
        fresh = [self._asked[k][0] for k in keys if k in sent]
        if fresh:
            ray.wait(fresh, num_returns=len(fresh), timeout=self.answer_s)
        ready = set(ray.wait(refs, num_returns=len(refs), timeout=0)[0])
        now = time.monotonic()
        out: dict[Key, tuple[str, Any]] = {}
        for key, ref in zip(keys, refs):
            if ref not in ready:
                out[key] = ("waiting", now - self._asked[key][1])
                continue
            del self._asked[key]
            try:
                out[key] = ("ok", ray.get(ref))  # it is ready: this does not wait
            except Exception as exc:  # noqa: BLE001 - e.g. the actor died
                out[key] = ("error", exc)
        return out

    def _forget(self, names: list[str]) -> None:
        """Drop what is kept of the queries that are no longer running."""
        running = set(names)
        kept: dict[Any, Any]
        for kept in (self._asked, self._known, self._last, self._history, self._growth):
            key: Any
            for key in [k for k in kept if k[0] not in running]:
                del kept[key]

    def _sample(self) -> dict[str, Any]:

        queries: dict[str, Any] = {}
        slots = hosted()  # the steps in step hosts, asked once per sample
        names = list_queries(slots)
        self._forget(names)
        sinks: dict[str, Any] = {}
        sent: set[Key] = set()
        for name in names:
            try:
                sinks[name] = sink = step_actor(actor_name(name, "sink"), slots)
                self._ask((name, "manifest", ""), sink.manifest.remote, sent)
            except Exception as exc:  # noqa: BLE001 - a query stopping while we look
                queries[name] = {"error": f"its sink cannot be reached: {problem(exc)}"}
        manifests = self._answers([(n, "manifest", "") for n in sinks], sent)
        plans: dict[str, dict[str, Any]] = {}
        for (query, _, _), (kind, value) in manifests.items():
            if kind == "ok":
                plans[query] = value
            elif kind == "waiting":
                queries[query] = {"error": f"its sink is not answering (for {value:.0f} s)"}
            else:
                queries[query] = {"error": f"its sink cannot be reached: {problem(value)}"}
        # every step's stats and every sink's newest rows, asked at once, waited for together
        keys: list[Key] = []
        gone: dict[Key, str] = {}
        sent = set()
        for name, info in plans.items():
            for step, actor in info["actors"].items():
                key = (name, "stats", step)
                keys.append(key)
                if key in self._asked:
                    continue
                try:
                    handle = step_actor(actor, slots)
                except Exception as exc:  # noqa: BLE001 - the step's actor is gone
                    gone[key] = f"its actor is gone ({problem(exc)})"
                    continue
                self._ask(key, handle.stats.remote, sent)
            keys.append((name, "rows", ""))
            self._ask((name, "rows", ""),
                      functools.partial(sinks[name].newest_rows.remote, ROWS_SHOWN,
                                        PAYLOAD_CHARS), sent)
        answers = self._answers(keys, sent)
        for name, info in plans.items():
            queries[name] = self._query(name, info, answers, gone)
        return queries

    def _query(self, name: str, info: dict[str, Any], answers: dict[Key, tuple[str, Any]],
               gone: dict[Key, str]) -> dict[str, Any]:
        edges: dict[str, list[str]] = info.get("edges", {})
        inputs: dict[str, list[str]] = {}
        for src, dsts in edges.items():
            for dst in dsts:
                inputs.setdefault(dst, []).append(src)
        now, wall = time.monotonic(), time.time()
        stats: dict[str, dict[str, Any]] = {}
        steps: dict[str, dict[str, Any]] = {}
        for step in info["actors"]:
            key = (name, "stats", step)
            kind, value = answers.get(key, ("gone", gone.get(key, "no answer")))
            rate_in = rate_out = None
            late_s = None
            if kind == "ok":
                s = self._known[key] = value
                before = self._last.get(key)
                self._last[key] = (now, s.get("events_in", 0), s.get("events_out", 0))
                rate_in = rate_out = 0.0
                if before is not None and now > before[0]:
                    dt = now - before[0]
                    rate_in = round((s.get("events_in", 0) - before[1]) / dt, 1)
                    rate_out = round((s.get("events_out", 0) - before[2]) / dt, 1)
                    ring = self._history.setdefault(
                        (name, step), deque(maxlen=HISTORY_POINTS))
                    ring.append((wall, rate_in, rate_out))
                if s.get("cti") is not None:
                    self._growth.setdefault((name, step), deque(maxlen=HISTORY_POINTS)).append(
                        (wall, int(s.get("state_size") or 0), int(s["cti"])))
                status = ("failed: " + _short(str(s["error"])) if s.get("error")
                          else "finished" if s.get("finished") else
                          "busy in one batch" + ("" if s.get("busy_s") is None else
                                                 f" for {s['busy_s']:.0f} s")
                          if s.get("busy") else "running")
            else:
                s = self._known.get(key, {})
                if kind == "waiting":
                    late_s = round(value, 1)
                    status = f"not answering for {value:.0f} s"
                elif kind == "error":
                    status = f"its actor is gone ({problem(value)})"
                else:
                    status = str(value)
            stats[step] = s
            steps[step] = {
                "operator": s.get("operator", ""), "node": s.get("node", ""),
                "status": status, "not_answering_s": late_s,
                "events_in": s.get("events_in"), "events_out": s.get("events_out"),
                "in_per_s": rate_in, "out_per_s": rate_out, "cti": s.get("cti"),
                "state_size": s.get("state_size"), "in_flight": s.get("in_flight"),
                "late": s.get("late"), "dead_letters": s.get("dead_letters"),
                "recoveries": s.get("recoveries", 0 if s else None),
                "finished": s.get("finished", False), "error": s.get("error"),
                "answering": kind == "ok", "traced": bool(s.get("trace")),
                "busy": bool(s.get("busy")) if kind == "ok" else False,
                "rates": self._rates(name, step, wall),
            }
        # the plan's clock, or what a source fed by a generator told of its first rows
        clock = running_clock(info.get("clock"), stats.values())
        for step, row in steps.items():
            # an input that ended no longer holds a step back (docs/ctis.md): it does not count
            known = [(stats[u]["cti"], u, bool(stats[u].get("finished")))
                     for u in inputs.get(step, []) if "cti" in stats.get(u, {})]
            ups = [(c, u) for c, u, ended in known if not ended] or [(c, u) for c, u, _ in known]
            row["in_cti"] = in_cti = min(ups)[0] if ups else None
            # the lag behind the input furthest ahead: a join held at its idle input's CTI is
            # as far behind as its live input is ahead, not "0"
            row["cti_lag"] = (None if in_cti is None or row["cti"] is None
                              else max(0, max(ups)[0] - row["cti"]))
            # a step with several inputs advances with the slowest: how far its inputs are apart
            row["inputs_apart"] = apart = (max(ups)[0] - min(ups)[0]) if len(ups) > 1 else None
            row["held"] = None if apart is None or apart <= 0 or not row["answering"] else \
                self._held(name, step, min(ups), max(ups), clock, wall)
            row["shown"] = {"cti": show_time(row["cti"], clock, self.tz),
                            "in_cti": show_time(in_cti, clock, self.tz),
                            "cti_lag": show_duration(row["cti_lag"], clock),
                            "inputs_apart": show_duration(apart, clock)}
        # backpressure: per edge, the batches sent and not yet taken against the limit
        load = {f"{src}>{dst}": [stats[src].get("in_flight_to", {}).get(dst, 0),
                                 stats[src].get("max_in_flight")]
                for src, dsts in edges.items() for dst in dsts if src in stats}
        key = (name, "rows", "")
        kind, value = answers.get(key, ("waiting", 0.0))
        if kind == "ok":
            self._known[key] = value
        rows = self._known.get(key, [])
        return {"steps": steps, "edges": edges, "clock": clock or "ticks", "in_flight": load,
                "rows": [[start, end, show_times_in(payload, start, end, clock, self.tz),
                          show_span(start, end, clock, self.tz)]
                         for start, end, payload in rows],
                "rows_note": None if kind == "ok" else
                "the sink has not answered: the rows shown are older" if rows else
                "the sink has not answered yet"}

    def _held(self, name: str, step: str, slow: tuple[int, str], fast: tuple[int, str],
              clock: str | None, wall: float) -> str | None:
        """Why ``step`` is held, when it is (else None): its inputs' CTIs apart (``slow`` and
        ``fast``: ``(CTI, upstream step)``), and over the last :data:`HELD_S` seconds its
        state grew while its output CTI stood still: the most common stall, a join whose
        reference input is idle (its state grows without bound while its CTI lags the live
        input; ``why`` says how to fix it)."""
        ring = self._growth.get((name, step))
        if not ring:
            return None
        while ring and wall - ring[0][0] > HELD_S:
            ring.popleft()
        if len(ring) < HELD_SAMPLES or ring[-1][0] - ring[0][0] < HELD_MIN_S:
            return None
        (_, first, cti0), (_, last, cti1) = ring[0], ring[-1]
        if cti1 != cti0 or last <= first or last < max(s for _, s, _ in ring):
            return None
        t = functools.partial(show_time, clock=clock, tz=self.tz)
        return (f"held: its inputs' CTIs are {show_duration(fast[0] - slow[0], clock)} apart "
                f"({slow[1]} at {t(slow[0])}, {fast[1]} at {t(fast[0])}) and its state grew "
                f"from {first:,} to {last:,} in {ring[-1][0] - ring[0][0]:.0f} s while its "
                f"CTI stood still: it waits for {slow[1]} (click it for why, and the fix)")

    def _rates(self, name: str, step: str, wall: float) -> list[list[float]]:
        """The step's sparkline: ``[seconds ago, events in/s, out/s]`` per sample of the
        last :data:`HISTORY_S` seconds, oldest first (older samples are dropped here)."""
        ring = self._history.get((name, step))
        if not ring:
            return []
        while ring and wall - ring[0][0] > HISTORY_S:
            ring.popleft()
        return [[round(wall - t, 1), a, b] for t, a, b in ring]

    def _actor(self, query: str, step: str) -> tuple[Any, dict[str, Any]]:
        """The actor of ``step`` of the deployed ``query`` (one its sink's manifest names)
        and that manifest; a ``LookupError`` saying what is missing otherwise."""
        import ray

        try:
            sink = step_actor(actor_name(query, "sink"))
            info = cast(dict[str, Any], ray.get(sink.manifest.remote(), timeout=PAGE_WAIT_S))
        except Exception as exc:  # noqa: BLE001 - no such query, or it is stopping
            raise LookupError(f"no query {query!r} is running here "
                              f"({problem(exc)})") from None
        actors = info.get("actors", {})
        if step not in actors:
            raise LookupError(f"query {query!r} has no step {step!r}; its steps are "
                              f"{', '.join(sorted(actors))}")
        try:
            return step_actor(actors[step]), info
        except Exception as exc:  # noqa: BLE001 - the step's actor is gone
            raise LookupError(f"the actor of step {step!r} is gone ({problem(exc)})"
                              ) from None

    def _clock(self, query: str, info: dict[str, Any]) -> str:
        """The clock of a running ``query`` (its sink's manifest ``info``): its plan's, or
        what its sources' last stats told of their rows
        (:func:`topology.building.times.running_clock`)."""
        return running_clock(info.get("clock"), [
            self._known.get((query, "stats", step), {}) for step in info.get("actors", {})])

    def records(self, query: str, step: str, kind: str) -> dict[str, Any]:
        """The late events (``kind="late"``) or dead letters (``"dead_letters"``) of one step
        (the newest :data:`RECORDS_SHOWN`), each with its reason and original time shown as
        people read them, and its row or message cut to :data:`PAYLOAD_CHARS` characters."""
        import ray

        if kind not in ("late", "dead_letters"):
            raise LookupError(f"ask for kind=late or kind=dead_letters, not {kind!r}")
        actor, info = self._actor(query, step)
        clock = self._clock(query, info)
        try:
            records = ray.get(actor.records.remote(kind), timeout=PAGE_WAIT_S)
        except Exception as exc:  # noqa: BLE001 - busy in one long batch, or gone
            raise LookupError(f"step {step!r} has not answered ({problem(exc)}); "
                              f"try again") from None
        shown = []
        for rec in records[-RECORDS_SHOWN:]:
            reason = str(getattr(rec, "reason", ""))
            item = getattr(rec, "item", rec)
            original = original_time(rec, reason)
            text = _short(_safe_repr(item))
            shown.append({
                "where": str(getattr(rec, "where", step)),
                "action": str(getattr(rec, "action", "dead letter")),
                "reason": show_reason(reason, clock, self.tz),
                "original": show_time(original, clock, self.tz),
                # the row's field that holds its original time, as that time
                "item": text if original is None else
                show_times_in(text, original, original, clock, self.tz)})
        return {"query": query, "step": step, "kind": kind, "count": len(records),
                "records": shown}

    def timeline(self, query: str, step: str) -> bytes:
        """The timeline picture (SVG, :func:`topology.seeing.timeline.timeline`) of one step of a
        query deployed with a trace, from what its actor has recorded so far (it writes its
        rows first); a ``LookupError`` saying how to get one when the query has no trace."""
        import ray

        actor, info = self._actor(query, step)
        try:
            path = ray.get(actor.stats.remote(), timeout=PAGE_WAIT_S).get("trace")
            if path:
                ray.get(actor.flush_trace.remote(), timeout=PAGE_WAIT_S)
        except Exception as exc:  # noqa: BLE001 - busy in one long batch, or gone
            raise LookupError(f"step {step!r} has not answered ({problem(exc)}); "
                              f"try again") from None
        if not path:
            raise LookupError(_NO_TRACE.format(query=query, step=step))
        from topology.seeing.debug import Recording
        from topology.seeing.timeline import timeline

        try:
            rec = Recording.open(path)
            traced = rec.step_of(step)
            # the trace's plan was written before a row came: a generator's times are times
            # when its source has told so since
            if self._clock(query, info) == TIMESTAMPS:
                rec.meta["clock"] = TIMESTAMPS
        except (OSError, KeyError) as exc:
            raise LookupError(f"step {step!r} has recorded nothing in its trace {path!r} yet "
                              f"({exc.args[0] if exc.args else exc})") from None
        # the newest PICTURE_EVENTS events that entered the step by each input (a join's idle
        # reference input has its events far behind the live one's: it is drawn too), and
        # the CTIs among them (a picture of a whole live stream would draw every CTI it saw)
        by_port: dict[int, list[int]] = {}
        for r in rec.by_step.get(traced, []):
            if r["direction"] == "in" and r["kind"] == "insert":
                by_port.setdefault(r["port"], []).append(r["start"])
        starts = [t for ts in by_port.values() for t in ts[-PICTURE_EVENTS:]]
        lo, hi = (min(starts), max(starts) + 1) if starts else (None, None)
        with tempfile.TemporaryDirectory(prefix="cedar-ui-") as tmp:
            out = os.path.join(tmp, "timeline.svg")
            # one row per event: these few are worth seeing one by one, never as a density
            timeline(rec, traced, out=out, start=lo, end=hi, limit=PICTURE_EVENTS,
                     tz=self._tz_name, lanes=False)
            with open(out, "rb") as f:
                return f.read()


_NO_TRACE = ("query {query!r} was deployed without a trace, so step {step!r} has no timeline "
             "picture. Deploy it with one: q.deploy({query!r}, trace='DIR') (or "
             "topology.Trace('DIR', steps=[...], limit=N) to bound it), then follow this "
             "link again; or draw one from a run with collect(trace='DIR') and `cedar "
             "timeline DIR --step STEP -o picture.svg`.")

#: ``start 1767225600000000`` in a late event's reason: its original time
_ORIGINAL = re.compile(r"\b(?:start|end) (-?\d+) is behind")


def original_time(record: Any, reason: str) -> int | None:
    """When a late event or dead letter was meant to happen: the record's ``start`` if it
    has one, else its message's, else the time its reason names as behind the CTI."""
    for value in (getattr(record, "start", None),
                  getattr(getattr(record, "item", None), "start", None)):
        if isinstance(value, int):
            return value
    found = _ORIGINAL.search(reason)
    return int(found.group(1)) if found else None


def _safe_repr(obj: Any) -> str:
    try:
        return repr(obj)
    except Exception as exc:  # noqa: BLE001 - a user's __repr__ failing
        return f"<{type(obj).__name__}: repr failed ({type(exc).__name__})>"

