"""The matching of :class:`operators.detect.Detect` (a base class of it): an attempt from a
row, the backtracking program run over the rows, and the output difference a change makes.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Hashable
from typing import Any

from .detect_rows import (
    BITS,
    END,
    LEN,
    OUT,
    PAYLOAD,
    REACH,
    SEQ,
    START,
    WANTS,
    Match,
    Row,
    new_tuple,
    same_output,
)
from .events import FreshId, Insert, Message, Retract
from .pattern import JMP, MATCH, PROGRESS, SAVE, SPLIT, SYM


class Matching:
    """The matching's methods, on the operator's state."""

    # the state the operator holds (operators.detect.Detect.__init__ makes it)
    keys: dict[Hashable, list[Any]]
    ids: dict[Hashable, tuple[Hashable, tuple[Any, ...]]]
    seq: int
    minted: int
    within: int
    final: bool
    key: Callable[[Any], Hashable] | None
    tie: Callable[[Any], Any] | None
    measures: Callable[[Any], Any] | None
    preds: tuple[Callable[[Any, Any], Any] | None, ...]
    program: Any
    index: dict[str, int]
    empty: Any
    touched: set[Hashable]
    pattern: str

    # -- matching -----------------------------------------------------------------------------
    def _change(self, ks: list[Any], at: int, news: list[tuple[Any, ...]], deleted: bool,
                out: list[Message]) -> None:
        """Rows of the order keys ``news`` (sorted) were inserted, the first at position
        ``at`` (or one was deleted from there): re-run the attempts they may change and
        output the difference."""
        rows, recs, reaching = ks
        kk, last_k = news[0], news[-1]
        s_k = kk[0]
        within = self.within
        # the earliest attempt that read the row's place or wanted a row there: one that
        # read past its first row or wanted more (the others read only their own row)
        p = at
        for seq, first in list(reaching.items()):
            rec = recs.get(seq)
            if rec is None or not (rec[WANTS] or rec[REACH] != first):
                del reaching[seq]  # (freed, covered by a match, or no longer reaching)
            elif first < kk and (kk <= rec[REACH] or (
                    not deleted and rec[WANTS] and s_k < first[0] + within)):
                q = bisect_left(rows, first, 0, p)
                if q < p:
                    p = q
        n = len(rows)
        pos = p
        while pos < n:
            r = rows[pos]
            rec = recs.get(r[SEQ])
            if rec is not None:
                rk = r[:3]
                if rk > last_k:
                    break  # the old attempt sequence from here on is the new one
                # (the first change after the attempt's row is the one it may have read)
                c = news[bisect_right(news, rk)] if len(news) > 1 else kk
                if not (c <= rec[REACH] or (
                        not deleted and rec[WANTS] and c[0] < r[START] + within)):
                    # before the change and did not read it: as it was
                    pos = pos + 1 if rec[END] is None else bisect_left(rows, rec[END], pos) + 1
                    continue
            new = self._attempt(rows, pos)
            old_out = None if rec is None else rec[OUT]
            new_out = new[OUT]
            if not self.final:
                if old_out is not None:
                    if new_out is not None and same_output(old_out, new_out):
                        new[OUT] = new_out = old_out
                    else:
                        self._retract(old_out, out)
                if new_out is not None and new_out is not old_out:
                    oid = self._mint()
                    new[OUT] = (*new_out[:3], oid)
                    out.append(new_tuple(Insert, (oid, *new_out[:3])))
            recs[r[SEQ]] = new
            if new[WANTS] or new[REACH] != r[:3]:
                reaching[r[SEQ]] = r[:3]
            if new[END] is None:
                pos += 1
                continue
            last = pos + new[LEN]
            for x in range(pos + 1, last + 1):
                covered = recs.pop(rows[x][SEQ], None)
                if covered is not None and covered[OUT] is not None and not self.final:
                    self._retract(covered[OUT], out)
            pos = last + 1
            new.pop()  # (the length, needed only here)

    def _attempt(self, rows: list[Row], i: int) -> list[Any]:
        """The match attempt from ``rows[i]``: a record ``[end, reach, wants, out, length]``
        (``length``: rows after the first, a match only)."""
        first = rows[i]
        code, preds = self.program.code, self.preds
        if code[0][0] == SYM:  # most patterns open with a symbol: a row it refuses is done
            a = code[0][1]
            pred = preds[a]
            if pred is not None:
                b = first[BITS] >> 2 * a
                if not (b & 2 if b & 1 else self._test(pred, a, first[PAYLOAD], self.empty)):
                    return [None, first[:3], False, None]
        j = bisect_left(rows, (first[START] + self.within,), i)
        syms: list[int] = []
        view = Match(self.index, rows, i, syms)
        stack: list[tuple[int, int, tuple[int, ...]]] = []
        regs: tuple[int, ...] = (-1,) * self.program.registers
        pc, pos, reach, wants = 0, i, i, False
        while True:
            op, a, b = code[pc]
            if op == SYM:
                if pos < j:
                    if pos > reach:
                        reach = pos
                    pred = preds[a]
                    if pred is None or (
                            (rows[pos][BITS] >> 2 * a) & 2 if (rows[pos][BITS] >> 2 * a) & 1
                            else self._test(pred, a, rows[pos][PAYLOAD], view)):
                        syms.append(a)
                        pos += 1
                        pc += 1
                        continue
                else:
                    wants = True
            elif op == SPLIT:
                stack.append((b, pos, regs))
                pc = a
                continue
            elif op == JMP:
                pc = a
                continue
            elif op == SAVE:
                regs = (*regs[:a], pos, *regs[a + 1:])
                pc += 1
                continue
            elif op == PROGRESS:
                if regs[a] != pos:
                    pc += 1
                    continue
            elif op == MATCH and pos > i:
                last = rows[pos - 1]
                bound = {s: view[s] for s in self.index}
                payload = bound if self.measures is None else self.measures(bound)
                return [last[:3], rows[reach][:3], wants,
                        (first[START], last[START] + 1, payload, None), pos - 1 - i]
            if not stack:
                return [None, rows[reach][:3], wants, None]
            pc, pos, regs = stack.pop()
            del syms[pos - i:]

    def _test(self, pred: Callable[[Any, Any], Any], sym: int, payload: Any,
              view: Match) -> bool:
        try:
            return bool(pred(payload, view))
        except Exception as exc:
            name = self.program.names[sym]
            text = (f"detect({self.pattern!r}): define[{name!r}] "
                    f"({getattr(pred, '__name__', pred)!s}) raised on the payload {payload!r}: "
                    f"{exc.args[0] if isinstance(exc, KeyError) and exc.args else exc}")
            # the same kind of error (a KeyError's message would be quoted: a LookupError)
            kind = LookupError if isinstance(exc, KeyError) else type(exc)
            try:
                wrapped = kind(text)
            except Exception:  # noqa: BLE001 - an exception class with other arguments
                wrapped = RuntimeError(text)
            raise wrapped from exc

    def _mint(self) -> FreshId:
        oid = FreshId(self.minted, 0)
        self.minted += 1
        return oid

    def _retract(self, o: tuple[Any, ...], out: list[Message]) -> None:
        out.append(new_tuple(Retract, (o[3], o[0], o[1], o[0], o[2])))
