"""The logical query tree: one frozen node per operator (docs/operators.md), plus the sources.

A :class:`~topology.stream.Stream` is a thin handle on one of these nodes; every builder method
returns a new node whose ``inputs`` are the nodes it reads. Nodes compare by identity, so a
stream used twice (``s.join(s)``) is one node with two consumers: the planner turns the tree
into a DAG of stages and gives every node a stable, readable step id (``where#2``).

Nodes hold configuration only (user functions, window specs, UDMs); the planner
(:mod:`topology.planner`) looks up one function per node type that builds the pure operator,
and keeps the nodes in the plan's stages. Each node type also declares what a trace says of
its step (:attr:`Node.trace_kind`, :meth:`Node.trace_info`): the debugger, the timeline
pictures and ``plan.json`` read operator kinds and arguments from there, so a new node type
needs no table anywhere else.

    >>> src = FromEvents(inputs=(), messages=())
    >>> Where(inputs=(src,), pred=bool).verb
    'where'
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, cast

from operators.events import MAX_TIME
from operators.expr import why_per_event
from operators.ticks import TIMESTAMPS, format_duration
from operators.udm import field_getter
from operators.windows.spec import (
    DEFAULT_POLICY,
    ResolvedPolicy,
    WindowPolicy,
)

from .checks import (
    SINK_STEP,
    check_function,
    check_key,
    check_on,
    check_query_name,
    check_step_name,
    check_window_spec,
)
from .reads import NOTHING, Reads, function_reads, needs, udm_reads, union, walk


@dataclass(frozen=True, eq=False, kw_only=True)
class Node:
    """A logical operator: its input nodes (port order) and an optional user-given step id."""

    inputs: tuple[Node, ...]
    name: str | None = None

    #: The operator's verb: the readable part of its step id.
    verb: ClassVar[str] = "node"
    #: True for span operators that keep no state (the planner may fuse them).
    stateless: ClassVar[bool] = False
    #: True for nodes that take their input from outside the plan.
    is_source: ClassVar[bool] = False
    #: What a trace says the step is (``kind`` in ``plan.json``): the rule by which the
    #: debugger (:mod:`topology.debug`) finds the inputs that made an output event --
    #: ``"source"``, ``"span"`` (the input event with the same id), ``"window"``, ``"join"``,
    #: ... (a kind it has no rule for: every input overlapping the output). Every node type
    #: declares its own (no default: a test walks :data:`NODE_TYPES`).
    trace_kind: ClassVar[str]
    #: For ``"span"`` nodes: whether the output event keeps its input's lifetime, and whether
    #: the node may drop events (what the debugger needs of a group_apply's sub-query).
    keeps_time: ClassVar[bool] = False
    drops: ClassVar[bool] = False

    def __post_init__(self) -> None:
        # validate where it was written: a step name names an actor, files and stats lines
        check_step_name(self.name, self.label)

    @property
    def label(self) -> str:
        """The readable part of the step id: the verb (a window's kind and verb)."""
        return self.verb

    def describe(self, clock: str | None = None) -> str:
        """One line for :meth:`Stream.explain`: the verb and its arguments, durations in
        units (``1 min``) when the query's ``clock`` is ``"timestamps"``, else in ticks
        (:mod:`topology.times`)."""
        return self.verb

    # -- the facts the planner, pruning and the debugger read (docs/architecture.md) ----------
    # Each node type states its own; the defaults are the safe answers (tests/topology/
    # test_node_facts.py holds every type to what its operator can state).
    def lengths(self) -> int | None:
        """The longest lifetime of the step's output when it holds only inserts (``MAX_TIME``:
        any, edges included), or None when it may hold retractions (the default). The keyed
        fast paths (:mod:`topology.rules`) take insert-only input."""
        return None

    def reads(self, out: Reads, port: int) -> Reads:
        """The payload columns the step needs of its input ``port`` when its consumers need
        ``out`` of its output (:mod:`topology.reads`); None, every column, by default."""
        return None

    def keys(self) -> tuple[Any, ...] | None:
        """The key function of each input port when the step keys its input (its events
        meet only events of equal keys: a group_apply's groups, a join's ``on``), else None
        (the default)."""
        return None

    def source_data(self) -> Any:
        """What a source consumes in a run in this process (messages, rows or batches); a
        ValueError says why a node has nothing to feed here."""
        raise ValueError(f"{self.describe()} has nothing to feed")

    def trace_info(self) -> dict[str, Any]:
        """What ``plan.json`` says of this node's step: its :attr:`trace_kind` (the
        debugger's cause rule), its type (``node``) and the arguments the debugger reads (a
        window's spec and output policy, a join's payload shape, a group_apply's sub-query);
        node types add theirs."""
        info: dict[str, Any] = {"kind": self.trace_kind, "node": type(self).__name__,
                                "keyed": self.keys() is not None}
        if self.trace_kind == "span":
            info["keeps_time"] = self.keeps_time
            info["drops"] = self.drops
        return info


def trace_chain(nodes: Sequence[Node]) -> dict[str, Any]:
    """What ``plan.json`` says of ``nodes`` run as one processor, in data order (a fused
    stage, a group_apply's linear sub-query): the one node's :meth:`~Node.trace_info`; of
    several, their infos as ``members`` under the kind ``"span"`` when all are spans (an
    output keeps its input's id), ``"source"`` when a source leads them, else ``"chain"``.

    >>> src = FromEvents(inputs=(), messages=())
    >>> w = Where(inputs=(src,), pred=bool)
    >>> trace_chain([w, Shift(inputs=(w,), delta=1)])["kind"]
    'span'
    >>> [m["kind"] for m in trace_chain([src, w])["members"]]
    ['source', 'span']
    """
    members = [node.trace_info() for node in nodes]
    if len(members) == 1:
        return members[0]
    kinds = [m["kind"] for m in members]
    kind = ("span" if all(k == "span" for k in kinds)
            else "source" if kinds[0] == "source" else "chain")
    return {"kind": kind, "members": members}


def _fn(f: Any) -> str:
    name = getattr(f, "__name__", None) or repr(f)
    return name if len(name) <= 40 else name[:37] + "..."


def _duration(ticks: int, clock: str | None) -> str:
    """A duration argument as ``explain()`` shows it: exactly, in units (``1 h 30 min``) when
    the query's times are timestamps; the ticks when its clock is plain integers."""
    return format_duration(ticks) if clock == TIMESTAMPS else str(ticks)


def _how(f: Any) -> str:
    """How a user function runs on a Columns batch (the rule: operators.expr)."""
    why = why_per_event(field_getter(f))
    return "[column-wise]" if why is None else f"[per event: {why}]"


# -- sources --------------------------------------------------------------------------------------
#: Who feeds a source's data to its actor when its query is deployed (:mod:`topology.deploy`):
#: ``"driver"``, the process that deployed it (a generator, a Spark DataFrame: data only it
#: holds); ``"host"``, the query's host actor (data any process can read again from its
#: beginning: a list, an Arrow table; a restarted host feeds it anew); ``"actor"``, the source
#: actor itself (files it reads faster than anyone could send them: the parts of
#: ``from_spark(df, sources=N)``).
Feed = Literal["driver", "host", "actor"]


def who_feeds(data: Any) -> Feed:
    """Who feeds ``data`` (see :data:`Feed`): what it declares as its ``feed`` (cedar's
    re-readable batch sources, :class:`topology.held_runs.Batches`), ``"host"`` for a list or a
    tuple, else ``"driver"`` (an iterator can be read once, by the process that holds it).

    >>> who_feeds([1, 2]), who_feeds(iter([1, 2]))
    ('host', 'driver')
    """
    if isinstance(data, (list, tuple)):
        return "host"
    declared = getattr(data, "feed", "driver")
    return "host" if declared == "host" else "actor" if declared == "actor" else "driver"


@dataclass(frozen=True, eq=False, kw_only=True)
class FromEvents(Node):
    """Replays a physical stream (validated: a malformed message goes to the dead letters)."""

    messages: Any
    #: ``messages`` is an iterable of message batches, read afresh by each run (a streaming
    #: source, e.g. ``Stream.from_spark`` over a streaming DataFrame)
    batched: bool = False
    #: the kind of time it carries when its builder knew (:mod:`topology.times`)
    clock: str | None = None
    verb: ClassVar[str] = "from_events"
    is_source: ClassVar[bool] = True
    trace_kind: ClassVar[str] = "source"

    @property
    def feed(self) -> Feed:
        return who_feeds(self.messages)

    def source_data(self) -> Any:
        return self.messages

    def describe(self, clock: str | None = None) -> str:
        if self.batched:
            return f"from_events({self.messages!r})"
        return f"from_events({len(self.messages)} messages)"


@dataclass(frozen=True, eq=False, kw_only=True)
class FromRows(Node):
    """Ingests plain rows through :class:`operators.ingress.Ingress`."""

    rows: Any
    start: Any
    end: Any = None
    shape: str = "point"
    id: Any = None
    advance: Any = None
    #: ``rows`` is an iterable of batches (row lists, or ``{name: array}`` column batches)
    batched: bool = False
    #: the kind of time it carries when its builder knew from a schema (``"timestamps"`` or
    #: ``"ticks"``; None: the first row tells, :func:`topology.times.source_clock`)
    clock: str | None = None
    verb: ClassVar[str] = "from_rows"

    @property
    def feed(self) -> Feed:
        return who_feeds(self.rows)

    def source_data(self) -> Any:
        return self.rows
    is_source: ClassVar[bool] = True
    trace_kind: ClassVar[str] = "source"

    def lengths(self) -> int | None:
        # rows never retract, but an edge is closed by a later row with its end
        if self.shape == "edge":
            return MAX_TIME if self.end is None else None
        return {"point": 1, "interval": MAX_TIME}.get(self.shape)

    def describe(self, clock: str | None = None) -> str:
        n = f"{len(self.rows)} rows" if hasattr(self.rows, "__len__") else "rows"
        return f"from_rows({n}, start={self.start!r}, shape={self.shape!r})"


@dataclass(frozen=True, eq=False, kw_only=True)
class Published(Node):
    """The output of the running query ``query``: its alive events, then its live stream."""

    query: str
    verb: ClassVar[str] = "published"
    is_source: ClassVar[bool] = True
    trace_kind: ClassVar[str] = "source"

    def source_data(self) -> Any:
        raise ValueError(f"published({self.query!r}) reads a query running on Ray; it cannot "
                         f"run inline (use collect() on Ray, or deploy())")

    def describe(self, clock: str | None = None) -> str:
        return f"published({self.query!r})"


@dataclass(frozen=True, eq=False, kw_only=True)
class GroupInput(Node):
    """The input of a ``group_apply`` sub-query: the events of one group."""

    verb: ClassVar[str] = "group"
    is_source: ClassVar[bool] = True
    trace_kind: ClassVar[str] = "source"


# -- span operators -------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False, kw_only=True)
class Where(Node):
    pred: Callable[[Any], bool]
    verb: ClassVar[str] = "where"
    stateless: ClassVar[bool] = True
    trace_kind: ClassVar[str] = "span"
    keeps_time: ClassVar[bool] = True
    drops: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        check_function("where", "pred", self.pred, "of the payload returning a bool")

    def lengths(self) -> int | None:
        return self.inputs[0].lengths()

    def reads(self, out: Reads, port: int) -> Reads:
        return union(out, function_reads(self.pred))

    def describe(self, clock: str | None = None) -> str:
        return f"where({_fn(self.pred)}) {_how(self.pred)}"


@dataclass(frozen=True, eq=False, kw_only=True)
class Select(Node):
    fn: Callable[[Any], Any]
    verb: ClassVar[str] = "select"
    stateless: ClassVar[bool] = True
    trace_kind: ClassVar[str] = "span"
    keeps_time: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        check_function("select", "fn", self.fn, "of the payload returning the new payload")

    def lengths(self) -> int | None:
        return self.inputs[0].lengths()

    def reads(self, out: Reads, port: int) -> Reads:
        return function_reads(self.fn)

    def describe(self, clock: str | None = None) -> str:
        return f"select({_fn(self.fn)}) {_how(self.fn)}"


@dataclass(frozen=True, eq=False, kw_only=True)
class AlterLifetime(Node):
    start: Callable[[int], int] | None = None
    duration: Any = None
    verb: ClassVar[str] = "alter_lifetime"
    trace_kind: ClassVar[str] = "alter_lifetime"

    def __post_init__(self) -> None:
        from operators.alter_lifetime import AlterLifetime

        super().__post_init__()
        op = AlterLifetime(self.start, self.duration)  # its checks name start= and duration=
        object.__setattr__(self, "duration", op.duration)  # "5 min" held as ticks

    def lengths(self) -> int | None:
        # a duration bounds the lifetimes; a retraction comes only for one received
        inner, d = self.inputs[0].lengths(), self.duration
        return None if inner is None else inner if d is None else d if isinstance(d, int) \
            else MAX_TIME

    def reads(self, out: Reads, port: int) -> Reads:
        for f in (self.start, self.duration):
            if callable(f):
                out = union(out, function_reads(f))
        return out

    def describe(self, clock: str | None = None) -> str:
        d = _fn(self.duration) if callable(self.duration) else \
            "None" if self.duration is None else _duration(self.duration, clock)
        s = _fn(self.start) if self.start is not None else "None"
        return f"alter_lifetime(start={s}, duration={d})"


@dataclass(frozen=True, eq=False, kw_only=True)
class Shift(Node):
    delta: int
    verb: ClassVar[str] = "shift"
    stateless: ClassVar[bool] = True
    trace_kind: ClassVar[str] = "span"

    def __post_init__(self) -> None:
        from operators.shift import Shift

        super().__post_init__()
        object.__setattr__(self, "delta", Shift(self.delta).delta)  # its check names delta=

    def lengths(self) -> int | None:
        return self.inputs[0].lengths()  # (or cut at the end of the axis)

    def reads(self, out: Reads, port: int) -> Reads:
        return out

    def describe(self, clock: str | None = None) -> str:
        return f"shift({_duration(self.delta, clock)})"


@dataclass(frozen=True, eq=False, kw_only=True)
class ToPoints(Node):
    verb: ClassVar[str] = "to_points"
    stateless: ClassVar[bool] = True
    trace_kind: ClassVar[str] = "span"

    def lengths(self) -> int | None:
        return None if self.inputs[0].lengths() is None else 1

    def reads(self, out: Reads, port: int) -> Reads:
        return out

    def describe(self, clock: str | None = None) -> str:
        return "to_points()"


@dataclass(frozen=True, eq=False, kw_only=True)
class ClipDuration(Node):
    limit: int
    verb: ClassVar[str] = "clip_duration"
    stateless: ClassVar[bool] = True
    trace_kind: ClassVar[str] = "span"

    def __post_init__(self) -> None:
        from operators.clip_duration import ClipDuration

        super().__post_init__()
        object.__setattr__(self, "limit", ClipDuration(self.limit).limit)  # it names limit=

    def lengths(self) -> int | None:
        inner = self.inputs[0].lengths()
        return None if inner is None else min(self.limit, inner)

    def reads(self, out: Reads, port: int) -> Reads:
        return out

    def describe(self, clock: str | None = None) -> str:
        return f"clip_duration({_duration(self.limit, clock)})"


# -- windows --------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False, kw_only=True)
class Window(Node):
    """A window operator: ``spec`` divides the time axis, ``udm`` runs per window, ``policy``
    says how (clip, output, emit: :class:`~operators.windows.spec.WindowPolicy`, held here
    with the window's defaults filled in)."""

    spec: Any
    udm: Any
    kind: str = "aggregate"
    policy: WindowPolicy = DEFAULT_POLICY
    on_error: str = "raise"
    verb: ClassVar[str] = "window"
    trace_kind: ClassVar[str] = "window"

    def __post_init__(self) -> None:
        from operators.windows.evaluate import WindowUdm

        super().__post_init__()
        check_window_spec(self.spec)
        if not isinstance(self.policy, WindowPolicy):
            raise TypeError(f"window(policy={self.policy!r}): give an "
                            f"operators.windows.WindowPolicy")
        resolved = self.policy.resolve(self.spec)
        object.__setattr__(self, "policy", resolved.policy)  # its output filled in
        # the UDM against kind, output policy and on_error, where the query names it
        WindowUdm(self.udm, self.kind, resolved, self.on_error)

    @property
    def resolved(self) -> ResolvedPolicy:
        """The policy resolved for the spec: what its output means, what it clips, ..."""
        return self.policy.resolve(self.spec)

    @property
    def clip(self) -> str:
        return self.policy.clip

    @property
    def output(self) -> str | None:
        return self.policy.output

    @property
    def emit(self) -> str:
        return self.policy.emit

    @property
    def label(self) -> str:
        kind = getattr(self.spec, "kind", "window")
        return f"{kind}.{self.kind}"

    def lengths(self) -> int | None:
        """Rows sent final (``emit="final"``, output ``"window"`` or ``"point_end"``) of a
        hopping, tumbling or count window are inserts only, each its window (its size: a
        count window's varies: not stated) or a point at its end; speculative rows are
        retracted.

        >>> from topology import Stream, Count
        >>> s = Stream.from_rows([], start="t")
        >>> s.tumbling_window(10, emit="final").aggregate(Count())._node.lengths()
        10
        >>> s.tumbling_window(10).aggregate(Count())._node.lengths() is None
        True
        """
        return self.resolved.final_row_length

    def reads(self, out: Reads, port: int) -> Reads:
        return udm_reads(self.udm) if self.kind == "aggregate" else None

    def trace_info(self) -> dict[str, Any]:
        """Its spec (kind and fields, :func:`~operators.windows.window_of.spec_from_dict`
        reads them back) and its output policy (the default filled in)."""
        return {**super().trace_info(), "spec": _spec_info(self.spec), "output": self.output}

    def describe(self, clock: str | None = None) -> str:
        udm = getattr(self.udm, "udm_name", None) if not isinstance(self.udm, str) else self.udm
        spec = self.spec.describe(lambda ticks: _duration(ticks, clock))
        opts = (f", {spec}" if spec else "") + self.policy.describe(self.spec)
        return f"{self.label}({udm or _fn(self.udm)}{opts})"


def _spec_info(spec: Any) -> dict[str, Any]:
    """A window spec as ``plan.json`` holds it: its kind and its plain fields."""
    out: dict[str, Any] = {"kind": getattr(spec, "kind", type(spec).__name__)}
    if dataclasses.is_dataclass(spec):
        for f in dataclasses.fields(spec):
            v = getattr(spec, f.name)
            if isinstance(v, (int, str, float, bool)) or v is None:
                out[f.name] = v
    return out


# -- multi-input ----------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False, kw_only=True)
class Join(Node):
    on: tuple[Any, Any] | None = None
    select: Callable[[Any, Any], Any] | None = None
    verb: ClassVar[str] = "join"
    trace_kind: ClassVar[str] = "join"

    def lengths(self) -> int | None:
        # intersections of inserts, never retracted (freeing state on CTIs emits nothing)
        both = [i.lengths() for i in self.inputs]
        return None if None in both else min(cast(list[int], both))

    def keys(self) -> tuple[Any, ...] | None:
        return self.on

    def trace_info(self) -> dict[str, Any]:
        # pairs: the payloads are (left, right), the debugger matches them
        return {**super().trace_info(), "pairs": self.select is None}

    def __post_init__(self) -> None:
        super().__post_init__()
        check_on("join", self.on)
        check_function("join", "select", self.select, "(left, right) -> payload",
                       optional=True)

    def describe(self, clock: str | None = None) -> str:
        on = "cross" if self.on is None else f"on=({_fn(self.on[0])}, {_fn(self.on[1])})"
        return f"join({on})"


@dataclass(frozen=True, eq=False, kw_only=True)
class AntiJoin(Node):
    on: tuple[Any, Any] | None = None
    verb: ClassVar[str] = "anti_join"
    trace_kind: ClassVar[str] = "anti_join"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_on("anti_join", self.on)

    def keys(self) -> tuple[Any, ...] | None:
        return self.on

    def describe(self, clock: str | None = None) -> str:
        on = "any" if self.on is None else f"on=({_fn(self.on[0])}, {_fn(self.on[1])})"
        return f"anti_join({on})"


@dataclass(frozen=True, eq=False, kw_only=True)
class LeftJoin(Node):
    on: tuple[Any, Any] | None = None
    select: Callable[[Any, Any], Any] | None = None
    default: Any = None
    verb: ClassVar[str] = "left_join"
    trace_kind: ClassVar[str] = "left_join"

    def keys(self) -> tuple[Any, ...] | None:
        return self.on

    def trace_info(self) -> dict[str, Any]:
        return {**super().trace_info(), "pairs": self.select is None}

    def __post_init__(self) -> None:
        super().__post_init__()
        check_on("left_join", self.on)
        check_function("left_join", "select", self.select, "(left, right) -> payload",
                       optional=True)

    def describe(self, clock: str | None = None) -> str:
        on = "cross" if self.on is None else f"on=({_fn(self.on[0])}, {_fn(self.on[1])})"
        return f"left_join({on})"


@dataclass(frozen=True, eq=False, kw_only=True)
class FullOuterJoin(Node):
    on: tuple[Any, Any] | None = None
    select: Callable[[Any, Any], Any] | None = None
    verb: ClassVar[str] = "full_outer_join"
    trace_kind: ClassVar[str] = "full_outer_join"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_on("full_outer_join", self.on)
        check_function("full_outer_join", "select", self.select, "(left, right) -> payload",
                       optional=True)

    def keys(self) -> tuple[Any, ...] | None:
        return self.on

    def trace_info(self) -> dict[str, Any]:
        return {**super().trace_info(), "pairs": self.select is None}

    def describe(self, clock: str | None = None) -> str:
        on = "cross" if self.on is None else f"on=({_fn(self.on[0])}, {_fn(self.on[1])})"
        return f"full_outer_join({on})"


@dataclass(frozen=True, eq=False, kw_only=True)
class ImportCti(Node):
    """Input 0's events with CTIs imported from input 1 (``Stream.import_ctis``)."""

    policy: str = "drop"
    verb: ClassVar[str] = "import_ctis"
    trace_kind: ClassVar[str] = "import_ctis"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.policy not in ("drop", "adjust"):
            raise ValueError(f"import_ctis(policy={self.policy!r}): policy must be 'drop' (late "
                             f"events are dropped) or 'adjust' (late intervals start at the "
                             f"imported CTI)")

    def lengths(self) -> int | None:
        # input 0's events, a late interval's start moved up ("adjust"): no longer
        return self.inputs[0].lengths()

    def reads(self, out: Reads, port: int) -> Reads:
        return out if port == 0 else NOTHING  # of the leader, only its CTIs

    def describe(self, clock: str | None = None) -> str:
        return f"import_ctis(policy={self.policy!r})"


@dataclass(frozen=True, eq=False, kw_only=True)
class Late(Node):
    """The late events of its input, a rows source or an ``import_ctis`` (``Stream.late()``):
    the planner gives its in-edge the flag that carries only them."""

    verb: ClassVar[str] = "late"
    trace_kind: ClassVar[str] = "late"

    def lengths(self) -> int | None:
        return MAX_TIME  # the late inserts, as they came (a late stream holds no retraction)


@dataclass(frozen=True, eq=False, kw_only=True)
class Union(Node):
    verb: ClassVar[str] = "union"
    trace_kind: ClassVar[str] = "union"

    def lengths(self) -> int | None:
        # passes inserts as they are (e.g. the parts of from_spark)
        each = [i.lengths() for i in self.inputs]
        return None if None in each else max(cast(list[int], each))

    def reads(self, out: Reads, port: int) -> Reads:
        return out

    def describe(self, clock: str | None = None) -> str:
        return f"union({len(self.inputs)} inputs)"


@dataclass(frozen=True, eq=False, kw_only=True)
class GroupApply(Node):
    """Runs the sub-query rooted at ``sub`` (over a :class:`GroupInput`) once per key."""

    key: Callable[[Any], Any]
    sub: Node
    partitions: int = 1
    verb: ClassVar[str] = "group_apply"
    trace_kind: ClassVar[str] = "group_apply"

    def trace_info(self) -> dict[str, Any]:
        """``sub``: the sub-query's nodes after its group input as one chain
        (:func:`trace_chain`), or ``{"kind": "dag"}`` when it is not a line."""
        line: list[Node] = []
        node = self.sub
        while not isinstance(node, GroupInput):
            if len(node.inputs) != 1:
                return {**super().trace_info(), "sub": {"kind": "dag"}}
            line.append(node)
            node = node.inputs[0]
        return {**super().trace_info(), "sub": trace_chain(line[::-1])}

    def lengths(self) -> int | None:
        # each group's output as the sub-query states it (its group input states nothing)
        return self.sub.lengths()

    def reads(self, out: Reads, port: int) -> Reads:
        group = [g for g in walk(self.sub) if isinstance(g, GroupInput)]
        read = needs(self.sub, None)
        sub: Reads = NOTHING
        for g in group:
            sub = union(sub, read.get(id(g)))
        return union(function_reads(self.key), sub if group else None)

    def keys(self) -> tuple[Any, ...] | None:
        return (self.key,)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_key("group_apply", "key", self.key)
        p = self.partitions
        if isinstance(p, bool) or not isinstance(p, int) or p < 1:
            raise ValueError(f"group_apply(partitions={p!r}): give an int >= 1 (the number of "
                             f"actors the keys are spread over)")

    def describe(self, clock: str | None = None) -> str:
        parts = f", partitions={self.partitions}" if self.partitions != 1 else ""
        return f"group_apply({_fn(self.key)}{parts}) key {_how(self.key)}"


# -- scan and distinct ---------------------------------------------------------------------------
@dataclass(frozen=True, eq=False, kw_only=True)
class Scan(Node):
    """A user-defined stream operator: ``step`` threads a state through the final events in
    start order (:mod:`operators.scan`)."""

    step: Any
    initial: Any = None
    tie: Callable[[Any], Any] | None = None
    verb: ClassVar[str] = "scan"
    trace_kind: ClassVar[str] = "scan"

    def __post_init__(self) -> None:
        from operators.scan import as_stream_operator

        super().__post_init__()
        as_stream_operator(self.step, self.initial, self.tie)  # refuse a bad argument here

    def lengths(self) -> int | None:
        return 1  # points at its input events' starts, final: never retracted

    def describe(self, clock: str | None = None) -> str:
        from operators.scan import as_stream_operator

        tie = "" if self.tie is None else f", tie={_fn(self.tie)}"
        return f"scan({as_stream_operator(self.step, self.initial).udm_name}{tie})"


@dataclass(frozen=True, eq=False, kw_only=True)
class Distinct(Node):
    """The maximal intervals covered by each distinct payload (or ``key(payload)``)
    (:mod:`operators.distinct`)."""

    key: Any = None
    verb: ClassVar[str] = "distinct"
    trace_kind: ClassVar[str] = "distinct"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.key is not None and not callable(self.key) and not isinstance(self.key,
                                                                              (str, int)):
            raise TypeError(f"distinct: key={self.key!r}: give a function of the payload, a "
                            f"field name or an index (or None: the whole payload)")

    def reads(self, out: Reads, port: int) -> Reads:
        # its output payloads are input payloads; without a key it compares them whole
        return None if self.key is None else union(out, function_reads(self.key))

    def keys(self) -> tuple[Any, ...] | None:
        return None if self.key is None else (self.key,)

    def describe(self, clock: str | None = None) -> str:
        return "distinct()" if self.key is None else f"distinct(key={_fn(self.key)})"


@dataclass(frozen=True, eq=False, kw_only=True)
class Detect(Node):
    """Row pattern recognition over its input's events (:mod:`operators.detect`): one event
    per match of ``pattern``, ``[first start, last start + 1)``."""

    pattern: str
    define: Any = None
    within: Any = None
    measures: Callable[[Any], Any] | None = None
    key: Any = None
    tie: Callable[[Any], Any] | None = None
    emit: str = "speculative"
    verb: ClassVar[str] = "detect"
    trace_kind: ClassVar[str] = "detect"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.key is not None:
            check_key("detect", "key", self.key)
        op = self.operator()  # refuse a bad pattern, define, within or emit here
        object.__setattr__(self, "within", op.within)  # "5 min" held as ticks

    def operator(self, name: str | None = None) -> Any:
        """The pure operator (:class:`operators.detect.Detect`) this node runs."""
        from operators.detect import Detect as DetectOperator

        key = None if self.key is None else field_getter(self.key)
        return DetectOperator(self.pattern, self.define, within=self.within,
                              measures=self.measures, key=key, tie=self.tie, emit=self.emit,
                              name=name)

    def lengths(self) -> int | None:
        # final: inserts only, a match spans less than within (speculative ones retract)
        return self.within if self.emit == "final" else None

    def keys(self) -> tuple[Any, ...] | None:
        return None if self.key is None else (self.key,)

    def describe(self, clock: str | None = None) -> str:
        key = "" if self.key is None else f", key={_fn(self.key)}"
        emit = "" if self.emit == "speculative" else f", emit={self.emit!r}"
        return (f"detect({self.pattern!r}, within={_duration(self.within, clock)}{key}"
                f"{emit})")


@dataclass(frozen=True, eq=False, kw_only=True)
class NotFollowedBy(Node):
    """Absence: input 0's events that no matching input 1 event follows within ``within``
    (:mod:`operators.not_followed_by`), points at ``start + within``."""

    within: Any
    on: tuple[Any, Any] | None = None
    verb: ClassVar[str] = "not_followed_by"
    trace_kind: ClassVar[str] = "not_followed_by"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_on("not_followed_by", self.on)
        object.__setattr__(self, "within", self.operator().within)  # "5 min" held as ticks

    def operator(self, name: str | None = None) -> Any:
        """The pure operator (:class:`operators.not_followed_by.NotFollowedBy`)."""
        from operators.not_followed_by import NotFollowedBy as Absence

        return Absence(self.within, on=self.on, name=name)

    def lengths(self) -> int | None:
        return 1  # points, final: never retracted

    def reads(self, out: Reads, port: int) -> Reads:
        if self.on is None:  # its output is input 0's payloads; of input 1 only times
            return out if port == 0 else NOTHING
        return union(out, function_reads(self.on[0])) if port == 0 else \
            function_reads(self.on[1])

    def keys(self) -> tuple[Any, ...] | None:
        return self.on

    def trace_info(self) -> dict[str, Any]:
        return {**super().trace_info(), "within": self.within}  # (its cause rule reads it)

    def describe(self, clock: str | None = None) -> str:
        on = "" if self.on is None else f", on=({_fn(self.on[0])}, {_fn(self.on[1])})"
        return f"not_followed_by(within={_duration(self.within, clock)}{on})"


#: Every node type a plan may hold (the planner has one function for each).
NODE_TYPES: tuple[type[Node], ...] = (
    FromEvents, FromRows, Published, GroupInput, Where, Select, AlterLifetime, Shift, ToPoints,
    ClipDuration, Window, Join, AntiJoin, LeftJoin, FullOuterJoin, ImportCti, Late, Union,
    GroupApply, Scan, Distinct, Detect, NotFollowedBy,
)
__all__ = [t.__name__ for t in NODE_TYPES] + ["NODE_TYPES", "SINK_STEP", "Node", "check_function",
                                              "check_key", "check_on", "check_query_name",
                                              "check_step_name", "check_window_spec",
                                              "trace_chain"]
