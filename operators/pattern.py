"""The row pattern language of ``detect``: a parser with errors that point at the spot, and a
compiler to a small backtracking program.

A pattern is a regular expression over symbol names (SQL:2016 ``PATTERN``): a space
concatenates, ``|`` alternates (its left first), ``( )`` groups, and ``?`` ``*`` ``+`` ``{n}``
``{n,}`` ``{n,m}`` (``{,m}`` is ``{0,m}``) repeat, greedy (the most rows first) or, followed by
``?``, reluctant (the fewest first). A symbol is a name: a letter or ``_``, then letters,
digits or ``_``.

    >>> parse("A B+ (C | D)*?")  # doctest: +NORMALIZE_WHITESPACE
    ('cat', [('sym', 'A'), ('rep', ('sym', 'B'), 1, None, True),
             ('rep', ('alt', [('sym', 'C'), ('sym', 'D')]), 0, None, False)])
    >>> parse("A B+ (C")
    Traceback (most recent call last):
    ...
    operators.pattern.PatternError: pattern 'A B+ (C': unclosed '(' at column 7 (opened at ...
      A B+ (C
             ^

Columns count characters from 0, so the caret sits under the spot. :func:`compile_pattern`
turns the tree into a :class:`Program`, which ``detect`` runs with an explicit backtracking
stack (no recursion: a match may span thousands of rows). A repetition without an upper bound
whose body can match no row stops when an iteration consumes nothing (as every backtracking
regex engine does), so no pattern loops forever.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: A pattern tree: ``('sym', name)``, ``('cat', [node, ...])``, ``('alt', [node, ...])`` or
#: ``('rep', node, least, most or None, greedy)``.
Node = tuple[Any, ...]

# the instructions of a Program (opcodes)
SYM, SPLIT, JMP, SAVE, PROGRESS, MATCH = range(6)


class PatternError(ValueError):
    """A pattern that does not parse: the message names the pattern, the problem and the
    column, with a caret line under the spot."""


def _error(pattern: str, at: int, what: str) -> PatternError:
    return PatternError(f"pattern {pattern!r}: {what}\n  {pattern}\n  {' ' * at}^")


class _Parser:
    """Recursive descent over the grammar
    ``alt := cat ('|' cat)*``, ``cat := rep+``, ``rep := atom quant*``,
    ``atom := NAME | '(' alt ')'``."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.at = 0

    def fail(self, at: int, what: str) -> PatternError:
        return _error(self.text, at, what)

    def skip(self) -> None:
        while self.at < len(self.text) and self.text[self.at].isspace():
            self.at += 1

    def peek(self) -> str:
        self.skip()
        return self.text[self.at] if self.at < len(self.text) else ""

    def parse(self) -> Node:
        if not self.text.strip():
            raise self.fail(0, "the pattern is empty; give symbols such as 'A B+ C'")
        node = self.alt()
        c = self.peek()
        if c == ")":
            raise self.fail(self.at, f"unmatched ')' at column {self.at}; remove it or add "
                                     f"'(' before")
        if c:  # pragma: no cover - alt() stops only at ')' or the end
            raise self.fail(self.at, f"unexpected {c!r} at column {self.at}")
        return node

    def alt(self) -> Node:
        options = [self.cat()]
        while self.peek() == "|":
            self.at += 1
            options.append(self.cat())
        return options[0] if len(options) == 1 else ("alt", options)

    def cat(self) -> Node:
        items: list[Node] = []
        while True:
            c = self.peek()
            if c in ("", "|", ")"):
                break
            items.append(self.rep())
        if not items:
            where = ("the end of the pattern" if not c else f"{c!r}")
            raise self.fail(self.at, f"nothing to match before {where} at column {self.at}; "
                                     f"an alternative or a group needs at least one symbol")
        return items[0] if len(items) == 1 else ("cat", items)

    def rep(self) -> Node:
        node = self.atom()
        quantified = False
        while True:
            c = self.peek()
            if c not in ("?", "*", "+", "{"):
                return node
            at = self.at
            if quantified:
                raise self.fail(at, f"{c!r} at column {at} repeats a repetition; group it "
                                    f"first, as in '(A+)*'")
            quantified = True
            if c == "{":
                least, most = self.bounds()
            else:
                self.at += 1
                least, most = {"?": (0, 1), "*": (0, None), "+": (1, None)}[c]
            greedy = True
            if self.at < len(self.text) and self.text[self.at] == "?":
                self.at += 1
                greedy = False
            node = ("rep", node, least, most, greedy)

    def bounds(self) -> tuple[int, int | None]:
        start = self.at
        close = self.text.find("}", start)
        if close < 0:
            raise self.fail(start, f"unclosed '{{' at column {start}; write {{n}}, {{n,}} "
                                   f"or {{n,m}}")
        body = self.text[start + 1:close].replace(" ", "")
        parts = body.split(",")
        ok = len(parts) in (1, 2) and all(p.isdigit() or p == "" for p in parts) and parts[0] + (
            parts[1] if len(parts) == 2 else "x") != ""
        if not ok or (len(parts) == 1 and not parts[0]):
            raise self.fail(start, f"bad repetition {self.text[start:close + 1]!r} at column "
                                   f"{start}; write {{n}}, {{n,}} or {{n,m}} with whole "
                                   f"numbers")
        least = int(parts[0]) if parts[0] else 0
        most: int | None = least if len(parts) == 1 else (int(parts[1]) if parts[1] else None)
        if most is not None and most < least:
            raise self.fail(start, f"bad repetition {self.text[start:close + 1]!r} at column "
                                   f"{start}: the most ({most}) is below the least ({least})")
        self.at = close + 1
        return least, most

    def atom(self) -> Node:
        c = self.peek()
        at = self.at
        if c == "(":
            self.at += 1
            node = self.alt()
            if self.peek() != ")":
                raise self.fail(self.at, f"unclosed '(' at column {self.at} (opened at column "
                                         f"{at}); add ')'")
            self.at += 1
            return node
        if c.isalpha() or c == "_":
            end = at
            while end < len(self.text) and (self.text[end].isalnum() or self.text[end] == "_"):
                end += 1
            self.at = end
            return ("sym", self.text[at:end])
        if c in ("?", "*", "+", "{"):
            raise self.fail(at, f"{c!r} at column {at} repeats nothing; put it after a symbol "
                                f"or a group")
        raise self.fail(at, f"unexpected {c!r} at column {at}; a pattern has symbol names, "
                            f"spaces, '|', '( )' and the repetitions ? * + {{n,m}}")


def parse(pattern: str) -> Node:
    """The tree of ``pattern``; a :class:`PatternError` pointing at the spot when it does not
    parse (see the module docstring)."""
    if not isinstance(pattern, str):
        raise TypeError(f"pattern={pattern!r} is not a string; write it as 'A B+ C'")
    return _Parser(pattern).parse()


def symbols(node: Node) -> list[str]:
    """The symbols of a tree, in the order they first appear."""
    out: list[str] = []

    def walk(n: Node) -> None:
        if n[0] == "sym":
            if n[1] not in out:
                out.append(n[1])
        elif n[0] == "rep":
            walk(n[1])
        else:
            for c in n[1]:
                walk(c)

    walk(node)
    return out


def nullable(node: Node) -> bool:
    """Whether ``node`` can match no row."""
    kind = node[0]
    if kind == "sym":
        return False
    if kind == "rep":
        return node[2] == 0 or nullable(node[1])
    if kind == "cat":
        return all(nullable(c) for c in node[1])
    return any(nullable(c) for c in node[1])


@dataclass(frozen=True)
class Program:
    """A compiled pattern: ``code`` is a list of ``(opcode, a, b)``: ``SYM`` symbol index,
    ``SPLIT`` preferred target, other target, ``JMP`` target, ``SAVE``/``PROGRESS`` register,
    ``MATCH``. ``names`` are the symbols (an index per ``SYM``), ``registers`` how many
    progress registers the loops over bodies that can match no row need."""

    code: tuple[tuple[int, int, int], ...]
    names: tuple[str, ...]
    registers: int


def compile_pattern(node: Node) -> Program:
    """The backtracking program of a tree (Thompson's construction, alternatives in order of
    preference: a ``SPLIT`` tries its first target first)."""
    names = symbols(node)
    index = {n: i for i, n in enumerate(names)}
    code: list[list[int]] = []
    regs = [0]

    def emit(op: int, a: int = 0, b: int = 0) -> int:
        code.append([op, a, b])
        return len(code) - 1

    def gen(n: Node) -> None:
        kind = n[0]
        if kind == "sym":
            emit(SYM, index[n[1]])
        elif kind == "cat":
            for c in n[1]:
                gen(c)
        elif kind == "alt":
            jumps = []
            options = n[1]
            for i, c in enumerate(options):
                if i < len(options) - 1:
                    split = emit(SPLIT)
                    code[split][1] = len(code)
                    gen(c)
                    jumps.append(emit(JMP))
                    code[split][2] = len(code)
                else:
                    gen(c)
            for j in jumps:
                code[j][1] = len(code)
        else:
            _, body, least, most, greedy = n
            for _ in range(least):
                gen(body)
            if most is None:
                guard = nullable(body)
                reg = regs[0]
                if guard:
                    regs[0] += 1
                loop = emit(SPLIT)
                enter = len(code)
                if guard:
                    emit(SAVE, reg)
                gen(body)
                if guard:
                    emit(PROGRESS, reg)
                emit(JMP, loop)
                _set_split(code[loop], greedy, enter, len(code))
            else:
                splits = []
                for _ in range(most - least):
                    split = emit(SPLIT)
                    splits.append(split)
                    enter = len(code)
                    gen(body)
                    code[split][1] = enter
                for split in splits:
                    _set_split(code[split], greedy, code[split][1], len(code))

    gen(node)
    emit(MATCH)
    return Program(tuple((op, a, b) for op, a, b in code), tuple(names), regs[0])


def _set_split(ins: list[int], greedy: bool, enter: int, leave: int) -> None:
    ins[1], ins[2] = (enter, leave) if greedy else (leave, enter)
