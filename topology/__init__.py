"""cedar's public names, in one place: ``from topology import Stream, AdvanceTime, Count,
to_cht``. Every name a topology script needs is here; the modules they live in
(``operators.*``, ``topology.*``) are the engine's own layout and may move.

    >>> from topology import Stream, Insert, Cti
    >>> Stream.from_events([Insert("a", 0, 5, 1), Cti(5)]).shift(2).collect(runtime="inline")
    [Insert(id='a', start=2, end=7, payload=1), Cti(time=7)]

``collect()`` (runtime ``"ray"`` by default) and ``deploy(name)`` run a query on Ray, one actor
per operator; :func:`attach` reaches a deployed query from another driver.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from operators.aggregates import (
    Aggregates,
    Avg,
    Count,
    CountDistinct,
    Max,
    Min,
    Sum,
    TimeWeightedAverage,
    TopK,
)
from operators.cht import check_equivalent, equivalent, to_cht
from operators.events import MAX_TIME, MIN_TIME, Cti, Insert, Retract
from operators.expr import col
from operators.ingress import AdvanceTime
from operators.udm import (
    Aggregate,
    IncrementalAggregate,
    Operator,
    StreamOperator,
    TimeSensitiveAggregate,
    TimeSensitiveOperator,
    Window,
    register,
)
from operators.vectorized import per_value
from operators.windows import WindowPolicy
from topology.running.inline import Collected, DeadLetterWarning, RunReport
from topology.running.step_hosts import StepHosts
from topology.running.tracing import Trace
from topology.seeing.checker import CheckFailed, check
from topology.stream import Stream, WindowedStream

if TYPE_CHECKING:
    from topology.running.query import Query

__all__ = [  # the messages, the builder, AdvanceTime, the aggregates, the UDM bases
    "MAX_TIME",
    "MIN_TIME",
    "AdvanceTime",
    "Aggregate",
    "Aggregates",
    "Avg",
    "CheckFailed",
    "Collected",
    "Count",
    "CountDistinct",
    "Cti",
    "DeadLetterWarning",
    "IncrementalAggregate",
    "Insert",
    "Max",
    "Min",
    "Operator",
    "Query",
    "QueryFailed",
    "Retract",
    "RunReport",
    "SavepointFailed",
    "StepHosts",
    "Stream",
    "StreamOperator",
    "Sum",
    "TimeSensitiveAggregate",
    "TimeSensitiveOperator",
    "TimeWeightedAverage",
    "TopK",
    "Trace",
    "Window",
    "WindowPolicy",
    "WindowedStream",
    "attach",
    "check",
    "check_equivalent",
    "col",
    "equivalent",
    "per_value",
    "register",
    "to_cht",
]


def attach(name: str, address: str | None = None) -> Query:
    """The :class:`~topology.running.query.Query` handle of the running query ``name`` (connects to
    the Ray cluster at ``address``, default ``"auto"``, when this process is not connected)."""
    from topology.running.query import attach as _attach

    return _attach(name, address)


def __getattr__(name: str) -> Any:
    # (read when first asked for: they live beside Ray's runtime, which ``import topology``
    # does not load)
    if name in ("Query", "QueryFailed"):
        from topology.running import query

        return getattr(query, name)
    if name == "SavepointFailed":
        from actors.savepoints import SavepointFailed

        return SavepointFailed
    raise AttributeError(name)
