"""The topology layer: the fluent :class:`Stream` builder, the planner, and the runtimes.

    >>> from topology import Stream
    >>> from operators.events import Insert, Cti
    >>> Stream.from_events([Insert("a", 0, 5, 1), Cti(5)]).shift(2).collect(runtime="inline")
    [Insert(id='a', start=2, end=7, payload=1), Cti(time=7)]

``collect()`` (runtime ``"ray"`` by default) and ``deploy(name)`` run a query on Ray, one actor
per operator; :func:`attach` reaches a deployed query from another driver.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .stream import Stream, WindowedStream
from .trace import Trace

if TYPE_CHECKING:
    from .query import Query

__all__ = ["Query", "Stream", "Trace", "WindowedStream", "attach"]


def attach(name: str, address: str | None = None) -> Query:
    """The :class:`~topology.query.Query` handle of the running query ``name`` (connects to the
    Ray cluster at ``address``, default ``"auto"``, when this process is not connected)."""
    from .query import attach as _attach

    return _attach(name, address)


def __getattr__(name: str) -> Any:
    if name == "Query":
        from .query import Query

        return Query
    raise AttributeError(name)
