"""``cedar ui``: a live, read-only web page of the queries running on a Ray cluster.

One page shows every deployed query: its topology as a graph, and per step its status, the
events in and out per second, the output CTI and its lag behind its input furthest ahead (and,
for a step with several inputs, how far apart they are: a step whose inputs diverge while its
state grows and its CTI stands still is flagged as held, the most common stall), the state
size, the batches sent and not yet taken (backpressure), late events and dead letters, the node
the actor runs on and the recoveries so far; and the query's newest output rows. It refreshes
every second. Times read as people read them: where the query's sources carried timestamps
(its manifest's ``clock``, :mod:`topology.building.times`) CTIs and rows show ISO-8601 times (UTC,
or ``cedar ui --tz``) and the CTI lag a duration (``2.4 s``); plain integer time stays integers.
Each step also shows a sparkline of its last minutes of rates (a sampler thread keeps a bounded
ring per step), its out-edges coloured by the batches in flight against the limit
(backpressure: red at the limit), its late-event and dead-letter counts linked to a page of
those rows (``/records``), and, when the query was deployed with a trace, a link to its
timeline picture (``/timeline``, :mod:`topology.seeing.timeline`).

The server is the standard library's (nothing to install), in three parts: this module serves
the page and its routes; :class:`~topology.seeing.ui_data.Monitor` (:mod:`topology.seeing.ui_data`)
gathers what the page shows from the queries' actors, at most once per refresh, and the page reads
it as JSON from ``/api/queries``; the page itself (its HTML, style and script) is the package's
``ui_page.html``, read once with :mod:`importlib.resources` (from the checkout or an
installed wheel alike).

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

import html
import ipaddress
import json
import os
import re
import secrets
import socket
import sys
import threading
import urllib.parse
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any

from topology.running.registry import ensure_ray
from topology.seeing.ui_data import (
    ANSWER_S,
    HELD_S,
    HISTORY_POINTS,
    HISTORY_S,
    PAYLOAD_CHARS,
    ROWS_SHOWN,
    SAMPLE_S,
    Monitor,
    problem,
)

__all__ = ["ANSWER_S", "CONNECT_S", "HELD_S", "HISTORY_POINTS", "HISTORY_S", "LOCAL_NAMES",
           "PAGE", "PAYLOAD_CHARS", "PORT", "ROWS_SHOWN", "SAMPLE_S", "WHY_PANEL", "WHY_WAIT_S",
           "Monitor", "connect", "records_page", "serve", "why_json"]

#: How long ``cedar ui`` tries to reach the cluster's address before it gives up.
CONNECT_S = 5.0
#: Default port of ``cedar ui``.
PORT = 8766
#: The host names a browser on this machine uses for a loopback server.
LOCAL_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def records_page(data: dict[str, Any]) -> str:
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
            f"{target} but Ray could not join it ({problem(exc)}). Check that the address is "
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


#: The page, its style and its script (``ui_page.html``, package data): served at ``/`` with
#: each ``NONCE`` replaced by a fresh one (its content security policy runs only the scripts
#: that carry it). It builds its DOM with ``textContent`` only.
PAGE = resources.files(__name__.rpartition(".")[0]).joinpath("ui_page.html").read_text(
    encoding="utf-8")
def _why_panel(page: str) -> str:
    """The why panel of ``page``: its ``<section id="why">`` and script, up to the comment
    that ends it in ``ui_page.html``."""
    found = re.search(r'<section id="why".*?</script>\n(?=<!-- end of the why panel -->)',
                      page, re.S)
    if found is None:
        raise RuntimeError("ui_page.html has lost its why panel: put back the <section "
                           "id=\"why\"> and its script, then <!-- end of the why panel -->")
    return found.group(0)


#: The page's why panel: click a step (its row or its box) to see why its output is not
#: final. Its script asks ``/api/why`` about the step clicked, every 2 s while one is selected
#: (never again while an answer is awaited), and shows the answer with ``textContent``: busy
#: steps say so (``why`` answers from what a step busy in one long batch last reported).
WHY_PANEL = _why_panel(PAGE)
#: How long the why panel waits for a query's actors.
WHY_WAIT_S = 5.0


def why_json(path: str, tz: Any = None) -> tuple[int, dict[str, Any]]:
    """``/api/why?query=&step=[&at=][&key=]``: the HTTP status and the JSON of
    :meth:`topology.running.query.Query.why` for ``step`` of the running ``query`` (its output CTI,
    or ``at``); a query or step that is not there, or a bad time, is a 404 or 400 with an
    ``error`` sentence."""
    import urllib.parse

    from topology.running.query import attach

    ask = urllib.parse.parse_qs(urllib.parse.urlsplit(path).query)
    query, step, at, key = (ask.get(k, [""])[0] for k in ("query", "step", "at", "key"))

    if not query:
        return 400, {"error": "ask /api/why?query=NAME&step=STEP"}
    try:
        q = attach(query, wait_s=WHY_WAIT_S)
    except Exception as exc:  # noqa: BLE001 - gone, or not reachable: said in the panel
        return 404, {"error": f"query {query!r}: {problem(exc)}"}
    try:
        asked = None if not key else int(key) if key.lstrip("-").isdigit() else key
        return 200, q.why(at or None, step=step or None, tz=tz, key=asked).to_dict()
    except (ValueError, TypeError) as exc:
        return 400, {"error": str(exc)}
    except Exception as exc:  # noqa: BLE001 - a step not answering: the panel says so
        return 503, {"error": f"query {query!r}: {problem(exc)}"}

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
            self._send(200, "text/html; charset=utf-8", PAGE.replace("NONCE", nonce).encode(),
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
                self._send(200, "text/html; charset=utf-8", records_page(data).encode())
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
