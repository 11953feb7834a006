"""One pass over a source shared by the readers that read it at the same time.

``Stream.from_spark(df, ...)`` reads its batch DataFrame sorted by time on every run (a count,
the sort, one Spark job per range). Several queries built on the **same** source stream and
started together (``deploy(..., hold=True)`` then ``start()``, as ``cedar demo`` does) would
each make Spark read and sort the same table again. A :class:`SharedRead` makes them share one
pass: the first reader starts it, every reader that joins while the pass still holds its first
batch reads the same batches from the beginning, and a batch is dropped as soon as every reader
of the pass has taken it. Each reader therefore sees exactly the whole sequence one read of its
own would have produced (the same table, in the same order: the same CHT), and the batches held
are only those between the slowest and the fastest reader of a pass.

A reader that comes when the pass has already dropped its first batch (a later run, or a
reader started after the others ran ahead) starts a new pass, that is a new read: runs one after
another read the source again, as before.

>>> made = []
>>> def numbers():
...     made.append(1)
...     return iter(range(3))
>>> shared = SharedRead(numbers)
>>> a, b = iter(shared()), iter(shared())  # two readers at the same time: one pass
>>> [next(a), next(b), next(a), next(b), next(a), next(b)], len(made)
([0, 0, 1, 1, 2, 2], 1)
>>> list(a), list(b), list(shared()), len(made)  # a later reader: a new pass
([], [], [0, 1, 2], 2)
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

_END = object()


class _Pass:
    """One read of the source and the batches its readers have not all taken yet."""

    def __init__(self, make: Callable[[], Iterable[Any]]) -> None:
        self.make = make
        self.source: Iterator[Any] | None = None
        self.lock = threading.RLock()  # the buffer and the readers' positions (RLock: a reader
        # dropped by the garbage collector leaves the pass from whatever code runs then)
        self.fill = threading.RLock()  # one reader at a time pulls from the source
        self.held: deque[Any] = deque()
        self.base = 0  # the index of held[0]
        self.done = False
        self.error: BaseException | None = None
        self.closed = False  # every reader left before the end: the read was stopped
        self.at: dict[object, int] = {}  # each reader's next index

    def joinable(self) -> bool:
        return self.base == 0 and self.error is None and not self.closed

    def join(self) -> object:
        token = object()
        self.at[token] = 0
        return token

    def get(self, i: int) -> Any:
        """Item ``i`` of the pass (``_END`` past its end), pulling from the source when no
        reader has pulled it yet."""
        while True:
            with self.lock:
                if i < self.base + len(self.held):
                    return self.held[i - self.base]
                if self.error is not None:
                    raise self.error
                if self.done:
                    return _END
            with self.fill:
                with self.lock:
                    if i < self.base + len(self.held) or self.done or self.error is not None:
                        continue
                try:
                    if self.source is None:
                        self.source = iter(self.make())
                    item = next(self.source)
                except StopIteration:
                    with self.lock:
                        self.done = True
                    continue
                except BaseException as exc:  # every reader of the pass sees the failure
                    with self.lock:
                        self.error = exc
                    raise
                with self.lock:
                    self.held.append(item)

    def moved(self, token: object, i: int | None) -> None:
        """Reader ``token`` is now at ``i`` (None: it left); drop what every reader took."""
        with self.lock:
            if i is None:
                self.at.pop(token, None)
            else:
                self.at[token] = i
            low = min(self.at.values(), default=self.base + len(self.held))
            while self.base < low and self.held:
                self.held.popleft()
                self.base += 1
            if not self.at and self.source is not None and (self.done or self.error):
                self.source = None

    def close(self) -> None:
        """The last reader left before the end: stop the read (a generator's cleanup runs)."""
        with self.fill:
            source, self.source = self.source, None
        close = getattr(source, "close", None)
        if close is not None:
            close()


class SharedRead:
    """A callable that makes a reader of ``make()``'s items; readers that overlap in time
    share one call of ``make`` (see the module's docstring). Copies (a pickled plan) share
    nothing: each starts without a pass."""

    def __init__(self, make: Callable[[], Iterable[Any]]) -> None:
        self.make = make
        self._lock = threading.Lock()
        self._pass: _Pass | None = None

    def __call__(self) -> Iterator[Any]:
        with self._lock:
            current = self._pass
            with current.lock if current is not None else _NO_LOCK:
                if current is None or not current.joinable():
                    current = self._pass = _Pass(self.make)
                token = current.join()
        return self._read(current, token)

    @staticmethod
    def _read(current: _Pass, token: object) -> Iterator[Any]:
        return _Reader(current, token)

    def __getstate__(self) -> dict[str, Any]:
        return {"make": self.make}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["make"])  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"SharedRead({self.make!r})"


class _Reader:
    """One reader of a pass: an iterator that leaves the pass when it ends, is closed or is
    dropped (a reader never read from must not hold the pass's batches)."""

    def __init__(self, current: _Pass, token: object) -> None:
        self.current: _Pass | None = current
        self.token = token
        self.i = 0

    def __iter__(self) -> _Reader:
        return self

    def __next__(self) -> Any:
        current = self.current
        if current is None:
            raise StopIteration
        try:
            item = current.get(self.i)
        except BaseException:
            self.close()
            raise
        if item is _END:
            self._leave(finished=True)
            raise StopIteration
        self.i += 1
        current.moved(self.token, self.i)
        return item

    def close(self) -> None:
        self._leave(finished=False)

    def _leave(self, finished: bool) -> None:
        current, self.current = self.current, None
        if current is None:
            return
        current.moved(self.token, None)
        with current.lock:
            last = not current.at and not current.done
            if last:
                current.closed = True
        if last and not finished:
            current.close()

    def __del__(self) -> None:
        self.close()


class _NoLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NO_LOCK = _NoLock()
