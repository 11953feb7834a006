"""From-scratch reference for ``detect`` (docs/patterns.md#detect): the definition applied
literally to a CHT. Nothing here is incremental or shares code with ``operators/``: its own
parser, and a plain recursive backtracking matcher (continuation passing) over the rows.

* rows: the CHT rows grouped by ``key(payload)``, each group sorted by
  ``(start, tie(payload), repr(payload))`` (``tie`` defaults to ``repr``);
* from row ``i`` the first match in a backtracking regex's order of preference (greedy
  repetitions try one more iteration first, reluctant ones one fewer, ``|`` its left), over
  rows that start before ``start_i + within``, never empty; an unbounded repetition's
  iteration beyond its least must consume a row;
* ONE ROW PER MATCH, AFTER MATCH SKIP PAST LAST ROW, else the next row;
* output ``(first start, last start + 1, measures(m))``, ``m`` a dict of every symbol (in the
  order it first appears) to the tuple of payloads bound to it.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import Any

Rows = list[tuple[int, int, Any]]

# the matcher recurses once per row and per node it tries (continuation passing)
sys.setrecursionlimit(max(sys.getrecursionlimit(), 20_000))

_TOKEN = re.compile(r"\s*(?:([A-Za-z_]\w*)|(\{\s*\d*\s*(?:,\s*\d*\s*)?\})|([()|?*+]))")


def parse(pattern: str) -> Any:
    """A tree: ``('sym', s)``, ``('seq', [...])``, ``('or', [...])``,
    ``('rep', t, least, most | None, greedy)``."""
    tokens = []
    at = 0
    while at < len(pattern.rstrip()):
        m = _TOKEN.match(pattern, at)
        if not m:
            raise ValueError(f"bad pattern at {at}")
        tokens.append(m.group(1) or m.group(2) or m.group(3))
        at = m.end()
    pos = 0

    def peek() -> str | None:
        return tokens[pos] if pos < len(tokens) else None

    def alternation() -> Any:
        nonlocal pos
        options = [sequence()]
        while peek() == "|":
            pos += 1
            options.append(sequence())
        return ("or", options)

    def sequence() -> Any:
        nonlocal pos
        items = []
        while peek() not in (None, "|", ")"):
            t = peek()
            pos += 1
            if t == "(":
                node = alternation()
                assert peek() == ")", "unclosed group"
                pos += 1
            else:
                node = ("sym", t)
            q = peek()
            if q in ("?", "*", "+") or (q or "").startswith("{"):
                pos += 1
                if q == "?":
                    lo, hi = 0, 1
                elif q == "*":
                    lo, hi = 0, None
                elif q == "+":
                    lo, hi = 1, None
                else:
                    parts = q.strip("{}").replace(" ", "").split(",")
                    lo = int(parts[0] or 0)
                    hi = lo if len(parts) == 1 else (int(parts[1]) if parts[1] else None)
                greedy = True
                if peek() == "?":
                    pos += 1
                    greedy = False
                node = ("rep", node, lo, hi, greedy)
            items.append(node)
        assert items, "empty alternative"
        return ("seq", items)

    tree = alternation()
    assert pos == len(tokens), "unexpected tokens"
    return tree


def symbol_names(tree: Any) -> list[str]:
    out: list[str] = []

    def walk(t: Any) -> None:
        if t[0] == "sym":
            if t[1] not in out:
                out.append(t[1])
        elif t[0] == "rep":
            walk(t[1])
        else:
            for c in t[1]:
                walk(c)

    walk(tree)
    return out


def detect(rows: Rows, pattern: str, define: dict[str, Callable[[Any, Any], Any]] | None,
           within: int, measures: Callable[[Any], Any] | None = None,
           key: Callable[[Any], Any] | None = None,
           tie: Callable[[Any], Any] | None = None) -> Rows:
    tree = parse(pattern)
    names = symbol_names(tree)
    define = define or {}
    groups: dict[Any, list[tuple[int, Any]]] = {}
    for s, _, p in rows:
        groups.setdefault(None if key is None else key(p), []).append((s, p))
    out: Rows = []
    for members in groups.values():
        members.sort(key=lambda r: (r[0], (tie or repr)(r[1]), repr(r[1])))
        i = 0
        while i < len(members):
            found = _match_from(members, i, tree, names, define, within)
            if found is None:
                i += 1
                continue
            end, bound = found
            m = {n: tuple(p for s, p in bound if s == n) for n in names}
            out.append((members[i][0], members[end - 1][0] + 1,
                        m if measures is None else measures(m)))
            i = end
    return out


def _match_from(rows: list[tuple[int, Any]], i: int, tree: Any, names: list[str],
                define: dict[str, Any], within: int) -> tuple[int, list[Any]] | None:
    limit = rows[i][0] + within
    n = len(rows)

    def usable(pos: int) -> bool:
        return pos < n and rows[pos][0] < limit

    def m(t: Any, pos: int, bound: list[Any], k: Callable[[int, list[Any]], Any]) -> Any:
        kind = t[0]
        if kind == "sym":
            if not usable(pos):
                return None
            pred = define.get(t[1])
            p = rows[pos][1]
            view = {nm: tuple(q for s, q in bound if s == nm) for nm in names}
            if pred is None or pred(p, view):
                return k(pos + 1, [*bound, (t[1], p)])
            return None
        if kind == "seq":
            items = t[1]

            def step(idx: int, pos: int, bound: list[Any]) -> Any:
                if idx == len(items):
                    return k(pos, bound)
                return m(items[idx], pos, bound, lambda p2, b2: step(idx + 1, p2, b2))

            return step(0, pos, bound)
        if kind == "or":
            for option in t[1]:
                r = m(option, pos, bound, k)
                if r is not None:
                    return r
            return None
        _, body, least, most, greedy = t

        def rep(count: int, pos: int, bound: list[Any]) -> Any:
            if count < least:
                return m(body, pos, bound, lambda p2, b2: rep(count + 1, p2, b2))
            if most is not None and count >= most:
                return k(pos, bound)

            def more() -> Any:
                return m(body, pos, bound, lambda p2, b2: (
                    rep(count + 1, p2, b2) if most is not None or p2 > pos else None))

            first, second = (more, lambda: k(pos, bound)) if greedy else (
                lambda: k(pos, bound), more)
            r = first()
            return r if r is not None else second()

        return rep(0, pos, bound)

    return m(tree, i, [], lambda pos, bound: (pos, bound) if pos > i else None)


def not_followed_by(a: Rows, b: Rows, within: int, ka: Callable[[Any], Any] | None = None,
                    kb: Callable[[Any], Any] | None = None, until: int | None = None) -> Rows:
    """Absence, from the definition: each row ``(s, e, p)`` of ``a`` with no row ``(s2, _, q)``
    of ``b`` with ``kb(q) == ka(p)`` (any, without keys) and ``s < s2 < s + within``, as the
    point ``(s + within, s + within + 1, p)``; with ``until``, only those with
    ``s + within <= until`` (decided by then)."""
    out = []
    for s, _, p in a:
        due = s + within
        if until is not None and due > until:
            continue
        followed = any(s < s2 < due and (ka is None or kb(q) == ka(p))  # type: ignore[misc]
                       for s2, _, q in b)
        if not followed:
            out.append((due, due + 1, p))
    return out
