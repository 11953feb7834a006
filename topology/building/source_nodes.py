"""The source nodes of a query tree: replayed messages (:class:`FromEvents`), rows and
batches (:class:`FromRows`), a running query's output (:class:`Published`) and a group's
events inside ``group_apply`` (:class:`GroupInput`), and who feeds each on a cluster
(:data:`Feed`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from operators.events import MAX_TIME
from topology.building.node import Node

# -- sources --------------------------------------------------------------------------------------
#: Who feeds a source's data to its actor when its query is deployed
# (:mod:`topology.running.deploy`):  ``"driver"``, the process that deployed it (a generator, a
# Spark DataFrame: data only it  holds); ``"host"``, the query's host actor (data any process can
# read again from its  beginning: a list, an Arrow table; a restarted host feeds it anew);
# ``"actor"``, the source  actor itself (files it reads faster than anyone could send them: the
# parts of  ``from_spark(df, sources=N)``).
Feed = Literal["driver", "host", "actor"]


def who_feeds(data: Any) -> Feed:
    """Who feeds ``data`` (see :data:`Feed`): what it declares as its ``feed`` (cedar's
    re-readable batch sources, :class:`topology.spark.held_runs.Batches`), ``"host"`` for a list or
    a tuple, else ``"driver"`` (an iterator can be read once, by the process that holds it).

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
    #: the kind of time it carries when its builder knew (:mod:`topology.building.times`)
    clock: str | None = None
    verb: ClassVar[str] = "from_events"
    is_source: ClassVar[bool] = True
    trace_kind: ClassVar[str] = "source"

    @property
    def feed(self) -> Feed:
        return who_feeds(self.messages)

    def source_data(self) -> Any:
        return self.messages

    def without_data(self) -> Node:
        return dataclasses.replace(self, messages=())

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
    #: ``"ticks"``; None: the first row tells, :func:`topology.building.times.source_clock`)
    clock: str | None = None
    verb: ClassVar[str] = "from_rows"

    @property
    def feed(self) -> Feed:
        return who_feeds(self.rows)

    def source_data(self) -> Any:
        return self.rows

    def without_data(self) -> Node:
        return dataclasses.replace(self, rows=())
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
