"""Bounded state: joins over long streams keep only what the CTIs have not made final.

Two inputs of short events in time order (points and intervals of up to 4 ticks, keys mod 100,
a few edge events closed a batch later, every batch in reverse order for disorder) with a CTI
after every 1,000 events on both inputs. Whatever the length of the streams, the state must
stay below a constant that depends only on what lies between two CTIs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from operators.anti_join import AntiJoin
from operators.events import MAX_TIME, Cti, Insert, Message, Retract
from operators.join import Join
from operators.left_join import LeftJoin
from operators.processor import Processor

BATCH = 1_000
#: events on both inputs between two CTIs, the few that straddle a CTI, and the outputs that
#: may still change (pairs, fragments; a left join holds both)
BOUND = 4 * BATCH


def side(port: int, n: int) -> Iterator[list[Message]]:
    """Batches of one input: ``BATCH`` events starting in ``[b, b + BATCH)`` (in reverse order),
    the closing retractions of the previous batch's edge events, then ``Cti(b + BATCH)``."""
    open_edges: list[Insert] = []
    for b in range(0, n, BATCH):
        batch: list[Message] = []
        for e in open_edges:  # close at a time the CTI has not passed
            batch.append(Retract(e.id, e.start, MAX_TIME, b + 3, e.payload))
        open_edges = []
        for i in range(b + BATCH - 1, b - 1, -1):
            payload = (i * 31 + port * 17) % 1_000
            if i % 97 == 0:
                ev = Insert(i, i, MAX_TIME, payload)
                open_edges.append(ev)
            else:
                ev = Insert(i, i, i + 1 + (i * 7 + port) % 4, payload)
            batch.append(ev)
        batch.append(Cti(b + BATCH))
        yield batch


def run_bounded(op: Processor, n: int) -> tuple[int, int]:
    """Feed both inputs batch by batch; return (largest state seen, output messages)."""
    peak = out = 0
    for left, right in zip(side(0, n), side(1, n), strict=True):
        out += len(op.process(left, 0))
        peak = max(peak, op.state_size())
        out += len(op.process(right, 1))
        peak = max(peak, op.state_size())
    return peak, out


def _mod100(p: int) -> int:
    return p % 100


BOUNDED: dict[str, tuple[Callable[[], Processor], int]] = {
    "join": (lambda: Join(on=(_mod100, _mod100)), 1_000_000),
    "anti_join": (lambda: AntiJoin(on=(_mod100, _mod100)), 100_000),
    "left_join": (lambda: LeftJoin(on=(_mod100, _mod100)), 50_000),
}


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if BOUNDED[c][1] >= 10**6
                                  else c for c in sorted(BOUNDED)])  # (a million events: slow)
def test_state_stays_bounded(case):
    factory, n = BOUNDED[case]
    op = factory()
    peak, out = run_bounded(op, n)
    assert out > n // 10, "the streams must actually match"
    assert peak < BOUND, f"{case}: state grew to {peak} over {n:,} events per input"
    # after both inputs' CTIs only the few events that straddle the last CTI (and the edge
    # events of the last batch, ~10 per input) remain, with their outputs
    assert op.state_size() < BATCH // 10


def test_state_grows_without_ctis():
    # the same streams without CTIs: nothing may be freed (the bound above is not vacuous)
    op = Join(on=(_mod100, _mod100))
    for left, right in zip(side(0, 20_000), side(1, 20_000), strict=True):
        op.process(left[:-1], 0)
        op.process(right[:-1], 1)
    assert op.state_size() > 40_000
