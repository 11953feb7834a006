"""Chaos: a window + join query over 50k events with several operator actors killed at random
moments, under three seeded kill schedules, ends with the fault-free run's CHT and no output
row twice. CI runs 50k events so that the test stays within about a minute on 2 cores. Larger
runs: ``CEDAR_CHAOS_EVENTS=1000000 python -m pytest --timeout=0
tests/reliability/test_chaos.py`` (the test's own limits scale with the size). Tried once, on
2026-11-22, with the 1M-event seed-1 schedule: all three kills happened and the query
recovered from each. It was still running when pytest's 900 s limit stopped it. The cause is
the checkpoint after every 2 batches of 1,000 events, a snapshot of every operator each
time; this is not yet profiled."""

from __future__ import annotations

import os
import random
import time

import pytest

from tests.reliability.test_recovery import check_exactly_once, window_join

pytestmark = [pytest.mark.ray, pytest.mark.slow]

N = int(os.environ.get("CEDAR_CHAOS_EVENTS", "50000"))
#: seconds allowed per 50k events (for the kills, then for the end of the run)
SLACK_S = 120 * max(1, N // 50_000)


@pytest.fixture(scope="module")
def expected():
    return window_join(N).collect(runtime="inline")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_kills_end_with_fault_free_cht(ray_session, tmp_path, expected, seed):
    import ray

    rng = random.Random(seed)
    live = window_join(N).deploy(f"chaos-{seed}", checkpoint_dir=str(tmp_path),
                                 checkpoint_every=2, batch_size=1000, detached=False)
    try:
        operators = [s for s in live.steps if not s.startswith("from_events")]
        # a schedule: 3 kills, each of a random operator once the input source has passed a
        # random point of the stream (the sources restart too, so progress is re-read)
        points = sorted(rng.sample(range(N // 10, N - N // 10), 3))
        victims = [rng.choice(operators) for _ in points]
        killed = 0
        deadline = time.monotonic() + SLACK_S
        while killed < len(points) and not live.wait(0):
            assert time.monotonic() < deadline, "the query made no progress"
            try:
                pos = max(len(live.output()), live.stats()["from_events#0"]["events_in"])
            except ray.exceptions.RayActorError:  # a restart is under way
                pos = 0
            if pos >= points[killed] and len(live.recoveries()) == killed:
                ray.kill(live.handles[victims[killed]], no_restart=True)
                killed += 1
            time.sleep(0.01)
        assert live.wait(SLACK_S)
        out = live.output()
        assert len(live.recoveries()) == killed >= 1
        check_exactly_once(out, expected)
    finally:
        live.stop()
