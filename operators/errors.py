"""Records of inputs that cedar did not process as given: dead letters and late events.

No bad row or message is lost silently (docs/errors.md): it is either processed, dropped or adjusted
by a declared policy (a :class:`LateEvent`), or sent to the dead letters with a reason (a
:class:`DeadLetter`).
"""

from __future__ import annotations

from typing import Any, NamedTuple


class DeadLetter(NamedTuple):
    """An input that could not be processed: ``where`` names the source or operator,
    ``reason`` says what was wrong and how to fix it, ``item`` is the rejected row/message."""

    where: str
    reason: str
    item: Any


class LateEvent(NamedTuple):
    """An event that arrived behind the CTI and was ``"dropped"`` or ``"adjusted"`` by the
    source's AdvanceTime policy; ``event`` is the message as sent on (None when dropped)."""

    where: str
    action: str
    reason: str
    item: Any
    event: Any


class OperatorError(RuntimeError):
    """An operator (or a user function inside it) failed; the message names the step."""


class SourceFailed(OperatorError):
    """The data of source ``step`` raised while it was read (a generator that raised, a file
    that could not be read): the query fails, naming the source, as a step whose function
    raised does. The exception that was raised is the ``__cause__``.

        >>> str(SourceFailed("from_rows#0", "from_rows(rows, start='t')", OSError("gone")))
        "step 'from_rows#0' (from_rows(rows, start='t')): reading its source failed: OSError: gone"
    """

    def __init__(self, step: str, describe: str, exc: BaseException) -> None:
        super().__init__(f"step {step!r} ({describe}): reading its source failed: "
                         f"{type(exc).__name__}: {exc}")
        self.step = step
