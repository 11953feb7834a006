"""Exact column-wise evaluation of user functions: what runs once per ``Columns`` batch.

``where``, ``select``, group keys and aggregate fields take plain functions of a payload. Such
a function runs column-wise only where that gives exactly what calling it on every payload
gives — the same values, the same types, and an error wherever a payload would raise. The
rule has two halves.

**Which functions.** A function is *traced* once, when first needed: it is called with a
stand-in payload whose fields (``p["v"]``, ``p[0]``, or the payload itself) are :class:`Expr`
nodes. If it returns an ``Expr`` — or a tuple or dict of them and constants — built only from
field reads, constants (bool, int, float), arithmetic ``+ - * / // %``, unary ``- + abs ~``,
comparisons ``< <= > >= == !=`` and ``& | ^``, it runs column-wise. Anything else makes the
tracing fail and the function runs per event, always: ``and``/``or``/``not``/``if`` and
chained comparisons (they ask ``bool()`` of a column), ``**``, calls (``math.sqrt``,
``round``, ``len``, ``str`` and its methods, f-strings), ``.get``, ``in``, and any bool
constant (a literal ``True``). What operator overloading cannot see is watched in every
Python function the call enters: a test of what the payload *is* (``isinstance``, ``type``,
``hasattr``, ``is``, ``match``) and a ``try`` would let the stand-in take another branch than
a payload (``p["v"] if isinstance(p, dict) else 0`` would trace to ``0``), so they run per
event too. ``col("v")`` builds the same expressions explicitly, and ``explain()`` says per
step which way it runs and why.

**Which batches.** An expression is evaluated on the columns only when every step is exact
for *these* values; otherwise that batch runs per event (and raises where a payload raises):

* arithmetic and comparisons take only bool, signed and unsigned integer and float columns
  (any other column — strings, decimals, timestamps, objects — runs per event); a field that
  is only passed through (``select(lambda p: (p["k"], p["name"]))``) may be of any type;
* integers are evaluated as int64 and every integer operand and result must lie within
  ``±2**53`` (so integer results never wrap and integer/float mixing is exact, as in Python);
* float16 and float32 columns are widened to float64: a payload's value is the same number as
  a Python float, and Python computes in double;
* bools count as ints in arithmetic and ``~`` (``True + True == 2``, ``~True == -2``);
* a zero divisor of ``/``, ``//`` or ``%`` and a non-finite operand of ``//`` or ``%`` run per
  event (Python raises, or its rules for infinities differ).

    >>> import numpy as np
    >>> v = {"v": np.array([1, 2, 3], dtype=np.int32)}
    >>> evaluate(trace(lambda p: p["v"] * 100_000 > 150_000), v, 3)
    array([False,  True,  True])
    >>> evaluate(trace(lambda p: p["v"] // 0), v, 3) is None  # per event: the payloads raise
    True
    >>> trace(lambda p: p["v"] > 1 and p["v"] < 3) is None  # bool() of a column: per event
    True
"""

from __future__ import annotations

import contextvars
import dis
import functools
import operator
import sys
from collections.abc import Callable
from types import CodeType
from typing import Any

import numpy as np

__all__ = ["Expr", "col", "evaluate", "pair_columns", "trace", "trace_pair", "tracing",
           "why_per_event"]

#: Integers beyond this are not all exact as float64: the column path declines them.
_EXACT = 2**53


class Decline(Exception):
    """These values cannot be evaluated column-wise exactly (the batch runs per event)."""


class NotElementwise(TypeError):
    """The function does something with a column that is not element-wise."""


class Expr:
    """An element-wise expression over payload fields (see the module doc). Called on one
    payload it computes its value with Python's own operators, so it works wherever a
    function of a payload does."""

    __array_ufunc__ = None  # numpy defers to our reflected operators
    __hash__ = None  # type: ignore[assignment]  # == builds an expression

    def __call__(self, payload: Any) -> Any:
        raise NotImplementedError

    def __bool__(self) -> bool:
        raise NotElementwise("asks for the truth of a whole column (and, or, not, if, a "
                             "chained comparison)")

    def __iter__(self) -> Any:
        raise NotElementwise("iterates over a field")

    def __len__(self) -> int:
        raise NotElementwise("asks for a length")

    def __getitem__(self, key: Any) -> Expr:
        raise NotElementwise("indexes into a field")

    # (f-strings, format() and str() would otherwise see the expression's repr: a constant)
    def __str__(self) -> str:
        raise NotElementwise("turns a field into a string (str, an f-string)")

    def __format__(self, spec: str) -> str:
        raise NotElementwise("formats a field (an f-string, format)")


class Field(Expr):
    """A payload field: ``p[key]`` (a dict key or tuple index), or the payload itself
    (``key is None``)."""

    def __init__(self, key: Any = None) -> None:
        self.key = key

    def __getitem__(self, key: Any) -> Expr:
        if self.key is not None:
            raise NotElementwise("indexes into a field")
        return Field(key)

    def __call__(self, payload: Any) -> Any:
        return payload if self.key is None else payload[self.key]

    def __repr__(self) -> str:
        return "p" if self.key is None else f"p[{self.key!r}]"


class Const(Expr):
    def __init__(self, value: Any) -> None:
        self.value = value.item() if isinstance(value, np.generic) else value

    def __call__(self, payload: Any) -> Any:
        return self.value

    def __repr__(self) -> str:
        return repr(self.value)


class Op(Expr):
    def __init__(self, name: str, *args: Expr) -> None:
        self.name, self.args = name, args

    def __call__(self, payload: Any) -> Any:
        return _PYTHON[self.name](*(a(payload) for a in self.args))

    def __repr__(self) -> str:
        return f"{self.name}({', '.join(map(repr, self.args))})"


def col(name: Any) -> Expr:
    """The payload field ``name`` as an expression: ``where(col("v") > 0.1)``."""
    return Field(name)


def _wrap(x: Any) -> Expr:
    if isinstance(x, Expr):
        return x
    if isinstance(x, (bool, np.bool_)) and _TRACING.get():
        raise NotElementwise(_BOOL)
    if isinstance(x, (int, float, np.integer, np.floating)):
        return Const(x)
    raise NotElementwise(f"combines a field with {type(x).__name__} {x!r}")


_BINARY = ("add", "sub", "mul", "truediv", "floordiv", "mod", "and", "or", "xor",
           "lt", "le", "gt", "ge", "eq", "ne")
_REFLECTED = {"add", "sub", "mul", "truediv", "floordiv", "mod", "and", "or", "xor"}


def _binary(name: str) -> tuple[Callable[..., Expr], Callable[..., Expr]]:
    def forward(self: Expr, other: Any) -> Expr:
        return Op(name, self, _wrap(other))

    def reflected(self: Expr, other: Any) -> Expr:
        return Op(name, _wrap(other), self)

    return forward, reflected


for _name in _BINARY:
    _fwd, _ref = _binary(_name)
    setattr(Expr, f"__{_name}__", _fwd)
    if _name in _REFLECTED:
        setattr(Expr, f"__r{_name}__", _ref)


def _unary(name: str) -> Callable[[Expr], Expr]:
    def apply(self: Expr) -> Expr:
        return Op(name, self)

    return apply


for _name in ("neg", "pos", "abs", "invert"):
    # (a closure of this module, not functools.partialmethod: tracing watches every Python
    # function outside this module, and partialmethod's own code uses getattr)
    setattr(Expr, f"__{_name}__", _unary(_name))


#: Python's own operator for each node name: what an expression means on one payload.
_PYTHON: dict[str, Callable[..., Any]] = {
    name: getattr(operator, name if name in ("xor", "abs") or name.endswith("_")
                  else f"{name}_" if name in ("and", "or") else name)
    for name in _BINARY + ("neg", "pos", "abs", "invert")}


# -- tracing -------------------------------------------------------------------------------------
def _trace(fn: Callable[[Any], Any]) -> tuple[Any, str | None]:
    field = getattr(fn, "field", _NO_FIELD)  # operators.udm.field_getter of a name
    if field is not _NO_FIELD:
        return Field(field), None
    try:
        with tracing() as watch:
            out = fn(Field())
        watch.check()
        return _result(out), None
    except NotElementwise as exc:
        return None, str(exc)
    except Exception as exc:  # noqa: BLE001 - anything else a stand-in payload cannot do
        return None, f"{type(exc).__name__}: {exc}"


_NO_FIELD = object()


class _Watch:
    """Watches every Python function that a traced call enters (``sys.settrace``) for what
    lets a stand-in payload take another branch than a real one without a bool showing:

    * a type test — ``isinstance``, ``type``, ``hasattr``, ``getattr``, ``callable``,
      ``issubclass``, ``__class__`` among the names it uses, an ``is`` or a ``match``
      statement: the stand-in is no dict, tuple or None, so the test answers for it, not for
      the payload;
    * exception handling — a ``try`` (or ``with``) block: a helper that catches the error
      the stand-in raises returns its fallback, and one that reads another field when the
      first fails reads a column that tracing never saw.

    Either makes the function run per event (:meth:`check`). cedar's own expression code
    (this module) is not watched: its operators are what tracing records."""

    def __init__(self) -> None:
        self.reason: str | None = None

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event == "call" and self.reason is None:
            code = frame.f_code
            if code.co_filename != __file__:
                self.reason = _branches(code)
        return None  # no line events: only the calls are looked at

    def check(self) -> None:
        if self.reason is not None:
            raise NotElementwise(self.reason)


#: The names with which a function asks what a value *is*, not what it holds.
_TYPE_TESTS = ("isinstance", "type", "hasattr", "getattr", "callable", "issubclass",
               "__class__")


def _branches(code: CodeType) -> str | None:
    """Why ``code`` may branch on what a payload is (see :class:`_Watch`), or None."""
    where = code.co_name if code.co_name != "<lambda>" else "the lambda"
    tests = [n for n in _TYPE_TESTS if n in code.co_names]
    if tests:
        return (f"tests what the payload is ({tests[0]} in {where}): the stand-in payload of "
                "tracing would answer it, not the payload")
    ops = {op.opname for op in dis.get_instructions(code)}
    if any(op == "IS_OP" or op.endswith("_NONE") for op in ops):  # (`is None` in an if)
        return (f"tests identity (`is` in {where}): the stand-in payload of tracing would "
                "answer it once, not each payload")
    if any(op.startswith("MATCH_") for op in ops):
        return (f"matches the payload's shape (a match statement in {where}): the stand-in "
                "payload of tracing would answer it, not the payload")
    if code.co_exceptiontable:
        return (f"handles exceptions (a try or with block in {where}): a real payload may "
                "take another branch than the stand-in payload of tracing")
    return None


class tracing:  # (lower case: it reads as a function, ``with tracing() as watch:``)
    """Call a function on stand-in payloads inside ``with tracing() as watch:``: bool
    constants are refused and every Python function it enters is watched (:class:`_Watch`);
    ``watch.check()`` afterwards raises :class:`NotElementwise` where the trace may not be
    what a payload gives. (A class of this module, not a generator: the watch sees no frame
    of its own.)"""

    def __enter__(self) -> _Watch:
        self._watch = _Watch()
        self._token = _TRACING.set(True)
        self._previous = sys.gettrace()
        sys.settrace(self._watch)
        return self._watch

    def __exit__(self, *exc: object) -> None:
        sys.settrace(self._previous)
        _TRACING.reset(self._token)


#: Whether a user function is being traced (then a bool constant is refused: explicit
#: ``col()`` expressions may hold literal bools).
_TRACING: contextvars.ContextVar[bool] = contextvars.ContextVar("tracing", default=False)
#: Why a bool constant runs per event: ``is``, ``isinstance`` and ``callable`` give one,
#: decided once on the stand-in payload instead of per payload.
_BOOL = ("uses a bool decided without the payload's value (an `is` or isinstance test, or a "
         "literal True/False)")


def _result(out: Any) -> Any:
    if isinstance(out, tuple) and type(out) is tuple:
        return tuple(_part(x) for x in out)
    if type(out) is dict:
        if not all(isinstance(k, str) for k in out):
            raise NotElementwise("returns a dict with keys that are not strings")
        return {k: _part(x) for k, x in out.items()}
    return _part(out)


def _part(x: Any) -> Expr:
    if isinstance(x, (bool, np.bool_)):
        raise NotElementwise(_BOOL)
    if isinstance(x, Expr):
        return x
    if isinstance(x, (tuple, list, dict, set)):
        raise NotElementwise(f"returns a nested {type(x).__name__}")
    return Const(x)


@functools.lru_cache(maxsize=4096)
def _cached(fn: Callable[[Any], Any]) -> tuple[Any, str | None]:
    return _trace(fn)


def _traced(fn: Callable[[Any], Any]) -> tuple[Any, str | None]:
    try:
        return _cached(fn)
    except TypeError:  # an unhashable callable: trace it every time
        return _trace(fn)


def trace(fn: Callable[[Any], Any]) -> Any:
    """The expression (or tuple/dict of them) ``fn`` computes, or None when it does not run
    column-wise (see the module doc). A function of whole batches
    (:class:`~operators.vectorized.Vectorized`) is never traced: None."""
    if isinstance(fn, Expr):
        return fn
    if getattr(fn, "batchwise", False):
        return None
    return _traced(fn)[0]


class Side(Field):
    """The payload of one input of a two-input function: its fields read ``(side, key)``."""

    def __init__(self, side: str) -> None:
        super().__init__((side, None))

    def __getitem__(self, key: Any) -> Expr:
        return Field((self.key[0], key))


@functools.lru_cache(maxsize=1024)
def _cached_pair(fn: Callable[[Any, Any], Any]) -> Any:
    try:
        with tracing() as watch:
            out = fn(Side("l"), Side("r"))
        watch.check()
        return _result(out)
    except Exception:  # noqa: BLE001 - not element-wise, or more than a stand-in can do
        return None


def trace_pair(fn: Callable[[Any, Any], Any]) -> Any:
    """:func:`trace` for a function of two payloads ``fn(left, right)`` (a join's
    ``select``): evaluate it on :func:`pair_columns` of the two inputs' payload columns.

    >>> import numpy as np
    >>> both = pair_columns({"v": np.array([1, 2])}, (np.array([10, 20]), np.array([0, 1])))
    >>> evaluate(trace_pair(lambda l, r: (l["v"], r[0] + l["v"])), both, 2)
    (array([1, 2]), array([11, 22]))
    """
    try:
        return _cached_pair(fn)
    except TypeError:  # an unhashable callable: trace it every time
        return _cached_pair.__wrapped__(fn)


def pair_columns(left: Any, right: Any) -> dict[Any, np.ndarray]:
    """The payload columns of two inputs as one payload for :func:`trace_pair`'s
    expressions: field ``key`` of side ``"l"`` or ``"r"`` at ``(side, key)``, a scalar
    payload (one array) at ``(side, None)``."""
    out: dict[Any, np.ndarray] = {}
    for side, cols in (("l", left), ("r", right)):
        if isinstance(cols, dict):
            out.update(((side, k), c) for k, c in cols.items())
        elif isinstance(cols, tuple):
            out.update(((side, k), c) for k, c in enumerate(cols))
        else:
            out[(side, None)] = cols
    return out


def why_per_event(fn: Callable[[Any], Any]) -> str | None:
    """None when ``fn`` runs column-wise, else why it runs per event (for ``explain()``). A
    :class:`~operators.vectorized.Vectorized` function runs on whole batches (in ``select``
    and ``where``, what it is made for): None."""
    if isinstance(fn, Expr) or getattr(fn, "batchwise", False):
        return None
    return _traced(fn)[1]


# -- evaluation ----------------------------------------------------------------------------------
def evaluate(traced: Any, payload: Any, n: int) -> Any:
    """``traced`` (from :func:`trace`) on payload columns of ``n`` events: an array, a tuple
    or a dict of arrays holding exactly what the function gives per payload, or None when
    these values must run per event."""
    if traced is None:
        return None
    try:
        with np.errstate(all="ignore"):
            if type(traced) is Field and traced.key is None and type(payload) in (dict, tuple):
                return _whole(payload, n)  # ``lambda p: p``: every column as it is
            if type(traced) is tuple:
                return tuple(_output(x, payload, n) for x in traced)
            if type(traced) is dict:
                return {k: _output(x, payload, n) for k, x in traced.items()}
            return _output(traced, payload, n)
    except Decline:
        return None


def _output(e: Expr, payload: Any, n: int) -> np.ndarray:
    """An output column: a passed-through field keeps its column, a constant is repeated."""
    if isinstance(e, Field):
        return _field(e, payload, n)
    if isinstance(e, Const):
        v = e.value
        if isinstance(v, (bool, float)) or (type(v) is int and abs(v) <= _EXACT):
            return np.full(n, v)
        out = np.empty(n, dtype=object)
        out[:] = [v] * n
        return out
    return _value(e, payload, n)[0]


def _whole(payload: Any, n: int) -> Any:
    """The payload columns themselves (a dict or tuple of ``n``-long arrays)."""
    parts = payload.values() if type(payload) is dict else payload
    if not all(isinstance(c, np.ndarray) and c.shape == (n,) for c in parts):
        raise Decline
    return payload


def _field(e: Field, payload: Any, n: int) -> np.ndarray:
    try:
        column = payload if e.key is None else payload[e.key]
    except (KeyError, IndexError, TypeError) as exc:
        raise Decline from exc
    if not isinstance(column, np.ndarray) or column.shape != (n,):
        raise Decline
    return column


def _value(e: Expr, payload: Any, n: int) -> tuple[np.ndarray, str]:
    """A numeric column (bool, int64 or float64) and its kind ``"b"``, ``"i"`` or ``"f"``."""
    if isinstance(e, Field):
        column = _field(e, payload, n)
        kind = column.dtype.kind
        if kind == "b":
            return column, "b"
        if kind in "iu":
            if len(column) and max(abs(int(column.min())), abs(int(column.max()))) > _EXACT:
                raise Decline
            return column.astype(np.int64, copy=False), "i"
        if kind == "f":
            return column.astype(np.float64, copy=False), "f"
        raise Decline
    if isinstance(e, Const):
        v = e.value
        if isinstance(v, bool):
            return np.full(n, v), "b"
        if type(v) is int and abs(v) <= _EXACT:
            return np.full(n, v, dtype=np.int64), "i"
        if type(v) is float:
            return np.full(n, v), "f"
        raise Decline
    assert isinstance(e, Op)
    args = [_value(a, payload, n) for a in e.args]
    return _APPLY[e.name](*args)


def _checked(values: np.ndarray) -> tuple[np.ndarray, str]:
    if len(values) and int(np.abs(values).max()) > _EXACT:
        raise Decline
    return values, "i"


def _num(x: tuple[np.ndarray, str]) -> tuple[np.ndarray, str]:
    """Bools as ints (Python's arithmetic on bools)."""
    return (x[0].astype(np.int64), "i") if x[1] == "b" else x


def _arith(name: str) -> Callable[..., tuple[np.ndarray, str]]:
    fn = getattr(operator, name)

    def apply(a: tuple[np.ndarray, str], b: tuple[np.ndarray, str]) -> tuple[np.ndarray, str]:
        (x, kx), (y, ky) = _num(a), _num(b)
        if name in ("truediv", "floordiv", "mod"):
            if (y == 0).any():
                raise Decline  # Python raises ZeroDivisionError
            if name != "truediv" and "f" in (kx, ky) and not (
                    np.isfinite(x).all() and np.isfinite(y).all()):
                raise Decline
        if name == "truediv":
            return x.astype(np.float64) / y.astype(np.float64), "f"
        if kx == "f" or ky == "f":
            return fn(x.astype(np.float64, copy=False), y.astype(np.float64, copy=False)), "f"
        if name == "mul" and len(x) and float(np.abs(x.astype(np.float64) * y).max()) > _EXACT:
            raise Decline
        return _checked(fn(x, y))

    return apply


def _bitwise(name: str) -> Callable[..., tuple[np.ndarray, str]]:
    fn = getattr(operator, name if name == "xor" else f"{name}_")

    def apply(a: tuple[np.ndarray, str], b: tuple[np.ndarray, str]) -> tuple[np.ndarray, str]:
        if a[1] == "f" or b[1] == "f":
            raise Decline  # Python raises TypeError
        if a[1] == b[1] == "b":
            return fn(a[0], b[0]), "b"
        return _checked(fn(_num(a)[0], _num(b)[0]))

    return apply


def _compare(name: str) -> Callable[..., tuple[np.ndarray, str]]:
    fn = getattr(operator, name)

    def apply(a: tuple[np.ndarray, str], b: tuple[np.ndarray, str]) -> tuple[np.ndarray, str]:
        return fn(a[0], b[0]), "b"

    return apply


def _neg(a: tuple[np.ndarray, str]) -> tuple[np.ndarray, str]:
    x, k = _num(a)
    return -x, k


def _abs(a: tuple[np.ndarray, str]) -> tuple[np.ndarray, str]:
    x, k = _num(a)
    return np.abs(x), k


def _invert(a: tuple[np.ndarray, str]) -> tuple[np.ndarray, str]:
    if a[1] == "f":
        raise Decline  # Python raises TypeError
    return _checked(~_num(a)[0])


_APPLY: dict[str, Callable[..., tuple[np.ndarray, str]]] = {
    **{name: _arith(name) for name in ("add", "sub", "mul", "truediv", "floordiv", "mod")},
    **{name: _bitwise(name) for name in ("and", "or", "xor")},
    **{name: _compare(name) for name in ("lt", "le", "gt", "ge", "eq", "ne")},
    "neg": _neg, "pos": _num, "abs": _abs, "invert": _invert,
}


def truthy(values: np.ndarray) -> np.ndarray:
    """Python's truth of each value of a numeric result column (NaN is true)."""
    return values if values.dtype == bool else values != 0
