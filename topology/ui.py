"""``cedar ui``: a live, read-only web page of the queries running on a Ray cluster.

One page shows every deployed query: its topology as a graph, and per step its status, the
events in and out per second, the output CTI and its lag behind its input furthest ahead (and,
for a step with several inputs, how far apart they are: a step whose inputs diverge while its
state grows and its CTI stands still is flagged as held, the most common stall), the state
size, the batches sent and not yet taken (backpressure), late events and dead letters, the node
the actor runs on and the recoveries so far; and the query's newest output rows. It refreshes
every second. Times read as people read them: where the query's sources carried timestamps
(its manifest's ``clock``, :mod:`topology.times`) CTIs and rows show ISO-8601 times (UTC, or
``cedar ui --tz``) and the CTI lag a duration (``2.4 s``); plain integer time stays integers.
Each step also shows a sparkline of its last minutes of rates (a sampler thread keeps a bounded
ring per step), its out-edges coloured by the batches in flight against the limit
(backpressure: red at the limit), its late-event and dead-letter counts linked to a page of
those rows (``/records``), and, when the query was deployed with a trace, a link to its
timeline picture (``/timeline``, :mod:`topology.timeline`).

The server is the standard library's (nothing to install): :class:`Monitor` polls each query's
actors (every step's ``stats()``, the sink's manifest and its newest rows) at most once per
refresh, and the page reads it as JSON from ``/api/queries``.

* **It stays up.** A refresh sends all its calls at once and waits for them together at most
  :data:`ANSWER_S`; a step that has not answered (one long batch holds it) shows as "not
  answering for N s" with its last known numbers, and the rest of the page keeps updating.
* **It moves little.** The sink sends only the :data:`ROWS_SHOWN` rows shown, each payload's
  repr cut to :data:`PAYLOAD_CHARS` characters in the sink's actor, whatever the table's size.
* **It stays private.** It binds to 127.0.0.1 unless told otherwise: on a cluster, run it on
  the head node and open an SSH tunnel (``ssh -L 8766:127.0.0.1:8766 head-node``), as for Ray's
  dashboard. It answers only requests whose ``Host`` header names it (127.0.0.1, localhost,
  [::1], the bound address at its port, or a name given with ``--allow-host``), as Jupyter and
  Ray's dashboard do, so that a DNS-rebinding page cannot read the queries' rows: any other
  ``Host`` gets 403 and a sentence saying why. The page builds its DOM with ``textContent``
  only, so a step name or payload holding HTML shows as text and never runs (and the page's
  content security policy runs no script but its own).
"""

from __future__ import annotations

import functools
import html
import ipaddress
import json
import os
import re
import secrets
import socket
import sys
import tempfile
import threading
import time
import urllib.parse
from collections import deque
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast

from .registry import actor_name, ensure_ray, hosted, list_queries, step_actor
from .times import (
    TIMESTAMPS,
    parse_tz,
    running_clock,
    show_duration,
    show_reason,
    show_span,
    show_time,
    show_times_in,
)

#: Output rows shown per query.
ROWS_SHOWN = 10
#: A shown payload's repr is cut to this many characters (in the sink's actor, before it
#: travels).
PAYLOAD_CHARS = 200
#: How long one refresh waits for the steps' answers before it shows a step as "not
#: answering" (and again for the sinks' manifests: a refresh takes at most about twice this).
ANSWER_S = 1.0
#: How long ``cedar ui`` tries to reach the cluster's address before it gives up.
CONNECT_S = 5.0
#: Default port of ``cedar ui``.
PORT = 8766
#: The host names a browser on this machine uses for a loopback server.
LOCAL_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
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


def _problem(exc: BaseException) -> str:
    """A failed call to a step's actor, in a few words (Ray's messages run to pages)."""
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
        #: the time zone times are shown in (UTC unless given, :func:`topology.times.parse_tz`)
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
                queries[name] = {"error": f"its sink cannot be reached: {_problem(exc)}"}
        manifests = self._answers([(n, "manifest", "") for n in sinks], sent)
        plans: dict[str, dict[str, Any]] = {}
        for (query, _, _), (kind, value) in manifests.items():
            if kind == "ok":
                plans[query] = value
            elif kind == "waiting":
                queries[query] = {"error": f"its sink is not answering (for {value:.0f} s)"}
            else:
                queries[query] = {"error": f"its sink cannot be reached: {_problem(value)}"}
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
                    gone[key] = f"its actor is gone ({_problem(exc)})"
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
                    status = f"its actor is gone ({_problem(value)})"
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
                              f"({_problem(exc)})") from None
        actors = info.get("actors", {})
        if step not in actors:
            raise LookupError(f"query {query!r} has no step {step!r}; its steps are "
                              f"{', '.join(sorted(actors))}")
        try:
            return step_actor(actors[step]), info
        except Exception as exc:  # noqa: BLE001 - the step's actor is gone
            raise LookupError(f"the actor of step {step!r} is gone ({_problem(exc)})"
                              ) from None

    def _clock(self, query: str, info: dict[str, Any]) -> str:
        """The clock of a running ``query`` (its sink's manifest ``info``): its plan's, or
        what its sources' last stats told of their rows (:func:`topology.times.running_clock`)."""
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
            raise LookupError(f"step {step!r} has not answered ({_problem(exc)}); "
                              f"try again") from None
        shown = []
        for rec in records[-RECORDS_SHOWN:]:
            reason = str(getattr(rec, "reason", ""))
            item = getattr(rec, "item", rec)
            original = _original_time(rec, reason)
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
        """The timeline picture (SVG, :func:`topology.timeline.timeline`) of one step of a
        query deployed with a trace, from what its actor has recorded so far (it writes its
        rows first); a ``LookupError`` saying how to get one when the query has no trace."""
        import ray

        actor, info = self._actor(query, step)
        try:
            path = ray.get(actor.stats.remote(), timeout=PAGE_WAIT_S).get("trace")
            if path:
                ray.get(actor.flush_trace.remote(), timeout=PAGE_WAIT_S)
        except Exception as exc:  # noqa: BLE001 - busy in one long batch, or gone
            raise LookupError(f"step {step!r} has not answered ({_problem(exc)}); "
                              f"try again") from None
        if not path:
            raise LookupError(_NO_TRACE.format(query=query, step=step))
        from .debug import Recording
        from .timeline import timeline

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


def _original_time(record: Any, reason: str) -> int | None:
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


def _records_page(data: dict[str, Any]) -> str:
    """The page of a step's late events or dead letters (every text escaped)."""
    e = html.escape
    what = "late events" if data["kind"] == "late" else "dead letters"
    shown = data["records"]
    head = (f"{data['count']} {what} at step {data['step']!r} of query {data['query']!r}"
            + (f" (the newest {len(shown)} shown)" if len(shown) < data["count"] else ""))
    rows = "".join(
        f'<tr data-role="record"><td>{i}</td><td>{e(r["where"])}</td><td>{e(r["action"])}'
        f'</td><td data-role="original">{e(r["original"])}</td>'
        f'<td data-role="reason">{e(r["reason"])}</td>'
        f'<td data-role="item">{e(r["item"])}</td></tr>'
        for i, r in enumerate(shown, data["count"] - len(shown) + 1))
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
            f"<title>cedar: {e(what)}</title><style>{_RECORDS_CSS}</style></head><body>"
            f'<p><a href="/">← all queries</a></p><h1>{e(head)}</h1>'
            + ("<p>none so far</p>" if not shown else
               "<table><tr><th>#</th><th>where</th><th>what</th><th>original time</th>"
               f"<th>reason</th><th>row or message</th></tr>{rows}</table>")
            + "</body></html>")


_RECORDS_CSS = ("body { font: 14px system-ui, sans-serif; margin: 1.5em; color: #222 } "
                "table { border-collapse: collapse } td, th { border: 1px solid #ccc; "
                "padding: 2px 8px; text-align: left; vertical-align: top } "
                "td[data-role=item] { font-family: monospace } "
                "td[data-role=original] { white-space: nowrap }")


def connect(address: str | None, timeout_s: float = CONNECT_S) -> None:
    """Connect this process to the Ray cluster at ``address`` (``"auto"``: the one running
    on this machine, or ``$RAY_ADDRESS``), or raise :class:`ConnectionError` with what to check
    within about ``timeout_s`` when nothing answers there (Ray itself would retry for minutes
    without a word)."""
    import ray

    if ray.is_initialized():
        return
    if address is None:  # ensure_ray starts a local instance (unless $RAY_ADDRESS)
        address = os.environ.get("RAY_ADDRESS") or None
    target = address
    if address and not address.startswith("ray://"):
        try:
            from ray._private.services import canonicalize_bootstrap_address
        except ImportError:  # another Ray: check the address as given
            pass
        else:
            try:
                target = canonicalize_bootstrap_address(address)
            except ConnectionError:
                raise ConnectionError(
                    f"no Ray cluster is running on this machine (address {address!r}): start "
                    f"one (`ray start --head`), or give the head node's address with "
                    f"--address HOST:6379 (or $RAY_ADDRESS)") from None
            except ValueError:
                target = address  # the check below says what is wrong with it
    if target and target not in ("auto", "local"):
        hostport = target.removeprefix("ray://")
        host, _, port = hostport.rpartition(":")
        if not host or not port.isdigit():
            raise ConnectionError(
                f"{address!r} is not a Ray cluster's address: give its head node's HOST:PORT "
                f"(port 6379 unless `ray start --port` chose another), ray://HOST:10001 for "
                f"Ray Client, or auto for the cluster running on this machine")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
        except OSError as exc:
            why = "no answer" if isinstance(exc, TimeoutError) else exc.strerror or str(exc)
            raise ConnectionError(
                f"cannot reach the Ray cluster at {address!r} ({hostport}: {why}, tried for "
                f"{timeout_s:g} s). Check that the cluster is running (`ray status` on its "
                f"head node), that the address is its head node's (HOST:6379 unless `ray "
                f"start --port` chose another port), and that this machine may reach that "
                f"port (firewall, security group; or run `cedar ui` on the head node)"
            ) from None
    try:
        ensure_ray(address)
    except Exception as exc:  # noqa: BLE001 - Ray's own words, after its retries
        raise ConnectionError(
            f"cannot connect to the Ray cluster at {address!r}: something answers at "
            f"{target} but Ray could not join it ({_problem(exc)}). Check that the address is "
            f"the head node's GCS address (HOST:6379 by default, as `ray status` on the head "
            f"node shows) and that this machine runs the cluster's Ray version") from None


def _host_name(header: str) -> tuple[str, int | None]:
    """The name and port of a ``Host`` header (``[::1]:8766`` -> ``("::1", 8766)``)."""
    header = header.strip().lower()
    if header.startswith("["):
        name, _, rest = header[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif header.count(":") == 1:
        name, _, port = header.partition(":")
    else:
        name, port = header, ""
    try:
        return name.rstrip("."), int(port) if port else None
    except ValueError:
        return name, -1


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>cedar</title>
<style>
 body { font: 14px system-ui, sans-serif; margin: 1.5em; color: #222 }
 h2 { margin: 1.2em 0 .3em } table { border-collapse: collapse; margin: .5em 0 }
 td, th { border: 1px solid #ccc; padding: 2px 8px; text-align: right }
 td.step, th.step { text-align: left } .rows td { text-align: left; font-family: monospace }
 svg text { font: 12px monospace } .muted { color: #888 }
 tr.stuck td { background: #fec } tr.failed td { background: #fdd }
 tr.held td { background: #fd9 } p.held { color: #a40 }
</style></head>
<body><h1>cedar: running queries</h1>
<p class="muted">read-only; refreshed every second — <span id="updated"></span></p>
<div id="queries"></div>
<script nonce="NONCE">
"use strict";
const FIELDS = ["status", "events_in", "events_out", "in_per_s", "out_per_s", "rates", "cti",
                "cti_lag", "inputs_apart", "state_size", "in_flight", "late", "dead_letters",
                "node", "recoveries", "timeline"];
const HOT = "#d22", WARM = "#e90", COOL = "#888", HELD = "#fd9";
function el(tag, text, attrs) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  return e;
}
function svgEl(tag, attrs) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  return e;
}
function stepUrl(path, query, step, extra) {
  return path + "?" + new URLSearchParams({query: query, step: step, ...(extra || {})});
}
function perSecond(v) {
  // a rate for a scale label: 0, 7.5, 120, 4.3k, 1.2M
  return v >= 1e6 ? (v / 1e6).toPrecision(2) + "M" : v >= 1e3 ? (v / 1e3).toPrecision(2) + "k"
    : String(Math.round(v * 10) / 10);
}
function sparkline(rates, span) {
  // events in (blue) and out (green) per second over the last `span` seconds, newest right;
  // its scale on the right: the top of the plot and its bottom, in events per second
  const W = 120, H = 26, L = 58;
  const svg = svgEl("svg", {width: W + L, height: H, "data-role": "sparkline",
                            "data-points": rates.length});
  svg.appendChild(svgEl("rect", {width: W, height: H, fill: "#f7f7f7"}));
  const top = Math.max(1, ...rates.map(r => Math.max(r[1], r[2])));
  for (const [y, text, role] of [[9, perSecond(top) + " ev/s", "spark-max"],
                                 [H - 2, "0 ev/s", "spark-min"]]) {
    const label = svgEl("text", {x: W + 3, y: y, "data-role": role, fill: "#555",
                                 style: "font-size: 9px"});
    label.textContent = text;
    svg.appendChild(label);
  }
  for (const [i, color, role] of [[1, "#36c", "in"], [2, "#393", "out"]]) {
    const pts = rates.map(r => ((1 - r[0] / span) * (W - 2) + 1).toFixed(1) + ","
                               + (H - 2 - r[i] / top * (H - 4)).toFixed(1));
    svg.appendChild(svgEl("polyline", {points: pts.join(" "), fill: "none", stroke: color,
                                       "stroke-width": 1.2, "data-rate": role}));
  }
  const most = i => Math.max(0, ...rates.map(r => r[i]));
  const t = svgEl("title");
  t.textContent = "events/s over the last "
    + (span < 120 ? Math.round(span) + " s" : Math.round(span / 60) + " min") + ": in (blue) up to "
    + most(1) + ", out (green) up to " + most(2);
  svg.appendChild(t);
  return svg;
}
function pressure(load) {
  // an edge's batches in flight against the limit: none, some, or the limit (the sender waits)
  const [n, limit] = load || [0, null];
  if (!n || !limit) return ["none", COOL, 1.2];
  return n >= limit ? ["full", HOT, 3.5] : ["some", WARM, 2.2];
}
function graph(steps, edges, load) {
  const depth = {}, names = Object.keys(steps);
  const inputs = {};
  for (const [s, ds] of Object.entries(edges)) for (const d of ds) (inputs[d] ||= []).push(s);
  const d = (s, seen) => {
    if (s in depth) return depth[s];
    if (seen.has(s)) return 0;
    seen.add(s);
    return depth[s] = Math.max(-1, ...(inputs[s] || []).map(u => d(u, seen))) + 1;
  };
  names.forEach(s => d(s, new Set()));
  const cols = {}, pos = {};
  for (const s of names) { const c = depth[s]; (cols[c] ||= []).push(s); }
  for (const [c, ss] of Object.entries(cols))
    ss.forEach((s, i) => pos[s] = [c * 190 + 10, i * 40 + 10]);
  const height = Math.max(...Object.values(cols).map(ss => ss.length)) * 40 + 10;
  const svg = svgEl("svg", {width: Object.keys(cols).length * 190 + 10, height: height,
                            "data-role": "graph"});
  for (const [s, ds] of Object.entries(edges)) for (const t of ds) if (pos[s] && pos[t]) {
    const [n, limit] = load[s + ">" + t] || [0, null];
    const [level, color, width] = pressure([n, limit]);
    const line = svgEl("line", {x1: pos[s][0] + 160, y1: pos[s][1] + 14, x2: pos[t][0],
                                y2: pos[t][1] + 14, stroke: color, "stroke-width": width,
                                "data-edge": s + ">" + t, "data-pressure": level,
                                "data-in-flight": n, "data-limit": limit === null ? "" : limit});
    const tip = svgEl("title");
    tip.textContent = s + " → " + t + ": " + n + " of " + (limit === null ? "?" : limit)
      + " batches in flight" + (level === "full" ? " (full: " + s + " waits for " + t + ")" : "");
    line.appendChild(tip);
    svg.appendChild(line);
  }
  for (const s of names) {
    const g = svgEl("g", {"data-step": s});
    const fill = steps[s].error ? "#fdd" : !steps[s].answering ? "#fec"
      : steps[s].held ? HELD : "#eef";
    if (steps[s].held) g.setAttribute("data-held", "1");
    g.appendChild(svgEl("rect", {x: pos[s][0], y: pos[s][1], width: 160, height: 28, rx: 4,
                                 fill: fill, stroke: steps[s].held ? HOT : "#99a"}));
    if (steps[s].held) { const tip = svgEl("title"); tip.textContent = steps[s].held;
                         g.appendChild(tip); }
    const t = svgEl("text", {x: pos[s][0] + 6, y: pos[s][1] + 18});
    t.textContent = s.length > 22 ? s.slice(0, 21) + "…" : s;
    g.appendChild(t);
    svg.appendChild(g);
  }
  return svg;
}
function render(data) {
  const root = document.getElementById("queries");
  root.replaceChildren();
  const names = Object.keys(data.queries).sort();
  if (!names.length) root.appendChild(el("p", "no query is running", {class: "muted"}));
  for (const name of names) {
    const q = data.queries[name];
    const box = el("section", null, {"data-query": name});
    box.appendChild(el("h2", name));
    if (q.error) { box.appendChild(el("p", q.error)); root.appendChild(box); continue; }
    box.appendChild(graph(q.steps, q.edges, q.in_flight || {}));
    box.appendChild(el("p", "edges: batches in flight against the limit — grey none, amber "
                       + "some, red the limit (the upstream step waits: backpressure)",
                       {class: "muted", "data-role": "legend"}));
    // the sparklines' time span: the history kept, from one minute up to history_s
    const ages = Object.values(q.steps).flatMap(s => (s.rates || []).map(r => r[0]));
    const span = Math.min(data.history_s, Math.max(60, ...ages));
    const table = el("table", null, {class: "steps"});
    const head = el("tr");
    head.appendChild(el("th", "step", {class: "step"}));
    for (const f of FIELDS) head.appendChild(el("th", f.replaceAll("_", " ")));
    table.appendChild(head);
    for (const [step, s] of Object.entries(q.steps)) {
      const tr = el("tr", null, {
        "data-step": step, class: s.error ? "failed" : !s.answering || s.busy ? "stuck"
          : s.held ? "held" : ""});
      if (s.held) { tr.setAttribute("data-held", "1"); tr.setAttribute("title", s.held); }
      tr.appendChild(el("td", step, {class: "step", title: s.operator}));
      for (const f of FIELDS) {
        const td = el("td", null, {"data-field": f});
        const v = s[f] === null || s[f] === undefined ? ""
          : f === "node" ? String(s[f]).slice(0, 8)
          : s.shown && f in s.shown ? s.shown[f] : s[f];
        if (f === "rates") td.appendChild(sparkline(s.rates || [], span));
        else if (f === "timeline") td.appendChild(s.traced
          ? el("a", "picture", {href: stepUrl("/timeline", name, step)})
          : el("span", "no trace", {class: "muted",
                                    title: "deploy the query with trace=DIR to draw it"}));
        else if ((f === "late" || f === "dead_letters") && s[f] > 0)
          td.appendChild(el("a", v, {href: stepUrl("/records", name, step, {kind: f})}));
        else td.textContent = String(v);
        tr.appendChild(td);
      }
      table.appendChild(tr);
    }
    box.appendChild(table);
    for (const [step, s] of Object.entries(q.steps)) if (s.held)
      box.appendChild(el("p", step + " " + s.held, {class: "held", "data-role": "held",
                                                    "data-step": step}));
    if (!Object.values(q.steps).some(s => s.traced))
      box.appendChild(el("p", "No timeline pictures: this query was deployed without a trace. "
        + "Deploy it with one (q.deploy(" + JSON.stringify(name) + ", trace='DIR')) to link "
        + "each step to its picture, or draw one from a run: collect(trace='DIR') then "
        + "`cedar timeline DIR --step STEP -o picture.svg`.", {class: "muted",
                                                              "data-role": "no-trace"}));
    const rows = el("table", null, {class: "rows"});
    for (const [start, end, payload, span] of q.rows) {
      const tr = el("tr");
      tr.appendChild(el("td", span || "[" + start + ", " + end + ")", {"data-role": "span"}));
      tr.appendChild(el("td", payload, {"data-role": "payload"}));
      rows.appendChild(tr);
    }
    box.appendChild(el("h3", "newest output rows"));
    if (q.rows_note) box.appendChild(el("p", q.rows_note, {class: "muted"}));
    box.appendChild(rows);
    root.appendChild(box);
  }
  document.getElementById("updated").textContent = new Date(data.time * 1000).toISOString();
}
async function refresh() {
  try { render(await (await fetch("/api/queries")).json()); }
  catch (e) { document.getElementById("updated").textContent = "cannot reach the server: " + e; }
}
refresh();
setInterval(refresh, 1000);
</script></body></html>
"""



# -- the why panel: click a step (its row or its box) to see why its output is not final ----------
#: The panel's script, added to the page before ``</body>``: it asks ``/api/why`` about the
#: step clicked, every 2 s while one is selected (never again while an answer is awaited),
#: and shows the answer with ``textContent``: busy steps say so (``why`` answers from what a
#: step busy in one long batch last reported).
WHY_PANEL = """<section id="why" data-role="why" hidden>
<h2 data-role="why-title"></h2><p data-role="why-status"></p><p data-role="why-culprit"></p>
<table data-role="why-hops"></table><p data-role="why-busy"></p><p data-role="why-advice"></p>
<ul data-role="why-late"></ul></section>
<script nonce="NONCE">
"use strict";
let whySel = null;
function whyShow(d) {
  const panel = document.getElementById("why"), part = r => panel.querySelector(
    '[data-role="' + r + '"]');
  panel.hidden = false;
  part("why-title").textContent = "why: " + whySel.query + " / " + whySel.step;
  if (d.error) { part("why-status").textContent = d.error; return; }
  part("why-status").textContent = d.what + ": " + d.status + " (output CTI " + d.cti_shown + ")";
  part("why-culprit").textContent = d.culprit ? "held back by " + d.culprit + ": " + d.reason : "";
  const hops = part("why-hops");
  hops.replaceChildren();
  for (const h of d.hops) {
    const tr = document.createElement("tr");
    tr.setAttribute("data-step", h.step);
    const ins = h.inputs.map(i => i.port + " ← " + i.from + " " + i.shown).join(", ");
    for (const v of [h.step, "CTI " + h.cti_shown, ins ? "inputs: " + ins : "source",
                     h.min_from ? "min from " + h.min_from + (h.min_advanced_shown
                       ? " (advanced " + h.min_advanced_shown + " ago)" : "") : "",
                     h.holds || ""]) {
      const td = document.createElement("td"); td.textContent = v; tr.appendChild(td);
    }
    hops.appendChild(tr);
  }
  part("why-busy").textContent = (d.busy || []).map(b => "busy: " + b.step
    + " has been inside one batch" + (b.shown ? " for " + b.shown : "")
    + ": its figures are from its last report").join("; ");
  part("why-advice").textContent = d.advice_text || "";
  const late = part("why-late");
  late.replaceChildren();
  for (const r of d.late) {
    const li = document.createElement("li"); li.textContent = r.where + ": " + r.text;
    late.appendChild(li);
  }
}
let whyWaiting = null;  // the step whose answer is awaited: asked again only once it came
async function whyAsk() {
  if (!whySel) return;
  const key = whySel.query + "\\n" + whySel.step;
  if (whyWaiting === key) return;
  whyWaiting = key;
  const url = "/api/why?query=" + encodeURIComponent(whySel.query) + "&step="
    + encodeURIComponent(whySel.step);
  try { whyShow(await (await fetch(url)).json()); }
  catch (e) { whyShow({error: "cannot reach the server: " + e}); }
  finally { if (whyWaiting === key) whyWaiting = null; }
}
document.addEventListener("click", ev => {
  const at = ev.target.closest("section[data-query] [data-step]");
  if (!at) return;
  whySel = {query: at.closest("section[data-query]").dataset.query, step: at.dataset.step};
  whyAsk();
});
setInterval(whyAsk, 2000);
</script>
"""
#: How long the why panel waits for a query's actors.
WHY_WAIT_S = 5.0


def why_json(path: str, tz: Any = None) -> tuple[int, dict[str, Any]]:
    """``/api/why?query=&step=[&at=]``: the HTTP status and the JSON of
    :meth:`topology.query.Query.why` for ``step`` of the running ``query`` (its output CTI,
    or ``at``); a query or step that is not there, or a bad time, is a 404 or 400 with an
    ``error`` sentence."""
    import urllib.parse

    from .query import attach

    ask = urllib.parse.parse_qs(urllib.parse.urlsplit(path).query)
    query, step, at = (ask.get(k, [""])[0] for k in ("query", "step", "at"))

    if not query:
        return 400, {"error": "ask /api/why?query=NAME&step=STEP"}
    try:
        q = attach(query, wait_s=WHY_WAIT_S)
    except Exception as exc:  # noqa: BLE001 - gone, or not reachable: said in the panel
        return 404, {"error": f"query {query!r}: {_problem(exc)}"}
    try:
        return 200, q.why(at or None, step=step or None, tz=tz).to_dict()
    except (ValueError, TypeError) as exc:
        return 400, {"error": str(exc)}
    except Exception as exc:  # noqa: BLE001 - a step not answering: the panel says so
        return 503, {"error": f"query {query!r}: {_problem(exc)}"}

class _Handler(BaseHTTPRequestHandler):
    monitor: Monitor
    #: the address and port the server is bound to
    bound: tuple[str, int] = ("127.0.0.1", PORT)
    #: the names of that address (as given to ``serve`` and as bound)
    bound_names: frozenset[str] = frozenset()
    #: more host names to answer to (``--allow-host``)
    allowed: frozenset[str] = frozenset()

    def do_GET(self) -> None:
        if not self._host_ok():
            self._send(403, "text/plain; charset=utf-8", self._refusal().encode())
        elif self.path == "/":
            nonce = secrets.token_urlsafe(16)
            page = PAGE.replace("</body>", WHY_PANEL + "</body>")
            self._send(200, "text/html; charset=utf-8", page.replace("NONCE", nonce).encode(),
                       nonce)
        elif self.path.startswith("/api/why"):
            code, answer = why_json(self.path, tz=self.monitor.tz)
            self._send(code, "application/json", json.dumps(answer, default=repr).encode())
        elif self.path == "/api/queries":
            body = json.dumps(self.monitor.sample(), default=repr).encode()
            self._send(200, "application/json", body)
        elif self.path.startswith(("/records?", "/timeline?")):
            self._step_page()
        else:
            self._send(404, "text/plain", b"not found")

    def _step_page(self) -> None:
        """``/records?query=Q&step=S&kind=late|dead_letters``: a page listing a step's late
        events or dead letters; ``/timeline?query=Q&step=S``: the step's timeline picture."""
        parts = urllib.parse.urlsplit(self.path)
        args = {k: v[0] for k, v in urllib.parse.parse_qs(parts.query).items()}
        query, step = args.get("query", ""), args.get("step", "")
        try:
            if parts.path == "/timeline":
                self._send(200, "image/svg+xml", self.monitor.timeline(query, step))
            else:
                data = self.monitor.records(query, step, args.get("kind", "late"))
                self._send(200, "text/html; charset=utf-8", _records_page(data).encode())
        except LookupError as exc:
            self._send(404, "text/plain; charset=utf-8", f"{exc.args[0]}\n".encode())

    def _host_ok(self) -> bool:
        """Whether the request names this server in its ``Host`` header: a loopback name (at
        any port: an SSH tunnel may forward another), a name given with ``--allow-host``, or
        the bound address at its port. A page of another site that a DNS rebinding points at
        this port names its own site, and is refused: it cannot read the queries' rows."""
        header = self.headers.get("Host")
        if not header:
            return False
        name, port = _host_name(header)
        if name in LOCAL_NAMES or name in self.allowed:
            return True
        address, bound_port = self.bound
        if port != bound_port and not (port is None and bound_port == 80):
            return False
        if name in self.bound_names:
            return True
        try:  # bound to every interface: any address of this machine, never a name
            ipaddress.ip_address(name)
        except ValueError:
            return False
        return address in ("0.0.0.0", "::", "")

    def _refusal(self) -> str:
        address, port = self.bound
        return (f"cedar ui refuses this request: its Host header names "
                f"{self.headers.get('Host')!r}, and this server answers only to 127.0.0.1, "
                f"localhost, [::1] and {address}:{port} (so that no other web site can read "
                f"the queries through your browser). Open http://127.0.0.1:{port}/ (through "
                f"an SSH tunnel on a cluster), or start `cedar ui --allow-host NAME` to reach "
                f"it by another name.\n")

    def _send(self, code: int, kind: str, body: bytes, nonce: str = "") -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")  # plain text is never HTML
        script = f"'nonce-{nonce}'" if nonce else "'none'"  # pages but "/" run no script
        self.send_header("Content-Security-Policy",
                         f"default-src 'none'; script-src {script}; "
                         "style-src 'unsafe-inline'; connect-src 'self'; img-src 'none'")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    """The page's server; ``shutdown()`` stops its sampler too."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.stopping = threading.Event()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A browser closed (a tab shut, a page left) while its answer was being written is
        no error of the server's: nothing to print. Anything else is printed as before."""
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)

    def shutdown(self) -> None:
        self.stopping.set()
        super().shutdown()


def serve(host: str = "127.0.0.1", port: int = PORT, allow_hosts: Iterable[str] = (),
          monitor: Monitor | None = None, tz: str | None = None,
          sample_s: float | None = SAMPLE_S) -> ThreadingHTTPServer:
    """Start the page's server in a background thread (this process must be connected to
    Ray); ``server.shutdown()`` stops it. ``port=0`` picks a free port
    (``server.server_address``). It answers only requests whose ``Host`` names it (a
    loopback name, ``host``, or one of ``allow_hosts``), and 403 to the others. Another
    thread samples the queries every ``sample_s`` seconds (None: only when the page asks),
    so that each step's sparkline holds its last :data:`HISTORY_S` seconds when a page
    opens."""
    handler: type[_Handler] = type("Handler", (_Handler,), {
        "monitor": monitor or Monitor(tz=tz),
        "allowed": frozenset(_host_name(h)[0] for h in allow_hosts),
    })
    server = _Server((host, port), handler)
    handler.bound = (str(server.server_address[0]), int(server.server_address[1]))
    handler.bound_names = frozenset({handler.bound[0].lower(), _host_name(host)[0]})
    threading.Thread(target=server.serve_forever, name="cedar-ui", daemon=True).start()
    if sample_s is not None:
        def sampler() -> None:
            import ray

            while not server.stopping.wait(sample_s):
                if not ray.is_initialized():  # never start a Ray of its own
                    continue
                try:
                    handler.monitor.sample(0)
                except Exception:  # noqa: BLE001 - the page's next refresh says why
                    continue
        threading.Thread(target=sampler, name="cedar-ui-sampler", daemon=True).start()
    return server
