"""The equivalence checker for users' own queries: ``topology.check`` / ``cedar check``.

cedar proves each of its operators by running it many ways and comparing canonical history
tables (CHTs). :func:`check` gives a query writer the same proof for a whole query: it runs
``query`` over ``data`` in every way the engine may legitimately run it and asserts that every
run has the same CHT as the plain inline run:

* ``batches``   — inline, one message per batch instead of the default batches;
* ``shuffled``  — the arrival order shuffled within the CTI bounds (messages between two CTIs
  in any order, each event's own insert and retractions kept in order), a few seeds;
* ``partitions`` — every ``group_apply`` with another random number of partitions;
* ``restored``  — checkpointed half-way (the snapshot pickled) and restored into fresh operators;
* ``final``     — every window and every ``detect`` with ``emit="final"`` against their
  speculative output: once every input is final (the end of input) the final output's CHT
  must be the speculative output's (a ``detect`` whose ``measures`` or predicates depend on
  how often or in what order they are called differs here: the speculative run calls them
  again on every correction, the final run once per match);
* ``columns``   — rows ingested column-wise (``from_arrow``) instead of row by row;
* ``interleaved`` — with a source of per-key progress (``AdvanceTime(per_key=...)``), the
  keys' rows interleaved another way, each key's own rows in their order, a few seeds (an
  interleaving that makes other rows late, behind the low watermark, gives another input:
  it is not compared, and the report says so);
* ``ray``       — the same query on Ray (when ``ray=True``).

Every operator of the query is varied, wherever it sits (under ``group_apply``, on either
input of a join or of ``not_followed_by``): the rewrites walk the whole logical tree.

A query whose result depends on anything else — the arrival order inside a window or a
pattern, the batch boundaries, the partition a key lands in — is not a temporal query: its
output changes with the physical stream though the logical input does not. When a run
differs, :func:`check` shrinks the input (rows, or events with their retractions) to a
minimal one on which it still differs and raises :class:`CheckFailed`, whose message is a
runnable test.

    >>> from topology import Count, Stream
    >>> rows = [{"ts": t, "v": t % 3} for t in range(20)]
    >>> def per_value(s):
    ...     return s.group_apply(lambda r: r["v"],
    ...                          lambda g: g.tumbling_window(5).aggregate(Count()))
    >>> check(per_value, rows, start="ts", ray=False).ok
    True
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import pickle
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from operators.cht import cht_diff, validate
from operators.events import Cti, Insert, Message, Retract
from topology.building import nodes as n
from topology.planning.dag import DagProcessor
from topology.stream import Stream

#: Every way :func:`check` runs a query, in the order it runs them.
VARIANTS = ("batches", "shuffled", "partitions", "restored", "final", "columns", "interleaved",
            "ray")


#: The line above the printed reproduction: it runs with plain python, pytest not needed.
REPRODUCTION_HEAD = ("As a test: save it as test_query.py and run `python test_query.py` "
                     "(plain python, or `pytest test_query.py` after `pip install pytest`):")


class CheckFailed(AssertionError):
    """A run of the query differs from its inline run; the message is a runnable test on a
    minimal input."""

    def __init__(self, report: CheckReport) -> None:
        super().__init__(report.describe())
        self.report = report


@dataclass
class CheckReport:
    """What :func:`check` ran and found: ``runs`` (variant → seconds), ``differences``
    (variant → the CHT difference on the full input), and for the first difference the
    ``minimal`` input and a runnable ``reproduction``."""

    runs: dict[str, float] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    differences: dict[str, str] = field(default_factory=dict)
    minimal: list[Any] | None = None
    minimal_difference: str | None = None
    reproduction: str | None = None

    @property
    def ok(self) -> bool:
        return not self.differences

    def describe(self) -> str:
        lines = [f"cedar check: {len(self.runs)} runs, "
                 + ("all with the same CHT" if self.ok else
                    f"{len(self.differences)} differ from the inline run: "
                    + ", ".join(self.differences))]
        lines += [f"  skipped {v}: {why}" for v, why in self.skipped.items()]
        if self.minimal is not None:
            variant = next(iter(self.differences))
            lines += ["", f"A minimal input on which '{variant}' differs "
                      f"({len(self.minimal)} of the input's items):",
                      *(f"    {item!r}" for item in self.minimal),
                      "", str(self.minimal_difference), "",
                      REPRODUCTION_HEAD, "", str(self.reproduction)]
        return "\n".join(lines)


# -- running one variant --------------------------------------------------------------------
@dataclass(frozen=True)
class _Input:
    """The input as given: rows (ingested with ``source``'s options) or physical messages."""

    data: tuple[Any, ...]
    source: dict[str, Any]

    @property
    def is_messages(self) -> bool:
        return all(isinstance(m, (Insert, Retract, Cti)) for m in self.data)

    def stream(self) -> Stream:
        if self.is_messages:
            return Stream.from_events(self.data)
        return Stream.from_rows(list(self.data), **self.source)

    def messages(self) -> list[Message]:
        """The physical stream the source makes of the input (its ingress applied once)."""
        if self.is_messages:
            return list(self.data)
        return Stream.from_rows(list(self.data), **self.source).collect(runtime="inline")

    def units(self) -> list[list[Any]]:
        """What shrinking removes one at a time: a row, or an event with its retractions,
        or a CTI (removing either keeps a physical stream valid)."""
        if not self.is_messages:
            return [[r] for r in self.data]
        by_id: dict[Any, list[Any]] = {}
        units: list[list[Any]] = []
        for m in self.data:
            if isinstance(m, Cti):
                units.append([m])
            elif m.id in by_id:
                by_id[m.id].append(m)
            else:
                by_id[m.id] = [m]
                units.append(by_id[m.id])
        return units


def _rewrite(node: n.Node, change: Callable[[n.Node], dict[str, Any]],
             memo: dict[int, n.Node] | None = None) -> n.Node:
    """A copy of the tree under ``node`` with ``change(node)``'s fields replaced in every node
    (``group_apply`` sub-queries included); a node read twice stays one node."""
    memo = {} if memo is None else memo
    if id(node) in memo:
        return memo[id(node)]
    fields: dict[str, Any] = dict(change(node))
    if node.inputs:
        fields["inputs"] = tuple(_rewrite(i, change, memo) for i in node.inputs)
    if isinstance(node, n.GroupApply):
        fields["sub"] = _rewrite(node.sub, change, memo)
    out = dataclasses.replace(node, **fields) if fields else node
    memo[id(node)] = out
    return out


def _shuffle(messages: Sequence[Message], rng: random.Random | None) -> list[Message]:
    """The messages between two CTIs in a random order (``rng``; None: the events in the
    reverse of their order) that keeps each event's own messages in theirs: a physical stream
    with the same CHT and the same CTIs."""
    out: list[Message] = []
    segment: list[Message] = []

    def flush() -> None:
        lanes: dict[Any, list[Message]] = {}
        for m in segment:
            lanes.setdefault(m.id, []).append(m)  # type: ignore[union-attr]
        heads = list(lanes.values())
        while heads:
            lane = heads[rng.randrange(len(heads)) if rng is not None else -1]
            out.append(lane.pop(0))
            if not lane:
                heads.remove(lane)
        segment.clear()

    for m in messages:
        if isinstance(m, Cti):
            flush()
            out.append(m)
        else:
            segment.append(m)
    flush()
    return out


def _restored(stream: Stream, messages: list[Message]) -> list[Message]:
    """Run inline, checkpoint after half the input (the snapshot pickled, as a checkpoint
    store would keep it), restore into fresh operators and run on."""
    plan = stream.plan()
    dag = DagProcessor(plan, inline_sink=True)
    half = len(messages) // 2
    out = dag.process(messages[:half], 0) if half else []
    state = pickle.loads(pickle.dumps(dag.snapshot()))
    dag = DagProcessor(plan, inline_sink=True)
    dag.restore(state)
    if messages[half:]:
        out += dag.process(messages[half:], 0)
    return out + dag.finish()


def _has(node: n.Node, kind: type[n.Node]) -> bool:
    found = False

    def look(x: n.Node) -> dict[str, Any]:
        nonlocal found
        found = found or isinstance(x, kind)
        return {}

    _rewrite(node, look)
    return found


def _variants(query: Callable[[Stream], Stream], inp: _Input, seed: int, shuffles: int,
              ray: bool) -> dict[str, Callable[[], list[Message]]]:
    """Each variant's run as a function of nothing: the messages it outputs."""
    msgs = inp.messages()
    events = Stream.from_events(msgs)
    plain = query(events)
    root = plain._node
    runs: dict[str, Callable[[], list[Message]]] = {
        "batches": lambda: query(Stream.from_events(msgs)).collect(runtime="inline",
                                                                   batch_size=1),
    }
    # the reversed order first: it swaps any two events that share a CTI period, whatever
    # the input, so a minimal input of two rows fails however the seeds would shuffle it
    for k in range(-1, shuffles):
        shuffled = _shuffle(msgs, None if k < 0 else random.Random(seed * 1000 + k))

        def inline_run(s: list[Message] = shuffled) -> list[Message]:
            return query(Stream.from_events(s)).collect(runtime="inline")

        runs["shuffled (reversed)" if k < 0 else f"shuffled (seed {seed * 1000 + k})"] = \
            inline_run
    if _has(root, n.GroupApply):
        rng = random.Random(seed)

        def partitions(x: n.Node) -> dict[str, Any]:
            return {"partitions": rng.randint(1, 4)} if isinstance(x, n.GroupApply) else {}

        tree = _rewrite(root, partitions)
        runs["partitions"] = lambda: Stream(tree).collect(runtime="inline")
    runs["restored"] = lambda: _restored(query(Stream.from_events(msgs)), msgs)
    if _has(root, n.Window) or _has(root, n.Detect):
        final = _rewrite(root, _final)
        runs["final"] = lambda: Stream(final).collect(runtime="inline")
    if not inp.is_messages and inp.data and all(isinstance(r, dict) for r in inp.data):
        runs["columns"] = lambda: _columns(query, inp)
    per_key = getattr(inp.source.get("advance"), "per_key", None)
    if per_key is not None and not inp.is_messages:
        for k in range(shuffles):
            order = seed * 1000 + k
            runs[f"interleaved (seed {order})"] = functools.partial(
                _interleaved, query, inp, per_key, random.Random(order))
    if ray:
        runs["ray"] = lambda: query(inp.stream()).collect(runtime="ray")
    return runs


def _final(node: n.Node) -> dict[str, Any]:
    """The fields that make ``node`` emit only final output: a window's policy, a detect's
    ``emit`` (its speculative matches and their retractions are what the final run leaves
    out; at the end of input both must hold the same matches)."""
    if isinstance(node, n.Window):
        return {"policy": dataclasses.replace(node.policy, emit="final")}
    if isinstance(node, n.Detect):
        return {"emit": "final"}
    return {}


class _Incomparable(Exception):
    """A variant's run gave another input than the inline run's (the argument says why):
    not compared."""


def _interleaved(query: Callable[[Stream], Stream], inp: _Input, per_key: Any,
                 rng: random.Random) -> list[Message]:
    """The rows of each key (by the source's ``per_key``) in their order, the keys' lanes
    merged at random; raises :class:`_Incomparable` when that makes other rows late (behind
    the low watermark, which the interleaving moves) than the inline run's."""
    from operators.udm import field_getter

    key = field_getter(per_key)
    lanes: dict[Any, list[Any]] = {}
    for row in inp.data:
        lanes.setdefault(repr(key(row)), []).append(row)
    heads, rows = list(lanes.values()), []
    while heads:
        lane = heads[rng.randrange(len(heads))]
        rows.append(lane.pop(0))
        if not lane:
            heads.remove(lane)
    out = query(Stream.from_rows(rows, **inp.source)).collect(runtime="inline")
    base = query(inp.stream()).collect(runtime="inline")
    if _late_rows(out) != _late_rows(base):
        raise _Incomparable(f"{len(_late_rows(out))} rows late in this interleaving, "
                            f"{len(_late_rows(base))} in the given order: the low watermark "
                            f"moves with the interleaving (a larger low_watermark tolerates "
                            f"more)")
    return out


def _late_rows(out: Any) -> list[str]:
    return sorted(repr(r.item) for r in getattr(out, "late", ()))


def _columns(query: Callable[[Stream], Stream], inp: _Input) -> list[Message]:
    import pyarrow as pa

    table = pa.Table.from_pylist(list(inp.data))
    return query(Stream.from_arrow(table, **inp.source)).collect(runtime="inline")


def _differs(query: Callable[[Stream], Stream], inp: _Input, variant: str, seed: int,
             shuffles: int, ray: bool) -> str | None:
    """The CHT difference between the inline run and ``variant`` on ``inp``, if any (an error
    in one run but not the other is a difference too)."""
    def run(fn: Callable[[], list[Message]]) -> list[Message] | str:
        try:
            return fn()
        except _Incomparable:
            raise
        except Exception as exc:  # noqa: BLE001 - an error is an outcome to compare
            return f"{type(exc).__name__}: {exc}"

    base = run(lambda: query(inp.stream()).collect(runtime="inline"))
    runs = _variants(query, inp, seed, shuffles, ray)
    if variant not in runs:
        return None
    try:
        got = run(runs[variant])
    except _Incomparable:
        return None
    if isinstance(base, str) or isinstance(got, str):
        return None if base == got else f"inline run: {_outcome(base)}\n{variant}: {_outcome(got)}"
    return cht_diff(got, base)


def _kind(variant: str) -> str:
    """A variant's kind: ``"shuffled"`` for ``"shuffled (seed 3)"``, what ``variants=`` names."""
    return variant.split(" ")[0]


def _differs_as(query: Callable[[Stream], Stream], inp: _Input, variant: str, seed: int,
                shuffles: int, ray: bool) -> tuple[str, str] | None:
    """The first run of ``variant``'s kind (any of the ``shuffles`` seeds of ``seed``: the
    reproduction runs them all) that differs from the inline run on ``inp``, and how."""
    kind = _kind(variant)
    names = [variant] + [v for v in _variants(query, inp, seed, shuffles, False)
                         if _kind(v) == kind and v != variant]
    for name in names:
        diff = _differs(query, inp, name, seed, shuffles, ray)
        if diff:
            return name, diff
    return None


def _outcome(result: list[Message] | str) -> str:
    return result if isinstance(result, str) else f"{len(result)} messages"


def _shrink(query: Callable[[Stream], Stream], inp: _Input, variant: str, seed: int,
            shuffles: int, ray: bool, budget_s: float) -> _Input:
    """The smallest input found within ``budget_s`` on which a run of ``variant``'s kind still
    differs: delta debugging (Zeller's ddmin) over the input's units, then, until nothing
    more goes, one or two units kept alone, and single units, pairs and runs of consecutive
    units removed. The last pass matters: removing one row moves the CTIs a source makes every
    N rows and reshuffles the arrival order, so a row that is not needed may only go together
    with others (the N rows before a pair that must share a CTI period)."""
    units = inp.units()
    deadline = time.monotonic() + budget_s

    def still_differs(rest: list[list[Any]]) -> bool:
        trial = _Input(tuple(m for u in rest for m in u), inp.source)
        return _differs_as(query, trial, variant, seed, shuffles, ray) is not None

    chunks = 2
    while len(units) >= 2 and time.monotonic() < deadline:
        size = max(1, len(units) // chunks)
        removed = False
        for lo in range(0, len(units), size):
            if time.monotonic() >= deadline:
                break
            rest = units[:lo] + units[lo + size:]
            if still_differs(rest):
                units, chunks, removed = rest, max(chunks - 1, 2), True
                break
        if not removed:
            if size == 1:
                break
            chunks = min(len(units), chunks * 2)
    removed = True
    while removed and len(units) >= 2 and time.monotonic() < deadline:
        removed = False
        for rest in _smaller(units):
            if time.monotonic() >= deadline:
                break
            if still_differs(rest):
                units, removed = rest, True
                break
    return _Input(tuple(m for u in units for m in u), inp.source)


def _smaller(units: list[list[Any]]) -> Iterator[list[list[Any]]]:
    """The inputs :func:`_shrink` tries last, smallest first: one unit, or two, kept alone;
    then one unit, a run of consecutive units, or two units removed."""
    n = len(units)
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    yield from ([units[i]] for i in range(n))
    yield from ([units[i], units[j]] for i, j in pairs if n > 2)
    yield from (units[:i] + units[j:] for size in range(n - 1, 0, -1)
                for i in range(n - size + 1) for j in (i + size,))
    yield from ([u for k, u in enumerate(units) if k not in (i, j)] for i, j in pairs
                if j > i + 1)


def _reproduction(query: Callable[[Stream], Stream], inp: _Input, variant: str,
                  seed: int) -> str:
    """A test that reruns the failing variant on the minimal input: a pytest test, which
    plain ``python`` runs too (``pip install .[viz]`` has no pytest)."""
    module = inspect.getmodule(query)
    name = getattr(query, "__name__", "query")
    if module is not None and module.__name__ not in ("__main__", "builtins") \
            and name != "<lambda>":
        head = f"from {module.__name__} import {name}"
    else:
        try:
            head = inspect.getsource(query).rstrip()
        except (OSError, TypeError):
            head = f"{name} = ...  # your query: a function of a Stream"
        if name == "<lambda>":
            name = "query"
    data = ",\n        ".join(repr(x) for x in inp.data)
    source = "".join(f", {k}={v!r}" for k, v in inp.source.items())
    messages = inp.is_messages
    names = ["check"] + (["Cti", "Insert", "Retract"] if messages else []) \
        + (["AdvanceTime"] if "advance" in inp.source else [])
    imports = f"from topology import {', '.join(sorted(names))}"
    return (f"{imports}\n{head}\n\n\n"
            f"def test_{name}_does_not_depend_on_how_it_runs():\n"
            f"    data = [\n        {data},\n    ]\n"
            f"    check({name}, data{source}, variants=[{variant.split(' ')[0]!r}], "
            f"seed={seed}, ray={variant == 'ray'})\n\n\n"
            f"if __name__ == \"__main__\":  # python test_query.py: no pytest needed\n"
            f"    test_{name}_does_not_depend_on_how_it_runs()\n")


# -- the entry point ----------------------------------------------------------------------------
def check(query: Callable[[Stream], Stream], data: Sequence[Any], *, start: Any = None,
          end: Any = None, shape: str = "point", id: Any = None, advance: Any = None,
          variants: Sequence[str] = VARIANTS, seed: int = 0, shuffles: int = 3,
          ray: bool = True, shrink_s: float = 60.0, raise_on_difference: bool = True,
          ) -> CheckReport:
    """Run ``query`` (a function of a :class:`Stream`) over ``data`` every way in
    ``variants`` (:data:`VARIANTS`) and assert that each run's CHT equals the inline run's.

    ``data`` is a list of rows, ingested as :meth:`Stream.from_rows` ingests them with
    ``start``/``end``/``shape``/``id``/``advance``, or a list of ``Insert``/``Retract``/``Cti``
    messages (a physical stream). ``ray=False`` leaves out the run on Ray. On a difference the
    input is shrunk for up to ``shrink_s`` seconds and :class:`CheckFailed` is raised (or, with
    ``raise_on_difference=False``, the :class:`CheckReport` returned) with a runnable test.
    """
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise ValueError(f"check(variants=...): unknown {unknown}; use some of {VARIANTS}")
    if not callable(query):
        raise TypeError(f"check(query=...): expected a function of a Stream, got {query!r}")
    items = tuple(data)
    source = {k: v for k, v in (("start", start), ("end", end), ("id", id),
                                ("advance", advance)) if v is not None}
    if shape != "point":
        source["shape"] = shape
    inp = _Input(items, source)
    if inp.is_messages:
        validate(items, name="check(data=...)")
    elif start is None:
        raise ValueError("check(start=...): rows need the column (or function) that gives "
                         "each row's start time; or pass Insert/Retract/Cti messages as data")
    report = CheckReport()
    t0 = time.perf_counter()
    base = query(inp.stream()).collect(runtime="inline")
    report.runs["inline"] = time.perf_counter() - t0
    for variant, run in _variants(query, inp, seed, shuffles, ray and "ray" in variants).items():
        kind = variant.split(" ")[0]
        if kind not in variants:
            continue
        t0 = time.perf_counter()
        try:
            diff = cht_diff(run(), base)
        except _Incomparable as why:
            report.skipped[variant] = str(why)
            continue
        except Exception as exc:  # noqa: BLE001 - an error where inline ran is a difference
            diff = f"{variant} raised {type(exc).__name__}: {exc} (the inline run did not)"
        report.runs[variant] = time.perf_counter() - t0
        if diff is not None:
            report.differences[variant] = diff
    for variant in variants:
        if not any(v.split(" ")[0] == variant for v in report.runs):
            report.skipped[variant] = _why_skipped(variant, inp, ray)
    if report.differences:
        variant = next(iter(report.differences))
        small = _shrink(query, inp, variant, seed, shuffles, variant == "ray", shrink_s)
        report.minimal = list(small.data)
        found = _differs_as(query, small, variant, seed, shuffles, variant == "ray")
        again = None if found else _differs(query, small, variant, seed, shuffles,
                                            variant == "ray")
        report.minimal_difference = f"{found[0]}: {found[1]}" if found else again or (
            f"'{variant}' differed on this input while shrinking, but not when run again: "
            "the query keeps state from run to run (a global, a predicate or measures "
            "function remembering what it was called with), so its output depends on what "
            "ran before it")
        report.reproduction = _reproduction(query, small, variant, seed)
        if raise_on_difference:
            raise CheckFailed(report)
    return report


def _why_skipped(variant: str, inp: _Input, ray: bool) -> str:
    return {"partitions": "the query has no group_apply",
            "final": "the query has no window and no detect",
            "columns": "the data are messages, or rows that are not dicts",
            "interleaved": "the source has no per-key progress (AdvanceTime(per_key=...))",
            "ray": "ray=False" if not ray else "not asked for"}.get(variant, "not applicable")
