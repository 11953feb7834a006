"""What every window operator does with a window once it knows its members: call the UDM under
its error policy, stamp the results under the output policy, and correct the output sent
before by the smallest difference.

* :class:`WindowUdm` checks a UDM against the operator's ``kind`` (aggregate: one result per
  window; apply: a UDO, zero or more) and :class:`~operators.windows.spec.WindowPolicy`,
  calls it (incrementally from a state, or over the members), checks what it returned, and
  turns an exception into an :class:`~operators.errors.OperatorError` (``on_error="raise"``)
  or a failure reason kept with the window until it is final, then a
  :class:`~operators.errors.DeadLetter`.
* the :class:`~operators.windows.spec.OutputPolicy` of the window's resolved policy
  (:class:`~operators.windows.spec.ResolvedPolicy`) stamps a window's results as rows.
* :func:`diff` turns a window's earlier rows and its new ones into retractions and inserts.

The hopping, snapshot, count and keyed operators all use these, so changing what a policy
stamps, how a failing UDM is reported or how output is corrected is an edit of this file.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable
from typing import Any, TypeVar

from ..errors import DeadLetter, OperatorError
from ..events import FreshId, Insert, Message, Retract, fmt_time
from ..payloads import equal, freeze
from ..udm import UDM, FunctionAggregate, Operator, Window, resolve
from .spec import OUTPUTS, OutputPolicy, Rec, ResolvedPolicy, WindowPolicy

__all__ = ["KINDS", "ON_ERROR", "Ids", "Rec", "WindowUdm", "between", "diff", "net_change",
           "not_behind", "stored_event", "unchanged_dropped"]

#: The window a row is about (a Win, or a key standing for one): diff gives back what it got.
_W = TypeVar("_W", bound=Hashable)

KINDS = ("aggregate", "apply")
ON_ERROR = ("raise", "dead_letter")


class _FunctionOperator(Operator):
    """A plain function of a list of payloads returning an iterable of payloads, as a UDO."""

    def __init__(self, fn: Callable[[list[Any]], Iterable[Any]]) -> None:
        self.fn = fn

    def compute(self, values: list[Any]) -> Iterable[Any]:
        return self.fn(values)

    @property
    def udm_name(self) -> str:
        return getattr(self.fn, "__qualname__", repr(self.fn))


class WindowUdm:
    """A window operator's UDM with its kind, window policy (resolved for its window:
    :meth:`~operators.windows.spec.WindowPolicy.resolve`) and error policy; ``output`` is the
    :class:`~operators.windows.spec.OutputPolicy` that stamps its results."""

    def __init__(self, udm: Any, kind: str, policy: ResolvedPolicy | WindowPolicy,
                 on_error: str = "raise") -> None:
        """``policy`` may be a WindowPolicy with its output filled in
        (:meth:`~operators.windows.spec.WindowPolicy.for_window`): the logical node checks
        its UDM so, where the query names it."""
        if kind not in KINDS:
            raise ValueError(f"kind={kind!r}: use 'aggregate' (one result per window) or "
                             f"'apply' (a UDO: one event per returned payload)")
        if on_error not in ON_ERROR:
            raise ValueError(f"on_error={on_error!r}: use 'raise' or 'dead_letter'")
        output: OutputPolicy
        if isinstance(policy, ResolvedPolicy):
            output = policy.output
        elif policy.output is None:
            raise ValueError(f"WindowUdm needs the policy for its window, resolved "
                             f"(WindowPolicy.resolve(spec)); got {policy!r}")
        else:
            output = OUTPUTS[policy.output]
        try:
            u: UDM = resolve(udm)
        except TypeError as exc:
            raise TypeError(f"udm={udm!r}: {exc}") from None
        if kind == "aggregate" and u.is_operator:
            raise ValueError(f"{u.udm_name} is a user-defined operator (zero or more events per "
                             f"window); use .apply(...) (kind='apply') instead of .aggregate")
        if kind == "apply" and not u.is_operator:
            if type(u) is not FunctionAggregate:
                raise ValueError(f"{u.udm_name} is an aggregate (one result per window); use "
                                 f".aggregate(...) (kind='aggregate') instead of .apply")
            u = _FunctionOperator(u.fn)
        if output.stamps and not (u.is_operator and u.time_sensitive):
            raise ValueError(f"output={output.name!r} keeps the timestamps a time-sensitive UDO "
                             f"stamps on its events, but {u.udm_name} is not a "
                             f"TimeSensitiveOperator; use output='window' or 'point_end'")
        if output.compressed and u.time_sensitive:
            raise ValueError(f"output='compressed' lets consecutive windows with the same member "
                             f"events share one row, which needs a time-insensitive UDM; "
                             f"{u.udm_name} is time-sensitive: use output='window' or "
                             f"'point_end'")
        self.udm = u
        self.kind = kind
        self.policy = policy
        self.output = output
        self.on_error = on_error
        self.name = u.udm_name
        self.time_sensitive = u.time_sensitive
        #: results are (start, end, payload) events (a time-sensitive UDO's)
        self.stamped = u.time_sensitive and u.is_operator
        self.incremental = u.incremental

    # -- calls -------------------------------------------------------------------------------
    def initial(self, views: list[Any]) -> Any:
        """A fresh incremental state holding ``views``."""
        state = self.udm.initial_state()  # type: ignore[attr-defined]
        return self.udm.add(state, views) if views else state  # type: ignore[attr-defined]

    def result(self, state: Any, window: Window) -> list[Any]:
        """The results of an incremental UDM's ``state`` over ``window``."""
        return self.results(self.udm.window_result(state, window),  # type: ignore[attr-defined]
                            window)

    def compute(self, views: list[Any], window: Window) -> list[Any]:
        """The results of a non-incremental UDM over the members as it sees them."""
        udm: Any = self.udm
        return self.results(udm.compute(views, window) if self.time_sensitive
                            else udm.compute(views), window)

    def results(self, raw: Any, window: Window) -> list[Any]:
        """What one call returned, as a list of results (checked for ``apply``)."""
        if self.kind == "aggregate":
            return [raw]
        if isinstance(raw, (str, bytes, dict)) or not hasattr(raw, "__iter__"):
            raise TypeError(f"returned {raw!r}, not an iterable of payloads; with apply() the "
                            f"UDM must return a list (use aggregate() for one result)")
        if not self.stamped:
            return list(raw)
        out = []
        keeps = self.output.stamps
        for ev in raw:
            try:
                s, e, p = ev
            except (TypeError, ValueError):
                raise TypeError(f"a TimeSensitiveOperator must return (start, end, payload) "
                                f"tuples, got {ev!r}") from None
            if keeps:  # (under window/point_end only the payload is used)
                if not (isinstance(s, int) and isinstance(e, int)) or e <= s:
                    raise ValueError(f"the UDO returned the event {ev!r}; it needs int ticks "
                                     f"with end > start")
                if self.output.keep and s < window.start:
                    raise ValueError(f"output='keep' rejects the event [{fmt_time(s)}, "
                                     f"{fmt_time(e)}) {p!r}: it starts before its window's "
                                     f"start {fmt_time(window.start)} and could contradict an "
                                     f"output CTI; stamp events at or after the window start, "
                                     f"or use output='clip'")
            out.append((s, e, p))
        return out

    # -- errors ------------------------------------------------------------------------------
    def reason(self, where: str, what: str, window: Window, about: str,
               exc: Exception) -> str:
        """Why the UDM failed: in ``what`` on ``window`` of operator ``where``; ``about``
        describes the window's content (e.g. "holding 3 events")."""
        return (f"window operator {where!r}: UDM {self.name!r} failed in {what} on window "
                f"[{fmt_time(window.start)}, {fmt_time(window.end)}) {about}: "
                f"{type(exc).__name__}: {exc}")

    def error(self, where: str, what: str, window: Window, about: str,
              exc: Exception) -> OperatorError:
        """The error that stops the query (``on_error="raise"``)."""
        return OperatorError(self.reason(where, what, window, about, exc) + " (fix the UDM, or "
                             "pass on_error='dead_letter' to record failing windows in "
                             "dead_letters)")

    def failed(self, where: str, what: str, window: Window, about: str,
               exc: Exception) -> str:
        """The UDM raised: raise :meth:`error` (``on_error="raise"``) or return the reason,
        to keep with the window until it is final (then :meth:`dead_letter`)."""
        if self.on_error == "raise":
            raise self.error(where, what, window, about, exc) from exc
        return self.reason(where, what, window, about, exc)

    @staticmethod
    def dead_letter(where: str, reason: str, window: Window, members: list[Rec],
                    *more: Any) -> DeadLetter:
        """The dead letter of a final window the UDM failed on: its item is the window, its
        ``(start, end, payload)`` members and anything ``more`` the operator knows."""
        return DeadLetter(where=where, reason=reason, item=(window, members, *more))


class Ids:
    """Output ids of an operator whose output events are not its input's: ``FreshId(name,
    n)`` for n = 0, 1, ..., never equal to another operator's or a user's."""

    __slots__ = ("name", "next_id")

    def __init__(self, name: str) -> None:
        self.name = name
        self.next_id = 0

    def mint(self) -> FreshId:
        oid = FreshId(self.name, self.next_id)
        self.next_id += 1
        return oid


def diff(pool: list[tuple[Any, int, int, Any, _W]], new: list[tuple[_W, Rec]],
         ids: Ids, sent: Callable[[_W, tuple[Any, int, int, Any]], None]
         ) -> list[tuple[Message, _W]]:
    """Correct earlier output ``pool`` (``(id, start, end, payload, window)`` rows sent before)
    to the ``new`` rows (``(window, (start, end, payload))``) by the smallest difference: a row
    that stays is not touched, a row that only changes its end is shortened or lengthened by
    one retraction, the rest are retracted fully and inserted anew under fresh ids. Payloads
    match exactly (``freeze(exact=True)``): a result that became ``2.0`` from ``2``, or
    ``0`` from ``-0.0``, is corrected, so the output is the result from scratch whatever the
    order of the events.
    ``sent(window, row)`` is told every row that stands for the window afterwards. Returns the
    messages with the window each is about (retractions first, then inserts)."""
    if not pool:  # new windows only: nothing to compare with
        return [(_insert(ids, w, row, sent), w) for w, row in new]
    exact: dict[Any, list[int]] = defaultdict(list)
    for i, (_, s, e, p, _w) in enumerate(pool):
        exact[(s, e, freeze(p, exact=True))].append(i)
    used = [False] * len(pool)
    rest: list[tuple[_W, Rec, Any]] = []
    for w, (s, e, p) in new:
        fp = freeze(p, exact=True)
        hits = exact.get((s, e, fp))
        if hits:
            i = hits.pop()
            used[i] = True
            sent(w, pool[i][:4])
        else:
            rest.append((w, (s, e, p), fp))
    by_start: dict[Any, list[int]] = defaultdict(list)
    for i, (_, s, _e, p, _w) in enumerate(pool):
        if not used[i]:
            by_start[(s, freeze(p, exact=True))].append(i)
    partial: list[tuple[Message, _W]] = []
    inserts: list[tuple[_W, Rec]] = []
    for w, (s, e, p), fp in rest:
        hits = by_start.get((s, fp))
        if hits:
            i = hits.pop()
            used[i] = True
            oid, _, oe, op, _ow = pool[i]
            partial.append((Retract(oid, s, oe, e, op), w))
            sent(w, (oid, s, e, op))
        else:
            inserts.append((w, (s, e, p)))
    out: list[tuple[Message, _W]] = [
        (Retract(oid, s, e, s, p), w) for i, (oid, s, e, p, w) in enumerate(pool) if not used[i]]
    out.extend(partial)
    out.extend((_insert(ids, w, row, sent), w) for w, row in inserts)
    return out


def _insert(ids: Ids, w: _W, row: Rec,
            sent: Callable[[_W, tuple[Any, int, int, Any]], None]) -> Message:
    oid = ids.mint()
    s, e, p = row
    sent(w, (oid, s, e, p))
    return Insert(oid, s, e, p)


def stored_event(events: dict[int, dict[Hashable, tuple[int, int, Any]]], key: int,
                 msg: Retract) -> tuple[int, int, Any]:
    """The live event ``(start, end, payload)`` that retraction ``msg`` names in an event index
    keyed by ``key`` then id (count and session windows); a retraction whose lifetime is not
    the held event's is an error that says which event is held."""
    rec = events.get(key, {}).get(msg.id)
    if rec is None or rec[0] != msg.start or rec[1] != msg.end:
        found = "no such live event" if rec is None else \
            f"the live event is [{fmt_time(rec[0])}, {fmt_time(rec[1])})"
        raise ValueError(f"retraction {msg!r} does not match an event held by the operator "
                         f"({found}); retract a live event with its current lifetime")
    return rec


def not_behind(msg: Message, out_cti: int, keep: bool, where: str) -> Message:
    """``msg``, a window's output correction, unless it changes the output behind the output CTI
    ``out_cti``: a UDM that is not deterministic, or an ``output='keep'`` UDO that is not
    time-bound (``keep``), which fails the operator with what went wrong (``where``: the
    operator, its UDM and the window, in words)."""
    if msg.sync_time < out_cti:
        hint = ("output='keep' needs a time-bound UDO: the events it returns for a window "
                "may change only at or after the time of the input change" if keep else
                "the UDM must be deterministic (the same input gives the same result)")
        raise OperatorError(f"{where} at {fmt_time(msg.sync_time)}, behind the output CTI "
                            f"{fmt_time(out_cti)} ({msg!r}); {hint}")
    return msg


def net_change(net: dict[Any, tuple[dict[Any, Any], dict[Any, Any]]], key: Any,
               removed: dict[Any, Any], added: dict[Any, Any]) -> None:
    """Fold one start time's change (events ``removed`` and ``added``, by id) into a batch's
    ``net`` change per start time: an event added and removed in one batch leaves no trace,
    one removed keeps its first record (its origin before the batch)."""
    entry = net.get(key)
    if entry is None:
        net[key] = (removed, added)
        return
    was, now = entry
    for eid, rec in removed.items():
        if eid in now:
            del now[eid]  # it joined (or changed) in this batch: ``was`` has its origin
        else:
            was[eid] = rec
    now.update(added)


def between(keys: list[int], lo: int, hi: int) -> list[int]:
    """The sorted ``keys`` in ``[lo, hi]``.

    >>> between([1, 3, 5, 7], 3, 6)
    [3, 5]
    """
    return keys[bisect_left(keys, lo):bisect_right(keys, hi)]


def unchanged_dropped(left: list[tuple[Hashable, Any]], joined: list[tuple[Hashable, Any]]
                      ) -> tuple[list[Any], list[Any]]:
    """The members that ``left`` a window and ``joined`` it (``(id, what the UDM sees)``),
    without the events that did both and look the same to the UDM (an event whose end moved
    but which the UDM sees unchanged): what its incremental state must remove and add."""
    if left and joined:
        seen = dict(left)
        same = {i for i, x in joined if i in seen and equal(seen[i], x)}
        if same:
            left = [(i, x) for i, x in left if i not in same]
            joined = [(i, x) for i, x in joined if i not in same]
    return [x for _, x in left], [x for _, x in joined]
