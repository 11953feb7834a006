"""Windows: every window operator and what they share (docs/windows.md).

==================  ===========================================================================
module              holds
==================  ===========================================================================
``spec``            the window specs (hopping, tumbling, snapshot, count) and policy names
``index``           the hopping grid arithmetic and the WindowIndex entry
``evaluate``        the UDM call and its error policy, the output policies, the output diff
``base``            the WindowIndex machinery hopping and snapshot windows share
``hopping``         hopping and tumbling windows (the semantics, described once)
``snapshot``        snapshot windows, and hopping windows with ``output="compressed"``
``count``           count windows
``session``         session windows
``keyed``           the keyed fast path: a hopping aggregate per key over points, column-wise
``final_output``    ``emit="final"``: a window's rows held back until a CTI makes them final
==================  ===========================================================================

:func:`make_window` builds the operator for a spec.
"""

from __future__ import annotations

from typing import Any, Literal

from ..processor import Processor
from .count import CountWindowOperator
from .hopping import HoppingWindowOperator
from .session import SessionWindowOperator
from .snapshot import SnapshotWindowOperator
from .spec import (
    CLIP_POLICIES,
    OUTPUT_POLICIES,
    CountWindow,
    HoppingWindow,
    SessionWindow,
    SnapshotWindow,
    WindowSpec,
    check_policies,
    count_window,
    hopping_window,
    session_window,
    snapshot_window,
    tumbling_window,
)

__all__ = [
    "CLIP_POLICIES",
    "OUTPUT_POLICIES",
    "CountWindow",
    "CountWindowOperator",
    "HoppingWindow",
    "HoppingWindowOperator",
    "SessionWindow",
    "SessionWindowOperator",
    "SnapshotWindow",
    "SnapshotWindowOperator",
    "WindowSpec",
    "check_policies",
    "count_window",
    "hopping_window",
    "make_window",
    "session_window",
    "snapshot_window",
    "tumbling_window",
]


def make_window(spec: WindowSpec, udm: Any, *, kind: Literal["aggregate", "apply"] = "aggregate",
                clip: str | None = None, output: str | None = None, name: str | None = None,
                on_error: Literal["raise", "dead_letter"] = "raise") -> Processor:
    """The operator applying ``udm`` to every window of ``spec``.

    ``kind="aggregate"``: one output event per non-empty window, payload = the UDM's result.
    ``kind="apply"``: the UDM is a UDO; each payload it returns is one event (a plain function
    returning an iterable is accepted), and a time-sensitive UDO stamps its own events.
    ``clip`` defaults to ``"full"``, ``output`` to ``"window"`` (``"point_end"`` for count
    windows). With ``on_error="dead_letter"`` a window whose UDM raises produces no output
    instead of failing the query, and is recorded in the operator's ``dead_letters`` list once,
    when it is final (a CTI frees it, or the input ends: ``finish()``) — not at all if a later
    change (its bad event retracted) lets the UDM succeed first.
    """
    if isinstance(spec, CountWindow):
        check_policies(spec, clip or "full", output or "point_end")
        return CountWindowOperator(spec, udm, kind=kind, name=name, on_error=on_error)
    if isinstance(spec, SessionWindow):
        return SessionWindowOperator(spec, udm, kind=kind, clip=clip or "full",
                                     output=output or "window", name=name, on_error=on_error)
    clip = clip or "full"
    output = output or "window"
    check_policies(spec, clip, output)
    if isinstance(spec, HoppingWindow) and output != "compressed":
        return HoppingWindowOperator(spec, udm, kind=kind, clip=clip, output=output, name=name,
                                     on_error=on_error)
    if isinstance(spec, (HoppingWindow, SnapshotWindow)):
        return SnapshotWindowOperator(spec, udm, kind=kind, clip=clip, output=output, name=name,
                                      on_error=on_error)
    raise TypeError(f"make_window: expected a HoppingWindow, SnapshotWindow, CountWindow or "
                    f"SessionWindow from operators.windows, got {spec!r}")
