"""How the runtimes feed a plan's sources: items cut into batches, sources taken in turn.

Every runtime (inline, ``collect()`` on Ray, the checkpointing supervisor of ``deploy()``)
feeds its sources the same way: one batch of each live source in turn, so that no source runs
ahead of the others by more than a batch (their CTIs advance together, and a join or union
downstream holds little state). :func:`round_robin` is that loop; :data:`END` marks a source
that has run out.

    >>> [[(i, b) for i, b in r] for r in round_robin([iter("ab"), iter("x")])]
    [[(0, 'a'), (1, 'x')], [(0, 'b'), (1, END)], [(0, END)]]
    >>> list(chunks(range(5), 2))
    [[0, 1], [2, 3], [4]]

A source's data that raises while it is read fails the query naming that source
(:func:`guarded`), on every runtime.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Final

from .errors import SourceFailed


class _End:
    __slots__ = ()

    def __repr__(self) -> str:
        return "END"


#: What :func:`round_robin` gives for a source that has run out (once per source).
END: Final[Any] = _End()


def round_robin(feeds: Sequence[Iterator[Any]]) -> Iterator[list[tuple[int, Any]]]:
    """Rounds of ``(index, next item)`` over the feeds still live, in index order; a feed's
    last entry is ``(index, END)``. The rounds end when every feed has ended."""
    live = list(range(len(feeds)))
    while live:
        round_: list[tuple[int, Any]] = []
        for i in list(live):
            item = next(feeds[i], END)
            if item is END:
                live.remove(i)
            round_.append((i, item))
        yield round_


def chunks(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    """Consecutive lists of at most ``size`` items."""
    if isinstance(items, (list, tuple)):
        for i in range(0, len(items), size):
            yield list(items[i:i + size])
        return
    buf: list[Any] = []
    for item in items:
        buf.append(item)
        if len(buf) >= size:
            yield buf
            buf = []
    if buf:
        yield buf


def guarded(items: Iterable[Any], step: str, describe: str) -> Iterator[Any]:
    """``items`` as they come; an exception raised while they are read (a generator of the
    user's that raised) becomes :class:`~operators.errors.SourceFailed` naming source
    ``step``, with the exception as its cause. Closing it before its end closes ``items`` (a
    streaming source releases its query).

        >>> def broken():
        ...     yield 1
        ...     raise ValueError("no meter")
        >>> feed = guarded(broken(), "from_rows#0", "from_rows(rows)")
        >>> next(feed)
        1
        >>> try:
        ...     next(feed)
        ... except SourceFailed as exc:
        ...     print(f"{exc.step}: {exc}")
        from_rows#0: step 'from_rows#0' (from_rows(rows)): reading its source failed: ...
    """
    try:
        yield from items  # (delegated in C: no Python step per item; close() reaches items)
    except Exception as exc:
        raise SourceFailed(step, describe, exc) from exc
