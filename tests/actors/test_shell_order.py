"""The data path of a shell actor keeps the submission order of one caller (issue #41, item 3).

Ray runs an actor's calls out of order when it is asynchronous or threaded: its default is
``allow_out_of_order_execution = is_asyncio or max_concurrency > 1`` (ray/actor.py), and
threaded actors delivered 12-40 % of batches out of order here. The shell has concurrency
groups for its control calls, but its data methods stay in the default group of one thread,
so Ray keeps the in-order queue: the batches one feeder sends (a streaming source's replayed
micro-batches, then its new ones, from one thread) are applied in the order sent."""

from __future__ import annotations

import inspect

from actors.shell import ACTOR_OPTIONS, OperatorShell

DATA = ("push", "end", "barrier", "pull", "fail")


def test_the_data_methods_run_in_order_in_one_thread() -> None:
    assert ACTOR_OPTIONS["max_concurrency"] == 1
    assert not ACTOR_OPTIONS.get("allow_out_of_order_execution", False)
    assert "data" not in ACTOR_OPTIONS["concurrency_groups"]
    for name in DATA:
        method = inspect.getattr_static(OperatorShell, name)
        assert getattr(method, "__ray_concurrency_group__", None) is None, name
    # (the mark is where Ray's decorator puts it: a control method carries it)
    assert inspect.getattr_static(OperatorShell, "stats").__ray_concurrency_group__ == "control"
