"""Nexmark's first steps of Q4, Q6 and Q9 in one join (:func:`benchmarks.nexmark.queries.
open_to_close`: the bids stretched to ``FOREVER`` joined with the auctions, those placed before
the opening dropped) against the two joins the queries said before (bids as points joined with
the open auction, stretched and joined with the auction again): the same CHT, on random
auctions (unique ids) and bids (on open, closed, not yet open and unknown auctions, ties),
column-wise and per event, with random CTIs. Inline only."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.nexmark import generator as gen
from benchmarks.nexmark import queries as nq
from operators.cht import to_cht
from operators.ingress import AdvanceTime
from tests.kit import PROPERTY
from topology import Stream

T0 = gen.BASE_TICKS
PAIRS = {"q4": (nq.q4_pair, nq.first), "q6": (nq.q6_pair, nq.first),
         "q9": (nq.q9_pair, nq.third)}


def two_joins(auction_iv: Stream, bid: Stream, pair: Any, key: Any) -> Stream:
    """The queries' former statement of the same events."""
    open_bids = auction_iv.join(bid, on=(nq.auction_key, nq.bid_auction), select=pair)
    return open_bids.alter_lifetime(duration=nq.FOREVER).join(
        auction_iv, on=(key, nq.auction_key), select=nq.keep_left)


@st.composite
def tables(draw: Any) -> dict[str, Any]:
    ids = draw(st.lists(st.integers(0, 8), unique=True, max_size=6))
    auctions = []
    for i in ids:
        opens = draw(st.integers(0, 50))
        auctions.append({"id": i, "item_name": "item", "description": "d",
                         "initial_bid": 1, "reserve": draw(st.integers(0, 3)),
                         "date_time": T0 + opens, "expires": T0 + opens + draw(st.integers(1, 30)),
                         "seller": draw(st.integers(0, 2)), "category": draw(st.integers(0, 2)),
                         "extra": draw(st.sampled_from(["", "x"]))})
    bids = [{"auction": draw(st.integers(0, 9)), "bidder": draw(st.integers(0, 3)),
             "price": draw(st.integers(1, 4)), "channel": "c", "url": "u",
             "date_time": T0 + draw(st.integers(0, 80)),
             "extra": draw(st.sampled_from(["", "y"]))} for _ in range(draw(st.integers(0, 30)))]
    ts = pa.timestamp("us", tz="UTC")
    auction_schema = pa.schema([(k, ts if k in ("date_time", "expires") else
                                 pa.string() if k in ("item_name", "description", "extra")
                                 else pa.int64()) for k in gen_fields("auction")])
    bid_schema = pa.schema([(k, ts if k == "date_time" else
                             pa.string() if k in ("channel", "url", "extra") else pa.int64())
                            for k in gen_fields("bid")])
    return {"auction": pa.Table.from_pylist(sorted(auctions, key=lambda a: a["date_time"]),
                                            schema=auction_schema),
            "bid": pa.Table.from_pylist(sorted(bids, key=lambda b: b["date_time"]),
                                        schema=bid_schema)}


def gen_fields(name: str) -> list[str]:
    return gen.generate(100, seed=1)[name].column_names


def streams(t: dict[str, Any], every: int) -> tuple[Stream, Stream]:
    adv = AdvanceTime(every=every)
    return (Stream.from_arrow(t["auction"], start="date_time", end="expires",
                              shape="interval", advance=adv, name="auction_iv"),
            Stream.from_arrow(t["bid"], start="date_time", shape="point", advance=adv,
                              name="bid"))


@pytest.mark.parametrize("query", sorted(PAIRS))
@PROPERTY
@given(t=tables(), every=st.integers(1, 12), columns=st.booleans())
def test_one_join_gives_the_two_joins_events(query: str, t: dict[str, Any], every: int,
                                             columns: bool) -> None:
    pair, key = PAIRS[query]
    got = to_cht(nq.open_to_close(*streams(t, every), pair).collect(runtime="inline",
                                                                    columns=columns))
    want = to_cht(two_joins(*streams(t, every), pair, key).collect(runtime="inline",
                                                                   columns=columns))
    assert got == want
