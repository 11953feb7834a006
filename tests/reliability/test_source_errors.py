"""A source whose data raises fails the query, naming the source step (issue 41, item 2).

A generator that raises after 30 rows used to look like a generator that ran out: the run
ended cleanly with part of its output, the exception was printed by a feeding thread, and
``collect()`` raised it bare. Now, on every runtime::

    rows  0 ... 29 | raise RuntimeError("the meter feed broke")
    from_rows#0 ── where#1 ── sink
         ^ failed: step from_rows#0: ... reading its source failed: RuntimeError: ...

* ``collect()`` (inline and Ray) raises an ``OperatorError`` naming ``from_rows#0``;
* a deployed query (actors of its own, slots of step hosts, or checkpointed) is ``failed:
  step from_rows#0: ...``, ``wait()`` raises ``QueryFailed`` with that step and ``error()`` says
  the same.

Each case is checked against a clean run: the same 30 rows from a generator that simply ends
finish, with the output of the inline reference.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from operators.errors import OperatorError
from tests.kit import assert_equivalent
from topology import StepHosts, Stream
from topology.running.query import QueryFailed

ROWS = 30
BROKE = "the meter feed broke"
REASON = f"reading its source failed: RuntimeError: {BROKE}"


def meter(raises: bool) -> Iterator[dict[str, Any]]:
    """30 readings, then (``raises``) the feed breaks; else it simply ends."""
    for t in range(ROWS):
        yield {"t": t, "kwh": t % 7}
    if raises:
        raise RuntimeError(BROKE)


def query(raises: bool) -> Stream:
    return Stream.from_rows(meter(raises), start="t").where(lambda r: r["kwh"] != 3)


def test_collect_names_the_source_that_raised(runtime):
    clean = query(raises=False).collect(runtime=runtime)
    assert_equivalent(clean, query(raises=False).collect(runtime="inline"))
    assert len([m for m in clean if type(m).__name__ == "Insert"]) == ROWS - 4

    with pytest.raises(OperatorError) as err:
        query(raises=True).collect(runtime=runtime)
    assert "'from_rows#0" in str(err.value) and REASON in str(err.value)
    assert isinstance(err.value.__cause__, RuntimeError)  # the user's traceback is kept


@pytest.fixture(scope="module")
def hosts(ray_session):
    with StepHosts(count=1, capacity=6, name="source-errors") as pool:
        yield pool


@pytest.mark.ray
@pytest.mark.parametrize("where", ["actors", "step hosts", "checkpointed"])
def test_a_deployed_query_whose_source_raised_fails_naming_it(ray_session, request, tmp_path,
                                                               where):
    opts: dict[str, Any] = {}
    if where == "step hosts":
        opts["hosts"] = request.getfixturevalue("hosts")
    elif where == "checkpointed":
        opts["checkpoint_dir"] = str(tmp_path)
    name = f"source-raises-{where.replace(' ', '-')}"
    expected = query(raises=False).collect(runtime="inline")

    clean = query(raises=False).deploy(name, history=True, **opts)
    try:
        assert clean.wait(60) is True and clean.state() == "finished"
        assert_equivalent(clean.output() if where == "checkpointed" else clean.snapshot(),
                          expected)
    finally:
        clean.stop()

    q = query(raises=True).deploy(name, **opts)
    try:
        with pytest.raises(QueryFailed) as err:
            q.wait(60)
        assert err.value.step == "from_rows#0" and REASON in err.value.reason
        assert q.state() == f"failed: step from_rows#0: {err.value.reason}"
        assert q.error() == str(err.value)
    finally:
        q.stop()
