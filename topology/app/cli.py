"""The ``cedar`` command line.

    cedar demo [--keep]                the main job: smart meters on local Ray and Spark
                                       (--keep: then leave its queries running, live)
    cedar run SCRIPT.py [--address A]  run a topology script on a Ray cluster (or locally)
    cedar status [--address A]         list the queries running on a cluster
    cedar inspect NAME [--address A]   stats and a snapshot of one running query
    cedar stop NAME [--address A]      stop a running query and free its name
                                       (--savepoint PATH: cut it and save its state first)
    cedar upgrade NEW.py --savepoint P which steps of a new query keep their state from P
                                       (--check: and prove its output equal on the data)
    cedar why NAME [--address A]       why an output is not final (or not there)
    cedar ui [--address A]             a live web page of the running queries
    cedar debug TRACE [--step S] ...   step through a recorded trace; --cause ID: root cause
    cedar timeline TRACE --step S -o F a picture of one step's input and output (svg, png)
    cedar check SCRIPT.py [--no-ray]   run a query every way the engine may; same CHT each time?
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import runpy
import socket
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from typing import Any, cast

from topology.app import upgrade

#: How long the command line waits for a cluster to answer its first question (seconds):
#: past it the address is left to Ray, whose own checks then say what is wrong.
PROBE_S = 5.0


def _time(value: str) -> int:
    """``--from``/``--to``: an ISO-8601 time or ticks (argparse shows the error)."""
    from topology.building.times import parse_time

    try:
        return parse_time(value)
    except (TypeError, ValueError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cedar",
        description="cedar: a temporal stream-processing engine (StreamInsight's algebra on "
                    "Ray and Spark).",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    demo = sub.add_parser(
        "demo", help="run the main job: smart-meter readings through five queries",
        description="Generate smart-meter readings (points, some late, some broken) and meter "
                    "states (edge events), read them through Spark, run five topologies on "
                    "a local Ray instance (tumbling averages, a spike-detecting UDO over "
                    "hopping windows, a join with meter metadata, count windows, snapshot "
                    "windows over edges), write the results through Spark to parquet and "
                    "print a summary.")
    demo.add_argument("--meters", type=int, default=40, help="number of meters (default 40)")
    demo.add_argument("--minutes", type=int, default=60,
                      help="minutes of readings, one every 10 s per meter (default 60)")
    demo.add_argument("--out", default="cedar-demo-output",
                      help="output directory for the parquet results (default "
                           "./cedar-demo-output)")
    demo.add_argument("--address", default=None,
                      help="Ray cluster address (default: start a local Ray instance)")
    demo.add_argument("--keep", action="store_true",
                      help="then leave the four reading queries running on a live feed of "
                           "readings (as demo-NAME), print their names and the cedar ui / "
                           "status / why commands that reach them, and wait until they are "
                           "stopped (cedar stop NAME) or Ctrl-C")
    demo.add_argument("--speed", type=float, default=None, metavar="X",
                      help="with --keep: the live feed runs X times faster than the meters "
                           "(default 60: a minute of readings a second)")

    run = sub.add_parser(
        "run", help="run a topology script",
        description="Run SCRIPT.py, a Python topology script that builds Streams and calls "
                    "collect() or deploy(). With --address the script runs against that Ray "
                    "cluster ('auto' finds the local cluster's head); without it, a local "
                    "Ray instance is started when the script needs one. --address is cedar's "
                    "wherever it stands (cedar run SCRIPT.py --address auto); the other "
                    "arguments after the script are passed to it as sys.argv.")
    run.add_argument("script", help="path of the topology script")
    run.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    run.add_argument("--address", default=None, help="Ray cluster address, e.g. auto")

    status = sub.add_parser(
        "status", help="list the queries running on a cluster",
        description="List the cedar queries deployed (with deploy(name)) on the Ray cluster: "
                    "their names and actors.")
    status.add_argument("--address", default="auto", help="Ray cluster address (default auto)")
    status.add_argument("--tz", default=None, metavar="ZONE", help=TZ_HELP)

    inspect = sub.add_parser(
        "inspect", help="stats and a snapshot of one running query",
        description="Attach to the running query NAME and print each step's stats (events "
                    "in/out, output CTI, state size, late and dead letters) and the current "
                    "output rows.")
    inspect.add_argument("name", help="the query's name, as given to deploy(name)")
    inspect.add_argument("--address", default="auto", help="Ray cluster address (default auto)")
    inspect.add_argument("--rows", type=int, default=20, help="snapshot rows to show")
    inspect.add_argument("--tz", default=None, metavar="ZONE", help=TZ_HELP)

    stop = sub.add_parser(
        "stop", help="stop a running query and free its name",
        description="Stop the query NAME in any state (running, recovering, finished or "
                    "failed): kill its host and every actor, wait until Ray confirms them "
                    "dead, and release its name, so that it can be deployed again.")
    stop.add_argument("name", help="the query's name, as given to deploy(name)")
    stop.add_argument("--address", default="auto", help="Ray cluster address (default auto)")
    stop.add_argument("--savepoint", default=None, metavar="PATH",
                      help="first cut the query at a consistent point and write its "
                           "savepoint to PATH (a directory or storage URI; a query deployed "
                           "with checkpoint_dir): every step's state and its sources' "
                           "positions, every output before the cut delivered. Start from it "
                           "with deploy(name, ..., restore=PATH)")

    ui = sub.add_parser(
        "ui", help="serve a live web page of the running queries",
        description="Serve a read-only page of the queries running on the Ray cluster: each "
                    "topology as a graph, per step events in/out per second, CTI and its lag, "
                    "state size, messages in flight, dead letters, node and recoveries, and "
                    "the newest output rows. It binds to 127.0.0.1: on a cluster, run it on "
                    "the head node and open an SSH tunnel (ssh -L 8766:127.0.0.1:8766 HEAD). "
                    "It answers only requests addressed to 127.0.0.1, localhost, [::1] or the "
                    "bound address (see --allow-host).")
    ui.add_argument("--address", default="auto", help="Ray cluster address (default auto)")
    ui.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    ui.add_argument("--port", type=int, default=8766, help="port (default 8766)")
    ui.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                    help="answer requests for this host name too (by default only 127.0.0.1, "
                         "localhost, [::1] and the bound address: other Host headers get 403, "
                         "so that no web site can read the page through a browser)")
    ui.add_argument("--tz", default=None, metavar="ZONE", help=TZ_HELP)

    debug = sub.add_parser(
        "debug", help="step through a recorded trace; find an output's root cause",
        description="Read the trace recorded by collect(trace=TRACE) or deploy(name, "
                    "trace=TRACE). Without filters: the steps and their message counts. With "
                    "filters: the matching messages, step by step in plan order. With "
                    "--cause ID: the input events that produced output event ID of --step "
                    "(default: the sink), down to the sources.")
    debug.add_argument("trace", help="the trace directory")
    debug.add_argument("--step", default=None, help="only this step (its id or a prefix)")
    debug.add_argument("--direction", choices=("in", "out"), default=None,
                       help="only its input or its output")
    debug.add_argument("--kind", choices=("insert", "retract", "cti", "dead_letter"),
                       default=None, help="only messages of this kind")
    debug.add_argument("--id", default=None, help="only the event with this id (its repr)")
    debug.add_argument("--key", default=None, help="only events of this group/join key")
    debug.add_argument("--from", dest="start", type=_time, default=None,
                       help="only events overlapping [FROM, TO): ISO-8601 times "
                            "(2026-01-01T00:05:00Z; naive means UTC) or ticks")
    debug.add_argument("--to", dest="end", type=_time, default=None, help="see --from")
    debug.add_argument("--cause", default=None, metavar="ID",
                       help="the root cause of output event ID of --step (default: sink)")
    debug.add_argument("--limit", type=int, default=50, help="messages to show (default 50)")

    tl = sub.add_parser(
        "timeline", help="a picture of one step's input and output on the time axis",
        description="Draw the events that entered and left --step of TRACE as bars on the "
                    "time axis (points as ticks, open events to the edge, retracted parts "
                    "hatched and struck through, CTIs as dashed lines, windows as shaded bands "
                    "under brackets; one lane per key for a keyed step or --lanes, a density "
                    "past --limit events) into -o FILE (.svg, .png, .pdf). Needs matplotlib: "
                    "pip install 'cedar[viz]'.")
    tl.add_argument("trace", help="the trace directory")
    tl.add_argument("--step", required=True, help="the step (its id or a prefix)")
    tl.add_argument("-o", "--out", required=True, help="the picture file (.svg, .png, .pdf)")
    tl.add_argument("--from", dest="start", type=_time, default=None,
                    help="only events overlapping [FROM, TO): ISO-8601 times "
                            "(2026-01-01T00:05:00Z; naive means UTC) or ticks")
    tl.add_argument("--to", dest="end", type=_time, default=None, help="see --from")
    tl.add_argument("--limit", type=int, default=40,
                    help="rows per panel: events or lanes (default 40)")
    tl.add_argument("--lanes", default=None, metavar="FIELD",
                    help="one lane per value of this payload field (default: one lane per key "
                         "for a keyed step; else one row per event up to --limit, a density "
                         "beyond)")
    tl.add_argument("--rows", action="store_true",
                    help="one row per event, the first --limit, never lanes or a density")
    tl.add_argument("--label", default=None, metavar="FIELD",
                    help="label each event by this field of its payload (default: the payload, "
                         "shortened)")
    tl.add_argument("--tz", default=None, metavar="ZONE",
                    help="the time axis in this time zone (default UTC) where the trace's "
                         "times came from timestamps")

    chk = sub.add_parser(
        "check", help="check that a query gives the same result however it runs",
        description="Load SCRIPT.py, which defines `query` (a function of a Stream) and `data` "
                    "(rows, or Insert/Retract/Cti messages), and optionally CHECK = {...}: the "
                    "keyword arguments of topology.check (start=, advance=, ...). Run the "
                    "query inline, batch by batch, with shuffled arrival within the CTIs, "
                    "other group_apply partitions, restored from a checkpoint half-way, with "
                    "emit='final', column-wise and on Ray, and compare every CHT with the "
                    "inline run's. On a difference, print a minimal input as a runnable test "
                    "and exit 1. (An upgrade from a savepoint is checked by `cedar upgrade "
                    "NEW.py --savepoint PATH --check`: restored against from scratch.)")
    chk.add_argument("script", help="the Python file defining `query` and `data`")
    chk.add_argument("--no-ray", dest="ray", action="store_false",
                     help="leave out the run on Ray")
    chk.add_argument("--seed", type=int, default=0, help="seed of the random runs (default 0)")

    why = sub.add_parser(
        "why", help="why an output of a running query is not final (or not there)",
        description="Attach to the running query NAME and explain its output at TIME (or over "
                    "a window, or its next output): final, speculative or not yet produced; if "
                    "not final, which input's CTI holds it back, through which steps (each "
                    "step's input CTIs, their minimum and where it came from), how long ago "
                    "that input last advanced, and for an idle source the idle_timeout that "
                    "would move it; and the late events dropped or adjusted out of it.")
    why.add_argument("name", help="the query's name, as given to deploy(name)")
    why.add_argument("--at", default=None, metavar="TIME",
                     help="the output time: an ISO-8601 time (2026-01-01T00:05:00Z) or ticks "
                          "(default: the step's output CTI, i.e. its next output)")
    why.add_argument("--window", nargs=2, default=None, metavar=("START", "END"),
                     help="an output window [START, END) instead of one time")
    why.add_argument("--step", default=None,
                     help="explain this step's output instead of the query's")
    why.add_argument("--key", default=None, type=_key_arg,
                     help="one key's output (a device's), where the source has per-key "
                          "progress: an int, or else the text")
    why.add_argument("--address", default="auto", help="Ray cluster address (default auto)")
    why.add_argument("--tz", default=None, metavar="ZONE", help=TZ_HELP)
    why.add_argument("--json", action="store_true", help="print the explanation as JSON")
    upgrade.add_parser(sub)
    return p


#: What ``--tz`` does, for every command that shows a query's times.
TZ_HELP = ("show times in this time zone (an IANA name such as Europe/Paris, or +02:00; "
           "default UTC) where the query's times came from timestamps")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return int(COMMANDS[args.command](args) or 0)
    except KeyboardInterrupt:
        return 130


class ClusterRefused(ConnectionError):
    """The cluster answered, and refused this process: its token authentication is on, and
    this process has no token or another one."""


def _connect(command: str, address: str | None) -> bool:
    """Connect this process to the Ray cluster at ``address`` for ``cedar COMMAND``, or print
    why it cannot, with what to do, as ``cedar COMMAND: ...`` on stderr and return False.

    Every command that reads a cluster goes through here, so each fails the same way and in
    seconds: an address nothing answers at (:func:`topology.seeing.ui.connect`: a few seconds, not
    Ray's minutes of retries); a cluster that turned Ray's token authentication on while this
    process sends no token (Ray would print ``InvalidAuthToken`` 20 times over 22 s and then a
    traceback; ``RAY_AUTH_MODE=token`` is the fix). When the address was found rather than
    given (``auto``), one line on stderr says which cluster that is: its address, when it was
    started and how many cedar queries run on it, so that a cluster other than the one
    expected shows at once."""
    from topology.seeing.ui import connect

    try:
        _refuse_without_token(address)
        connect(address)
    except ConnectionError as exc:
        print(f"cedar {command}: {exc}", file=sys.stderr)
        return False
    if (address or os.environ.get("RAY_ADDRESS") or "auto") == "auto":
        print(f"cedar {command}: {_which_cluster()}", file=sys.stderr)
    return True


def _refuse_without_token(address: str | None) -> None:
    """Raise :class:`ClusterRefused` when the cluster at ``address`` answers but refuses this
    process's token (or its lack of one); do nothing in any other case (connected already,
    no such cluster, nothing answering: :func:`topology.seeing.ui.connect` says what is wrong).

    It asks the cluster's GCS one question with Ray's own client, which sends this process's
    token exactly as ``ray.init`` would, and takes the refusal from its first answer."""
    import ray

    if ray.is_initialized():
        return
    target = _gcs_address(address)
    if target is None:
        return
    host, _, port = target.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_S).close()
    except (OSError, ValueError):
        return
    answer, words = _ask_gcs(target)
    if answer == "answered":
        return
    if answer == "silent":
        raise ConnectionError(
            f"{address!r}: something takes connections at {target} but did not answer as a "
            f"Ray cluster within {PROBE_S:g} s. Check that the address is the head node's GCS "
            f"address (HOST:6379 unless `ray start --port` chose another, as `ray status` on "
            f"the head node shows)")
    if answer == "error":
        raise ConnectionError(
            f"{address!r}: something answers at {target}, but not as a Ray cluster ({words}). "
            f"Check that the address is the head node's GCS address (HOST:6379 unless `ray "
            f"start --port` chose another, as `ray status` on the head node shows) and that "
            f"this machine runs the cluster's Ray version")
    if os.environ.get("RAY_AUTH_MODE", "").lower() == "token":
        raise ClusterRefused(
            f"the Ray cluster at {target} refused this machine's token ({words}): it checks "
            f"tokens, and the one here is not its own. Copy the cluster's token (on its head "
            f"node: `ray get-auth-token`) to ~/.ray/auth_token here, or point "
            f"$RAY_AUTH_TOKEN_PATH at a file holding it (or set $RAY_AUTH_TOKEN)")
    raise ClusterRefused(
        f"the Ray cluster at {target} turned token authentication on, and this process sent "
        f"no token ({words}). Run the command with RAY_AUTH_MODE=token, e.g. "
        f"`RAY_AUTH_MODE=token cedar ...`, with the cluster's token in ~/.ray/auth_token "
        f"(a cluster started on this machine wrote it there; for a remote one, copy it from "
        f"the head node: `ray get-auth-token`), or in $RAY_AUTH_TOKEN_PATH or $RAY_AUTH_TOKEN")


def _gcs_address(address: str | None) -> str | None:
    """The HOST:PORT of the GCS ``address`` names (``auto``: the cluster on this machine, or
    ``$RAY_ADDRESS``); None for Ray Client (``ray://``), for a local instance or when none is
    found (the connection then says why)."""
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address is None or address.startswith("ray://"):
        return None
    try:
        from ray._private.services import canonicalize_bootstrap_address

        found = canonicalize_bootstrap_address(address)
    except Exception:  # noqa: BLE001 - another Ray, or nothing found: connect() says
        return None
    return found if found and ":" in found else None


def _ask_gcs(target: str) -> tuple[str, str]:
    """Ask the GCS at ``target`` for its session: ``("answered", "")``, ``("refused", why)``
    (token authentication refused this process), ``("error", why)`` (it answered, not as a
    Ray GCS) or ``("silent", "")`` (no answer within :data:`PROBE_S`). Ray's client logs
    its failures on stderr by itself: those lines are kept off the terminal (the caller says
    what they mean)."""
    result: list[BaseException | None] = []

    def ask() -> None:
        from ray._raylet import GcsClient  # type: ignore[attr-defined]

        try:
            GcsClient(address=target).internal_kv_get(b"session_name", namespace=b"session",
                                                       timeout=PROBE_S)
            result.append(None)
        except BaseException as exc:  # noqa: BLE001 - judged by the caller
            result.append(exc)

    with _stderr_hidden():
        asker = threading.Thread(target=ask, daemon=True, name="cedar-probe")
        asker.start()
        asker.join(PROBE_S)
    if not result:
        return "silent", ""
    error = result[0]
    if error is None:
        return "answered", ""
    from ray.exceptions import AuthenticationError

    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    words = text.split(". ")[0].removeprefix("RPC error: ")
    if isinstance(error, AuthenticationError) or "InvalidAuthToken" in text:
        return "refused", words
    return "error", words


@contextlib.contextmanager
def _stderr_hidden() -> Iterator[None]:
    """This process's file descriptor 2 into a scratch file for the block (Ray's C++ client
    writes its own log lines there, which ``sys.stderr`` never sees)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with tempfile.TemporaryFile() as scratch:
            os.dup2(scratch.fileno(), 2)
            try:
                yield
            finally:
                os.dup2(saved, 2)
    finally:
        os.close(saved)


def _which_cluster() -> str:
    """The connected cluster in one line: its address, when it started (its session's name
    holds the head node's clock) and how many cedar queries run on it."""
    import ray

    from topology.running.registry import list_queries

    address = ray.get_runtime_context().gcs_address
    try:
        from ray._private import worker

        node: Any = worker.global_worker.node
        session = str(node.session_name)
        started = datetime.datetime.strptime("_".join(session.split("_")[1:3]),
                                             "%Y-%m-%d_%H-%M-%S")
        when = f"started {started:%Y-%m-%d %H:%M:%S} (the head node's clock)"
    except Exception:  # noqa: BLE001 - another Ray's session names: leave the time out
        when = "start time unknown"
    try:
        count = len(list_queries())
    except Exception:  # noqa: BLE001 - the answer is for people: leave the count out
        count = -1
    queries = "" if count < 0 else f", {count} cedar quer{'y' if count == 1 else 'ies'}"
    return (f"--address auto found the Ray cluster at {address}, {when}{queries}; give "
            f"--address HOST:PORT for another")


def _demo(args: Any) -> int:
    from topology.app.demo import LIVE_SPEED, run

    if args.speed is not None and (not args.keep or args.speed <= 0):
        print("cedar demo: --speed X goes with --keep and must be positive (60: a minute of "
              "readings a second)", file=sys.stderr)
        return 2
    run(meters=args.meters, minutes=args.minutes, out=args.out, address=args.address,
        keep=args.keep, speed=args.speed or LIVE_SPEED)
    return 0


def _own_address(args: Any) -> None:
    """Take ``--address A`` (or ``--address=A``) out of the script's arguments: the README
    writes ``cedar run SCRIPT.py --address auto``, and the script never sees it."""
    rest, i = [], 0
    while i < len(args.args):
        arg = args.args[i]
        if arg == "--address" and i + 1 < len(args.args):
            args.address, i = args.args[i + 1], i + 2
            continue
        if arg.startswith("--address="):
            args.address = arg.split("=", 1)[1]
        else:
            rest.append(arg)
        i += 1
    args.args = rest


def _run(args: Any) -> int:
    _own_address(args)
    if args.address and not _connect("run", args.address):
        return 2
    sys.argv = [args.script, *args.args]
    runpy.run_path(args.script, run_name="__main__")
    return 0


def _zone_and_cluster(command: str, args: Any) -> Any:
    """The time zone ``--tz`` names, once connected to the cluster ``--address`` names; None
    (after saying why on stderr) when either fails."""
    from topology.building.times import parse_tz

    try:
        tz = parse_tz(args.tz)
    except ValueError as exc:
        print(f"cedar {command}: {exc}", file=sys.stderr)
        return None
    return tz if _connect(command, args.address) else None


def _status(args: Any) -> int:
    import ray

    from topology import attach
    from topology.building.times import TIMESTAMPS, running_clock, show_time
    from topology.running.registry import actor_name, list_queries, step_actor, stuck_slots

    tz = _zone_and_cluster("status", args)
    if tz is None:
        return 2
    names = list_queries()
    if not names:
        print("no cedar queries are running")
    for name in names:
        try:  # its output CTI, in the query's time: a few words, never a failure
            sink = step_actor(actor_name(name, "sink"))
            info, stats = cast(Any, ray.get([sink.manifest.remote(), sink.stats.remote()],
                                            timeout=5))
            clock = info.get("clock")
            if clock != TIMESTAMPS:  # a generator's rows say their clock as they come
                clock = running_clock(clock, attach(name).stats().values())
        except Exception:  # noqa: BLE001 - a query stopping while we look: its name alone
            print(name)
            continue
        print(f"{name}  output CTI {show_time(stats.get('cti'), clock, tz) or '-'}")
    for actor, (slot, age) in sorted(stuck_slots().items()):
        print(f"stuck slot {slot}: {actor} was stopped {age:.0f} s ago and its function has "
              f"not returned; no query takes the slot until it does")
    return 0


def _inspect(args: Any) -> int:
    import ray

    from topology import attach
    from topology.building.times import running_clock, show_duration, show_row, show_time

    tz = _zone_and_cluster("inspect", args)
    if tz is None:
        return 2
    q = attach(args.name, args.address)
    manifest = ray.get(q.handles[q.sink_step].manifest.remote())
    stats = q.stats()
    clock = running_clock(manifest.get("clock"), stats.values())

    def fmt_time(t: int) -> str:
        return show_time(t, clock, tz)

    print(f"query {args.name!r}: {len(stats)} steps")
    print(f"  {'step':<28}{'in':>10}{'out':>10}{'cti':>28}{'state':>8}{'late':>6}{'dead':>6}"
          f"  node")
    for step, s in stats.items():
        print(f"  {step:<28}{s.get('events_in', 0):>10,}{s.get('events_out', 0):>10,}"
              f"{fmt_time(s.get('cti', 0)):>28}{s.get('state_size', 0):>8,}"
              f"{s.get('late', 0):>6,}{s.get('dead_letters', 0):>6,}  {s.get('node', '?')[:12]}")
    if q.host is not None:
        role = "feeds and supervises" if q.supervisor is not None else "feeds"
        print(f"  the query's host ({role} it): node {ray.get(q.host.node.remote())[:12]}")
    from operators.events import MAX_TIME, MIN_TIME

    ctis = [s["cti"] for s in stats.values() if MIN_TIME < (s.get("cti") or MIN_TIME) < MAX_TIME]
    if ctis and clock == "timestamps":
        lag = max(ctis) - min(ctis)
        print(f"  times in {tz}; the slowest step's CTI is {show_duration(lag, clock)} behind "
              f"the fastest's")
    fed_here = manifest.get("fed_by_driver")
    if fed_here:
        print(f"  fed by the deploying process: {', '.join(fed_here)}")
    from topology.seeing.partials import detect_lines

    for views in q.partial_matches().values():  # a detect's partial matches and ended runs
        for v in views:
            print()
            print("\n".join(detect_lines(v, clock, tz)))
    rows = q.snapshot()
    print(f"\nsnapshot: {len(rows):,} rows" + (f" (first {args.rows})" if len(rows) > args.rows
                                                else ""))
    for start, end, payload in rows[: args.rows]:
        print(f"  {show_row(start, end, repr(payload), clock, tz)}")
    return 0


def _stop(args: Any) -> int:
    import time

    from actors.savepoints import SavepointFailed
    from topology import attach
    from topology.running.query import QueryUnavailable, stop_by_name

    if not _connect("stop", args.address):
        return 2
    record = None
    try:
        record = attach(args.name, args.address).stop(savepoint=args.savepoint)
    except QueryUnavailable:  # its sink is gone: stop what is left by name
        if args.savepoint is not None:
            print(f"cedar stop: query {args.name!r} cannot be reached, so no savepoint can be "
                  f"taken; stop it without --savepoint", file=sys.stderr)
            return 1
        stop_by_name(args.name)
    except (ValueError, SavepointFailed) as exc:
        print(f"cedar stop: {exc}", file=sys.stderr)
        return 1
    print(f"stopped {args.name}")
    if record is not None:
        taken = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(record["taken"]))
        print(f"savepoint {args.savepoint} taken at {taken} (in {record['took_s']:.1f} s): "
              f"{len(record['steps'])} steps, {record['rounds']:,} batches of each source "
              f"fed, {record['output_position']:,} output events delivered, fingerprint "
              f"{record['fingerprint']}")
    return 0


def _ui(args: Any) -> int:
    from topology.seeing.ui import serve

    if not _connect("ui", args.address):
        return 2
    try:
        server = serve(args.host, args.port, allow_hosts=args.allow_host, tz=args.tz)
    except ValueError as exc:
        print(f"cedar ui: {exc}", file=sys.stderr)
        return 2
    host, port = str(server.server_address[0]), server.server_address[1]
    print(f"cedar ui: http://{host}:{port}/  (Ctrl-C stops it)")
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.shutdown()
    return 0


def _debug(args: Any) -> int:
    from topology.seeing.debug import Recording

    try:
        rec = Recording.open(args.trace)
        if args.cause is not None:
            step = args.step or rec.meta.get("sink", "sink")
            print(rec.root_cause(step, args.cause).render())
            return 0
        filters = (args.step, args.direction, args.kind, args.id, args.key, args.start,
                   args.end)
        if all(f is None for f in filters):
            print(rec.summary())
            return 0
        rows = rec.events(step=args.step, direction=args.direction, kind=args.kind,
                          start=args.start, end=args.end, key=args.key, id=args.id)
    except (FileNotFoundError, KeyError) as exc:
        print(f"cedar debug: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 2
    print(rec.table(rows, args.limit))
    return 0


def _timeline(args: Any) -> int:
    from topology.seeing.timeline import timeline

    try:
        timeline(args.trace, args.step, out=args.out, start=args.start, end=args.end,
                 limit=args.limit, label=args.label, tz=args.tz,
                 lanes=args.lanes or (False if args.rows else None))
    except (FileNotFoundError, KeyError, ImportError, ValueError) as exc:
        print(f"cedar timeline: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}")
    return 0


def _check(args: Any) -> int:
    import importlib.util
    import os

    from topology.seeing.checker import CheckFailed, check

    path = os.path.abspath(args.script)
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        print(f"cedar check: cannot load {args.script}", file=sys.stderr)
        return 2
    # the script's folder on the path, the script under its own name: the reproduction
    # imports its query from it, and Ray's workers unpickle its functions from it
    sys.path.insert(0, os.path.dirname(path))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (os.path.dirname(path), os.environ.get("PYTHONPATH", "")) if p)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    missing = [v for v in ("query", "data") if not hasattr(module, v)]
    if missing:
        print(f"cedar check: {args.script} must define {' and '.join(missing)} (query: a "
              f"function of a Stream; data: rows or messages)", file=sys.stderr)
        return 2
    options = dict(getattr(module, "CHECK", {}))
    options.setdefault("seed", args.seed)
    options["ray"] = args.ray and options.get("ray", True)
    wrong = _check_options(args.script, module.data, options)
    if wrong:
        print(f"cedar check: {wrong}", file=sys.stderr)
        return 2
    try:
        report = check(module.query, module.data, **options)
    except CheckFailed as failed:
        print(failed)
        return 1
    print(report.describe())
    return 0


def _check_options(script: str, data: Any, options: dict[str, Any]) -> str | None:
    """What is wrong with a check script's ``CHECK`` for its ``data``, said as what to write
    in the script; None when nothing is (the checks of topology.check itself follow)."""
    import inspect
    import json
    import os

    from topology.seeing.checker import check

    base = os.path.basename(script)
    try:
        inspect.signature(check).bind(None, data, **options)
    except TypeError as exc:
        return (f"{base}'s CHECK = {{...}} holds keyword arguments of topology.check (start=, "
                f"end=, shape=, id=, advance=, variants=, seed=, shuffles=, shrink_s=): {exc}")
    rows = list(data)[:1] if isinstance(data, (list, tuple)) else []
    if options.get("start") is not None or not rows or \
            type(rows[0]).__name__ in ("Insert", "Retract", "Cti"):
        return None
    first = rows[0]
    columns = list(first) if isinstance(first, dict) else []
    guess = next((c for c in columns if str(c).lower() in ("ts", "t", "time", "timestamp",
                                                           "start", "event_time")),
                 columns[0] if columns else "ts")
    seen = f" (its first row has {', '.join(map(repr, columns))})" if columns else ""
    add = f"CHECK = {{\"start\": {json.dumps(guess)}}}"
    return (f"{base}'s data are rows, and cedar needs the column that gives each row's start "
            f"time{seen}: add\n\n    {add}\n\nto {base} (a column name or a function row -> "
            f"time; end=, shape=, id= and advance= go there too, as in Stream.from_rows), or "
            f"make data a list of Insert/Retract/Cti messages")


def _key_arg(text: str) -> Any:
    """A key as the command line gives it: an int where it reads as one, else the text."""
    try:
        return int(text)
    except ValueError:
        return text


def _why(args: Any) -> int:
    import json

    from topology import attach
    from topology.building.times import parse_tz

    if args.at is not None and args.window is not None:
        print("cedar why: give --at TIME or --window START END, not both", file=sys.stderr)
        return 2
    try:
        parse_tz(args.tz)
    except ValueError as exc:
        print(f"cedar why: {exc}", file=sys.stderr)
        return 2
    if not _connect("why", args.address):
        return 2
    try:
        q = attach(args.name, args.address)
        e = q.why(tuple(args.window) if args.window else args.at, step=args.step, tz=args.tz,
                  key=args.key)
    except (ValueError, TypeError) as exc:
        print(f"cedar why: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(e.to_dict(), indent=1) if args.json else e)
    return 0


COMMANDS = {"demo": _demo, "run": _run, "status": _status, "inspect": _inspect, "stop": _stop,
            "ui": _ui, "debug": _debug, "timeline": _timeline, "check": _check, "why": _why,
            "upgrade": upgrade.run}

if __name__ == "__main__":
    sys.exit(main())
