"""``Stream``: the immutable fluent builder of cedar queries (docs/operators.md, docs/runtime.md).

A ``Stream`` wraps one node of a logical query tree (:mod:`topology.building.nodes`); every method
returns a new ``Stream`` and never changes the one it is called on, so a stream can be reused
as the input of several queries. Nothing runs until :meth:`Stream.collect` (run to the end,
return the output messages) or :meth:`Stream.deploy` (a live query on Ray, see
:class:`topology.running.query.Query`).

    >>> from operators.events import Insert, Cti
    >>> from operators.aggregates import Count
    >>> s = Stream.from_events([Insert(i, i, i + 1, i) for i in range(6)] + [Cti(6)])
    >>> q = s.where(lambda p: p % 2 == 0).tumbling_window(3).aggregate(Count())
    >>> print(q.explain(stages=False))  # doctest: +ELLIPSIS
    sink
    └── tumbling.aggregate#2  tumbling.aggregate(Count(), size=3)
        └── where#1  where(<lambda>) [column-wise]
            └── from_events#0  from_events(7 messages)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from operators import windows as w
from operators.ticks import Duration
from operators.vectorized import Vectorized
from topology.building import nodes as n
from topology.building.checks import check_function, check_key, check_window_spec
from topology.stream_running import Running
from topology.stream_sources import Sources

__all__ = ["Stream", "WindowedStream"]


class Stream(Sources, Running):
    """An immutable handle on a logical query; every method returns a new Stream."""

    __slots__ = ("_node",)
    _node: n.Node

    def __init__(self, node: n.Node) -> None:
        object.__setattr__(self, "_node", node)

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError("Stream is immutable: every method returns a new Stream")

    def _then(self, node_type: type[n.Node], *others: Stream, arg: str = "other",
              **kw: Any) -> Stream:
        """A new node of ``node_type`` reading this stream and ``others`` (argument ``arg``
        of the builder method), with the node's fields ``kw``."""
        for o in others:
            if not isinstance(o, Stream):
                raise TypeError(f"{node_type.verb}({arg}={o!r}): expected a Stream of cedar "
                                f"(topology.Stream)")
        return Stream(node_type(inputs=(self._node,) + tuple(o._node for o in others), **kw))

    def __repr__(self) -> str:
        return f"<Stream {self._node.describe()}>"

    # -- span operators ---------------------------------------------------------------------
    def where(self, pred: Callable[[Any], Any], name: str | None = None,
              vectorized: bool = False) -> Stream:
        """Keep the events whose payload satisfies ``pred``; lifetimes unchanged. With
        ``vectorized=True``, ``pred`` takes a batch's payload columns and returns a boolean
        mask (:mod:`operators.vectorized`)."""
        if vectorized:
            pred = Vectorized(pred, mask=True, step=name)
        return self._then(n.Where, pred=pred, name=name)

    def select(self, fn: Callable[[Any], Any], name: str | None = None,
               vectorized: bool = False) -> Stream:
        """Map every payload through ``fn``; lifetimes unchanged. With ``vectorized=True``,
        ``fn`` takes a batch's payload columns and returns the new payload columns
        (:mod:`operators.vectorized`)."""
        if vectorized:
            fn = Vectorized(fn, step=name)
        return self._then(n.Select, fn=fn, name=name)

    def alter_lifetime(self, start: Callable[[int], int] | None = None,
                       duration: Any = None, name: str | None = None) -> Stream:
        """New lifetimes: start ``start(s)``, end ``s' + duration`` (a duration: ticks, a
        ``timedelta`` or ``"5 min"``; or a function ``(s, e) -> ticks``); see
        :mod:`operators.alter_lifetime`."""
        return self._then(n.AlterLifetime, start=start, duration=duration, name=name)

    def shift(self, delta: Duration, name: str | None = None) -> Stream:
        """Move every lifetime by ``delta`` (∞ stays ∞): ticks, a ``timedelta`` or a string
        such as ``"-5 min"``."""
        return self._then(n.Shift, delta=delta, name=name)

    def to_points(self, name: str | None = None) -> Stream:
        """Every event becomes the point ``[start, start + 1)``."""
        return self._then(n.ToPoints, name=name)

    def clip_duration(self, limit: Duration, name: str | None = None) -> Stream:
        """Lifetimes longer than ``limit`` (ticks, a ``timedelta`` or ``"1 h"``) are cut to
        ``[start, start + limit)``."""
        return self._then(n.ClipDuration, limit=limit, name=name)

    # -- scan and distinct ---------------------------------------------------------------
    def scan(self, step: Any, initial: Any = None, tie: Callable[[Any], Any] | None = None,
             name: str | None = None) -> Stream:
        """A user-defined stream operator: ``step(state, payload) -> (state, outputs)`` is
        called once per event, in start order (equal starts ordered by ``tie(payload)``,
        default ``repr``), once a CTI has made the event final; each output payload becomes
        a point at the event's start, never retracted. ``initial`` is the first state
        (deep-copied; per key under ``group_apply``). ``step`` may instead be a
        :class:`operators.udm.StreamOperator` (class, instance or registered name) with its
        own ``initial()`` (:mod:`operators.scan`)."""
        return self._then(n.Scan, step=step, initial=initial, tie=tie, name=name)

    def distinct(self, key: Any = None, name: str | None = None) -> Stream:
        """For each distinct payload (or ``key(payload)``), the maximal intervals its
        lifetimes cover: overlapping or touching lifetimes of equal payloads become one
        event. With ``key``, each interval carries the payload of its earliest-starting
        event (equal starts: the least by ``repr``) (:mod:`operators.distinct`)."""
        return self._then(n.Distinct, key=key, name=name)

    def detect(self, pattern: str, define: dict[str, Callable[[Any, Any], Any]] | None = None,
               *, within: Duration, measures: Callable[[Any], Any] | None = None,
               key: Any = None, tie: Callable[[Any], Any] | None = None,
               emit: str = "speculative", name: str | None = None) -> Stream:
        """Row pattern recognition (SQL:2016 ``MATCH_RECOGNIZE``) over the events in start
        order (per ``key``): one event per match of ``pattern`` (symbols; space, ``|``,
        ``( )``, ``? * + {n,m}`` and their reluctant forms), ``define`` a predicate per symbol
        ``pred(payload, match)``, every match within ``within`` of its first row; payload
        ``measures(match)`` (default: symbol -> tuple of payloads). Speculative matches are
        retracted when late input breaks them; ``emit="final"`` sends only final ones
        (docs/patterns.md#detect)."""
        return self._then(n.Detect, pattern=pattern, define=define, within=within,
                          measures=measures, key=key, tie=tie, emit=emit, name=name)

    def not_followed_by(self, other: Stream, *, within: Duration,
                        on: tuple[Any, Any] | None = None, name: str | None = None) -> Stream:
        """Absence: each event of this stream that no event of ``other`` with a matching key
        (``on=(this key, other key)``; any event without ``on``) follows within ``within``
        (starting in ``(start, start + within)``), as a point at ``start + within`` with its
        payload, output final once both streams' CTIs pass that time: an idle key still gets
        its answer when time moves on (docs/patterns.md#absence)."""
        return self._then(n.NotFollowedBy, other, within=within, on=on, name=name)

    # -- windows ----------------------------------------------------------------------------
    def window(self, spec: w.WindowSpec, clip: str | None = None, output: str | None = None,
               emit: str | None = None, *,
               policy: w.WindowPolicy | None = None) -> WindowedStream:
        """Divide the time axis by ``spec`` (:mod:`operators.windows`); then ``.aggregate``
        or ``.apply``. ``clip=`` (default ``"full"``) cuts member lifetimes to the window,
        ``output=`` (default ``"window"``; ``"point_end"`` for count windows) stamps the
        results (docs/windows.md). ``emit="speculative"`` (the default) outputs a window's
        result as soon as it has events and corrects it by retractions; ``emit="final"``
        outputs each result once, when a CTI passes the window's end, and never retracts it.
        The three may instead come as one ``policy=WindowPolicy(clip, output, emit)``
        (:class:`operators.windows.WindowPolicy`). A bad or inapplicable policy fails here,
        naming the argument.

        >>> Stream.from_events([]).tumbling_window(5, output="bogus")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: output='bogus' is not an output policy; use one of 'window', 'point_end', ...
        """
        if policy is None:
            policy = w.WindowPolicy.of(clip, output, emit)
        elif clip is not None or output is not None or emit is not None:
            raise TypeError("window: give policy=WindowPolicy(...) or clip=/output=/emit=, "
                            "not both")
        elif not isinstance(policy, w.WindowPolicy):
            raise TypeError(f"window(policy={policy!r}): give an "
                            f"operators.windows.WindowPolicy")
        check_window_spec(spec)
        return WindowedStream(self, spec, policy.resolve(spec).policy)

    def hopping_window(self, size: Duration, hop: Duration, alignment: Duration = 0,
                       clip: str | None = None, output: str | None = None,
                       emit: str | None = None, *,
                       policy: w.WindowPolicy | None = None) -> WindowedStream:
        """Windows ``[alignment + k·hop, alignment + k·hop + size)``; ``size``, ``hop`` and
        ``alignment`` are durations: ticks, a ``timedelta`` or a string such as ``"5 min"``."""
        return self.window(w.hopping_window(size, hop, alignment), clip, output, emit,
                           policy=policy)

    def tumbling_window(self, size: Duration, alignment: Duration = 0, clip: str | None = None,
                        output: str | None = None, emit: str | None = None, *,
                        policy: w.WindowPolicy | None = None) -> WindowedStream:
        """Windows ``[alignment + k·size, alignment + (k + 1)·size)``; ``size`` is a
        duration: ticks, a ``timedelta`` or a string such as ``"5 min"``.

        >>> from datetime import timedelta
        >>> s = Stream.from_events([])
        >>> sizes = ("5 min", timedelta(minutes=5), 300_000_000)
        >>> {s.tumbling_window(size).spec for size in sizes}
        {HoppingWindow(size=300000000, hop=300000000, alignment=0)}
        """
        return self.window(w.tumbling_window(size, alignment), clip, output, emit,
                           policy=policy)

    def snapshot_window(self, clip: str | None = None, output: str | None = None,
                        emit: str | None = None, *,
                        policy: w.WindowPolicy | None = None) -> WindowedStream:
        """Windows between consecutive distinct event endpoints."""
        return self.window(w.snapshot_window(), clip, output, emit, policy=policy)

    def count_window(self, n_starts: int, by: str = "start", clip: str | None = None,
                     output: str | None = None, emit: str | None = None, *,
                     policy: w.WindowPolicy | None = None) -> WindowedStream:
        """Windows over ``n_starts`` consecutive distinct start (or end) times."""
        if isinstance(n_starts, bool) or not isinstance(n_starts, int) or n_starts <= 0:
            raise ValueError(f"count_window(n_starts={n_starts!r}): give a positive int (the "
                             f"number of distinct times a window spans)")
        return self.window(w.count_window(n_starts, by), clip,  # type: ignore[arg-type]
                           output, emit, policy=policy)

    def session_window(self, gap: Duration, max_duration: Duration | None = None,
                       clip: str | None = None, output: str | None = None,
                       emit: str | None = None, *,
                       policy: w.WindowPolicy | None = None) -> WindowedStream:
        """Sessions (:mod:`operators.windows.session`): over the distinct start times, a
        maximal run in which each next start is less than the previous start + ``gap`` (a
        duration, as ``max_duration``: ticks, a ``timedelta`` or ``"30 s"``); the window is
        ``[first start, last start + gap)``, cut at ``first start + max_duration`` when given
        (an event starting there or later opens a new session).
        An event belongs to the session holding its start. A session that grows, or two
        that a late event bridges, are corrected by retractions; ``emit="final"`` outputs a
        session once a CTI passes its end. Bad arguments fail here, naming the argument.

        >>> from operators.aggregates import Count
        >>> from operators.events import Insert, Cti
        >>> s = Stream.from_events([Insert(i, t, t + 1, i) for i, t in enumerate((0, 2, 10))]
        ...                        + [Cti(20)])
        >>> to_cht = __import__("operators.cht", fromlist=["to_cht"]).to_cht
        >>> to_cht(s.session_window(5).aggregate(Count()).collect(runtime="inline"))
        [(0, 7, 2), (10, 15, 1)]
        >>> s.session_window(0)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: session_window(gap=0): gap must be a positive duration, got 0 ticks; ...
        """
        return self.window(w.session_window(gap, max_duration), clip, output, emit,
                           policy=policy)

    # -- multi-input ------------------------------------------------------------------------
    def join(self, other: Stream, on: tuple[Any, Any] | None = None,
             select: Callable[[Any, Any], Any] | None = None,
             name: str | None = None) -> Stream:
        """Pairs with equal keys (``on=(left_key, right_key)``; None: every pair) whose
        lifetimes overlap, over the intersection; payload ``select(l, r)``."""
        return self._then(n.Join, other, on=on, select=select, name=name)

    def anti_join(self, other: Stream, on: tuple[Any, Any] | None = None,
                  name: str | None = None) -> Stream:
        """The parts of each left lifetime during which no matching right event is alive."""
        return self._then(n.AntiJoin, other, on=on, name=name)

    def left_join(self, other: Stream, on: tuple[Any, Any] | None = None,
                  select: Callable[[Any, Any], Any] | None = None, default: Any = None,
                  name: str | None = None) -> Stream:
        """The join, plus the unmatched parts of left lifetimes paired with ``default``."""
        return self._then(n.LeftJoin, other, on=on, select=select, default=default, name=name)

    def full_outer_join(self, other: Stream, on: tuple[Any, Any] | None = None,
                        select: Callable[[Any, Any], Any] | None = None,
                        name: str | None = None) -> Stream:
        """The join, plus each side's unmatched parts as ``select(l, None)`` and
        ``select(None, r)`` (cut as ``anti_join`` cuts them)."""
        if select is not None and not callable(select):
            raise TypeError(f"full_outer_join(select={select!r}): select must be a function "
                            f"(left, right) -> payload; one of the two is None where a side "
                            f"has no partner")
        if on is not None and (not isinstance(on, (tuple, list)) or len(on) != 2):
            raise ValueError(f"full_outer_join(on={on!r}): on must be a pair (left_key, "
                             f"right_key) of field names or functions of the payload, or None "
                             f"for a cross join")
        return self._then(n.FullOuterJoin, other, on=on, select=select, name=name)

    def import_ctis(self, leader: Stream, policy: str = "drop",
                    name: str | None = None) -> Stream:
        """This stream's events with ``leader``'s CTIs imported (StreamInsight's
        AdvanceTimeImportSettings): the output CTI is the larger of the two, so a rarely
        changing stream (a reference table) no longer holds back a join with a fast one.
        Events that arrive behind the imported CTI go through ``policy`` ('drop' or
        'adjust'), are counted in the step's ``late`` and sent on ``.late()``."""
        if not isinstance(leader, Stream):
            raise TypeError(f"import_ctis(leader={leader!r}): leader must be a Stream of the "
                            f"same query, whose CTIs this stream takes")
        return self._then(n.ImportCti, leader, policy=policy, name=name)

    def late(self, name: str | None = None) -> Stream:
        """The late events of this stream's source (a rows, Arrow or Spark source) or of its
        ``import_ctis``: each dropped or adjusted event as an insert with its original times
        and the payload ``{"source", "policy", "reason", "payload"}``. Its only CTI comes at
        the end of input. Route it to a sink or into another query like any stream."""
        from topology.spark.table_parts import UnionOfParts

        node = self._node
        if isinstance(node, (n.FromRows, n.ImportCti)):
            return self._then(n.Late, name=name)
        if isinstance(node, UnionOfParts) and all(isinstance(i, n.FromRows)
                                                  for i in node.inputs):
            parts = [Stream(i)._then(n.Late, name=None if name is None else f"{name}[{k}]")
                     for k, i in enumerate(node.inputs)]
            return parts[0]._then(n.Union, *parts[1:], name=name)
        raise ValueError(
            f"late(): {node.verb} has no late events; call .late() on a source that ingests "
            f"rows (from_rows, from_arrow, from_spark) or on an import_ctis, whose "
            f"AdvanceTime policy drops or adjusts them")

    def union(self, *others: Stream, name: str | None = None) -> Stream:
        """All events of every input; the CTI is the minimum of the inputs' CTIs."""
        return self._then(n.Union, *others, arg="others", name=name)

    def group_apply(self, key: Callable[[Any], Any], fn: Callable[[Stream], Stream],
                    partitions: int = 1, name: str | None = None,
                    key_groups: int | None = None) -> Stream:
        """Run ``fn`` on the events of each key separately; payloads become
        ``(key, payload)``. ``partitions=N`` spreads the keys over N actors by hash, their
        state kept by key group (``key_groups``, 128 unless said: Flink's max parallelism),
        so that a savepoint restores at any ``partitions`` up to it (``Query.rescale``;
        docs/operations.md, "Rescaling"). ``key_groups=`` at ``partitions=1`` keeps one
        actor's state so too, to rescale it later."""
        check_key("group_apply", "key", key)
        check_function("group_apply", "fn", fn, "(a Stream of one group's events) -> the "
                         "Stream of its sub-query")
        sub = fn(Stream(n.GroupInput(inputs=())))
        if not isinstance(sub, Stream):
            raise TypeError(f"group_apply(fn={_name(fn)}): the sub-query function must "
                            f"return a Stream, got {sub!r}")
        return self._then(n.GroupApply, key=key, sub=sub._node, partitions=partitions,
                          key_groups=key_groups, name=name)


@dataclass(frozen=True)
class WindowedStream:
    """A stream divided into windows; ``aggregate`` or ``apply`` a UDM per window."""

    stream: Stream
    spec: w.WindowSpec
    policy: w.WindowPolicy = w.DEFAULT_POLICY

    def _window(self, udm: Any, kind: str, name: str | None, on_error: str) -> Stream:
        return self.stream._then(n.Window, spec=self.spec, udm=udm, kind=kind,
                                 policy=self.policy, on_error=on_error, name=name)

    def aggregate(self, udm: Any, name: str | None = None, on_error: str = "raise") -> Stream:
        """One result per non-empty window: payload ``udm``'s result (an Aggregate, an
        IncrementalAggregate, a registered name or a function of the payload list)."""
        return self._window(udm, "aggregate", name, on_error)

    def apply(self, udo: Any, name: str | None = None, on_error: str = "raise") -> Stream:
        """Zero or more events per window: one per payload ``udo`` returns."""
        return self._window(udo, "apply", name, on_error)


def _name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)
