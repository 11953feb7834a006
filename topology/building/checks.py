"""The checks of the builder's arguments: each refuses a bad value where the query writes it,
naming the call and the argument and saying what to give instead (STYLE.md: validate where it
was written). The node types (:mod:`topology.building.nodes`) call them in ``__post_init__``, the
:class:`~topology.stream.Stream` methods before they build a node.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from operators.windows.spec import CountWindow, HoppingWindow, SessionWindow, SnapshotWindow

#: The fusion levels, shallow to deep (``plan(fuse=...)``, ``deploy(fuse=...)``,
#: ``collect(fuse=...)``); ``False`` is none (one stage per step) and ``True`` is
#: ``"stateless"``.
FUSE_LEVELS = ("stateless", "chains", "all")


def fuse_level(what: str, fuse: Any) -> str | None:
    """The fusion level ``fuse`` names (None: no fusion), or a clear error naming ``what``'s
    argument.

    >>> fuse_level("deploy", True), fuse_level("deploy", "all"), fuse_level("plan", False)
    ('stateless', 'all', None)
    >>> fuse_level("deploy", "deep")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: deploy(fuse='deep'): give False (one actor per step), True or 'stateless' ...
    """
    if fuse is False:
        return None
    if fuse is True:
        return "stateless"
    if isinstance(fuse, str) and fuse in FUSE_LEVELS:
        return fuse
    raise (ValueError if isinstance(fuse, str) else TypeError)(
        f"{what}(fuse={fuse!r}): give False (one actor per step), True or 'stateless' "
        f"(stateless steps run in the stage before them), 'chains' (every run of single-input "
        f"steps in one actor, windows and group_apply too) or 'all' (each connected part of "
        f"the query in one actor)")


#: The runtimes a query runs on: ``collect(runtime=...)``.
RUNTIMES = ("ray", "inline")

#: A step name names the step's Ray actor ``<query>/<step>``, its trace files and its line in
#: stats and errors: no ``/`` (a phantom query ``<query>/a`` would appear), no ``~`` (the
#: query's own ``~host``), no spaces. Letters and digits of any script are fine.
_STEP_CHARS = "-_.#[]"
#: A query name is also the folder of its checkpoints (a path or a URI): no ``#``, ``[``, ``]``.
_QUERY_CHARS = "-_."
#: The step the planner adds for the query's output.
SINK_STEP = "sink"
_WORD = re.compile(r"[^\W_]")  # a letter or a digit, of any script


def _check_name(name: Any, what: str, chars: str, why: str, arg: str = "name") -> None:
    """Raise unless ``name`` is letters, digits and ``chars``, starting with a letter, a digit
    or ``_``; ``what`` names the call, ``arg`` the argument, ``why`` says what it names."""
    if not isinstance(name, str):
        raise TypeError(f"{what}({arg}={name!r}): give a str ({why})")
    bad = "".join(dict.fromkeys(ch for ch in name if not (_WORD.match(ch) or ch in chars)))
    if name and not bad and (_WORD.match(name[0]) or name[0] == "_"):
        return
    listed = f" ({', '.join(repr(ch) for ch in bad)} not allowed)" if bad else ""
    raise ValueError(f"{what}({arg}={name!r}): not a valid name{listed}; use letters, digits and "
                     f"{' '.join(chars)}, starting with a letter, a digit or _ ({why})")


def check_step_name(name: str | None, what: str) -> None:
    """Refuse a step name (``name=`` of a builder method) that cannot name the step's actor
    and files; ``what`` names the call, e.g. ``"where"``. ``None`` (the planner's id) passes.

    >>> check_step_name("per-meter[0]", "where")
    >>> check_step_name("a/sink", "where")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: where(name='a/sink'): not a valid name ('/' not allowed); use letters, ...
    """
    if name is None:
        return
    _check_name(name, what, _STEP_CHARS,
                "a step name names the step's Ray actor '<query>/<step>', its trace files and "
                "its line in stats and errors")
    if name == SINK_STEP:
        raise ValueError(f"{what}(name={name!r}): 'sink' is the query's output step; choose "
                         f"another name")


def check_query_name(name: str, what: str, arg: str = "name") -> None:
    """Refuse a query name (``deploy(name)``, ``Stream.published(name)``) that cannot name the
    query's actors ``<name>/<step>`` and its checkpoint folder.

    >>> check_query_name("meter-avg", "deploy")
    >>> check_query_name("..", "deploy")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: deploy(name='..'): not a valid name; use letters, digits and - _ ., ...
    """
    _check_name(name, what, _QUERY_CHARS,
                "a query name names its Ray actors '<query>/<step>' and its checkpoint folder",
                arg)


def check_function(what: str, arg: str, value: Any, does: str, optional: bool = False) -> None:
    """Refuse ``value`` for argument ``arg`` of ``what`` unless it is callable (or None when
    ``optional``); ``does`` says what the function is given and returns."""
    if callable(value) or (optional and value is None):
        return
    alt = " (or None)" if optional else ""
    raise TypeError(f"{what}({arg}={value!r}): give a function {does}{alt}")


def check_key(what: str, arg: str, value: Any, optional: bool = False) -> None:
    """Refuse a key that is neither a function of the payload, a field name (str) nor an
    index (int) (nor None when ``optional``)."""
    if callable(value) or (isinstance(value, (str, int)) and not isinstance(value, bool)) \
            or (optional and value is None):
        return
    alt = " (or None)" if optional else ""
    raise TypeError(f"{what}({arg}={value!r}): give a function of the payload, a field name "
                    f"or an index{alt}")


def check_on(what: str, on: Any) -> None:
    """Refuse a join's ``on`` that is neither None (a cross join) nor a pair of keys."""
    if on is None:
        return
    if not isinstance(on, (tuple, list)) or len(on) != 2:
        raise ValueError(f"{what}(on={on!r}): on must be a pair (left_key, right_key) of field "
                         f"names or functions of the payload, or None for a cross join")
    for k in on:
        check_key(what, "on", k)


def check_window_spec(spec: Any) -> None:
    """Refuse a ``spec`` that is not one of the window specs of :mod:`operators.windows`."""
    if not isinstance(spec, (HoppingWindow, SnapshotWindow, CountWindow, SessionWindow)):
        raise TypeError(f"window(spec={spec!r}): give a window spec of operators.windows "
                        f"(hopping_window, tumbling_window, snapshot_window, count_window, "
                        f"session_window)")


def check_iterable(what: str, arg: str, value: Any, of: str) -> None:
    """Refuse ``value`` for argument ``arg`` of ``what`` unless it is an iterable (of ``of``)
    other than a string."""
    if isinstance(value, Iterable) and not isinstance(value, (str, bytes)):
        return
    raise TypeError(f"{what}({arg}={value!r}): give an iterable of {of}")


def check_flag(what: str, arg: str, value: Any) -> None:
    """Refuse a ``value`` that is not True or False."""
    if not isinstance(value, bool):
        raise TypeError(f"{what}({arg}={value!r}): give True or False")


def check_fuse(what: str, fuse: Any) -> None:
    """Refuse a ``fuse`` that is not None (the runtime's default) or a fusion level."""
    if fuse is not None:
        fuse_level(what, fuse)


def check_runtime(what: str, runtime: Any) -> None:
    """Refuse a runtime that is not one of :data:`RUNTIMES`."""
    if runtime not in RUNTIMES:
        raise ValueError(f"{what}(runtime={runtime!r}): use one of {RUNTIMES}")


__all__ = ["FUSE_LEVELS", "RUNTIMES", "SINK_STEP", "check_flag", "check_function", "check_fuse",
           "check_iterable", "check_key", "check_on", "check_query_name", "check_runtime",
           "check_step_name", "check_window_spec", "fuse_level"]
