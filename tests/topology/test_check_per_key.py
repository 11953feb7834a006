"""``cedar check`` with per-key progress: the ``interleaved`` variant runs the keys' rows in
other interleavings (each key's rows in their order) and compares; an interleaving that makes
other rows late behind the low watermark is another input, said and not compared; a query
whose output depends on the interleaving is caught."""

from __future__ import annotations

import itertools

import pytest

from operators.aggregates import Count
from operators.ingress import AdvanceTime
from topology.seeing.checker import CheckFailed, check

#: three meters, m2 40 ticks behind the others
ROWS = [{"m": m, "t": t - (40 if m == "m2" else 0)} for t in range(40, 120, 4)
        for m in ("m0", "m1", "m2")]


def per_meter(s):
    return s.group_apply("m", lambda g: g.tumbling_window(10, emit="final").aggregate(Count()))


def test_the_keys_interleavings_give_the_same_output():
    adv = AdvanceTime(every=1, per_key="m", low_watermark=200)
    report = check(per_meter, ROWS, start="t", advance=adv, ray=False,
                   variants=["interleaved", "batches"])
    assert report.ok and sum(v.startswith("interleaved") for v in report.runs) == 3


def test_an_interleaving_that_moves_the_low_watermark_past_rows_is_not_compared():
    adv = AdvanceTime(every=1, per_key="m", low_watermark=45)
    report = check(per_meter, ROWS, start="t", advance=adv, ray=False, variants=["interleaved"],
                   shuffles=6)
    notes = [why for v, why in report.skipped.items() if v.startswith("interleaved")]
    assert notes and all("the low watermark moves with the interleaving" in w for w in notes)


def test_a_query_that_depends_on_the_interleaving_is_caught():
    calls = itertools.count()

    def numbered(s):  # numbers the rows as they come: not a temporal query
        return s.select(lambda r: (r["m"], next(calls)))

    adv = AdvanceTime(every=1, per_key="m", low_watermark=200)
    with pytest.raises(CheckFailed, match="interleaved"):
        check(numbered, ROWS[:6], start="t", advance=adv, ray=False, variants=["interleaved"],
              shrink_s=5)


def test_without_per_key_progress_it_says_why_it_did_not_run():
    report = check(per_meter, ROWS, start="t", ray=False, variants=["interleaved"])
    assert report.skipped["interleaved"].startswith("the source has no per-key progress")
