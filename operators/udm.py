"""User-defined modules (UDMs): the interfaces a UDM writer implements (docs/udm.md).

A query writer names a UDM by object, class, plain function or registered name; a UDM writer
picks one base class, deciding two things up front (the paper's section IV): incremental or
not, and time-sensitive or not.

==============================  ==========================================================
base class                      the writer implements
==============================  ==========================================================
:class:`Aggregate`              ``compute(values) -> result`` over the window's payloads
:class:`TimeSensitiveAggregate` ``compute(events, window) -> result``; events are clipped
                                ``(start, end, payload)`` tuples, ``window`` a :class:`Window`
:class:`IncrementalAggregate`   ``initial_state()``, ``add(state, values)``,
                                ``remove(state, values)``, ``result(state)``: called with
                                the deltas since the last call (payloads, or clipped events
                                when ``time_sensitive = True``)
:class:`Operator`               ``compute(values) -> iterable of payloads``
:class:`TimeSensitiveOperator`  ``compute(events, window) -> iterable of (start, end, payload)``
:class:`StreamOperator`         ``initial() -> state``, ``step(state, payload) -> (state,
                                outputs)``: a stream operator for ``Stream.scan`` (no
                                window: every event once, in start order, when final)
==============================  ==========================================================

UDMs must be deterministic: the engine calls them again on the same input to retract earlier
output. ``add``/``remove`` may update the state in place and must return the (new) state.

    >>> class Median(Aggregate):
    ...     def compute(self, values):
    ...         v = sorted(values)
    ...         return v[len(v) // 2]
    >>> register("median", Median)
    >>> resolve("median").compute([5, 1, 3])
    3
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar, NamedTuple, Protocol, runtime_checkable


class Window(NamedTuple):
    """A window ``[start, end)`` of the time axis, as time-sensitive UDMs see it."""

    start: int
    end: int


class UDM:
    """Base of every user-defined module."""

    #: True for UDMs that see events (start, end, payload) and the window, not just payloads.
    time_sensitive: ClassVar[bool] = False
    #: True for UDMs maintained from deltas (IncrementalAggregate).
    incremental: ClassVar[bool] = False
    #: True for UDOs (zero or more output events per window), False for aggregates.
    is_operator: ClassVar[bool] = False

    @property
    def udm_name(self) -> str:
        """How error messages name this UDM."""
        return type(self).__name__


class Aggregate(UDM):
    """A time-insensitive, non-incremental aggregate: one result per window."""

    def compute(self, values: list[Any]) -> Any:
        raise NotImplementedError


class TimeSensitiveAggregate(UDM):
    """A non-incremental aggregate over clipped events and the window."""

    time_sensitive = True

    def compute(self, events: list[tuple[int, int, Any]], window: Window) -> Any:
        raise NotImplementedError


class IncrementalAggregate(UDM):
    """An aggregate maintained per window from deltas (the paper's AddEventToState /
    RemoveEventFromState / ComputeResult). Set ``time_sensitive = True`` to receive clipped
    ``(start, end, payload)`` events instead of payloads, and override :meth:`window_result`
    if the result depends on the window."""

    incremental = True

    def initial_state(self) -> Any:
        raise NotImplementedError

    def add(self, state: Any, values: list[Any]) -> Any:
        raise NotImplementedError

    def remove(self, state: Any, values: list[Any]) -> Any:
        raise NotImplementedError

    def result(self, state: Any) -> Any:
        raise NotImplementedError

    def window_result(self, state: Any, window: Window) -> Any:
        """The result for ``window`` (what the engine calls); defaults to :meth:`result`."""
        return self.result(state)

    def copy_state(self, state: Any) -> Any:
        """An independent copy of ``state``: ``add``/``remove`` on either must leave the other
        as it was. A snapshot window that splits in two gives both halves a copy of the old
        window's state instead of adding every member again. Defaults to
        ``copy.deepcopy``; override it when that is slow or wrong for the state (if it
        raises, the engine rebuilds the state from the window's events)."""
        return copy.deepcopy(state)


@runtime_checkable
class ColumnAggregate(Protocol):
    """The column-wise path of an :class:`IncrementalAggregate` (every built-in of
    :mod:`operators.aggregates` has it): whole groups of a batch's payload *columns* (see
    :mod:`operators.columns`) are added at once, without a payload object per event. The keyed
    window aggregate (:mod:`operators.windows.keyed`) takes it when the UDM is an instance of
    this protocol; any method may decline (``False`` / ``None``) and the engine then calls
    ``add`` with the payloads."""

    def column_ready(self, columns: Any, n: int) -> bool:
        """Whether :meth:`add_groups` / :meth:`add_ranges` take these ``n`` rows of payload
        columns."""
        ...

    def add_groups(self, states: list[Any], columns: Any,
                   bounds: Sequence[int]) -> list[Any] | None:
        """The new states of groups of consecutive rows: group ``j`` is rows
        ``bounds[j]:bounds[j + 1]`` (never empty), ``states[j]`` its state (None: a new
        group); exactly what ``add`` of each group's payloads gives, or None to decline."""
        ...

    def add_ranges(self, states: list[Any], columns: Any, n: int, lo: Sequence[int],
                   hi: Sequence[int]) -> list[Any] | None:
        """:meth:`add_groups` for groups that are row ranges ``lo[j]:hi[j]`` of the ``n``
        rows of ``columns`` (they may overlap: a point in several hopping windows)."""
        ...


class Operator(UDM):
    """A time-insensitive UDO: zero or more output payloads per window."""

    is_operator = True

    def compute(self, values: list[Any]) -> Iterable[Any]:
        raise NotImplementedError


class TimeSensitiveOperator(UDM):
    """A time-sensitive UDO: stamps its own output events ``(start, end, payload)``."""

    time_sensitive = True
    is_operator = True

    def compute(self, events: list[tuple[int, int, Any]], window: Window) -> Iterable[
            tuple[int, int, Any]]:
        raise NotImplementedError


class StreamOperator(UDM):
    """A user-defined stream operator (StreamInsight's UDSO), run by ``Stream.scan``: the
    engine calls :meth:`step` once per event, in start order (equal starts ordered by
    :meth:`tie`), when a CTI has made the event final, threading the state :meth:`initial`
    made through the calls. Keep every bit of state in that value, not on ``self``: it is
    what a checkpoint stores and what ``group_apply`` keeps per key (operators/scan.py).

        >>> class Rising(StreamOperator):  # output a price higher than the one before
        ...     def initial(self): return None
        ...     def step(self, last, price):
        ...         return price, [price] if last is not None and price > last else []
        >>> Rising().step(3, 5)
        (5, [5])
    """

    is_operator = True

    def initial(self) -> Any:
        """A fresh state (called once per scan, and per key under ``group_apply``)."""
        raise NotImplementedError

    def step(self, state: Any, payload: Any) -> tuple[Any, Iterable[Any]]:
        """``(new state, output payloads)`` after the event ``payload``; each output becomes
        a point at the event's start. May update ``state`` in place and return it."""
        raise NotImplementedError

    def tie(self, payload: Any) -> Any:
        """The order of events with equal starts (default ``repr``): a total order makes the
        output the same on every plan and runtime."""
        return repr(payload)


class FunctionAggregate(Aggregate):
    """A plain function of a list of payloads, used as an :class:`Aggregate`."""

    def __init__(self, fn: Callable[[list[Any]], Any]) -> None:
        self.fn = fn

    def compute(self, values: list[Any]) -> Any:
        return self.fn(values)

    @property
    def udm_name(self) -> str:
        return getattr(self.fn, "__qualname__", repr(self.fn))


_REGISTRY: dict[str, Callable[..., UDM]] = {}


def register(name: str, factory: Callable[..., UDM] | UDM) -> None:
    """Register a UDM class, factory or instance under ``name`` so queries can name it."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"register: a UDM name must be a non-empty string, got {name!r}")
    if isinstance(factory, UDM):
        instance = factory
        _REGISTRY[name] = lambda: instance
    elif callable(factory):
        _REGISTRY[name] = factory
    else:
        raise TypeError(f"register({name!r}, ...): expected a UDM class, factory or instance, "
                        f"got {factory!r}")


def registered() -> list[str]:
    """The names of all registered UDMs."""
    return sorted(_REGISTRY)


def resolve(udm: Any, *args: Any, **kwargs: Any) -> UDM:
    """Turn what a query writer passed into a UDM instance: an instance, a UDM class, a
    registered name (with its constructor arguments) or a plain function of a list."""
    if isinstance(udm, UDM):
        return udm
    if isinstance(udm, str):
        if udm not in _REGISTRY:
            known = ", ".join(registered()) or "none yet"
            raise KeyError(f"no UDM is registered as {udm!r} (registered: {known}); "
                           f"register it with operators.udm.register({udm!r}, MyUDM)")
        return _REGISTRY[udm](*args, **kwargs)
    if isinstance(udm, type) and issubclass(udm, UDM):
        return udm(*args, **kwargs)
    if callable(udm):
        return FunctionAggregate(udm)
    raise TypeError(f"expected a UDM (Aggregate, IncrementalAggregate, Operator, ...), a "
                    f"registered UDM name or a function of a list; got {udm!r}")


def field_getter(field: Any) -> Callable[[Any], Any]:
    """A function reading ``field`` from a payload: a callable is used as it is; a name reads
    a dict key, or else an attribute; an int indexes a tuple or list; ``None`` returns the
    payload itself.

    >>> field_getter("kwh")({"kwh": 2}), field_getter(1)(("m1", 5)), field_getter(None)(7)
    (2, 5, 7)
    """
    if field is None:
        return lambda p: p
    if callable(field):
        return field

    def get(payload: Any) -> Any:
        if isinstance(payload, dict):
            return payload[field]
        if isinstance(field, int):
            return payload[field]
        return getattr(payload, field)

    get.__qualname__ = f"field {field!r}"
    get.field = field  # type: ignore[attr-defined]  # read column-wise: operators.expr
    return get
