"""The logical query tree: one frozen node per operator (docs/operators.md); their base class
is :class:`topology.building.node.Node`, the sources' nodes are in
:mod:`topology.building.source_nodes` (all importable from here).

A :class:`~topology.stream.Stream` is a thin handle on one of these nodes; every builder method
returns a new node whose ``inputs`` are the nodes it reads. Nodes compare by identity, so a
stream used twice (``s.join(s)``) is one node with two consumers: the planner turns the tree
into a DAG of stages and gives every node a stable, readable step id (``where#2``).

Nodes hold configuration only (user functions, window specs, UDMs); the planner
(:mod:`topology.planning.planner`) looks up one function per node type that builds the pure
operator, and keeps the nodes in the plan's stages. Each node type also declares what a trace says
of its step (:attr:`Node.trace_kind`, :meth:`Node.trace_info`): the debugger, the timeline
pictures and ``plan.json`` read operator kinds and arguments from there, so a new node type
needs no table anywhere else.

    >>> src = FromEvents(inputs=(), messages=())
    >>> Where(inputs=(src,), pred=bool).verb
    'where'
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, cast

from operators.events import MAX_TIME
from operators.udm import field_getter
from operators.windows.spec import (
    DEFAULT_POLICY,
    ResolvedPolicy,
    WindowPolicy,
)
from topology.building.checks import (
    SINK_STEP,
    check_function,
    check_key,
    check_on,
    check_window_spec,
)
from topology.building.node import Node, duration_text, fn_text, how_text, trace_chain
from topology.building.reads import (
    NOTHING,
    Reads,
    function_reads,
    needs,
    pair_reads,
    udm_reads,
    union,
    walk,
)
from topology.building.source_nodes import (
    Feed,
    FromEvents,
    FromRows,
    GroupInput,
    Published,
    who_feeds,
)


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
        return f"where({fn_text(self.pred)}) {how_text(self.pred)}"


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
        return f"select({fn_text(self.fn)}) {how_text(self.fn)}"


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
        d = fn_text(self.duration) if callable(self.duration) else \
            "None" if self.duration is None else duration_text(self.duration, clock)
        s = fn_text(self.start) if self.start is not None else "None"
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
        return f"shift({duration_text(self.delta, clock)})"


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
        return f"clip_duration({duration_text(self.limit, clock)})"


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
        spec = self.spec.describe(lambda ticks: duration_text(ticks, clock))
        opts = (f", {spec}" if spec else "") + self.policy.describe(self.spec)
        return f"{self.label}({udm or fn_text(self.udm)}{opts})"


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
class Keyed2(Node):
    """A two-input step that meets events of equal keys, ``on=(left key, right key)`` (None:
    every pair): what the joins share."""

    on: tuple[Any, Any] | None = None
    #: what ``on=None`` means, as ``explain()`` says it
    no_key: ClassVar[str] = "cross"
    shared_base: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        check_on(self.verb, self.on)

    def keys(self) -> tuple[Any, ...] | None:
        return self.on

    def describe(self, clock: str | None = None) -> str:
        on = self.no_key if self.on is None else \
            f"on=({fn_text(self.on[0])}, {fn_text(self.on[1])})"
        return f"{self.verb}({on})"


@dataclass(frozen=True, eq=False, kw_only=True)
class Paired(Keyed2):
    """A join whose output payloads are ``select(left, right)``, or the pair itself."""

    select: Callable[[Any, Any], Any] | None = None
    shared_base: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        check_function(self.verb, "select", self.select, "(left, right) -> payload",
                       optional=True)

    def trace_info(self) -> dict[str, Any]:
        # pairs: the payloads are (left, right), the debugger matches them
        return {**super().trace_info(), "pairs": self.select is None}


@dataclass(frozen=True, eq=False, kw_only=True)
class Join(Paired):
    verb: ClassVar[str] = "join"
    trace_kind: ClassVar[str] = "join"

    def lengths(self) -> int | None:
        # intersections of inserts, never retracted (freeing state on CTIs emits nothing)
        both = [i.lengths() for i in self.inputs]
        return None if None in both else min(cast(list[int], both))

    def reads(self, out: Reads, port: int) -> Reads:
        # its key and what its select reads of that input (the output is made of nothing else)
        key = NOTHING if self.on is None else function_reads(self.on[port])
        return union(key, pair_reads(self.select, port))


@dataclass(frozen=True, eq=False, kw_only=True)
class AntiJoin(Keyed2):
    verb: ClassVar[str] = "anti_join"
    trace_kind: ClassVar[str] = "anti_join"
    no_key: ClassVar[str] = "any"


@dataclass(frozen=True, eq=False, kw_only=True)
class LeftJoin(Paired):
    default: Any = None
    verb: ClassVar[str] = "left_join"
    trace_kind: ClassVar[str] = "left_join"


@dataclass(frozen=True, eq=False, kw_only=True)
class FullOuterJoin(Paired):
    verb: ClassVar[str] = "full_outer_join"
    trace_kind: ClassVar[str] = "full_outer_join"


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
    #: the key groups its state is kept by (:mod:`operators.key_groups`), so that a
    #: savepoint restores at any ``partitions`` up to it; None: 128 when ``partitions > 1``
    #: (:data:`~operators.key_groups.KEY_GROUPS`), none at ``partitions=1`` (one actor,
    #: restored at one partition only)
    key_groups: int | None = None
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
        g = self.key_groups
        if g is not None and (isinstance(g, bool) or not isinstance(g, int) or g < 1):
            raise ValueError(f"group_apply(key_groups={g!r}): give an int >= 1 (the number of "
                             f"key groups its state is kept by: the most partitions it can "
                             f"ever be rescaled to)")
        if self.groups and p > self.groups:
            raise ValueError(f"group_apply(partitions={p}, key_groups={self.groups}): a "
                             f"partition holds at least one key group; give partitions <= "
                             f"{self.groups}, or key_groups= as many as the most partitions "
                             f"it will ever run on")

    @property
    def groups(self) -> int:
        """The key groups of its partitions (0: not kept by key group)."""
        from operators.key_groups import KEY_GROUPS

        if self.key_groups is not None:
            return self.key_groups
        return KEY_GROUPS if self.partitions > 1 else 0

    def describe(self, clock: str | None = None) -> str:
        parts = f", partitions={self.partitions}" if self.partitions != 1 else ""
        if self.key_groups is not None:
            parts += f", key_groups={self.key_groups}"
        return f"group_apply({fn_text(self.key)}{parts}) key {how_text(self.key)}"


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

        tie = "" if self.tie is None else f", tie={fn_text(self.tie)}"
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
        return "distinct()" if self.key is None else f"distinct(key={fn_text(self.key)})"


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

    @property
    def operator(self) -> Callable[..., Any]:
        """``operator(name=None)``: the pure operator (:class:`operators.detect.Detect`) this
        node runs. A factory of the node's arguments, not of the node, so that a step's
        factory ships to its actor without the node's inputs (a live source's rows)."""
        key = None if self.key is None else field_getter(self.key)
        return functools.partial(_detect_operator, pattern=self.pattern, define=self.define,
                                 within=self.within, measures=self.measures, key=key,
                                 tie=self.tie, emit=self.emit)

    def lengths(self) -> int | None:
        # final: inserts only, a match spans less than within (speculative ones retract)
        return self.within if self.emit == "final" else None

    def keys(self) -> tuple[Any, ...] | None:
        return None if self.key is None else (self.key,)

    def describe(self, clock: str | None = None) -> str:
        key = "" if self.key is None else f", key={fn_text(self.key)}"
        emit = "" if self.emit == "speculative" else f", emit={self.emit!r}"
        return (f"detect({self.pattern!r}, within={duration_text(self.within, clock)}{key}"
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

    @property
    def operator(self) -> Callable[..., Any]:
        """``operator(name=None)``: the pure operator
        (:class:`operators.not_followed_by.NotFollowedBy`), a factory of the node's arguments
        (see :attr:`Detect.operator`)."""
        return functools.partial(_absence_operator, within=self.within, on=self.on)

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
        on = "" if self.on is None else f", on=({fn_text(self.on[0])}, {fn_text(self.on[1])})"
        return f"not_followed_by(within={duration_text(self.within, clock)}{on})"


#: Every node type a plan may hold (the planner has one function for each).
def _detect_operator(name: str | None = None, **args: Any) -> Any:
    """:class:`operators.detect.Detect` of a :class:`Detect` node's ``args``, named ``name``."""
    from operators.detect import Detect as DetectOperator

    return DetectOperator(args.pop("pattern"), args.pop("define"), name=name, **args)


def _absence_operator(name: str | None = None, *, within: Any, on: Any) -> Any:
    """:class:`operators.not_followed_by.NotFollowedBy` of a :class:`NotFollowedBy` node."""
    from operators.not_followed_by import NotFollowedBy as Absence

    return Absence(within, on=on, name=name)


NODE_TYPES: tuple[type[Node], ...] = (
    FromEvents, FromRows, Published, GroupInput, Where, Select, AlterLifetime, Shift, ToPoints,
    ClipDuration, Window, Join, AntiJoin, LeftJoin, FullOuterJoin, ImportCti, Late, Union,
    GroupApply, Scan, Distinct, Detect, NotFollowedBy,
)
__all__ = ["NODE_TYPES", "SINK_STEP", "AlterLifetime", "AntiJoin", "ClipDuration", "Detect",
           "Distinct", "Feed", "FromEvents", "FromRows", "FullOuterJoin", "GroupApply",
           "GroupInput", "ImportCti", "Join", "Late", "LeftJoin", "Node", "NotFollowedBy",
           "Published", "Scan", "Select", "Shift", "ToPoints", "Union", "Where", "Window",
           "trace_chain", "who_feeds"]
