"""What ``why`` and the web view show of a source's per-key progress
(``AdvanceTime(per_key=...)``, docs/ctis.md#per-key-progress): its low watermark, its slowest
keys and the keys with the most late rows, each key with its CTI, how far behind the fastest
key that is, when its last event came and its late rows; and why one key's output is or is
not final. Times as times, durations in units.

A view is what :meth:`operators.ingress_keys.IngressKeys.slowest_keys` returns (each key's
``ago_s``: the seconds since its last rows came, when its runtime keeps a clock).
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

from operators.events import MIN_TIME
from topology.building.times import show_duration, show_time

__all__ = ["aged", "key_reason", "key_row", "key_text", "keys_dict", "keys_lines"]


def aged(view: dict[str, Any]) -> dict[str, Any]:
    """``view`` as an explanation keeps it: without its ``table`` and ``asked``."""
    return {k: v for k, v in view.items() if k not in ("table", "asked")}


def key_row(view: dict[str, Any], key: Any) -> dict[str, Any] | None:
    """The row of ``key`` in a view that was asked about it (or keeps every key's); None:
    the source has not seen that key."""
    return view.get("asked") or view.get("table", {}).get(key)


def _ago(s: float | None) -> str:
    if s is None:
        return ""
    return f"; its last event came {show_duration(round(s * 1_000_000), 'timestamps')} ago"


def key_text(r: dict[str, Any], top: int, clock: str, tz: str | _dt.tzinfo | None) -> str:
    """``key 'm042' has CTI 10:03, 7 min behind the fastest key's; its last event came 2 min
    ago; 3 late rows``."""
    if r["cti"] is None:
        return f"key {r['key']!r}: none of its rows was on time ({r['late']} late rows)"
    behind = top - r["cti"]
    lag = (f", {show_duration(behind, clock)} behind the fastest key's"
           if behind > 0 and r["cti"] > MIN_TIME else "")
    late = f"; {r['late']} late rows" if r["late"] else ""
    return (f"key {r['key']!r} has CTI {show_time(r['cti'], clock, tz)}{lag}"
            f"{_ago(r.get('ago_s'))}{late}")


def keys_lines(source: str, view: dict[str, Any], clock: str,
               tz: str | _dt.tzinfo | None) -> list[str]:
    """The report's lines of one per-key source: its low watermark, slowest keys and the
    keys with the most late rows."""
    top = view["top"]
    lines = [f"per-key progress of {source}: {view['keys']} keys; its CTI (the low watermark) "
             f"{show_time(view['cti'], clock, tz)}, the fastest key's "
             f"{show_time(top, clock, tz)}"]
    lines += [f"  slowest {key_text(r, top, clock, tz)}" for r in view["slowest"]]
    lines += [f"  most late {key_text(r, top, clock, tz)}" for r in view["most_late"]
              if r["late"]]
    return lines


def keys_dict(source: str, view: dict[str, Any], clock: str,
              tz: str | _dt.tzinfo | None) -> dict[str, Any]:
    """The web view's JSON of one per-key source: the view with every time shown, and each
    key's sentence."""
    top = view["top"]

    def row(r: dict[str, Any]) -> dict[str, Any]:
        return {**r, "key": repr(r["key"]), "cti_shown": show_time(r["cti"], clock, tz),
                "text": key_text(r, top, clock, tz)}

    return {"source": source, "keys": view["keys"], "cti": view["cti"], "top": top,
            "cti_shown": show_time(view["cti"], clock, tz),
            "top_shown": show_time(top, clock, tz),
            "slowest": [row(r) for r in view["slowest"]],
            "most_late": [row(r) for r in view["most_late"] if r["late"]]}


def key_reason(key: Any, r: dict[str, Any] | None, top: int, hi: int, clock: str,
               tz: str | _dt.tzinfo | None) -> str:
    """Why ``key``'s output up to ``hi`` is not final: its CTI, how far behind the others,
    when its last event came."""
    if r is None:
        return f"the source has seen no row of key {key!r}"
    if r["cti"] is None:
        return (f"every row of key {key!r} came late ({r['late']}): the low watermark is "
                f"past them (a larger low_watermark keeps a device further behind)")
    return (f"{key_text(r, top, clock, tz)}; its output is final once that key's CTI passes "
            f"{show_time(hi - 1, clock, tz)} (its own later rows move it)")
