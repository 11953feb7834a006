"""The operators' differential tests, run again through the whole runtime: inline and on Ray.

Every operator test module under ``tests/operators`` keeps a ``CASES`` table of
``(factory, reference, query_fn)``. Here each case's ``query_fn`` is applied to
``Stream.from_events(input)`` (one stream per input port), the plan is executed with
``collect(runtime=...)`` and the output must have the CHT the from-scratch reference computes —
the same bodies for ``runtime="inline"`` (Hypothesis examples per case) and ``runtime="ray"``
(non-trivial inputs per operator family, each for a case of the family, derandomized: the same
runs each time, as many as the profile gives a test ``ON_RAY``; on the session's Ray instance,
in small batches so that batching, the in-flight window and multi-input interleaving across
actors are exercised).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tests.operators
from operators.cht import to_cht, validate
from operators.events import Cti, Insert
from tests.kit import ON_RAY, assert_equivalent, physical_streams
from topology import Stream


def _suites() -> dict[str, tuple[Any, ...]]:
    cases: dict[str, tuple[Any, ...]] = {}
    for info in pkgutil.iter_modules(tests.operators.__path__):
        if not info.name.startswith("test_"):
            continue
        mod = importlib.import_module(f"tests.operators.{info.name}")
        table = getattr(mod, "CASES", None)
        if not isinstance(table, dict):
            continue
        for case, row in table.items():
            if isinstance(row, tuple) and len(row) >= 3 and callable(row[2]):
                cases[f"{info.name[5:]}:{case}"] = (mod, *row[:3])
    return cases


CASES = _suites()


def _past_the_end(stream: list[Any]) -> list[Any]:
    """The stream, closed by a CTI 10 ticks past its last one: every window that a finite
    (or clipped) event touches is then final, whatever the operator's liveliness rule."""
    last = next((m.time for m in reversed(stream) if type(m) is Cti), 0)
    return [*stream, Cti(last + 10)]


def _inputs(case: str) -> st.SearchStrategy[list[list[Any]]]:
    """Input streams for ``case``: the module's ``STREAMS`` (one input) or streams of its
    ``KV`` payloads (several inputs), else the kit's default streams."""
    mod, factory, _, _ = CASES[case]
    n_inputs = factory().n_inputs
    if n_inputs == 1:
        single = getattr(mod, "STREAMS", None)
        if single is None:
            single = physical_streams()
        return st.tuples(single.map(_past_the_end)).map(list)
    payloads = getattr(mod, "KV", None)
    if payloads is None:
        payloads = st.integers(0, 5)
    prefixes = "lrabcdefgh"
    return st.tuples(*[physical_streams(payloads=payloads, id_prefix=prefixes[i])
                       .map(_past_the_end) for i in range(n_inputs)]).map(list)


def _reference_reads_streams(mod: Any, reference: Any) -> bool:
    """Most references take CHT rows; some (windows) take the physical stream itself. A module
    says so with ``REFERENCE_INPUT = "stream"``, else the parameter name tells."""
    declared = getattr(mod, "REFERENCE_INPUT", None)
    if declared is not None:
        return bool(declared == "stream")
    try:
        params = list(inspect.signature(reference).parameters)
    except (TypeError, ValueError):
        return False
    return bool(params) and params[0] in ("stream", "streams", "messages")


def check_case(case: str, streams: list[list[Any]], runtime: str, batch_size: int) -> None:
    """The body shared by both runtimes: collect() must match the reference CHT."""
    mod, _, reference, query_fn = CASES[case]
    query = query_fn(*[Stream.from_events(s) for s in streams])
    out = query.collect(runtime=runtime, batch_size=batch_size)
    validate(out, name=f"{case} output ({runtime})")
    if _reference_reads_streams(mod, reference):
        expected = reference(*streams)
    else:
        expected = reference(*[to_cht(s) for s in streams])
    assert_equivalent(out, expected)


@pytest.mark.parametrize("case", sorted(CASES))
@ON_RAY  # (a hundred cases: each gets a few examples)
@given(data=st.data())
def test_inline_matches_reference(case, data):
    streams = data.draw(_inputs(case), label="inputs")
    check_case(case, streams, "inline", batch_size=data.draw(st.sampled_from([1, 3, 64])))


def _nontrivial(streams: list[list[Any]]) -> bool:
    """Every input stream holds at least three events (not Hypothesis' simplest inputs)."""
    return all(sum(type(m) is Insert for m in s) >= 3 for s in streams)


FAMILIES = sorted({case.split(":")[0] for case in CASES})


@pytest.mark.ray
@pytest.mark.parametrize("family", FAMILIES)
@settings(ON_RAY, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.filter_too_much])
@given(data=st.data())
def test_ray_matches_reference(ray_session, family, data):
    """Non-trivial inputs for the family's cases, the same each run (derandomized)."""
    case = data.draw(st.sampled_from([c for c in sorted(CASES) if c.split(":")[0] == family]),
                     label="case")
    streams = data.draw(_inputs(case).filter(_nontrivial), label="inputs")
    check_case(case, streams, "ray", batch_size=4)


def test_every_operator_family_has_cases():
    assert {"span_operators", "window", "count_window", "join", "anti_join", "left_join",
            "union", "group_apply"} <= set(FAMILIES), FAMILIES
