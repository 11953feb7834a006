"""The test kit: stream builders, a checked operator runner, CHT assertions and Hypothesis
strategies that generate *valid* physical streams.

Every operator test has the same shape (Trill's habit): an input stream, the operator, and an
assertion that the output is well formed and equivalent (same CHT) to what the from-scratch
reference in :mod:`tests.reference` computes from the input's CHT.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st

from operators.cht import check_equivalent, to_cht, validate
from operators.events import MAX_TIME, Cti, Insert, Message, Retract
from operators.processor import Processor

# -- Hypothesis profiles ------------------------------------------------------------------------
#: Examples per property test that runs in process, by profile: ``dev`` for the default tier
#: (the README's ``python -m pytest``), ``ci`` for the full run (``.ci/run``), ``nightly`` for a
#: long hunt. Pick one with ``--hypothesis-profile=NAME`` or ``CEDAR_PROFILE=NAME``.
PROFILES = {"dev": 40, "ci": 200, "nightly": 5000}
#: How many times costlier one example is than one in process, by the settings a test takes:
#: ``PROPERTY`` (an operator or query in process), ``HEAVY`` (a large input, a process of its
#: own), ``ON_RAY`` (a query on Ray: each example deploys actors; or one case of a table of a
#: hundred). A test never names a count.
COSTS = {"PROPERTY": 1, "HEAVY": 5, "ON_RAY": 20}
#: The fewest examples any property test runs, whatever its cost and profile.
FLOOR = 3

for _name, _examples in PROFILES.items():
    settings.register_profile(_name, max_examples=_examples, deadline=None)
settings.load_profile(os.environ.get("CEDAR_PROFILE", "dev"))


def examples(cost: str = "PROPERTY") -> int:
    """The examples a property test of ``cost`` (a key of :data:`COSTS`) runs under the
    profile loaded now."""
    return max(FLOOR, settings().max_examples // COSTS[cost])


def scale() -> int:
    """How many times the loaded profile's examples are ``ci``'s (at least 1): what a test's
    time limit is multiplied by."""
    return max(1, settings().max_examples // PROFILES["ci"])


def __getattr__(name: str) -> Any:
    """``PROPERTY``, ``HEAVY`` and ``ON_RAY``: the settings of a property test of that cost
    under the loaded profile, read when a test module is imported (after pytest has loaded
    ``--hypothesis-profile``). Use as ``@ON_RAY`` or ``@settings(ON_RAY, derandomize=True)``."""
    if name in COSTS:
        return settings(max_examples=examples(name), deadline=None)
    raise AttributeError(name)

INF = MAX_TIME


# -- builders ---------------------------------------------------------------------------------
def ins(id: Any, start: int, end: int, payload: Any = None) -> Insert:
    return Insert(id, start, end, payload)


def ret(id: Any, start: int, end: int, new_end: int, payload: Any = None) -> Retract:
    return Retract(id, start, end, new_end, payload)


def cti(t: int) -> Cti:
    return Cti(t)


def assert_equivalent(actual: Sequence[Any], expected: Sequence[Any], digits: int = 9) -> None:
    """Assert equal CHTs (messages or rows on either side); the error shows the differences."""
    check_equivalent(actual, expected, digits)


# -- the checked runner -------------------------------------------------------------------------
def run_operator(
    factory: Callable[[], Processor],
    messages: Iterable[Message] | Iterable[tuple[int, Message]],
    *,
    seed: int | None = 0,
    restore_at: int | None = None,
    check_input: bool = True,
) -> list[Message]:
    """Run one operator over a stream (or ``(port, message)`` pairs for multi-input operators)
    in random batch sizes, call its ``_check()`` after every batch, and validate the output.

    With ``restore_at=k`` the operator is checkpointed after input message k and the rest of
    the stream is fed to a fresh operator restored from that snapshot: the output must not
    notice.
    """
    items = list(messages)
    tagged = [m if isinstance(m, tuple) and not isinstance(m, (Insert, Retract, Cti))
              else (0, m) for m in items]
    op = factory()
    if check_input:
        for port in range(op.n_inputs):
            validate([m for p, m in tagged if p == port], name=f"input {port}")
    rng = random.Random(seed)
    out: list[Message] = []
    i = 0
    restored = restore_at is None
    while i < len(tagged):
        if not restored and i >= restore_at:  # type: ignore[operator]
            restored = True
            state = op.snapshot()
            op = factory()
            op.restore(state)
        port = tagged[i][0]
        size = 1 if seed is None else rng.choice((1, 1, 2, 3, 8))
        batch = []
        while i < len(tagged) and len(batch) < size and tagged[i][0] == port:
            batch.append(tagged[i][1])
            i += 1
        out.extend(op.process(batch, port))
        op._check()
    validate(out, name=f"output of {op.name}")
    return out


# -- Hypothesis strategies ---------------------------------------------------------------------
@st.composite
def physical_streams(
    draw: Any,
    payloads: st.SearchStrategy[Any] = st.integers(0, 5),  # noqa: B008 - immutable
    max_steps: int = 30,
    span: int = 30,
    max_length: int = 20,
    edges: bool = True,
    retractions: bool = True,
    final_cti: bool = True,
    id_prefix: str = "e",
) -> list[Message]:
    """A valid physical stream: inserts out of order (any start at or after the current CTI,
    up to ``span`` ahead), point, interval and edge events, edge events closed later, lifetime
    corrections (shorten and lengthen), full retractions and advancing CTIs. With
    ``final_cti`` it ends with a CTI at the latest finite endpoint, which finalizes every event's
    last tick (what a source's end emits; an event ending exactly there could still be
    lengthened).
    """
    cti_time = 0
    live: dict[str, list[Any]] = {}
    out: list[Message] = []
    n = 0
    kinds = ["insert"] * 5 + (["retract"] * 3 if retractions else []) + ["cti"] * 2
    for _ in range(draw(st.integers(0, max_steps))):
        kind = draw(st.sampled_from(kinds))
        if kind == "insert":
            start = draw(st.integers(cti_time, cti_time + span))
            shape = draw(st.sampled_from(["point", "interval", "interval"]
                                         + (["edge"] if edges else [])))
            end = (start + 1 if shape == "point" else INF if shape == "edge"
                   else start + draw(st.integers(1, max_length)))
            payload = draw(payloads)
            eid = f"{id_prefix}{n}"
            n += 1
            live[eid] = [start, end, payload]
            out.append(Insert(eid, start, end, payload))
        elif kind == "retract":
            open_ids = sorted(i for i, (s, e, _) in live.items() if e >= cti_time)
            if not open_ids:
                continue
            eid = draw(st.sampled_from(open_ids))
            s, e, p = live[eid]
            choices = [max(cti_time, s + 1) + k for k in range(max_length)]
            if s >= cti_time:
                choices.append(s)  # full retraction
            if e != INF:
                choices.append(INF)  # reopen: a correction can lengthen to ∞ as well
            new_end = draw(st.sampled_from([c for c in choices if c != e]))
            out.append(Retract(eid, s, e, new_end, p))
            if new_end == s:
                del live[eid]
            else:
                live[eid][1] = new_end
        else:
            cti_time = draw(st.integers(cti_time, cti_time + span // 2))
            out.append(Cti(cti_time))
    if final_cti:
        horizon = max([cti_time] + [e if e != INF else s + 1 for s, e, _ in live.values()])
        out.append(Cti(horizon))
    return out


def final_time(messages: Sequence[Message]) -> int | None:
    """The last CTI of a stream, if any."""
    for msg in reversed(messages):
        if type(msg) is Cti:
            return msg.time
    return None


def cht_of(messages: Iterable[Message]) -> list[tuple[int, int, Any]]:
    return to_cht(messages)
