"""An idle *deployed* query wakes cedar's code in its actors no more than once a second.

tests/actors/test_idle.py drives a shell in-process; this deploys real queries on Ray (a
keyed window, a join, a source with an idle timeout) whose sources are open and yield no
row, and counts every step's timer iterations (``stats()["timer_wakes"]``) over a window.
What an idle actor costs in CPU (Ray's own 10 ms loop included) is measured by
``python -m benchmarks.idle_cost``; this test bounds cedar's share of the wake-ups.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from topology import AdvanceTime, Count, Stream

MINUTE = 60_000_000
#: cedar's timer wake-ups an idle step may make per second (the old polling timer: ~20)
BOUND_PER_S = 1.0
WINDOW_S = 2.0


def _shapes(never: threading.Event) -> list[Stream]:
    def rows() -> Iterator[dict[str, Any]]:
        never.wait()
        yield from ()

    def src(name: str, idle: float | None = None) -> Stream:
        return Stream.from_rows(rows(), start="ts", name=name,
                                advance=AdvanceTime(every=1, idle_timeout=idle))

    keyed = (src("meters").where(lambda r: r["kwh"] > 0)
             .group_apply(lambda r: r["meter"],
                          lambda g: g.tumbling_window(MINUTE).aggregate(Count()), partitions=2))
    join = src("left").join(src("right"), on=(lambda a: a["k"], lambda b: b["k"]))
    quiet = src("quiet", idle=0.2).tumbling_window(MINUTE).aggregate(Count())
    return [keyed, join, quiet]


@pytest.mark.slow
@pytest.mark.parametrize("fuse", [False, "all"])
def test_idle_deployed_steps_do_not_wake_cedar_code(ray_session, fuse):
    never = threading.Event()
    queries = []
    shapes = _shapes(never)
    stages = sum(len(shape.plan(fuse).stages) for shape in shapes)
    try:
        for i, shape in enumerate(shapes):
            queries.append(shape.deploy(f"idle-test-{fuse}-{i}", fuse=fuse))
        time.sleep(0.5)  # configured and subscribed: from here on nothing arrives
        before = {(q.name, s): st["timer_wakes"] for q in queries
                  for s, st in q.stats().items()}
        t0 = time.monotonic()
        time.sleep(WINDOW_S)
        after = {(q.name, s): st["timer_wakes"] for q in queries
                 for s, st in q.stats().items()}
        elapsed = time.monotonic() - t0
        assert len(after) == stages, sorted(after)  # every actor was counted
        bound = BOUND_PER_S * elapsed + 1
        busy = {k: after[k] - before[k] for k in after if after[k] - before[k] > bound}
        assert not busy, (f"idle steps woke cedar's timer more than {BOUND_PER_S}/s over "
                          f"{elapsed:.1f} s: {busy}")
    finally:
        never.set()
        for q in queries:
            q.stop()


@pytest.mark.slow
def test_an_idle_checkpointed_query_fetches_from_its_sink_rarely(ray_session, tmp_path):
    """The supervisor's watcher waits on one fetch from the sink at a time; an idle query's
    sink answers one per ``FETCH_S`` (10 s; 2 s cost the sink ~0.1 % of a core)."""
    never = threading.Event()
    q = _shapes(never)[2].deploy("idle-test-ckpt", checkpoint_dir=str(tmp_path))
    try:
        sup = q.supervisor
        assert hasattr(sup, "fetches"), "a driver-fed query's supervisor runs in the driver"
        time.sleep(1.0)
        first = sup.fetches
        time.sleep(6.0)
        assert sup.fetches - first <= 1, f"{sup.fetches - first} fetches from an idle sink"
    finally:
        never.set()
        q.stop()
