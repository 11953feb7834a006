"""The timeline pictures of docs/windows.md, drawn by cedar itself from traced queries.

    python docs/pictures/make.py            # rewrites docs/pictures/*.svg

Each picture is a small query over the events of the page's examples, run inline with a
trace (``collect(trace=...)``) and drawn with :func:`topology.seeing.timeline.timeline`: the input
events as bars, the windows as brackets, the output rows, the CTIs as dashed lines and the
retracted parts struck through. The SVGs carry no date and a fixed hash salt, so the same code
draws the same file.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # run from anywhere in the repo

from operators.aggregates import Count  # noqa: E402
from operators.events import Cti, Insert, Retract  # noqa: E402
from topology import Stream  # noqa: E402
from topology.seeing.timeline import timeline  # noqa: E402

#: the page's example: a [1, 5), b [4, 12), c [14, 16), then a CTI past them all
EVENTS = [Insert("a", 1, 5, "a"), Insert("b", 4, 12, "b"), Insert("c", 14, 16, "c"), Cti(30)]
#: speculative output corrected: [0, 5) counts a alone until b arrives (its row is retracted
#: and replaced), then b is shortened to [4, 8) before the CTI at 10
CORRECTED = [Insert("a", 1, 5, "a"), Cti(1), Insert("b", 4, 12, "b"), Cti(3),
             Retract("b", 4, 12, 8, "b"), Cti(10), Insert("c", 14, 16, "c"), Cti(30)]

#: sessions with a gap of 5: a·1 b·3 and c·11 are two sessions until the late d·7 bridges them
SESSIONS = [Insert("a", 1, 2, "a"), Insert("b", 3, 4, "b"), Insert("c", 11, 12, "c"), Cti(2),
            Insert("d", 7, 8, "d"), Cti(30)]

PICTURES: dict[str, tuple[Callable[[Stream], Stream], list, str]] = {
    "session.svg": (lambda s: s.session_window(5).aggregate(Count()), SESSIONS, "session"),
    "hopping.svg": (lambda s: s.hopping_window(10, 5).aggregate(Count()), EVENTS, "hopping"),
    "snapshot.svg": (lambda s: s.snapshot_window().aggregate(Count()), EVENTS, "snapshot"),
    "speculative.svg": (lambda s: s.tumbling_window(5).aggregate(Count()), CORRECTED,
                        "tumbling"),
}


def make(out_dir: str = HERE) -> list[str]:
    """Draw every picture into ``out_dir``; return the paths written."""
    import matplotlib

    matplotlib.rcParams["svg.hashsalt"] = "cedar-docs"  # stable element ids
    written = []
    for name, (query, events, step) in PICTURES.items():
        with tempfile.TemporaryDirectory() as trace:
            query(Stream.from_events(events)).collect(runtime="inline", trace=trace)
            fig = timeline(trace, step)
        path = os.path.join(out_dir, name)
        fig.savefig(path, metadata={"Date": None})
        written.append(path)
    return written


if __name__ == "__main__":
    for path in make():
        print(path)
