"""Windows: every window operator and what they share (docs/windows.md).

==================  ===========================================================================
module              holds
==================  ===========================================================================
``spec``            the window specs (hopping, tumbling, snapshot, count, session), the
                    :class:`WindowPolicy` (clip, output, emit) every operator takes and the
                    :class:`ResolvedPolicy` it is resolved into, once, for its spec
``index``           the hopping grid arithmetic and the WindowIndex entry
``evaluate``        the UDM call and its error policy, the output diff
``window_operator`` the WindowIndex machinery hopping and snapshot windows share
``hopping``         hopping and tumbling windows (the semantics, described once)
``snapshot``        snapshot windows, and hopping windows with ``output="compressed"``
``count``           count windows
``session``         session windows
``keyed``           the keyed fast path: a hopping aggregate per key over points, column-wise
``keyed_columns``   what the keyed paths share: key codes, (window, key) groups of a column
                    batch, number columns
``keyed_session``   the keyed fast path of session windows
``final_output``    ``emit="final"``: a window's rows held back until a CTI makes them final
==================  ===========================================================================

:func:`make_window` builds the operator for a spec.
"""

from __future__ import annotations

from typing import Any, Literal

from ..processor import Processor
from .count import CountWindowOperator
from .final_output import FinalOutput
from .hopping import HoppingWindowOperator
from .session import SessionWindowOperator
from .snapshot import SnapshotWindowOperator
from .spec import (
    CLIP_POLICIES,
    DEFAULT_POLICY,
    EMIT_POLICIES,
    OUTPUT_POLICIES,
    OUTPUTS,
    CountWindow,
    HoppingWindow,
    OutputPolicy,
    PolicyArg,
    ResolvedPolicy,
    SessionWindow,
    SnapshotWindow,
    WindowPolicy,
    WindowSpec,
    count_window,
    default_output,
    hopping_window,
    session_window,
    snapshot_window,
    tumbling_window,
)

__all__ = [
    "CLIP_POLICIES",
    "DEFAULT_POLICY",
    "EMIT_POLICIES",
    "OUTPUTS",
    "OUTPUT_POLICIES",
    "CountWindow",
    "CountWindowOperator",
    "HoppingWindow",
    "HoppingWindowOperator",
    "OutputPolicy",
    "PolicyArg",
    "ResolvedPolicy",
    "SessionWindow",
    "SessionWindowOperator",
    "SnapshotWindow",
    "SnapshotWindowOperator",
    "WindowPolicy",
    "WindowSpec",
    "count_window",
    "default_output",
    "hopping_window",
    "make_window",
    "session_window",
    "snapshot_window",
    "tumbling_window",
]


def make_window(spec: WindowSpec, udm: Any, *, kind: Literal["aggregate", "apply"] = "aggregate",
                policy: PolicyArg | None = None, clip: str | None = None,
                output: str | None = None, name: str | None = None,
                on_error: Literal["raise", "dead_letter"] = "raise") -> Processor:
    """The operator applying ``udm`` to every window of ``spec`` under ``policy``
    (:class:`WindowPolicy`; ``clip=`` and ``output=`` are a shorter way to give its first two).

    ``kind="aggregate"``: one output event per non-empty window, payload = the UDM's result.
    ``kind="apply"``: the UDM is a UDO; each payload it returns is one event (a plain function
    returning an iterable is accepted), and a time-sensitive UDO stamps its own events.
    ``clip`` defaults to ``"full"``, ``output`` to ``"window"`` (``"point_end"`` for count
    windows); with ``emit="final"`` the operator is wrapped in a :class:`FinalOutput`. With
    ``on_error="dead_letter"`` a window whose UDM raises produces no output
    instead of failing the query, and is recorded in the operator's ``dead_letters`` list once,
    when it is final (a CTI frees it, or the input ends: ``finish()``) — not at all if a later
    change (its bad event retracted) lets the UDM succeed first.
    """
    if policy is None:
        policy = WindowPolicy.of(clip, output)
    elif clip is not None or output is not None:
        raise TypeError("make_window: give policy=WindowPolicy(...) or clip=/output=, not both")
    if not isinstance(policy, (WindowPolicy, ResolvedPolicy)):
        raise TypeError(f"make_window(policy={policy!r}): give an "
                        f"operators.windows.WindowPolicy")
    resolved = policy.resolve(spec)
    op: Processor
    if isinstance(spec, CountWindow):
        op = CountWindowOperator(spec, udm, kind=kind, policy=resolved, name=name,
                                 on_error=on_error)
    elif isinstance(spec, SessionWindow):
        op = SessionWindowOperator(spec, udm, kind=kind, policy=resolved, name=name,
                                   on_error=on_error)
    elif isinstance(spec, HoppingWindow) and not resolved.compressed:
        op = HoppingWindowOperator(spec, udm, kind=kind, policy=resolved, name=name,
                                   on_error=on_error)
    elif isinstance(spec, (HoppingWindow, SnapshotWindow)):
        op = SnapshotWindowOperator(spec, udm, kind=kind, policy=resolved, name=name,
                                    on_error=on_error)
    else:
        raise TypeError(f"make_window: expected a HoppingWindow, SnapshotWindow, CountWindow or "
                        f"SessionWindow from operators.windows, got {spec!r}")
    if not resolved.final:
        return op
    return FinalOutput(op, final_at_end=resolved.final_at_end)
