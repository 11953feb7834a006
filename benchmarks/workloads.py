"""The benchmark suite's data and queries: generated once with numpy, shared by every engine.

Every workload is a stream of point events ``{"ts": ticks, "k": key, "v": value}`` whose
event time advances at a fixed rate (:data:`EVENT_RATE_EPS` events per second of event time)
with a light, bounded disorder (each start jittered by up to :data:`JITTER_TICKS`), so an
``AdvanceTime(delay=JITTER_TICKS)`` source drops nothing. The same columns are written to
parquet (``ts`` as a UTC timestamp) for Spark.

    >>> cols = points(5, keys=3, seed=1)
    >>> sorted(cols), len(cols["ts"])
    (['k', 'ts', 'v'], 5)
    >>> rows(cols)[0].keys()
    dict_keys(['ts', 'k', 'v'])

The queries (the same ones run inline, on Ray and fed from Spark):

* :func:`w1` -- ``where`` (keeps ~90 %) → ``select`` → ``group_apply(key, tumbling 1 s →``
  ``Aggregates(count=Count(), sum=Sum(1)))``: both built-ins over one window per key (one
  output row per window and key with the fields ``count`` and ``sum``);
* :func:`w2` -- the same with a hopping window (10 s, hop 1 s) and ``TimeWeightedAverage``;
* :func:`w3` -- a temporal equi-join of two streams whose point events are stretched to
  :data:`JOIN_LIFETIME_TICKS` (pairs with equal keys less than that far apart).
"""

from __future__ import annotations

import operator
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from operators.aggregates import Aggregates, Count, Sum
from operators.events import TICKS_PER_SECOND
from operators.ingress import AdvanceTime
from topology import Stream

#: Event-time rate of the generated streams (events per second of event time).
EVENT_RATE_EPS = 100_000
#: Largest disorder: each start is moved forward by up to this many ticks (2 ms).
JITTER_TICKS = 2_000
#: Event time of the first event: 2024-01-01T00:00:00Z in ticks (µs since the epoch).
T0_TICKS = 1_704_067_200 * TICKS_PER_SECOND
#: CTIs every this many events (docs/ctis.md ``AdvanceTime(every=...)``).
CTI_EVERY = 10_000
#: The latency run's CTIs: every this many events, one 1 s window of event time each, so that
#: 20 s at 50,000 events/s give 1,000 samples.
LATENCY_CTI_EVERY = 1_000
#: Share of events ``where`` keeps (``v >= WHERE_CUT``, v uniform in [0, 1)).
WHERE_CUT = 0.1
TUMBLE_TICKS = TICKS_PER_SECOND
HOP_SIZE_TICKS = 10 * TICKS_PER_SECOND
HOP_TICKS = TICKS_PER_SECOND
#: W3: every point event lives this long before the join (50 ms).
JOIN_LIFETIME_TICKS = 50_000


def advance(every: int = CTI_EVERY) -> AdvanceTime:
    """The sources' AdvanceTime: a CTI every ``every`` events, ``delay`` covering the
    generated disorder."""
    return AdvanceTime(every=every, delay=JITTER_TICKS)


# -- data ---------------------------------------------------------------------------------------
def points(n: int, keys: int, seed: int, first: int = 0,
           rate_eps: int = EVENT_RATE_EPS) -> dict[str, np.ndarray]:
    """Columns of events ``first .. first + n - 1`` of a stream: ``ts`` (int64 ticks, event
    ``i`` near ``T0 + i / rate_eps`` s plus a jitter below :data:`JITTER_TICKS`), ``k``
    (int64 in ``[0, keys)``), ``v`` (float64 in [0, 1)). Vectorised; event ``i`` depends only
    on ``(seed, first)``, so a long stream can be generated chunk by chunk."""
    rng = np.random.default_rng([seed, first])
    step = TICKS_PER_SECOND // rate_eps
    idx = np.arange(first, first + n, dtype=np.int64)
    ts = T0_TICKS + idx * step + rng.integers(0, JITTER_TICKS, n, dtype=np.int64)
    return {"ts": ts, "k": rng.integers(0, keys, n, dtype=np.int64), "v": rng.random(n)}


def rows(cols: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    """The columns as row dicts (what ``Stream.from_rows`` ingests)."""
    return [{"ts": t, "k": k, "v": v}
            for t, k, v in zip(cols["ts"].tolist(), cols["k"].tolist(), cols["v"].tolist())]


def write_parquet(cols: dict[str, np.ndarray], path: str) -> str:
    """Write the columns as one parquet file (``ts`` a UTC µs timestamp) and return its
    directory, which Spark reads as a table. One file keeps the row order of Spark's read."""
    import pyarrow.parquet as pq

    os.makedirs(path, exist_ok=True)
    pq.write_table(arrow_table(cols), os.path.join(path, "part-0.parquet"),
                   row_group_size=256 * 1024)
    return path


def arrow_table(cols: dict[str, np.ndarray]) -> Any:
    """The columns as the Arrow table written to parquet (``ts`` a UTC µs timestamp)."""
    import pyarrow as pa

    return pa.table({"ts": pa.array(cols["ts"], pa.timestamp("us", tz="UTC")),
                     "k": pa.array(cols["k"]), "v": pa.array(cols["v"])})


# -- the queries ----------------------------------------------------------------------------------
def keep(row: dict[str, Any]) -> bool:
    """W1's filter: keeps ~90 % of the rows."""
    return row["v"] >= WHERE_CUT


def project(row: dict[str, Any]) -> tuple[int, float]:
    """W1's projection: the payload becomes ``(key, value)``."""
    return (row["k"], row["v"])


key_of = operator.itemgetter(0)


def w1(src: Stream, emit: str = "final") -> Stream:
    """where → select → group_apply(key, tumbling 1 s → count and sum); final rows, as Spark's
    append mode gives them (``emit="speculative"`` for the default, corrected output)."""
    return (src.where(keep).select(project)
            .group_apply(key_of, lambda g: g.tumbling_window(TUMBLE_TICKS, emit=emit)
                         .aggregate(Aggregates(count=Count(), sum=Sum(1)))))


def w2(src: Stream, emit: str = "final") -> Stream:
    """where → select → group_apply(key, hopping 10 s / 1 s → TimeWeightedAverage), final
    rows."""
    from operators.aggregates import TimeWeightedAverage

    return (src.where(keep).select(project)
            .group_apply(key_of, lambda g: g.hopping_window(HOP_SIZE_TICKS, HOP_TICKS, emit=emit)
                         .aggregate(TimeWeightedAverage(1))))


def w3(left: Stream, right: Stream) -> Stream:
    """Both sides stretched to :data:`JOIN_LIFETIME_TICKS`, joined on the key."""
    def side(s: Stream) -> Stream:
        return s.select(project).alter_lifetime(duration=JOIN_LIFETIME_TICKS)

    return side(left).join(side(right), on=(key_of, key_of), select=pair)


def pair(left: tuple[int, float], right: tuple[int, float]) -> tuple[int, float, float]:
    """W3's join output: ``(key, left value, right value)``."""
    return (left[0], left[1], right[1])


def source(data: Any, name: str | None = None, every: int = CTI_EVERY) -> Stream:
    """The generated layout as a source: columns (a dict of arrays, an Arrow table, or an
    iterable of Arrow tables) through ``Stream.from_arrow``; rows (a list or an iterable of
    row dicts) through ``Stream.from_rows``."""
    import pyarrow as pa

    if isinstance(data, (dict, pa.Table, Columnar)):
        return Stream.from_arrow(data, start="ts", shape="point", advance=advance(every),
                                 name=name)
    return Stream.from_rows(data, start="ts", shape="point", advance=advance(every), name=name)


class Columnar:
    """An iterable of Arrow tables (a long generated stream read chunk by chunk)."""

    def __init__(self, tables: Iterator[Any]) -> None:
        self.tables = tables

    def __iter__(self) -> Iterator[Any]:
        return iter(self.tables)


def table_stream(n: int, keys: int, seed: int, chunk: int = 100_000,
                 progress: list[int] | None = None) -> Columnar:
    """``n`` events as Arrow tables of ``chunk`` rows, generated as they are read;
    ``progress[0]`` counts the rows handed out."""
    import pyarrow as pa

    def generate() -> Iterator[Any]:
        for first in range(0, n, chunk):
            cols = points(min(chunk, n - first), keys, seed, first)
            if progress is not None:
                progress[0] += len(cols["ts"])
            yield pa.table(cols)

    return Columnar(generate())


def head(cols: dict[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
    """The first ``n`` events of generated columns."""
    return {k: v[:n] for k, v in cols.items()}
