"""What a user function computes, as text a plan fingerprint hashes (:func:`code_text`).

A step's fingerprint (:mod:`topology.planning.plan`) must change when its function's body
changes, and stay the same in another process, under another hash seed, for the same code:
so it reads the function's code object -- its bytecode (``co_code``), its constants
(``co_consts``, nested code objects read the same way), the names it loads (``co_names``)
-- its defaults and the values of its closure cells, never ``hash()`` of a string or an
object's address.

What it cannot see (said, not guessed): a global the function reads (``THRESHOLD`` in
``lambda r: r["v"] > THRESHOLD``) is seen by its name only, not its value; a closure cell
or a default that is not plain data (ints, floats, str, bytes, None, bools and tuples or
frozensets of these; a function is read as a function) is seen by its type's name only; a
callable without code (a builtin, a C extension's object) by its type and ``repr`` only; a
callable object's ``__dict__`` is pickled, so a set in it (ordered by the hash seed) or a
large table in it (read whole) is better kept out of it.
Bytecode belongs to one Python version: the same function under another Python has another
fingerprint.
"""

from __future__ import annotations

import functools
import hashlib
import pickle
import types
from typing import Any

#: How deep functions held by functions (closures, partials, a callable's ``__call__``) are
#: read; below it, a function is seen by its qualified name.
MAX_DEPTH = 4


def _plain(value: Any) -> str | None:
    """``value`` as stable text when it is plain data, else None."""
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        return f"{type(value).__name__}:{value!r}"
    if isinstance(value, tuple):
        parts = [_plain(v) for v in value]
        return None if None in parts else "(" + ",".join(p for p in parts if p) + ")"
    if isinstance(value, frozenset):  # its iteration order follows the hash seed: sorted
        parts = [_plain(v) for v in value]
        return None if None in parts else "{" + ",".join(sorted(p for p in parts if p)) + "}"
    return None


def _value(value: Any, depth: int) -> str:
    """A default, a closure cell's value or a partial's argument: plain data as itself, a
    function as its code, anything else by its type's qualified name."""
    plain = _plain(value)
    if plain is not None:
        return plain
    if callable(value):
        return code_text(value, depth + 1)
    return f"<{type(value).__module__}.{type(value).__qualname__}>"


def _code(co: types.CodeType) -> str:
    consts = [f"[{_code(c)}]" if isinstance(c, types.CodeType) else (_plain(c) or
              f"<{type(c).__qualname__}>") for c in co.co_consts]
    return f"{co.co_code.hex()}|{';'.join(consts)}|{','.join(co.co_names)}"


def _function(fn: types.FunctionType, depth: int) -> str:
    cells = fn.__closure__ or ()
    closure = []
    for cell in cells:
        try:
            closure.append(_value(cell.cell_contents, depth))
        except ValueError:  # an empty cell (a name bound later)
            closure.append("<empty>")
    defaults = [_value(d, depth) for d in fn.__defaults__ or ()]
    kw = [f"{k}={_value(v, depth)}" for k, v in sorted((fn.__kwdefaults__ or {}).items())]
    return (f"code:{_code(fn.__code__)}|defaults:{','.join(defaults + kw)}|"
            f"closure:{','.join(closure)}")


def code_text(fn: Any, depth: int = 0) -> str:
    """What the callable ``fn`` computes, as text that is the same in any process for the
    same code (see the module docstring for what it reads and what it cannot):

    * a function or a lambda: its code object, defaults and closure cells (the function's
      name is not part of it: a lambda and a ``def`` with the same body read the same);
    * a bound method: its function and the type of the object it is bound to;
    * ``functools.partial``: its function and its arguments;
    * a class: its qualified name;
    * another callable object: its class's qualified name, its ``__call__``'s code, and its
      ``__dict__`` when that pickles;
    * anything else (a builtin, ``operator.itemgetter('k')``): its type and its ``repr``.

    >>> code_text(lambda r: r["v"] > 3) == code_text(lambda r: r["v"] > 3)
    True
    >>> code_text(lambda r: r["v"] > 3) == code_text(lambda r: r["v"] > 4)
    False
    """
    if depth > MAX_DEPTH:
        return f"<{_name(fn)}>"
    if isinstance(fn, types.FunctionType):
        return _function(fn, depth)
    if isinstance(fn, types.MethodType):
        return f"method of {_name(type(fn.__self__))}:{code_text(fn.__func__, depth + 1)}"
    if isinstance(fn, functools.partial):
        args = [_value(a, depth) for a in fn.args]
        kw = [f"{k}={_value(v, depth)}" for k, v in sorted(fn.keywords.items())]
        return f"partial({code_text(fn.func, depth + 1)}|{','.join(args + kw)})"
    if isinstance(fn, type):
        return f"class {_name(fn)}"
    call = next((vars(c)["__call__"] for c in type(fn).__mro__ if "__call__" in vars(c)), None)
    if isinstance(call, types.FunctionType):  # an object of a user's class
        state = ""
        try:
            state = hashlib.sha256(pickle.dumps(vars(fn), protocol=4)).hexdigest()
        except Exception:  # noqa: BLE001 - no __dict__, or it does not pickle: the class only
            state = "<unreadable>"
        return f"object of {_name(type(fn))}:{_function(call, depth + 1)}|state:{state}"
    return f"<{_name(type(fn))}:{fn!r}>"  # its repr: an address in it is dropped by the hash


def _name(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', type(obj).__name__)}"
