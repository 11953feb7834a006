"""``cedar ui``: a live, read-only web page of the queries running on a Ray cluster.

One page shows every deployed query: its topology as a graph, and per step the events in and
out per second, the output CTI and its lag behind the step's input CTI, the state size, the
batches in flight (backpressure), late events and dead letters, the node the actor runs on and
the recoveries so far; and the query's newest output rows. It refreshes every second.

The server is the standard library's (nothing to install): :class:`Monitor` polls each query's
actors (``Query.stats()``, the sink's manifest and snapshot) at most once per refresh, and the
page reads it as JSON from ``/api/queries``. The page builds its DOM with ``textContent`` only,
so a step name or payload holding HTML shows as text and never runs (and the page's content
security policy runs no script but its own). It binds to 127.0.0.1
unless told otherwise: on a cluster, run it on the head node and open an SSH tunnel
(``ssh -L 8766:127.0.0.1:8766 head-node``), as for Ray's dashboard.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .names import NAMESPACE, actor_name, list_queries

#: Output rows shown per query.
ROWS_SHOWN = 10
#: Default port of ``cedar ui``.
PORT = 8766


class Monitor:
    """Samples the running queries: per step its stats, and the rates since the last sample."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[tuple[str, str], tuple[float, int, int]] = {}
        self._cache: tuple[float, dict[str, Any]] | None = None

    def sample(self, max_age_s: float = 0.5) -> dict[str, Any]:
        with self._lock:
            if self._cache is not None and time.monotonic() - self._cache[0] < max_age_s:
                return self._cache[1]
            data = {"time": time.time(), "queries": {}}
            for name in list_queries():
                try:
                    data["queries"][name] = self._query(name)
                except Exception as exc:  # noqa: BLE001 - a query stopping while we look
                    data["queries"][name] = {"error": f"{type(exc).__name__}: {exc}"}
            self._cache = (time.monotonic(), data)
            return data

    def _query(self, name: str) -> dict[str, Any]:
        import ray

        sink = ray.get_actor(actor_name(name, "sink"), namespace=NAMESPACE)
        info = ray.get(sink.manifest.remote())
        handles = {step: ray.get_actor(actor, namespace=NAMESPACE)
                   for step, actor in info["actors"].items()}
        stats = dict(zip(handles, ray.get([h.stats.remote() for h in handles.values()])))
        edges: dict[str, list[str]] = info.get("edges", {})
        inputs: dict[str, list[str]] = {}
        for src, dsts in edges.items():
            for dst in dsts:
                inputs.setdefault(dst, []).append(src)
        now = time.monotonic()
        steps = {}
        for step, s in stats.items():
            before = self._last.get((name, step))
            self._last[(name, step)] = (now, s.get("events_in", 0), s.get("events_out", 0))
            rate_in = rate_out = 0.0
            if before is not None and now > before[0]:
                dt = now - before[0]
                rate_in = (s.get("events_in", 0) - before[1]) / dt
                rate_out = (s.get("events_out", 0) - before[2]) / dt
            ups = [stats[u]["cti"] for u in inputs.get(step, []) if u in stats]
            in_cti = min(ups) if ups else None
            steps[step] = {
                "operator": s.get("operator", ""), "node": s.get("node", ""),
                "events_in": s.get("events_in", 0), "events_out": s.get("events_out", 0),
                "in_per_s": round(rate_in, 1), "out_per_s": round(rate_out, 1),
                "cti": s.get("cti"), "in_cti": in_cti,
                "cti_lag": None if in_cti is None else max(0, in_cti - s.get("cti", 0)),
                "state_size": s.get("state_size", 0), "in_flight": s.get("in_flight", 0),
                "late": s.get("late", 0), "dead_letters": s.get("dead_letters", 0),
                "recoveries": s.get("recoveries", 0), "finished": s.get("finished", False),
                "error": s.get("error"),
            }
        rows = ray.get(sink.rows.remote())[-ROWS_SHOWN:]
        return {"steps": steps, "edges": edges,
                "rows": [[start, end, repr(payload)] for start, end, payload in rows]}


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>cedar</title>
<style>
 body { font: 14px system-ui, sans-serif; margin: 1.5em; color: #222 }
 h2 { margin: 1.2em 0 .3em } table { border-collapse: collapse; margin: .5em 0 }
 td, th { border: 1px solid #ccc; padding: 2px 8px; text-align: right }
 td.step, th.step { text-align: left } .rows td { text-align: left; font-family: monospace }
 svg text { font: 12px monospace } .muted { color: #888 }
</style></head>
<body><h1>cedar: running queries</h1>
<p class="muted">read-only; refreshed every second — <span id="updated"></span></p>
<div id="queries"></div>
<script nonce="NONCE">
"use strict";
const FIELDS = ["events_in", "events_out", "in_per_s", "out_per_s", "cti", "cti_lag",
                "state_size", "in_flight", "late", "dead_letters", "node", "recoveries"];
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
function graph(steps, edges) {
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
    svg.appendChild(svgEl("line", {x1: pos[s][0] + 160, y1: pos[s][1] + 14, x2: pos[t][0],
                                   y2: pos[t][1] + 14, stroke: "#888", "data-edge": s + ">" + t}));
  }
  for (const s of names) {
    const g = svgEl("g", {"data-step": s});
    g.appendChild(svgEl("rect", {x: pos[s][0], y: pos[s][1], width: 160, height: 28, rx: 4,
                                 fill: steps[s].error ? "#fdd" : "#eef", stroke: "#99a"}));
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
    box.appendChild(graph(q.steps, q.edges));
    const table = el("table", null, {class: "steps"});
    const head = el("tr");
    head.appendChild(el("th", "step", {class: "step"}));
    for (const f of FIELDS) head.appendChild(el("th", f.replaceAll("_", " ")));
    table.appendChild(head);
    for (const [step, s] of Object.entries(q.steps)) {
      const tr = el("tr", null, {"data-step": step});
      tr.appendChild(el("td", step, {class: "step", title: s.operator}));
      for (const f of FIELDS) {
        const v = s[f] === null || s[f] === undefined ? ""
          : f === "node" ? String(s[f]).slice(0, 8) : s[f];
        tr.appendChild(el("td", v, {"data-field": f}));
      }
      table.appendChild(tr);
    }
    box.appendChild(table);
    const rows = el("table", null, {class: "rows"});
    for (const [start, end, payload] of q.rows) {
      const tr = el("tr");
      tr.appendChild(el("td", "[" + start + ", " + end + ")"));
      tr.appendChild(el("td", payload, {"data-role": "payload"}));
      rows.appendChild(tr);
    }
    box.appendChild(el("h3", "newest output rows"));
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


class _Handler(BaseHTTPRequestHandler):
    monitor: Monitor

    def do_GET(self) -> None:
        if self.path == "/":
            nonce = secrets.token_urlsafe(16)
            self._send(200, "text/html; charset=utf-8", PAGE.replace("NONCE", nonce).encode(),
                       nonce)
        elif self.path == "/api/queries":
            body = json.dumps(self.monitor.sample(), default=repr).encode()
            self._send(200, "application/json", body)
        else:
            self._send(404, "text/plain", b"not found")

    def _send(self, code: int, kind: str, body: bytes, nonce: str = "none") -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Security-Policy",
                         f"default-src 'none'; script-src 'nonce-{nonce}'; "
                         "style-src 'unsafe-inline'; connect-src 'self'; img-src 'none'")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def serve(host: str = "127.0.0.1", port: int = PORT) -> ThreadingHTTPServer:
    """Start the page's server in a background thread (this process must be connected to
    Ray); ``server.shutdown()`` stops it. ``port=0`` picks a free port
    (``server.server_address``)."""
    handler = type("Handler", (_Handler,), {"monitor": Monitor()})
    server = ThreadingHTTPServer((host, port), handler)
    threading.Thread(target=server.serve_forever, name="cedar-ui", daemon=True).start()
    return server
