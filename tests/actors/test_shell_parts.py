"""The operator shell is composed of parts (issue 40, item 3), and the actor Ray sees keeps
its interface: callers (the driver, the supervisor, step hosts, other shells) call its
remote methods by name, each in its concurrency group. A part that moves a method, drops it
or changes its group fails here, as does a part that grows past the size of one concern."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.checkpointing import Checkpointing
from actors.inspection import Inspection
from actors.outbox import Outbox
from actors.readers import Readers
from actors.shell import OperatorShell
from actors.shell_state import ShellState
from actors.step_host import SHELL_METHODS

REPO = Path(__file__).resolve().parents[2]

#: The shell actor's public methods and the concurrency group each runs in ("data": the
#: default group, one thread, calls of one caller in order).
INTERFACE = {
    "configure": "data", "reset": "data", "push": "data", "end": "data", "barrier": "data",
    "pull": "data", "fail": "data",
    "subscribe": "control", "unsubscribe": "control", "open_pull": "control",
    "close_pull": "control", "fetch": "io", "fetch_from": "io",
    "stats": "control", "rows": "control", "newest_rows": "control", "records": "control",
    "inspect": "control", "manifest": "control", "error_info": "control",
    "flush_trace": "control", "ping": "control", "until_failed": "watch",
}


def test_the_shell_keeps_its_remote_methods_and_their_groups() -> None:
    assert SHELL_METHODS == INTERFACE


def test_the_shell_is_its_parts_over_one_state() -> None:
    #   OperatorShell ─ data path, configuration
    #     ├ Inspection     stats, rows, records, inspect, ...      (control reads)
    #     ├ Readers        subscribe, open_pull, fetch, ...        (other queries, drivers)
    #     └ Checkpointing  aligned barriers, the sink's release
    #         └ Outbox     batching, backpressure, the flush timer
    #             └ ShellState  the step, its edges, counters, failure, the locks
    assert OperatorShell.__mro__[1:] == (Inspection, Readers, Checkpointing, Outbox,
                                         ShellState, object)
    owner = {name: next(c for c in OperatorShell.__mro__ if name in vars(c)).__name__
             for name in INTERFACE}
    assert {n for n, c in owner.items() if c == "Inspection"} == {
        "stats", "rows", "newest_rows", "records", "inspect", "manifest", "error_info",
        "flush_trace", "ping", "until_failed"}
    assert {n for n, c in owner.items() if c == "Readers"} == {
        "subscribe", "unsubscribe", "open_pull", "close_pull", "fetch", "fetch_from"}
    assert {n for n, c in owner.items() if c == "OperatorShell"} == {
        "configure", "reset", "push", "end", "barrier", "pull", "fail"}


def test_configure_takes_a_stage_config_only() -> None:
    with pytest.raises(TypeError, match=r"configure\(dict\): pass the stage as an "
                                        r"actors.stage_config.StageConfig"):
        OperatorShell().configure({"step": "where#1"})  # type: ignore[arg-type]
