"""The built-in aggregates (docs/udm.md): Count, CountDistinct, Sum, Avg, Min, Max, TopK,
TimeWeightedAverage.

Every built-in is an :class:`~operators.udm.IncrementalAggregate`: a window operator keeps one
state per window and feeds it the deltas (events that joined or left the window since the last
call), so a window's result never needs a pass over all of its events. Each also offers
``compute(...)``, the same result from scratch, and is registered under a lowercase name::

    >>> Avg("kwh").compute([{"kwh": 1.0}, {"kwh": 2.0}, {"kwh": 4.5}])
    2.5
    >>> s = Max("kwh").initial_state()
    >>> s = Max("kwh").add(s, [{"kwh": 7}, {"kwh": 3}])
    >>> s = Max("kwh").remove(s, [{"kwh": 7}])
    >>> Max("kwh").result(s)
    3
    >>> from operators.udm import resolve
    >>> resolve("topk", 2, by="kwh").compute([{"kwh": 1}, {"kwh": 9}, {"kwh": 5}])
    ({'kwh': 9}, {'kwh': 5})

Results depend only on the multiset of events in the window, never on the order in which
they were added or removed: the engine recomputes and retracts results, and compares them with
a from-scratch evaluation, so ``add(a); add(b); remove(a)`` must give exactly ``add(b)``. Sums
are therefore kept *exactly* (floats as integers scaled by 2**1074, every finite double being
a multiple of 2**-1074), and a float result is the exact value correctly rounded once.

Floating-point NaN follows Spark: it ranks above every other number (Max and descending TopK
put it first) and makes a Sum or Avg NaN.

Result types follow one rule, whatever the order of the events (SQL's and numpy's; see
docs/operators.md#aggregate-result-types): a Sum of ints is an exact int, and a Sum with any
float among its terms is a float (``Sum`` of ``[2, -0.0]`` is ``2.0`` either way; a zero float
sum is ``0.0``). Min and Max return one of the window's values; among values that compare
equal they pick by a fixed rank, ``-0.0`` below a bool below an int below a float (``Max`` of
``[0, -0.0]`` is ``0``, ``Min`` is ``-0.0``; ``Max`` of ``[2, 2.0]`` is ``2.0``, ``Min`` is
``2``), as Java's ``Math.max`` ranks ``-0.0`` below ``0.0``.

``field`` (and ``by``) is a callable of the payload or a dict key / attribute name; ``None``
means the payload itself. States are plain picklable objects: the runtime checkpoints them.

============  ===============================================================================
module        holds
============  ===============================================================================
``base``      :class:`Builtin`, what every built-in shares (pickling, name, the column-wise
              protocol)
``exact``     :class:`ExactSum`, the exact running sum, and its column-wise additions
``sums``      Count, Sum, Avg, TimeWeightedAverage
``extremes``  Min, Max, and the order keys (:func:`extreme_key`) count windows share
``topk``      TopK and :func:`canonical`
``distinct``  CountDistinct
``several``   Aggregates (several at once)
============  ===============================================================================
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..udm import IncrementalAggregate, register
from .base import Builtin
from .distinct import CountDistinct
from .exact import ExactSum
from .extremes import Max, Min, extreme_key, tie
from .several import Aggregates
from .sums import Avg, Count, Sum, TimeWeightedAverage
from .topk import TopK, canonical

__all__ = ["Aggregates", "Avg", "Builtin", "Count", "CountDistinct", "ExactSum",
           "IncrementalAggregate", "Max", "Min", "Sum", "TimeWeightedAverage", "TopK",
           "canonical", "extreme_key", "tie"]

#: The names these had when the built-ins were one module (tests and the demo read them).
_extreme_key, _tie = extreme_key, tie

# -- the registry -----------------------------------------------------------------------------
_BUILTINS: dict[str, Callable[..., Any]] = {
    "count": Count,
    "count_distinct": CountDistinct,
    "sum": Sum,
    "avg": Avg,
    "min": Min,
    "max": Max,
    "topk": TopK,
    "twa": TimeWeightedAverage,
    "time_weighted_average": TimeWeightedAverage,
}
for _name, _cls in _BUILTINS.items():
    register(_name, _cls)

