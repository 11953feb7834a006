"""The Nexmark queries the temporal algebra expresses, in cedar and in Spark Structured Streaming.

Every query exists twice over the same generated tables (:mod:`.generator`):

* **cedar**: a function of ``topology.Stream`` sources returning a ``Stream``. The sources
  (:func:`sources`) are ``Stream.from_arrow`` of each entity, point events at ``date_time``
  (``auction_iv``: auctions as intervals ``[date_time, expires)``). A payload holds every
  column but the time columns: an event's time is its lifetime.
* **Spark**: a function of streaming DataFrames (``readStream.parquet``) returning a streaming
  DataFrame, run with ``trigger(availableNow=True)`` in append mode.

:data:`QUERIES` lists them with, per query, how to turn each engine's output into comparable
rows (:class:`Query`). Where cedar and Spark differ, the query's docstring says how, and
``comparable`` says what is compared (or why nothing is).

**The end of input.** cedar's sources end with a CTI at ∞, so every window is final and
output. Spark's append mode outputs a window only once the watermark (the latest event time
minus the delay, :data:`WATERMARK` = 0: every table is sorted by time) has passed its end, and
the stream never "ends": windows not closed by the latest event time are never output. The
windowed queries therefore compare only windows that end at or before the latest event time of
their input (:func:`closed_by`).
"""

from __future__ import annotations

import bisect
import datetime as dt
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from operators.aggregates import Aggregates, Avg, Count, CountDistinct, Max, Min, Sum
from operators.columns import Columns
from operators.events import TICKS_PER_SECOND
from operators.ingress import AdvanceTime
from operators.scan import ColumnScan
from operators.vectorized import per_value
from topology import Stream

#: Nexmark's window: 10 s (Q5's size, Q7's and Q8's tumbling windows).
WINDOW = 10 * TICKS_PER_SECOND
#: Q5's hop: 2 s.
HOP = 2 * TICKS_PER_SECOND
#: "Forever" for lifetimes that stand for edges never closed (persons, auctions in Q3, the
#: closed auctions in Q4's running average): 100 years.
FOREVER = 100 * 365 * 24 * 3600 * TICKS_PER_SECOND
#: Q1's dollar-to-euro rate.
EURO = 0.908
#: Q11's session gap: 10 s.
SESSION_GAP = 10 * TICKS_PER_SECOND
#: Q2's selection: ``auction % Q2_MOD == 0``.
Q2_MOD = 123
#: Q3's states and category.
Q3_STATES = ("OR", "ID", "CA")
Q3_CATEGORY = 10
CTI_EVERY = 10_000
#: Spark's watermark delay: the tables are sorted by time, so nothing is late.
WATERMARK = "0 seconds"


# -- sources ---------------------------------------------------------------------------------------
def sources(tables: dict[str, Any]) -> dict[str, Stream]:
    """The cedar sources over the generated Arrow tables: ``person``, ``auction``, ``bid``
    (points at ``date_time``; ``bid`` where the tables have it), ``auction_iv`` (auctions over
    ``[date_time, expires)``) and, where the tables have it, Q13's ``side_input`` (points at
    ``date_time``); a CTI every :data:`CTI_EVERY` events, no delay (the tables are sorted by
    time)."""
    adv = AdvanceTime(every=CTI_EVERY)
    out = {name: Stream.from_arrow(tables[name], start="date_time", shape="point",
                                   advance=adv, name=name)
           for name in ("person", "auction", "bid") if name in tables}
    out["auction_iv"] = Stream.from_arrow(tables["auction"], start="date_time", end="expires",
                                          shape="interval", advance=adv, name="auction_iv")
    if "side_input" in tables:
        out["side_input"] = Stream.from_arrow(tables["side_input"], start="date_time",
                                              shape="point", advance=adv, name="side_input")
    return out


# -- cedar -----------------------------------------------------------------------------------------
def identity(b: dict[str, Any]) -> dict[str, Any]:
    return b


def q0(bid: Stream) -> Stream:
    """Q0, pass-through: every bid as it is (an identity ``select``, column-wise)."""
    return bid.select(identity)


def euro(b: dict[str, Any]) -> dict[str, Any]:
    return {"auction": b["auction"], "bidder": b["bidder"], "price": b["price"] * EURO,
            "extra": b["extra"]}


def q1(bid: Stream) -> Stream:
    """Q1, currency conversion: ``price * 0.908`` (column-wise; the time stays the event's)."""
    return bid.select(euro)


def q2_keep(b: dict[str, Any]) -> bool:
    return b["auction"] % Q2_MOD == 0


def auction_price(b: dict[str, Any]) -> dict[str, Any]:
    return {"auction": b["auction"], "price": b["price"]}


def q2(bid: Stream) -> Stream:
    """Q2, selection: the bids on auctions ``auction % 123 == 0`` (the form Flink's Nexmark
    uses; Beam's original lists auction ids in a set, which would run per event here),
    projected to ``auction, price``."""
    return bid.where(q2_keep).select(auction_price)


def in_q3_states(state: str) -> bool:
    return state in Q3_STATES


def q3_person(p: dict[str, Any]) -> Any:
    """Whether each person of a batch lives in one of :data:`Q3_STATES` (a boolean mask, once
    per distinct state: ``where(vectorized=True)``)."""
    return per_value(in_q3_states, p["state"])


def q3_auction(a: dict[str, Any]) -> bool:
    return a["category"] == Q3_CATEGORY


def seller(a: dict[str, Any]) -> Any:
    return a["seller"]


def person_id(p: dict[str, Any]) -> Any:
    return p["id"]


def q3_pair(a: dict[str, Any], p: dict[str, Any]) -> dict[str, Any]:
    return {"name": p["name"], "city": p["city"], "state": p["state"], "id": a["id"]}


def q3(person: Stream, auction: Stream) -> Stream:
    """Q3, local item suggestion: auctions of category 10 joined with their sellers when they
    live in OR, ID or CA. Persons and auctions are facts that stay true: both become
    :data:`FOREVER`-long events (edges never closed), so every matching pair is output once,
    from the later of the two starts.

    Spark: an unbounded stream-stream inner join (no watermark, state kept forever). Compared:
    the multisets of ``(name, city, state, id)``; cedar's lifetimes have no Spark counterpart.
    """
    people = person.where(q3_person, vectorized=True).alter_lifetime(duration=FOREVER)
    items = auction.where(q3_auction).alter_lifetime(duration=FOREVER)
    return items.join(people, on=(seller, person_id), select=q3_pair)


def auction_key(a: dict[str, Any]) -> Any:
    return a["id"]


def bid_auction(b: dict[str, Any]) -> Any:
    return b["auction"]


def q4_pair(a: dict[str, Any], b: dict[str, Any]) -> tuple[Any, ...]:
    """Q4's pair: ``(auction, category, price)``, then the bid's and the auction's times
    (:func:`placed_while_open` reads them)."""
    return (a["id"], a["category"], b["price"], b["date_time"], a["date_time"])


def placed_while_open(p: tuple[Any, ...]) -> Any:
    """Whether a pair's bid was placed at or after its auction opened: its last two items
    are the bid's time and the auction's (:func:`open_to_close`)."""
    return p[-2] >= p[-1]


def open_to_close(auction_iv: Stream, bid: Stream,
                  pair: Callable[[dict[str, Any], dict[str, Any]], tuple[Any, ...]]) -> Stream:
    """Every bid placed while its auction is open (``date_time <= bid time < expires``) as
    ``pair(auction, bid)``, living from the bid to the auction's close ``[bid time,
    expires)``: the first steps of Q4, Q6 and Q9. ``pair`` ends with the bid's time and the
    auction's opening time.

    One join: each bid, stretched to :data:`FOREVER`, meets its auction ``[date_time,
    expires)`` over ``[max(bid time, date_time), expires)`` when placed before the close,
    and :func:`placed_while_open` drops those placed before the opening (a bid's lifetime
    starts at its ``date_time``, an auction's at its own). It states in one join what the
    queries said in two (bids as points joined with the open auction, which keeps those
    placed while it is open, ``[bid time, bid time + 1)``; stretched to :data:`FOREVER` and
    joined with the auction again, ``[bid time, expires)``): the same events, as auction ids
    are unique (one auction event per id; two would pair each bid twice in the first join
    and four times in the second), at the cost of one join instead of two."""
    stretched = bid.alter_lifetime(duration=FOREVER)
    return auction_iv.join(stretched, on=(auction_key, bid_auction),
                           select=pair).where(placed_while_open)


def first(p: tuple[Any, ...]) -> Any:
    return p[0]


def keep_left(p: Any, a: Any) -> Any:
    return p


def price_category(p: tuple[Any, ...]) -> tuple[Any, Any]:
    return (p[2], p[1])


def category_price(p: tuple[Any, tuple[Any, Any]]) -> tuple[Any, Any]:
    return (p[1][1], p[1][0])


def q4(auction_iv: Stream, bid: Stream) -> Stream:
    """Q4, average price per category: an auction's winning price is its highest bid placed
    while it is open (``date_time <= bid time < expires``; the reserve is not checked, as in
    Flink's Nexmark SQL); the output is, per category, the running average of the winning
    prices of the auctions closed so far, with their count: one window of :data:`FOREVER`
    (from 1970 to December 2069) per category, whose speculative output is that running
    average (each closed auction retracts the category's average and inserts the new one, as
    Flink's updating aggregate does) and whose CHT is the final average.

    In cedar: each bid placed while its auction is open lives from its time to the close
    (:func:`open_to_close`: one join of the bids stretched to :data:`FOREVER` with the auctions,
    those placed before the opening dropped; it was bids as points joined with the open auction,
    stretched and joined with the auction again: the same events); per auction a count window of
    one end time (``count_window(1, by="end")``: all of an auction's bids end at its close)
    takes the highest ``(price, category)``, a point at the close; per category the window
    averages them (``Aggregates(avg=Avg, count=Count)``). (A snapshot window per auction says
    the same; it cost O(bids²) per auction until snapshot windows kept their incremental state
    across splits, and the count window, one window per close, is still the cheaper statement.)
    The planner runs that ``group_apply`` as one keyed by-end count window
    (:mod:`operators.windows.keyed_count`), and ``emit="final"`` sends each winner once, at the
    close (the same CHT), instead of correcting it at every batch with a new bid: the category
    windows see 60k inserts rather than a retraction and an insert per auction and batch.

    Spark Structured Streaming cannot run it (tried with PySpark 4.3, both inputs
    watermarked): the join, the maximum per auction and the average per category are rejected
    in append mode (aggregations without a watermark on a grouping key), in update mode (the
    correctness check of chained stateful operators under the global watermark) and in
    complete mode (no stream-stream join). Compared instead with the same query as a Spark
    *batch* query: per category the average (cedar's CHT: one row per category) against
    Spark's, to 9 significant digits (cedar's averages are exact sums rounded once; Spark
    sums doubles).
    """
    to_close = open_to_close(auction_iv, bid, q4_pair)
    winners = to_close.group_apply(first, lambda g: g.count_window(
        1, by="end", emit="final").aggregate(Max(price_category))).select(category_price)
    return winners.group_apply(first, lambda g: g.tumbling_window(FOREVER).aggregate(
        Aggregates(avg=Avg(1), count=Count())))


def bid_count(p: tuple[Any, Any]) -> Any:
    return p[1]


def itself(p: Any) -> Any:
    return p


def q5(bid: Stream) -> Stream:
    """Q5, hot items: per hopping window (10 s, hop 2 s) the auctions with the most bids
    ``(auction, count)`` over the window's lifetime: every auction tied for the most, as
    Nexmark's SQL states it (the counts joined with their window's maximum, ``num >= maxn``).

    cedar: ``group_apply(auction, hopping → Count)`` (the keyed column-wise path); the counts,
    as points at their window's start, fall one window per 2 s tumbling window, whose
    ``Max`` of the count is the window's most; the counts joined with it on the count are
    the tied maxima (a point at the window's start), stretched back over the 10 s window.
    Spark: the count per (window, auction), then per window (a tumbling window over
    ``window_time``, chained time-window aggregations) the maximum and the list of
    ``(count, auction)``, exploded to the entries equal to the maximum.

    Both windows are sent final (``emit="final"``: each row once, when a CTI passes its
    window's end; the same CHT). Final rows are inserts of a known length, so the planner
    keeps the 2 s window on the column-wise path too, and the join matches column batches
    (speculative counts, corrected at every batch, would retract, and the maximum and the
    join would go event by event).
    """
    counts = bid.group_apply(bid_auction, lambda g: g.hopping_window(WINDOW, HOP, emit="final")
                             .aggregate(Count())).to_points()
    most = counts.tumbling_window(HOP, emit="final").aggregate(Max(bid_count))
    return (counts.join(most, on=(bid_count, itself), select=keep_left)
            .alter_lifetime(duration=WINDOW))


def price_auction_bidder(b: dict[str, Any]) -> tuple[Any, Any, Any]:
    return (b["price"], b["auction"], b["bidder"])


def q7(bid: Stream) -> Stream:
    """Q7, highest bid: per tumbling 10 s window the bid with the highest price, as
    ``(price, auction, bidder)`` (ties to the larger auction, then bidder: the maximum of
    the tuple, in cedar and in Spark alike)."""
    return bid.tumbling_window(WINDOW).aggregate(Max(price_auction_bidder))


def window_of(s: int) -> int:
    return s - s % WINDOW


def id_name(p: dict[str, Any]) -> dict[str, Any]:
    return {"id": p["id"], "name": p["name"]}


def q8_pair(p: dict[str, Any], a: tuple[Any, Any]) -> dict[str, Any]:
    return p


def q8(person: Stream, auction: Stream) -> Stream:
    """Q8, monitor new users: the persons who opened an auction in the same tumbling 10 s
    window in which they registered, ``{id, name}`` over that window. cedar: persons'
    lifetimes become their window (``alter_lifetime``), the auctions' sellers are counted per
    window (``group_apply(seller, tumbling → Count)``, one event per seller and window) and
    the two are joined on the id; the output lifetime is the window.

    Spark: persons and auctions, each with its window column, inner-joined on id = seller
    and equal windows: one row per (person, auction) pair, where cedar has one per person
    and window (Nexmark's SQL groups both sides first; SSS cannot join after an
    aggregation). Compared: Spark's distinct rows against cedar's.

    The counts are sent final (``emit="final"``, the same CHT): one column batch per window,
    inserts only, so the join stays column-wise (speculative counts retract, and a
    retraction turns the join's state into per-event records).
    """
    people = person.select(id_name).alter_lifetime(start=window_of, duration=WINDOW)
    sellers = auction.group_apply(seller, lambda g: g.tumbling_window(WINDOW, emit="final")
                                  .aggregate(Count()))
    return people.join(sellers, on=(person_id, first), select=q8_pair)


# Q14's price range (after the euro rate) and its hours (UTC).
Q14_LOW, Q14_HIGH = 1_000_000, 50_000_000
HOUR = 3600 * TICKS_PER_SECOND
DAY = 24 * HOUR


def q14_keep(b: dict[str, Any]) -> Any:
    """``Q14_LOW < price * EURO < Q14_HIGH`` as two comparisons joined by ``&`` (a chained
    comparison asks ``bool()`` and would run per event; this one runs column-wise)."""
    euros = b["price"] * EURO
    return (euros > Q14_LOW) & (euros < Q14_HIGH)


def time_type_of_hour(hour: int) -> str:
    """Q14's case expression on an hour (UTC)."""
    if 8 <= hour <= 18:
        return "dayTime"
    if hour <= 6 or hour >= 20:
        return "nightTime"
    return "otherTime"


def bid_time_type(t: int) -> str:
    """Q14's case expression on the hour (UTC) of a time in ticks."""
    return time_type_of_hour(t % DAY // HOUR)


def count_c(s: str) -> int:
    """Nexmark's ``count_char(extra, 'c')``."""
    return s.count("c")


def q14_rows(b: dict[str, Any]) -> dict[str, Any]:
    """Q14's row of each bid, on a batch's columns (``select(vectorized=True)``): the hour's
    name and ``c_counts`` once per distinct hour and ``extra`` (:func:`per_value`)."""
    t = b["date_time"]
    return {"auction": b["auction"], "bidder": b["bidder"], "price": b["price"] * EURO,
            "bidTimeType": per_value(time_type_of_hour, t % DAY // HOUR), "date_time": t,
            "extra": b["extra"], "c_counts": per_value(count_c, b["extra"])}


def q14(bid: Stream) -> Stream:
    """Q14, a calculation: the bids whose price in euros lies strictly between 1,000,000 and
    50,000,000, with the price in euros, ``bidTimeType`` (``dayTime`` for hours 8-18,
    ``nightTime`` for 20-6, else ``otherTime``; hours of UTC) and ``c_counts``, the number of
    ``'c'`` in ``extra`` (Nexmark's ``count_char`` UDF). (The generator's bids have an empty
    ``extra``: ``c_counts`` is 0 on generated input; the tests check it on hand-made bids.)"""
    return bid.where(q14_keep).select(q14_rows, vectorized=True)


#: Q21's channels with a fixed id (Nexmark compares ``lower(channel)``).
Q21_CHANNELS = {"apple": "0", "google": "1", "facebook": "2", "baidu": "3"}
#: Q21's pattern; group 2 is the id (Java's ``Matcher.find`` and Python's ``re.search`` agree
#: on this pattern: no lookaround, no possessive quantifiers).
CHANNEL_ID = re.compile(r"(&|^)channel_id=([^&]*)")


def fixed_channel_id(channel: str) -> str | None:
    """The fixed id of a named channel (``lower(channel)``), else None."""
    return Q21_CHANNELS.get(channel.lower())


def is_named_channel(channel: str) -> bool:
    return fixed_channel_id(channel) is not None


def url_channel_id(url: str) -> str | None:
    """The url's ``channel_id`` parameter (``REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)',
    2)``), else None."""
    m = CHANNEL_ID.search(url)
    return None if m is None else m.group(2)


def channel_id(b: dict[str, Any]) -> str | None:
    """Q21's ``channel_id``: the fixed id of a named channel, else the url's ``channel_id``
    parameter, else None."""
    fixed = fixed_channel_id(b["channel"])
    return fixed if fixed is not None else url_channel_id(b["url"])


def q21_rows(b: dict[str, Any]) -> dict[str, Any]:
    """Q21's row of each bid (:func:`channel_id`), on a batch's columns: the channel's and
    the url's id once per distinct channel and url (:func:`per_value`)."""
    ids = np.where(per_value(is_named_channel, b["channel"]),
                   per_value(fixed_channel_id, b["channel"]), per_value(url_channel_id, b["url"]))
    return {"auction": b["auction"], "bidder": b["bidder"], "price": b["price"],
            "channel": b["channel"], "channel_id": ids}


def is_not_none(v: Any) -> bool:
    return v is not None


def has_channel_id(b: dict[str, Any]) -> Any:
    """Whether each row of a batch has a ``channel_id`` (a boolean mask)."""
    return per_value(is_not_none, b["channel_id"])


def q21(bid: Stream) -> Stream:
    """Q21, add a column from a regular expression: each bid with its channel's id (see
    :func:`channel_id`), kept when it has one (Nexmark's ``WHERE``: the url's parameter is
    not null or the channel is one of the four named ones: the same as a non-null id).
    Vectorised (:func:`q21_rows`, :func:`has_channel_id`)."""
    return bid.select(q21_rows, vectorized=True).where(has_channel_id, vectorized=True)


def split_index(s: str, sep: str, i: int) -> str | None:
    """Flink's ``SPLIT_INDEX``: the ``i``-th field of ``s`` split at ``sep`` (empty fields
    kept), None past the last."""
    parts = s.split(sep)
    return parts[i] if 0 <= i < len(parts) else None


def dir1(url: str) -> str | None:
    return split_index(url, "/", 3)


def dir2(url: str) -> str | None:
    return split_index(url, "/", 4)


def dir3(url: str) -> str | None:
    return split_index(url, "/", 5)


def q22_rows(b: dict[str, Any]) -> dict[str, Any]:
    """Q22's row of each bid, on a batch's columns: the fields once per distinct url
    (:func:`per_value`)."""
    url = b["url"]
    return {"auction": b["auction"], "bidder": b["bidder"], "price": b["price"],
            "channel": b["channel"], "dir1": per_value(dir1, url), "dir2": per_value(dir2, url),
            "dir3": per_value(dir3, url)}


def q22(bid: Stream) -> Stream:
    """Q22, split a string: each bid with the url's fields 3, 4 and 5 split at ``/``
    (``https://www.nexmark.com/<dir1>/<dir2>/...``; None past the last field). Vectorised
    (:func:`q22_rows`)."""
    return bid.select(q22_rows, vectorized=True)


#: The auction's columns in Q9's and Q20's output (``date_time`` and ``extra`` are the
#: auction's; the bid's are ``bid_date_time`` and ``bid_extra``).
AUCTION_FIELDS = ("id", "item_name", "description", "initial_bid", "reserve", "date_time",
                  "expires", "seller", "category", "extra")
Q9_FIELDS = AUCTION_FIELDS + ("auction", "bidder", "price", "bid_date_time", "bid_extra")


def q9_pair(a: dict[str, Any], b: dict[str, Any]) -> tuple[Any, ...]:
    """An open auction's bid as a tuple whose order is Q9's: highest price, then earliest;
    last the bid's and the auction's times again (:func:`open_to_close`)."""
    return (b["price"], -b["date_time"], a["id"]) + tuple(a[f] for f in AUCTION_FIELDS[1:]) + (
        b["bidder"], b["extra"], b["date_time"], a["date_time"])


def third(p: tuple[Any, ...]) -> Any:
    return p[2]


def q9_row(p: tuple[Any, tuple[Any, ...]]) -> dict[str, Any]:
    price, neg_time, *auction, bidder, extra, _, _ = p[1]
    return {**dict(zip(AUCTION_FIELDS, auction)), "auction": auction[0], "bidder": bidder,
            "price": price, "bid_date_time": -neg_time, "bid_extra": extra}


def q9(auction_iv: Stream, bid: Stream) -> Stream:
    """Q9, winning bids: per auction the highest bid placed while it is open
    (``date_time <= bid time < expires``, as :func:`q4`; Nexmark: ``BETWEEN``, both ends),
    ties to the earliest bid, with the auction's columns and the bid's (:data:`Q9_FIELDS`); a
    point at the auction's close. cedar: Q4's first steps (bids joined with the open auction,
    stretched to its close, one count window per close) with the maximum of
    ``(price, -bid time, ...)`` (:func:`open_to_close` states the first steps in one join).

    Spark: SSS cannot (see :func:`q4`): compared with :func:`spark_q9_batch` (a
    ``row_number`` per auction, as Nexmark's SQL)."""
    to_close = open_to_close(auction_iv, bid, q9_pair)
    return to_close.group_apply(third, lambda g: g.count_window(
        1, by="end", emit="final").aggregate(Max())).select(q9_row)


def bidder_auction(b: dict[str, Any]) -> tuple[Any, Any]:
    return (b["bidder"], b["auction"])


def bid_order(b: dict[str, Any]) -> tuple[Any, ...]:
    """The order of bids with equal times in Q18's and Q19's scans (cheaper than ``repr``)."""
    return (b["auction"], b["bidder"], b["price"], b["channel"], b["url"], b["extra"])


def q18_step(versions: dict[tuple[Any, Any], int],
             b: dict[str, Any]) -> tuple[dict[tuple[Any, Any], int], list[Any]]:
    """Q18's step per bid: the bid is its key's latest from now on, the key's next version
    (the per-event form of :class:`Q18Versions`, which Q18 runs)."""
    key = (b["bidder"], b["auction"])
    n = versions[key] = versions.get(key, 0) + 1
    return versions, [{**b, "version": n}]


class Q18Versions(ColumnScan):
    """Q18's step a batch at a time (:class:`operators.scan.ColumnScan`): every bid once, with
    its ``(bidder, auction)`` key's next version; the outputs are the batch's own columns
    plus a ``version`` column, so they leave as one column batch."""

    def initial(self) -> dict[tuple[Any, Any], int]:
        return {}

    def tie(self, b: dict[str, Any]) -> tuple[Any, ...]:
        return bid_order(b)

    def step_columns(self, versions: dict[tuple[Any, Any], int], batch: Columns
                     ) -> tuple[dict[tuple[Any, Any], int], np.ndarray, Any]:
        cols = batch.payload
        get = versions.get
        numbers = []
        for key in zip(cols["bidder"].tolist(), cols["auction"].tolist()):
            n = versions[key] = get(key, 0) + 1
            numbers.append(n)
        return versions, np.arange(len(batch)), {**cols, "version": np.array(numbers,
                                                                             dtype=np.int64)}


def q18(bid: Stream) -> Stream:
    """Q18, the last bid per ``(bidder, auction)`` (Nexmark's dedup by ``ROW_NUMBER`` over
    ``date_time DESC``, ``<= 1``): a ``scan`` over the bids in time order keeps, per key, the
    number of bids seen (its state, one int per key) and outputs each bid as its key's new
    latest, the bid's row with its ``version``, a point at the bid's time: the changelog of
    Nexmark's dedup (Flink's upserts: every bid replaces its key's previous one). Compared:
    per key the bid of the highest version (Flink's final rows; Spark batch: ``row_number``).

    The scan is :class:`Q18Versions`, stepped a CTI's bids at a time on their columns (the
    same CHT as :func:`q18_step` per bid).

    (It was a snapshot window per key over bids lasting to ∞ with ``TopK(1)``, each bid the
    answer until the next: the window copied the aggregate's state, every bid so far, at every
    split, quadratic in the bids per key. The scan is linear.)"""
    return bid.scan(Q18Versions())


#: Q19's ranks: the 10 highest bids per auction.
Q19_TOP = 10


def q19_enter(tops: dict[Any, list[Any]], auction: Any, price: Any) -> tuple[int, int] | None:
    """Q19's ranking of ``auction`` after its next bid at ``price``: per auction ``[bids seen,
    version, ranking]``, the ranking a list of ``(-price, seen)`` (highest price first, equal
    prices in time order), at most :data:`Q19_TOP` long. ``(rank, version)`` when the bid
    enters the ranking (rank from 1), else None."""
    top = tops.get(auction)
    if top is None:
        top = tops[auction] = [0, 0, []]
    top[0] += 1
    ranking = top[2]
    entry = (-price, top[0])
    if len(ranking) == Q19_TOP and entry > ranking[-1]:
        return None
    at = bisect.bisect_right(ranking, entry)
    ranking.insert(at, entry)
    del ranking[Q19_TOP:]
    top[1] += 1
    return at + 1, top[1]


def q19_step(tops: dict[Any, list[Any]],
             b: dict[str, Any]) -> tuple[dict[Any, list[Any]], list[Any]]:
    """Q19's step per bid (the per-event form of :class:`Q19Ranks`, which Q19 runs): the bid
    with its ``rank`` and its auction's ``version`` when it enters the ranking."""
    entered = q19_enter(tops, b["auction"], b["price"])
    return tops, [] if entered is None else [{**b, "rank": entered[0],
                                              "version": entered[1]}]


class Q19Ranks(ColumnScan):
    """Q19's step a batch at a time: :func:`q19_enter` per bid on the auction and price
    columns; the outputs are the entering bids' columns plus ``rank`` and ``version``."""

    def initial(self) -> dict[Any, list[Any]]:
        return {}

    def tie(self, b: dict[str, Any]) -> tuple[Any, ...]:
        return bid_order(b)

    def step_columns(self, tops: dict[Any, list[Any]], batch: Columns
                     ) -> tuple[dict[Any, list[Any]], np.ndarray, Any]:
        cols = batch.payload
        rows, ranks, versions = [], [], []
        for i, (a, p) in enumerate(zip(cols["auction"].tolist(), cols["price"].tolist())):
            entered = q19_enter(tops, a, p)
            if entered is not None:
                rows.append(i)
                ranks.append(entered[0])
                versions.append(entered[1])
        at = np.array(rows, dtype=np.int64)
        return tops, at, {**{k: c[at] for k, c in cols.items()},
                          "rank": np.array(ranks, dtype=np.int64),
                          "version": np.array(versions, dtype=np.int64)}


def q19(bid: Stream) -> Stream:
    """Q19, the :data:`Q19_TOP` highest bids per auction so far (Nexmark: ``ROW_NUMBER`` over
    ``price DESC``, ``<= 10``): a ``scan`` over the bids in time order keeps per auction its
    ranking (:func:`q19_enter`: at most 10 bids; equal prices ranked in time order, where
    Flink's ``ROW_NUMBER`` picks any) and outputs each bid that enters it, with its ``rank``
    and the auction's ``version``, a point at the bid's time: the changelog of Nexmark's
    Top-N (inserting at ``rank`` moves the ranks below down, the eleventh out; replayed in
    version order it gives the ranking). Compared: the final ranking per auction as
    ``(auction, rank, price)`` (the bids themselves may differ on equal prices). Linear:
    O(log 10) per bid (it was a snapshot window copying a TopK of every bid so far at every
    split, quadratic). The scan is :class:`Q19Ranks`, stepped a CTI's bids at a time on their
    columns (the same CHT as :func:`q19_step` per bid)."""
    return bid.scan(Q19Ranks())


Q20_FIELDS = ("auction", "bidder", "price", "channel", "url", "bid_date_time", "bid_extra",
              "item_name", "description", "initial_bid", "reserve", "auction_date_time",
              "expires", "seller", "category", "auction_extra")


def q20_pair(b: dict[str, Any], a: dict[str, Any]) -> dict[str, Any]:
    return {"auction": b["auction"], "bidder": b["bidder"], "price": b["price"],
            "channel": b["channel"], "url": b["url"], "bid_date_time": b["date_time"],
            "bid_extra": b["extra"], "item_name": a["item_name"],
            "description": a["description"], "initial_bid": a["initial_bid"],
            "reserve": a["reserve"], "auction_date_time": a["date_time"],
            "expires": a["expires"], "seller": a["seller"], "category": a["category"],
            "auction_extra": a["extra"]}


def q20(auction_iv: Stream, bid: Stream) -> Stream:
    """Q20, expand bids with their auction: every bid joined with its auction when the
    auction's category is 10, whichever comes first (Nexmark's unbounded join: bids and
    auctions both become :data:`FOREVER`-long, as in :func:`q3`); ``auction_iv`` for its
    ``expires`` in ticks. Spark: an unbounded stream-stream inner join. Compared: the
    payloads (:data:`Q20_FIELDS`)."""
    items = auction_iv.where(q3_auction).alter_lifetime(duration=FOREVER)
    return bid.alter_lifetime(duration=FOREVER).join(items, on=(bid_auction, auction_key),
                                                     select=q20_pair)


def bid_bidder(b: dict[str, Any]) -> Any:
    return b["bidder"]


def q11(bid: Stream) -> Stream:
    """Q11, user sessions: per bidder, the number of bids in each session of activity, a
    session ending when the bidder places no bid for :data:`SESSION_GAP` (10 s); the row
    lives over the session ``[first bid, last bid + 10 s)``, payload ``(bidder, count)``.
    cedar: ``group_apply(bidder, session_window → Count)`` (the keyed column-wise session
    path). Spark: ``groupBy(session_window(date_time, "10 seconds"), bidder)`` in append
    mode, which outputs a session once the watermark passes its end: compared are the
    sessions closed by the last bid.
    """
    return bid.group_apply(bid_bidder, lambda g: g.session_window(SESSION_GAP)
                           .aggregate(Count()))


def q12(bid: Stream) -> Stream:
    """Q12, bids per bidder in tumbling 10 s windows, ``(bidder, count)`` over the window.

    Nexmark's Q12 windows on *processing time* (``PROCTIME()``): which window a bid falls in
    depends on when the machine reads it, so no two runs (nor two engines) agree on its
    output. Its nearest event-time equivalent, stated here (and in Spark and Flink), windows
    on the bid's ``date_time``: the same count per bidder per 10 s, deterministic."""
    return bid.group_apply(bid_bidder, lambda g: g.tumbling_window(WINDOW).aggregate(Count()))


#: Q17's price ranks: below 10,000; 10,000 to 1,000,000; from 1,000,000.
Q17_RANKS = (10_000, 1_000_000)


def q17(bid: Stream) -> Stream:
    """Q17, auction statistics per day: per auction and UTC day (a tumbling window of
    :data:`DAY`), the number of bids, the number in each price rank (Nexmark's
    ``count(*) filter``: ``Count(where=...)`` of Q15's rank predicates), and the minimum,
    maximum, average and sum of the prices; ``(auction, {...})`` over the day. Compared: the
    final rows with the day as ``yyyy-MM-dd`` (Spark batch: a ``GROUP BY`` is not a time
    window in SSS's append mode, which would output a day only once the next one is reached).

    The rank predicates are elementwise comparisons, so they run on the columns (the ranks
    were sums of ``int(price < ...)``, which is not elementwise: each rank's indicator was
    computed per bid)."""
    return bid.group_apply(bid_auction, lambda g: g.tumbling_window(DAY).aggregate(Aggregates(
        total_bids=Count(), rank1_bids=Count(where=in_rank1), rank2_bids=Count(where=in_rank2),
        rank3_bids=Count(where=in_rank3), min_price=Min("price"), max_price=Max("price"),
        avg_price=Avg("price"), sum_price=Sum("price"))))


def day_of_minute(m: int) -> str:
    """``yyyy-MM-dd`` (UTC) of minute ``m`` since the epoch."""
    return dt.datetime.fromtimestamp(m * 60, dt.UTC).strftime("%Y-%m-%d")


def hh_mm_of_minute(m: int) -> str:
    """``HH:mm`` (UTC) of minute ``m`` since the epoch."""
    return dt.datetime.fromtimestamp(m * 60, dt.UTC).strftime("%H:%M")


def q10_rows(b: dict[str, Any]) -> dict[str, Any]:
    """Q10's row of each bid, on a batch's columns: ``dt`` and ``hm`` depend only on the
    bid's minute, formatted once per distinct minute (:func:`per_value`)."""
    t = b["date_time"]
    minute = t // MINUTE
    return {"auction": b["auction"], "bidder": b["bidder"], "price": b["price"],
            "date_time": t, "extra": b["extra"], "dt": per_value(day_of_minute, minute),
            "hm": per_value(hh_mm_of_minute, minute)}


def q10(bid: Stream) -> Stream:
    """Q10, log to a file system: each bid with its UTC day ``dt`` (``yyyy-MM-dd``) and minute
    ``hm`` (``HH:mm``), the columns Nexmark partitions its file sink by. Here the query's
    rows only (the benchmark's sinks are its own; a partitioned parquet sink is
    ``Stream.write``'s business, not the query's)."""
    return bid.select(q10_rows, vectorized=True)


# Q6: the closed auctions averaged per seller.
Q6_LAST = 10


def q6_pair(a: dict[str, Any], b: dict[str, Any]) -> tuple[Any, ...]:
    """Q6's pair: ``(auction, seller, price)``, then the bid's and the auction's times
    (:func:`open_to_close`)."""
    return (a["id"], a["seller"], b["price"], b["date_time"], a["date_time"])


def price_seller(p: tuple[Any, ...]) -> tuple[Any, Any]:
    return (p[2], p[1])


def q6_step(last: dict[Any, list[Any]],
            p: tuple[Any, tuple[Any, Any]]) -> tuple[dict[Any, list[Any]], list[Any]]:
    """Q6's step, at an auction's close: the seller's last :data:`Q6_LAST` winning prices,
    averaged."""
    price, seller_id = p[1]
    prices = last.setdefault(seller_id, [])
    prices.append(price)
    del prices[:-Q6_LAST]
    return last, [(seller_id, p[0], sum(prices) / len(prices))]


def q6(auction_iv: Stream, bid: Stream) -> Stream:
    """Q6, average selling price by seller: at each auction's close, the average winning
    price of the seller's last :data:`Q6_LAST` closed auctions (that one included),
    ``(seller, auction, average)``, a point at the close. The winning price is Q4's (the
    highest bid while the auction is open, :func:`open_to_close`; auctions without a bid are
    not sold); the last 10
    are a count window per seller over the closes, stated as a ``scan`` whose state keeps
    each seller's last 10 prices (auctions of one seller closing at the same time in auction
    id order). A scan steps an event once a CTI has made it final: the output holds the
    auctions closed by the inputs' last CTI (the last event), and an auction still open
    then has no winning price yet. Compared: those auctions (Spark batch: ``expires`` at or
    before the latest event time).

    Nexmark's Flink SQL for Q6 (``AVG(final) OVER (PARTITION BY seller ORDER BY dateTime
    ROWS BETWEEN 10 PRECEDING AND CURRENT ROW)`` over an updating ``GROUP BY``) does not run
    in Flink (an OVER window cannot read an update stream: Nexmark lists Q6 as not
    supported) and says 11 rows where Beam's Nexmark, which defined the query, says 10.
    Compared with the same query as a Spark batch query (a ``rowsBetween(-9, 0)`` average
    per seller ordered by close time, then auction id); SSS has no row windows."""
    to_close = open_to_close(auction_iv, bid, q6_pair)
    winners = to_close.group_apply(first, lambda g: g.count_window(
        1, by="end", emit="final").aggregate(Max(price_seller)))
    return winners.scan(q6_step, {}, tie=first)


#: Q13's side input: rows ``(key, value)``, key ``0 .. Q13_KEYS - 1``, joined on
#: ``auction % Q13_KEYS``.
Q13_KEYS = 10_000


def side_key(r: dict[str, Any]) -> Any:
    return r["key"]


def auction_mod(b: dict[str, Any]) -> Any:
    return b["auction"] % Q13_KEYS


def q13_pair(b: dict[str, Any], r: dict[str, Any]) -> dict[str, Any]:
    return {"auction": b["auction"], "bidder": b["bidder"], "price": b["price"],
            "date_time": b["date_time"], "value": r["value"]}


def q13(side_input: Stream, bid: Stream) -> Stream:
    """Q13, bounded side input join: each bid with the side input's value for
    ``auction % 10000``. Nexmark joins each bid with the side table as of the bid's
    *processing* time (``FOR SYSTEM_TIME AS OF PROCTIME()``, a lookup join): which version of
    the table a bid meets depends on when the machine reads it. The nearest event-time
    statement: the side input is a bounded stream of rows valid from their time on
    (:data:`FOREVER`-long; the generated table's rows all start at the first event's time),
    and each bid meets the rows valid at its event time. With a table that does not change,
    both give the same rows. Flink: a regular join; Spark: a stream-stream inner join."""
    table = side_input.alter_lifetime(duration=FOREVER)
    return bid.join(table, on=(auction_mod, side_key), select=q13_pair)


MINUTE = 60 * TICKS_PER_SECOND


def in_rank1(b: dict[str, Any]) -> Any:
    return b["price"] < Q17_RANKS[0]


def in_rank2(b: dict[str, Any]) -> Any:
    return (b["price"] >= Q17_RANKS[0]) & (b["price"] < Q17_RANKS[1])


def in_rank3(b: dict[str, Any]) -> Any:
    return b["price"] >= Q17_RANKS[1]


def bid_bidder_id(b: dict[str, Any]) -> Any:
    return b["bidder"]


def bid_auction_id(b: dict[str, Any]) -> Any:
    return b["auction"]


def minute_of_day(b: dict[str, Any]) -> Any:
    return b["date_time"] % DAY // MINUTE


def bid_channel(b: dict[str, Any]) -> Any:
    return b["channel"]


#: Q15's and Q16's statistics, in Nexmark's column order.
Q15_FIELDS = ("total_bids", "rank1_bids", "rank2_bids", "rank3_bids", "total_bidders",
              "rank1_bidders", "rank2_bidders", "rank3_bidders", "total_auctions",
              "rank1_auctions", "rank2_auctions", "rank3_auctions")


def day_statistics(**more: Any) -> Aggregates:
    """Q15's aggregates (and Q16's, with its ``minute``): counts of bids, distinct bidders
    and distinct auctions, all and per price rank (``Count`` and ``CountDistinct`` with
    ``where``: Nexmark's ``count(*) filter`` and ``count(distinct ...) filter``); column-wise
    on integer columns."""
    ranks = (in_rank1, in_rank2, in_rank3)
    parts: dict[str, Any] = dict(more)
    parts.update(total_bids=Count(), total_bidders=CountDistinct(bid_bidder_id))
    parts.update({f"rank{i}_bids": Count(where=r) for i, r in enumerate(ranks, 1)})
    parts.update({f"rank{i}_bidders": CountDistinct(bid_bidder_id, where=r)
                  for i, r in enumerate(ranks, 1)})
    parts["total_auctions"] = CountDistinct(bid_auction_id)
    parts.update({f"rank{i}_auctions": CountDistinct(bid_auction_id, where=r)
                  for i, r in enumerate(ranks, 1)})
    return Aggregates(**parts)


def q15(bid: Stream) -> Stream:
    """Q15, bidding statistics per day: per UTC day (a tumbling window of :data:`DAY`) the
    number of bids, distinct bidders and distinct auctions, all and in each of Q17's price
    ranks (:func:`day_statistics`); a dict over the day. Compared: the final rows with the
    day as ``yyyy-MM-dd`` (Spark batch: ``countDistinct``; SSS has no distinct aggregation,
    and its append mode would output a day only once the next one is reached)."""
    return bid.tumbling_window(DAY).aggregate(day_statistics())


def hh_mm(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def q16_row(p: tuple[Any, dict[str, Any]]) -> tuple[Any, dict[str, Any]]:
    return (p[0], {**p[1], "minute": hh_mm(p[1]["minute"])})


def q16(bid: Stream) -> Stream:
    """Q16, channel statistics per day: Q15's statistics per channel and UTC day, with the
    day's latest minute ``HH:mm`` that has a bid (``max(DATE_FORMAT(dateTime, 'HH:mm'))``:
    the maximum of the minutes of the day, formatted once); ``(channel, {...})`` over the
    day. Compared as Q15."""
    return bid.group_apply(bid_channel, lambda g: g.tumbling_window(DAY).aggregate(
        day_statistics(minute=Max(minute_of_day)))).select(q16_row)


# -- Spark -----------------------------------------------------------------------------------------
def spark_q0(bid: Any) -> Any:
    return bid


def spark_q1(bid: Any) -> Any:
    from pyspark.sql import functions as F

    return bid.select("auction", "bidder", (F.col("price") * F.lit(EURO)).alias("price"),
                      "date_time", "extra")


def spark_q2(bid: Any) -> Any:
    from pyspark.sql import functions as F

    return bid.where(F.col("auction") % Q2_MOD == 0).select("auction", "price", "date_time")


def spark_q3(person: Any, auction: Any) -> Any:
    from pyspark.sql import functions as F

    p = person.where(F.col("state").isin(*Q3_STATES)).select(
        F.col("id").alias("pid"), "name", "city", "state")
    a = auction.where(F.col("category") == Q3_CATEGORY).select("id", "seller")
    return a.join(p, F.col("seller") == F.col("pid")).select("name", "city", "state", "id")


def spark_q4_batch(auction: Any, bid: Any) -> Any:
    """Q4 as a Spark batch query (SSS cannot chain these aggregations; see :func:`q4`)."""
    from pyspark.sql import functions as F

    a = auction.select(F.col("id"), "category", F.col("date_time").alias("a_time"), "expires")
    b = bid.select("auction", "price", F.col("date_time").alias("b_time"))
    wins = (a.join(b, (F.col("auction") == F.col("id")) & (F.col("b_time") >= F.col("a_time"))
                   & (F.col("b_time") < F.col("expires")))
            .groupBy("id", "category").agg(F.max("price").alias("final")))
    return wins.groupBy("category").agg(F.avg("final").alias("avg"),
                                        F.count(F.lit(1)).alias("count"))


def _windowed(df: Any) -> Any:
    return df.withWatermark("date_time", WATERMARK)


def spark_q5(bid: Any) -> Any:
    from pyspark.sql import functions as F

    counts = (_windowed(bid).groupBy(F.window("date_time", "10 seconds", "2 seconds"), "auction")
              .agg(F.count(F.lit(1)).alias("count")))
    # each 10 s window's window_time (its end - 1 µs) falls in one 2 s tumbling window; there
    # the maximum and every (count, auction), of which those equal to the maximum are kept
    top = (counts.groupBy(F.window(F.window_time("window"), "2 seconds").alias("w"))
           .agg(F.max("count").alias("most"),
                F.collect_list(F.struct("count", "auction")).alias("all")))
    tied = top.select("w", F.explode(F.filter("all", lambda x: x["count"] == F.col("most")))
                      .alias("m"))
    return tied.select((F.col("w.end") - F.expr("interval 10 seconds")).alias("window_start"),
                       F.col("w.end").alias("window_end"), F.col("m.auction").alias("auction"),
                       F.col("m.count").alias("count"))


def spark_q7(bid: Any) -> Any:
    from pyspark.sql import functions as F

    return (_windowed(bid).groupBy(F.window("date_time", "10 seconds"))
            .agg(F.max(F.struct("price", "auction", "bidder")).alias("m"))
            .select(F.col("window.start").alias("window_start"),
                    F.col("window.end").alias("window_end"), "m.price", "m.auction", "m.bidder"))


def spark_q8(person: Any, auction: Any) -> Any:
    from pyspark.sql import functions as F

    p = _windowed(person).select("id", "name", F.window("date_time", "10 seconds").alias("pw"))
    a = _windowed(auction).select("seller", F.window("date_time", "10 seconds").alias("aw"))
    cond = (F.col("id") == F.col("seller")) & (F.col("pw") == F.col("aw"))
    return p.join(a, cond).select(F.col("pw.start").alias("window_start"),
                                  F.col("pw.end").alias("window_end"), "id", "name")


def spark_q11(bid: Any) -> Any:
    from pyspark.sql import functions as F

    return (_windowed(bid).groupBy(F.session_window("date_time", "10 seconds").alias("s"),
                                   "bidder")
            .agg(F.count(F.lit(1)).alias("count"))
            .select(F.col("s.start").alias("window_start"), F.col("s.end").alias("window_end"),
                    "bidder", "count"))
def spark_q14(bid: Any) -> Any:
    from pyspark.sql import functions as F

    euros = F.col("price") * F.lit(EURO)
    hour = F.hour(F.col("date_time"))  # the session is in UTC (spark_sss.session)
    kind = (F.when((hour >= 8) & (hour <= 18), "dayTime")
            .when((hour <= 6) | (hour >= 20), "nightTime").otherwise("otherTime"))
    return bid.where((euros > Q14_LOW) & (euros < Q14_HIGH)).select(
        "auction", "bidder", euros.alias("price"), kind.alias("bidTimeType"), "date_time",
        "extra", (F.length("extra") - F.length(F.regexp_replace("extra", "c", "")))
        .cast("long").alias("c_counts"))


def spark_q21(bid: Any) -> Any:
    from pyspark.sql import functions as F

    pattern = CHANNEL_ID.pattern
    # Spark's regexp_extract gives "" where Flink's REGEXP_EXTRACT gives NULL: guard it
    from_url = F.when(F.col("url").rlike(pattern), F.regexp_extract("url", pattern, 2))
    ch = F.lower(F.col("channel"))
    cid = F.coalesce(*(F.when(ch == name, F.lit(i)) for name, i in Q21_CHANNELS.items()),
                     from_url)
    return (bid.select("auction", "bidder", "price", "channel", "date_time",
                       cid.alias("channel_id"))
            .where(F.col("channel_id").isNotNull()))


def spark_q22(bid: Any) -> Any:
    from pyspark.sql import functions as F

    parts = F.split(F.col("url"), "/", -1)
    # get(): NULL past the end, as Flink's SPLIT_INDEX (getItem would fail under ANSI mode)
    return bid.select("auction", "bidder", "price", "channel", "date_time",
                      *(F.get(parts, F.lit(i)).alias(f"dir{i - 2}") for i in (3, 4, 5)))


def _q9_open_bids(auction: Any, bid: Any) -> Any:
    from pyspark.sql import functions as F

    b = bid.select("auction", "bidder", "price", F.col("date_time").alias("bid_date_time"),
                   F.col("extra").alias("bid_extra"))
    return auction.join(b, (F.col("auction") == F.col("id"))
                        & (F.col("bid_date_time") >= F.col("date_time"))
                        & (F.col("bid_date_time") < F.col("expires")))


def _micros(df: Any, *columns: str) -> Any:
    """A batch query's timestamp columns as µs since the epoch (ticks): ``collect()`` would
    give them as datetimes in the Python process's time zone."""
    from pyspark.sql import functions as F

    return df.withColumns({c: F.unix_micros(c) for c in columns})


def spark_q9_batch(auction: Any, bid: Any) -> Any:
    """Q9 as a Spark batch query (SSS cannot; see :func:`q9`)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy("id").orderBy(F.col("price").desc(), F.col("bid_date_time").asc())
    rows = (_q9_open_bids(auction, bid).withColumn("rownum", F.row_number().over(w))
            .where(F.col("rownum") == 1).select(*Q9_FIELDS))
    return _micros(rows, "date_time", "expires", "bid_date_time")


def spark_q18_batch(bid: Any) -> Any:
    """Q18 as a Spark batch query (SSS has no ``row_number``)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy("bidder", "auction").orderBy(F.col("date_time").desc())
    return _micros(bid.withColumn("rn", F.row_number().over(w)).where(F.col("rn") == 1)
                   .drop("rn"), "date_time")


def spark_q19_batch(bid: Any) -> Any:
    """Q19 as a Spark batch query (SSS has no ``row_number``)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy("auction").orderBy(F.col("price").desc())
    return (bid.withColumn("rank_number", F.row_number().over(w))
            .where(F.col("rank_number") <= Q19_TOP))


def spark_q20(auction: Any, bid: Any) -> Any:
    from pyspark.sql import functions as F

    a = auction.where(F.col("category") == Q3_CATEGORY).select(
        "id", "item_name", "description", "initial_bid", "reserve",
        F.col("date_time").alias("auction_date_time"), "expires", "seller", "category",
        F.col("extra").alias("auction_extra"))
    b = bid.select("auction", "bidder", "price", "channel", "url",
                   F.col("date_time").alias("bid_date_time"), F.col("extra").alias("bid_extra"))
    return b.join(a, F.col("auction") == F.col("id")).select(*Q20_FIELDS)


def spark_q12(bid: Any) -> Any:
    from pyspark.sql import functions as F

    return (_windowed(bid).groupBy(F.window("date_time", "10 seconds"), "bidder")
            .agg(F.count(F.lit(1)).alias("bid_count"))
            .select(F.col("window.start").alias("window_start"),
                    F.col("window.end").alias("window_end"), "bidder", "bid_count"))


def spark_q17_batch(bid: Any) -> Any:
    """Q17 as a Spark batch query (see :func:`q17`)."""
    from pyspark.sql import functions as F

    price = F.col("price")
    return bid.groupBy("auction", F.date_format("date_time", "yyyy-MM-dd").alias("day")).agg(
        F.count(F.lit(1)).alias("total_bids"),
        F.count(F.when(price < Q17_RANKS[0], 1)).alias("rank1_bids"),
        F.count(F.when((price >= Q17_RANKS[0]) & (price < Q17_RANKS[1]), 1))
        .alias("rank2_bids"),
        F.count(F.when(price >= Q17_RANKS[1], 1)).alias("rank3_bids"),
        F.min(price).alias("min_price"), F.max(price).alias("max_price"),
        F.avg(price).alias("avg_price"), F.sum(price).alias("sum_price"))


def spark_q10(bid: Any) -> Any:
    from pyspark.sql import functions as F

    return bid.select("auction", "bidder", "price", "date_time", "extra",
                      F.date_format("date_time", "yyyy-MM-dd").alias("dt"),
                      F.date_format("date_time", "HH:mm").alias("hm"))


def spark_q6_batch(auction: Any, bid: Any) -> Any:
    """Q6 as a Spark batch query (see :func:`q6`)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    a = auction.select("id", "seller", F.col("date_time").alias("a_time"), "expires")
    b = bid.select("auction", "price", F.col("date_time").alias("b_time"))
    wins = (a.join(b, (F.col("auction") == F.col("id")) & (F.col("b_time") >= F.col("a_time"))
                   & (F.col("b_time") < F.col("expires")))
            .groupBy("id", "seller", "expires").agg(F.max("price").alias("final")))
    w = Window.partitionBy("seller").orderBy("expires", "id").rowsBetween(-(Q6_LAST - 1), 0)
    return _micros(wins.select("seller", F.col("id").alias("auction"), "expires",
                               F.avg("final").over(w).alias("avg")), "expires")


def spark_q13(side_input: Any, bid: Any) -> Any:
    from pyspark.sql import functions as F

    side = side_input.select("key", "value")
    return (bid.join(side, F.col("auction") % Q13_KEYS == F.col("key"))
            .select("auction", "bidder", "price", "date_time", "value"))


def _spark_day_statistics() -> list[Any]:
    from pyspark.sql import functions as F

    price = F.col("price")
    ranks = [price < Q17_RANKS[0], (price >= Q17_RANKS[0]) & (price < Q17_RANKS[1]),
             price >= Q17_RANKS[1]]
    cols = [F.count(F.lit(1)).alias("total_bids")]
    cols += [F.count(F.when(r, 1)).alias(f"rank{i}_bids") for i, r in enumerate(ranks, 1)]
    for what, name in (("bidder", "bidders"), ("auction", "auctions")):
        cols.append(F.countDistinct(what).alias(f"total_{name}"))
        cols += [F.countDistinct(F.when(r, F.col(what))).alias(f"rank{i}_{name}")
                 for i, r in enumerate(ranks, 1)]
    return cols


def spark_q15_batch(bid: Any) -> Any:
    """Q15 as a Spark batch query (see :func:`q15`)."""
    from pyspark.sql import functions as F

    return bid.groupBy(F.date_format("date_time", "yyyy-MM-dd").alias("day")).agg(
        *_spark_day_statistics())


def spark_q16_batch(bid: Any) -> Any:
    """Q16 as a Spark batch query (see :func:`q16`)."""
    from pyspark.sql import functions as F

    return bid.groupBy("channel", F.date_format("date_time", "yyyy-MM-dd").alias("day")).agg(
        F.max(F.date_format("date_time", "HH:mm")).alias("minute"), *_spark_day_statistics())


# -- comparable rows -------------------------------------------------------------------------------
Row = tuple[Any, ...]


def closed_by(rows: list[Row], latest: int) -> list[Row]:
    """The windowed rows ``(start, end, ...)`` whose window ends at or before ``latest``: the
    windows Spark's watermark has closed at the end of the input."""
    return [r for r in rows if r[1] <= latest]


def _dicts(payload: dict[str, Any], fields: tuple[str, ...]) -> Row:
    return tuple(payload[f] for f in fields)


BID_FIELDS = ("auction", "bidder", "price", "channel", "url", "extra")
Q10_FIELDS = ("auction", "bidder", "price", "extra", "dt", "hm")
Q14_FIELDS = ("auction", "bidder", "price", "bidTimeType", "extra", "c_counts")
Q21_FIELDS = ("auction", "bidder", "price", "channel", "channel_id")
Q22_FIELDS = ("auction", "bidder", "price", "channel", "dir1", "dir2", "dir3")


@dataclass(frozen=True)
class Query:
    """One Nexmark query: its cedar and Spark forms, its inputs, and how to compare.

    ``cedar_rows(cht, latest)`` and ``spark_rows(rows, latest)`` map the cedar CHT
    ``(start, end, payload)`` and Spark's output rows (dicts, times as ticks) to comparable
    tuples; ``latest`` is the input's latest event time. ``spark`` is None when SSS cannot
    express the query (``spark_batch`` then runs it as a batch query, for the comparison
    only)."""

    name: str
    cedar: Callable[..., Stream]
    inputs: tuple[str, ...]
    spark: Callable[..., Any] | None
    spark_inputs: tuple[str, ...]
    cedar_rows: Callable[[list[Row], int], list[Row]]
    spark_rows: Callable[[list[dict[str, Any]], int], list[Row]]
    spark_batch: Callable[..., Any] | None = None
    note: str = ""
    #: too slow for the suite's default sizes (its cost grows faster than its input): run
    #: only when named (``--queries``)
    slow: bool = False


def _q4_final(cht: list[Row], latest: int) -> list[Row]:
    return [(c, agg["count"], float(f"{agg['avg']:.9g}")) for _, _, (c, agg) in cht]


def _q18_latest(cht: list[Row], latest: int) -> list[dict[str, Any]]:
    """Q18's changelog as its final rows: per ``(bidder, auction)`` the bid of the highest
    version."""
    last: dict[Any, dict[str, Any]] = {}
    for _, _, b in cht:
        key = (b["bidder"], b["auction"])
        if key not in last or b["version"] > last[key]["version"]:
            last[key] = b
    return list(last.values())


def _q19_ranks(cht: list[Row], latest: int) -> list[Row]:
    """Q19's changelog replayed per auction in version order: each bid inserted at its rank,
    the ranking cut to :data:`Q19_TOP`; the final rankings as ``(auction, rank, price)``."""
    rankings: dict[Any, list[dict[str, Any]]] = {}
    for b in sorted((p for _, _, p in cht), key=lambda b: (b["auction"], b["version"])):
        ranking = rankings.setdefault(b["auction"], [])
        ranking.insert(b["rank"] - 1, b)
        del ranking[Q19_TOP:]
    return [(a, i, b["price"]) for a, bids in rankings.items()
            for i, b in enumerate(bids, 1)]


Q17_FIELDS = ("total_bids", "rank1_bids", "rank2_bids", "rank3_bids", "min_price",
              "max_price", "avg_price", "sum_price")


def day_of(t: int) -> str:
    """A time in ticks as its UTC day, ``yyyy-MM-dd``."""
    return dt.datetime.fromtimestamp(t / TICKS_PER_SECOND, dt.UTC).strftime("%Y-%m-%d")


def _q17_rows(cht: list[Row], latest: int) -> list[Row]:
    return [(a, day_of(s)) + _q17_values(agg) for s, _, (a, agg) in cht]


def _q17_values(r: dict[str, Any]) -> Row:
    """Q17's statistics, the average to 12 significant digits (exact sum ÷ count in cedar,
    a sum of doubles in Spark and Flink)."""
    return tuple(float(f"{r[f]:.12g}") if f == "avg_price" else r[f] for f in Q17_FIELDS)


def _q15_rows(cht: list[Row], latest: int) -> list[Row]:
    return [(day_of(s),) + _dicts(agg, Q15_FIELDS) for s, _, agg in cht]


def _q16_rows(cht: list[Row], latest: int) -> list[Row]:
    return [(c, day_of(s), agg["minute"]) + _dicts(agg, Q15_FIELDS) for s, _, (c, agg) in cht]


Q13_FIELDS = ("auction", "bidder", "price", "value")


QUERIES: dict[str, Query] = {q.name: q for q in (
    Query("Q0", q0, ("bid",), spark_q0, ("bid",),
          lambda cht, _: [(s,) + _dicts(p, BID_FIELDS) for s, _, p in cht],
          lambda rows, _: [(r["date_time"],) + _dicts(r, BID_FIELDS) for r in rows]),
    Query("Q1", q1, ("bid",), spark_q1, ("bid",),
          lambda cht, _: [(s, p["auction"], p["bidder"], p["price"], p["extra"])
                          for s, _, p in cht],
          lambda rows, _: [(r["date_time"], r["auction"], r["bidder"], r["price"], r["extra"])
                           for r in rows]),
    Query("Q2", q2, ("bid",), spark_q2, ("bid",),
          lambda cht, _: [(s, p["auction"], p["price"]) for s, _, p in cht],
          lambda rows, _: [(r["date_time"], r["auction"], r["price"]) for r in rows]),
    Query("Q3", q3, ("person", "auction"), spark_q3, ("person", "auction"),
          lambda cht, _: [_dicts(p, ("name", "city", "state", "id")) for _, _, p in cht],
          lambda rows, _: [_dicts(r, ("name", "city", "state", "id")) for r in rows],
          note="payloads only (Spark rows have no lifetime)"),
    Query("Q4", q4, ("auction_iv", "bid"), None, ("auction", "bid"), _q4_final,
          lambda rows, _: [(r["category"], r["count"], float(f"{r['avg']:.9g}"))
                           for r in rows],
          spark_batch=spark_q4_batch,
          note="SSS cannot chain the two aggregations: compared with Spark batch"),
    Query("Q5", q5, ("bid",), spark_q5, ("bid",),
          lambda cht, latest: closed_by([(s, e, p[0], p[1]) for s, e, p in cht], latest),
          lambda rows, latest: closed_by([(r["window_start"], r["window_end"], r["auction"],
                                           r["count"]) for r in rows], latest),
          note="windows closed by the last bid"),
    Query("Q7", q7, ("bid",), spark_q7, ("bid",),
          lambda cht, latest: closed_by([(s, e) + tuple(p) for s, e, p in cht], latest),
          lambda rows, latest: closed_by([(r["window_start"], r["window_end"], r["price"],
                                           r["auction"], r["bidder"]) for r in rows], latest),
          note="windows closed by the last bid"),
    Query("Q8", q8, ("person", "auction"), spark_q8, ("person", "auction"),
          lambda cht, _: [(s, e, p["id"], p["name"]) for s, e, p in cht],
          lambda rows, _: sorted({(r["window_start"], r["window_end"], r["id"], r["name"])
                                  for r in rows}),
          note="Spark's distinct rows (a join outputs every pair eagerly)"),
    Query("Q11", q11, ("bid",), spark_q11, ("bid",),
          lambda cht, latest: closed_by([(s, e, p[0], p[1]) for s, e, p in cht], latest),
          lambda rows, latest: closed_by([(r["window_start"], r["window_end"], r["bidder"],
                                           r["count"]) for r in rows], latest),
          note="sessions closed by the last bid"),
    Query("Q14", q14, ("bid",), spark_q14, ("bid",),
          lambda cht, _: [(s,) + _dicts(p, Q14_FIELDS) for s, _, p in cht],
          lambda rows, _: [(r["date_time"],) + _dicts(r, Q14_FIELDS) for r in rows]),
    Query("Q21", q21, ("bid",), spark_q21, ("bid",),
          lambda cht, _: [(s,) + _dicts(p, Q21_FIELDS) for s, _, p in cht],
          lambda rows, _: [(r["date_time"],) + _dicts(r, Q21_FIELDS) for r in rows]),
    Query("Q22", q22, ("bid",), spark_q22, ("bid",),
          lambda cht, _: [(s,) + _dicts(p, Q22_FIELDS) for s, _, p in cht],
          lambda rows, _: [(r["date_time"],) + _dicts(r, Q22_FIELDS) for r in rows]),
    Query("Q9", q9, ("auction_iv", "bid"), None, ("auction", "bid"),
          lambda cht, _: [_dicts(p, Q9_FIELDS) for _, _, p in cht],
          lambda rows, _: [_dicts(r, Q9_FIELDS) for r in rows],
          spark_batch=spark_q9_batch, note="SSS cannot rank: compared with Spark batch"),
    Query("Q18", q18, ("bid",), None, ("bid",),
          lambda cht, latest: [(p["date_time"],) + _dicts(p, BID_FIELDS)
                               for p in _q18_latest(cht, latest)],
          lambda rows, _: [(r["date_time"],) + _dicts(r, BID_FIELDS) for r in rows],
          spark_batch=spark_q18_batch,
          note="the final rows; SSS cannot rank: compared with Spark batch"),
    Query("Q19", q19, ("bid",), None, ("bid",), _q19_ranks,
          lambda rows, _: [(r["auction"], r["rank_number"], r["price"]) for r in rows],
          spark_batch=spark_q19_batch,
          note="the final (auction, rank, price); SSS cannot rank: compared with Spark batch"),
    Query("Q20", q20, ("auction_iv", "bid"), spark_q20, ("auction", "bid"),
          lambda cht, _: [_dicts(p, Q20_FIELDS) for _, _, p in cht],
          lambda rows, _: [_dicts(r, Q20_FIELDS) for r in rows],
          note="payloads only (Spark rows have no lifetime)"),
    Query("Q12", q12, ("bid",), spark_q12, ("bid",),
          lambda cht, latest: closed_by([(s, e, p[0], p[1]) for s, e, p in cht], latest),
          lambda rows, latest: closed_by([(r["window_start"], r["window_end"], r["bidder"],
                                           r["bid_count"]) for r in rows], latest),
          note="windows closed by the last bid; event time, not Nexmark's processing time"),
    Query("Q17", q17, ("bid",), None, ("bid",), _q17_rows,
          lambda rows, _: [(r["auction"], r["day"]) + _q17_values(r) for r in rows],
          spark_batch=spark_q17_batch,
          note="final rows, the average to 12 digits; compared with Spark batch"),
    Query("Q10", q10, ("bid",), spark_q10, ("bid",),
          lambda cht, _: [(s,) + _dicts(p, Q10_FIELDS) for s, _, p in cht],
          lambda rows, _: [(r["date_time"],) + _dicts(r, Q10_FIELDS) for r in rows]),
    Query("Q6", q6, ("auction_iv", "bid"), None, ("auction", "bid"),
          lambda cht, latest: [tuple(p) for s, _, p in cht if s <= latest],
          lambda rows, latest: [(r["seller"], r["auction"], r["avg"]) for r in rows
                                if r["expires"] <= latest],
          spark_batch=spark_q6_batch,
          note="auctions closed by the last event; Flink cannot (an OVER window on an "
               "update stream): Spark batch"),
    Query("Q13", q13, ("side_input", "bid"), spark_q13, ("side_input", "bid"),
          lambda cht, _: [(s,) + _dicts(p, Q13_FIELDS) for s, _, p in cht],
          lambda rows, _: [(r["date_time"],) + _dicts(r, Q13_FIELDS) for r in rows],
          note="event time, not Nexmark's processing-time lookup"),
    Query("Q15", q15, ("bid",), None, ("bid",), _q15_rows,
          lambda rows, _: [(r["day"],) + _dicts(r, Q15_FIELDS) for r in rows],
          spark_batch=spark_q15_batch,
          note="final rows; SSS has no distinct aggregation: compared with Spark batch"),
    Query("Q16", q16, ("bid",), None, ("bid",), _q16_rows,
          lambda rows, _: [(r["channel"], r["day"], r["minute"]) + _dicts(r, Q15_FIELDS)
                           for r in rows],
          spark_batch=spark_q16_batch,
          note="final rows; SSS has no distinct aggregation: compared with Spark batch"),
)}

#: The queries a run of the suite runs unless told otherwise: all but the :attr:`Query.slow`
#: ones (none today: Q18 and Q19, once quadratic, are linear scans).
DEFAULT: list[str] = [name for name, q in QUERIES.items() if not q.slow]
