"""A Nexmark event generator, vectorised with numpy, deterministic from a seed.

It follows the model of the reference generators (Apache Beam's ``sdk/nexmark`` and the
Flink ``nexmark`` project; read, not copied):

* **Mix.** Event number ``i`` is a person, an auction or a bid by ``i % 50``: 1 person, 3
  auctions, 46 bids in every 50 events (:data:`PERSON_PROPORTION`, :data:`AUCTION_PROPORTION`,
  :data:`BID_PROPORTION`).
* **Ids.** Persons and auctions are numbered in order of creation from :data:`FIRST_PERSON_ID`
  and :data:`FIRST_AUCTION_ID`; ``last_person(i)`` / ``last_auction(i)`` are the newest ones
  created by event ``i``.
* **Hot items.** A bid goes to a *hot auction* with probability ``1 - 1/HOT_AUCTION_RATIO``
  (2: one half): the first of the newest block of :data:`HOT_BLOCK` (100) auctions, else to a
  random auction among the :data:`IN_FLIGHT_AUCTIONS` newest (plus a lead of
  :data:`AUCTION_ID_LEAD` ids not created yet, as the reference does). A bid's bidder is a *hot
  bidder* with probability ``1 - 1/HOT_BIDDERS_RATIO`` (4: three quarters), the second person of
  the newest block of 100 persons, else one of the :data:`ACTIVE_PEOPLE` newest persons (plus a
  lead of :data:`PERSON_ID_LEAD`). An auction's seller is a *hot seller* with probability
  ``1 - 1/HOT_SELLERS_RATIO``, the first person of that block, else a random active person.
* **Time.** Event ``i`` happens at ``base + i * inter_event_delay`` ticks (µs; the default
  delay 100 µs is the reference's default rate of 10,000 events/s). Timestamps are strictly
  increasing in event number, so each entity's table is sorted by ``date_time``.
  An auction expires ``1 + U[0, 2 * horizon)`` ticks after its creation, ``horizon`` being the
  time :data:`IN_FLIGHT_AUCTIONS` auctions take to be created (about 100 auctions in flight).
* **Values.** Prices ``round(10 ** U[0, 6) * 100)`` (cents); reserve = initial bid + another
  price; 5 categories from 10; states from six western states, cities from ten; bids' channels
  are one of four hot channels 99 % of the time, else ``channel-N``, N < 10,000.

    >>> t = generate(1_000, seed=1)
    >>> [t[k].num_rows for k in ENTITIES]
    [20, 60, 920]
    >>> t["bid"].column_names
    ['auction', 'bidder', 'price', 'channel', 'url', 'date_time', 'extra']
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from operators.events import TICKS_PER_SECOND

PERSON_PROPORTION = 1
AUCTION_PROPORTION = 3
BID_PROPORTION = 46
TOTAL_PROPORTION = PERSON_PROPORTION + AUCTION_PROPORTION + BID_PROPORTION

FIRST_PERSON_ID = 1000
FIRST_AUCTION_ID = 1000
FIRST_CATEGORY_ID = 10
NUM_CATEGORIES = 5
#: Probability of a hot choice is ``1 - 1/ratio`` (the reference's defaults).
HOT_AUCTION_RATIO = 2
HOT_SELLERS_RATIO = 4
HOT_BIDDERS_RATIO = 4
#: Hot auctions / sellers / bidders are the first (second for bidders) of blocks of this many.
HOT_BLOCK = 100
ACTIVE_PEOPLE = 1000
IN_FLIGHT_AUCTIONS = 100
PERSON_ID_LEAD = 10
AUCTION_ID_LEAD = 10
CHANNELS = 10_000
HOT_CHANNELS = ("Google", "Facebook", "Baidu", "Apple")
HOT_URLS = tuple(f"https://www.nexmark.com/{p}/item.htm?query=1"
                 for p in ("googl", "meta", "bidu", "aapl"))
US_STATES = ("AZ", "CA", "ID", "OR", "WA", "WY")
US_CITIES = ("Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend",
             "Redmond", "Seattle", "Kent", "Cheyenne")
FIRST_NAMES = ("Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah",
               "Deiter", "Walter")
LAST_NAMES = ("Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones",
              "Noris")

#: 2024-01-01T00:00:00Z in ticks (µs since the epoch): the first event's time.
BASE_TICKS = 1_704_067_200 * TICKS_PER_SECOND
#: The reference's default rate, 10,000 events/s: one event every 100 µs of event time.
INTER_EVENT_DELAY = 100
ENTITIES = ("person", "auction", "bid")


def last_person(i: np.ndarray) -> np.ndarray:
    """Base-0 id of the newest person created by event ``i`` (included)."""
    epoch, offset = np.divmod(i, TOTAL_PROPORTION)
    return epoch * PERSON_PROPORTION + np.minimum(offset, PERSON_PROPORTION - 1)


def last_auction(i: np.ndarray) -> np.ndarray:
    """Base-0 id of the newest auction created by event ``i`` (-1 before the first)."""
    epoch, offset = np.divmod(i, TOTAL_PROPORTION)
    before = offset < PERSON_PROPORTION  # this epoch's auctions not started: previous epoch's
    epoch = np.where(before, epoch - 1, epoch)
    offset = np.where(before | (offset >= PERSON_PROPORTION + AUCTION_PROPORTION),
                      AUCTION_PROPORTION - 1, offset - PERSON_PROPORTION)
    return epoch * AUCTION_PROPORTION + offset


def _random_person(rng: np.random.Generator, i: np.ndarray) -> np.ndarray:
    """A random recently created person (base 0), with the reference's lead of ids."""
    people = last_person(i) + 1
    active = np.minimum(people, ACTIVE_PEOPLE)
    return people - active + rng.integers(0, active + PERSON_ID_LEAD)


def _random_auction(rng: np.random.Generator, i: np.ndarray) -> np.ndarray:
    """A random auction among the newest in flight (base 0), with a lead of ids."""
    last = last_auction(i)
    low = np.maximum(last - IN_FLIGHT_AUCTIONS, 0)
    return low + rng.integers(0, last - low + 1 + AUCTION_ID_LEAD)


def _prices(rng: np.random.Generator, n: int) -> np.ndarray:
    return np.rint(10.0 ** (rng.random(n) * 6.0) * 100.0).astype(np.int64)


def _strings(rng: np.random.Generator, n: int, length: int) -> np.ndarray:
    """``n`` random lowercase strings of ``length`` letters (numpy unicode array)."""
    if length == 0:
        return np.full(n, "", dtype="<U1")
    codes = rng.integers(ord("a"), ord("z") + 1, (n, length), dtype=np.uint8)
    return codes.view(f"S{length}").ravel().astype(f"<U{length}")


def _pick(rng: np.random.Generator, choices: tuple[str, ...], n: int) -> np.ndarray:
    return np.asarray(choices)[rng.integers(0, len(choices), n)]


def _ts(ticks: np.ndarray) -> Any:
    import pyarrow as pa

    return pa.array(ticks, pa.timestamp("us", tz="UTC"))


def persons(rng: np.random.Generator, i: np.ndarray, t: np.ndarray) -> Any:
    import pyarrow as pa

    n = len(i)
    name = np.char.add(np.char.add(_pick(rng, FIRST_NAMES, n), " "), _pick(rng, LAST_NAMES, n))
    email = np.char.add(np.char.add(_strings(rng, n, 7), "@"),
                        np.char.add(_strings(rng, n, 5), ".com"))
    digits = rng.integers(0, 10_000, (n, 4))
    card = np.char.add(np.char.add(np.char.zfill(digits[:, 0].astype(str), 4), " "),
                       np.char.zfill(digits[:, 1].astype(str), 4))
    card = np.char.add(np.char.add(card, " "), np.char.zfill(digits[:, 2].astype(str), 4))
    card = np.char.add(np.char.add(card, " "), np.char.zfill(digits[:, 3].astype(str), 4))
    return pa.table({
        "id": last_person(i) + FIRST_PERSON_ID, "name": name, "email_address": email,
        "credit_card": card, "city": _pick(rng, US_CITIES, n), "state": _pick(rng, US_STATES, n),
        "date_time": _ts(t), "extra": _strings(rng, n, 8)})


def auctions(rng: np.random.Generator, i: np.ndarray, t: np.ndarray, delay: int) -> Any:
    import pyarrow as pa

    n = len(i)
    hot = rng.integers(0, HOT_SELLERS_RATIO, n) > 0
    seller = np.where(hot, last_person(i) // HOT_BLOCK * HOT_BLOCK, _random_person(rng, i))
    initial = _prices(rng, n)
    horizon = IN_FLIGHT_AUCTIONS * TOTAL_PROPORTION // AUCTION_PROPORTION * delay
    length = 1 + rng.integers(0, max(2 * horizon, 1), n)
    return pa.table({
        "id": last_auction(i) + FIRST_AUCTION_ID, "item_name": _strings(rng, n, 20),
        "description": _strings(rng, n, 40), "initial_bid": initial,
        "reserve": initial + _prices(rng, n), "date_time": _ts(t), "expires": _ts(t + length),
        "seller": seller + FIRST_PERSON_ID,
        "category": FIRST_CATEGORY_ID + rng.integers(0, NUM_CATEGORIES, n),
        "extra": _strings(rng, n, 8)})


def bids(rng: np.random.Generator, i: np.ndarray, t: np.ndarray, urls: np.ndarray) -> Any:
    import pyarrow as pa

    n = len(i)
    hot_a = rng.integers(0, HOT_AUCTION_RATIO, n) > 0
    auction = np.where(hot_a, last_auction(i) // HOT_BLOCK * HOT_BLOCK, _random_auction(rng, i))
    hot_b = rng.integers(0, HOT_BIDDERS_RATIO, n) > 0
    bidder = np.where(hot_b, last_person(i) // HOT_BLOCK * HOT_BLOCK + 1, _random_person(rng, i))
    number = rng.integers(0, CHANNELS, n)
    new = rng.integers(0, 100, n) == 0  # 1 in 100: a numbered channel, else a hot one
    hot = rng.integers(0, len(HOT_CHANNELS), n)
    channel = np.where(new, np.char.add("channel-", number.astype(str)),
                       np.asarray(HOT_CHANNELS)[hot])
    url = np.where(new, urls[number], np.asarray(HOT_URLS)[hot])
    return pa.table({
        "auction": auction + FIRST_AUCTION_ID, "bidder": bidder + FIRST_PERSON_ID,
        "price": _prices(rng, n), "channel": channel, "url": url, "date_time": _ts(t),
        "extra": np.full(n, "", dtype="<U1")})


def generate(n: int, seed: int = 0, inter_event_delay: int = INTER_EVENT_DELAY,
             base: int = BASE_TICKS, entities: tuple[str, ...] = ENTITIES) -> dict[str, Any]:
    """Events ``0 .. n - 1`` as three Arrow tables ``{"person", "auction", "bid"}``, each
    sorted by ``date_time`` (a UTC µs timestamp); the same ``(n, seed, delay)`` gives the same
    tables. ``entities`` leaves out the bids when it does not name them: the persons and the
    auctions are then the same as with them (they are drawn first), at a twelfth of the cost.

    >>> whole = generate(5_000, seed=3)
    >>> no_bids = generate(5_000, seed=3, entities=("person", "auction"))
    >>> sorted(no_bids) == ["auction", "person"] and no_bids["auction"].equals(whole["auction"])
    True
    """
    rng = np.random.default_rng(seed)
    i = np.arange(n, dtype=np.int64)
    t = base + i * inter_event_delay
    kind = i % TOTAL_PROPORTION
    is_person = kind < PERSON_PROPORTION
    is_auction = ~is_person & (kind < PERSON_PROPORTION + AUCTION_PROPORTION)
    is_bid = ~is_person & ~is_auction
    # a numbered channel's url is fixed per channel (the reference caches it)
    paths = _strings(rng, CHANNELS, 5)
    urls = np.char.add(np.char.add(np.char.add("https://www.nexmark.com/", paths),
                                   "/item.htm?query=1&channel_id="),
                       np.arange(CHANNELS).astype(str))
    out = {"person": persons(rng, i[is_person], t[is_person]),
           "auction": auctions(rng, i[is_auction], t[is_auction], inter_event_delay)}
    if "bid" in entities:
        out["bid"] = bids(rng, i[is_bid], t[is_bid], urls)
    return {name: out[name] for name in ENTITIES if name in entities}


def side_input(keys: int = 10_000, base: int = BASE_TICKS) -> Any:
    """Q13's bounded side input: rows ``key`` ``0 .. keys - 1`` with ``value`` the key as text
    (``"v<key>"``), all at the first event's time ``base`` (a table that holds from the start
    of the run)."""
    import pyarrow as pa

    k = np.arange(keys, dtype=np.int64)
    return pa.table({"key": k, "value": np.char.add("v", k.astype(str)),
                     "date_time": _ts(np.full(keys, base, dtype=np.int64))})


def write_parquet(tables: dict[str, Any], root: str) -> dict[str, str]:
    """Each table as one parquet file in ``root/<entity>/`` (one file keeps the time order of
    Spark's read); returns the directories."""
    import pyarrow.parquet as pq

    paths = {}
    for name, table in tables.items():
        path = os.path.join(root, name)
        os.makedirs(path, exist_ok=True)
        pq.write_table(table, os.path.join(path, "part-0.parquet"), row_group_size=256 * 1024)
        paths[name] = path
    return paths


if __name__ == "__main__":
    import sys
    import time

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    t0 = time.perf_counter()
    tables = generate(n, seed=1)
    print({k: v.num_rows for k, v in tables.items()}, f"{time.perf_counter() - t0:.2f} s")
