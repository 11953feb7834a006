"""What ``cedar demo`` prints: no library chatter, and a short 'what to try next'."""

from __future__ import annotations

import sys

NOTE = ("WARNING: 8 PYTHON worker processes have been started on node: abc with address: "
        "192.0.2.2, which is 4x the maximum expected startup concurrency (2).")


def test_ray_worker_start_notes_are_dropped_and_other_messages_kept(capsys, monkeypatch):
    # Ray's driver prints what its raylet sends through print_to_stdstream; the demo wraps it
    from ray._private import worker

    from topology.app.demo import _without_worker_notes

    monkeypatch.setattr(worker, "print_to_stdstream", worker.print_to_stdstream)
    _without_worker_notes()
    _without_worker_notes()  # once is enough: a second call does not wrap again
    show = worker.print_to_stdstream
    assert show.cedar_quiet and not getattr(show.__closure__[0].cell_contents, "cedar_quiet",
                                            False)
    show({"lines": [NOTE], "pid": "raylet", "is_err": False}, ignore_prefix=False)
    show({"lines": [NOTE, "an actor died: step where#1"], "pid": "raylet", "is_err": False},
         ignore_prefix=False)
    sys.stdout.flush()
    out = capsys.readouterr().out
    assert "worker processes have been started" not in out
    assert "an actor died: step where#1" in out


def test_the_demo_ends_with_what_to_try_next(capsys):
    from topology.app.demo import print_next_steps

    print_next_steps("out", {"a picture": "out/meter-readings.svg"})
    text = capsys.readouterr().out
    assert "what to try next" in text
    for command in ("cedar ui", "cedar why NAME", "out/*.svg", "cedar timeline"):
        assert command in text
    assert max(len(line) for line in text.splitlines()) <= 100
