"""An idle shell sleeps: its timer thread wakes for a deadline (a buffer's time bound, a
source's idle timeout), not on a period. Without Ray: the shell is driven in-process and its
timer's loop iterations counted (``timer_wakes``). The cost on Ray is measured by
``python -m benchmarks.idle_cost``."""

from __future__ import annotations

import time

from actors.shell import OperatorShell
from actors.stage_config import StageConfig
from actors.wire import decode, encode, encode_rows
from operators.events import Cti, Insert
from operators.ingress import AdvanceTime
from operators.sources import RowsSource
from operators.where import Where


def _wakes_over(shell: OperatorShell, seconds: float) -> int:
    first = shell.timer_wakes
    time.sleep(seconds)
    return shell.timer_wakes - first


def _until(shell: OperatorShell, pull: int, want, timeout_s: float = 10.0) -> list:
    got: list = []
    deadline = time.monotonic() + timeout_s
    while not any(want(m) for m in got):
        assert time.monotonic() < deadline, f"never came: {got}"
        got += decode(shell.fetch(pull, timeout_s=0.05)[0])
    return got


def test_an_idle_shell_does_not_wake_up():
    shell = OperatorShell()
    shell.configure(StageConfig(step="where#1", describe="where", factory=lambda: Where(bool)))
    pull = shell.open_pull()
    shell.push(0, encode([Insert("a", 0, 1, 1)]))  # no CTI: waits for the flush bound
    assert decode(shell.fetch(pull, timeout_s=0)[0]) == [Insert("a", 0, 1, 1)]
    time.sleep(0.2)  # the flush bound (20 ms) passed: nothing waits any more
    assert _wakes_over(shell, 1.0) <= 1


def test_an_idle_source_fires_its_idle_timeout_on_time_then_sleeps():
    shell = OperatorShell()
    shell.configure(StageConfig(step="from_rows#0", describe="from_rows", rows=True,
                                factory=lambda: RowsSource(
                                    start="t", advance=AdvanceTime(every=1, idle_timeout=0.3))))
    pull = shell.open_pull()
    # before any row there is nothing to flush: the poll sleeps too
    assert _wakes_over(shell, 0.5) <= 1
    t0 = time.monotonic()
    shell.push(0, encode_rows([{"t": 5}, {"t": 7}]))
    got = _until(shell, pull, lambda m: m == Cti(8))
    waited = time.monotonic() - t0
    assert Cti(7) in got and got[-1] == Cti(8)  # latest start + 1: every event flushed
    assert 0.3 <= waited < 3.0, waited
    # quiet after its idle CTI: no more polls until more rows come (the old shell polled
    # every min(0.05, idle_timeout / 4) s: ~20 wake-ups a second, forever)
    assert _wakes_over(shell, 1.0) <= 2
    t1 = time.monotonic()
    shell.push(0, encode_rows([{"t": 9}]))  # new rows: the timer runs again
    assert _until(shell, pull, lambda m: m == Cti(10))[-1] == Cti(10)
    assert time.monotonic() - t1 >= 0.3



class _Down:
    """A subscriber that records the calls it gets (``handle.method.remote(...)``)."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __getattr__(self, name: str):
        calls = self.calls

        class _Method:
            def remote(self, *args):
                calls.append((name, *args))

        return _Method()


def test_a_failed_step_with_a_waiting_buffer_does_not_spin_its_timer():
    shell = OperatorShell()
    shell.configure(StageConfig(step="where#1", describe="where",
                                factory=lambda: Where(lambda p: p["v"] > 0, name="where#1")))
    down = _Down()
    shell.readers.subscribe("t", down, 0)
    shell.push(0, encode([Insert("a", 0, 1, {"v": 1})]))  # waits for its flush bound...
    shell.push(0, encode([Insert("b", 0, 1, {})]))        # ... and the step fails before it
    assert "KeyError" in shell.stats()["error"] and down.calls[0][0] == "fail"
    time.sleep(0.1)
    assert _wakes_over(shell, 0.5) <= 2  # the old timer spun here, without a pause
