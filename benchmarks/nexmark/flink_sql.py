"""The Nexmark queries in Flink SQL, as the Nexmark project states them for Flink
(``nexmark-flink/src/main/resources/queries``), adapted in their sources and sinks only:

* **Sources.** Three tables ``person``, ``auction``, ``bid`` read from CSV (:mod:`benchmarks.flink`)
  instead of one generated ``datagen`` table split by views; the time column is
  ``date_time`` (µs, ``BIGINT``; Flink 2.3's parser rejects ``dateTime``), its rowtime ``rt``.
  The tables are sorted by time: the watermark has no delay.
* **Sinks.** The query's rows go to ``blackhole`` (timed) and to ``collect()`` (compared); a
  query that outputs a window carries its bounds (``window_start``, ``window_end``) so that
  its rows can be compared with cedar's CHT, and the columns are named as the Spark side
  names them (:mod:`.queries`).
* **Types, where the comparison needs them.** Q1 multiplies in ``DOUBLE`` (Nexmark writes
  ``0.908 * price``, a ``DECIMAL``; cedar and Spark multiply doubles). Q4 averages in
  ``DOUBLE`` and also counts (Nexmark's ``AVG`` of a ``BIGINT`` truncates to a ``BIGINT``) and
  takes a bid while the auction is open as ``date_time <= bid < expires``, on the µs columns
  (Nexmark: ``BETWEEN``, both ends included, on millisecond rowtimes). Q14 computes in
  ``DOUBLE`` as Q1 does and counts the ``'c'`` in ``extra`` with ``CHAR_LENGTH`` and
  ``REPLACE`` (Nexmark: its ``count_char`` UDF); ``HOUR`` is of the rowtime in UTC. Q14, Q21
  and Q22 also output ``date_time`` (to compare each row with cedar's event). Q9 takes a bid
  while the auction is open as Q4 does and names its columns explicitly (``A.*`` would carry
  the rowtime into a regular join); Q9 and Q20 name the bid's and the auction's time and
  extra columns ``bid_date_time``/``auction_date_time``, ``bid_extra``/``auction_extra``.
* **Time.** Q12 windows on the rowtime ``rt``, where Nexmark windows on ``PROCTIME()``: a
  processing-time window's output depends on when the rows are read (see ``queries.q12``).
  Q17's day is ``DATE_FORMAT`` of the rowtime (UTC); its average is in ``DOUBLE`` as Q4's.
* **Q13** joins the side input with a regular join, where Nexmark looks it up as of each bid's
  processing time (``FOR SYSTEM_TIME AS OF PROCTIME()``): see ``queries.q13``. The side input
  is a CSV table as the others (Nexmark: a file of ``key,value`` rows).
* **Q15, Q16** group by ``DATE_FORMAT`` of the rowtime (UTC), as Q17.
* **Q6** is not here: Nexmark's Flink SQL for it does not run in Flink (see ``queries.q6``).
* **Q10** writes to ``blackhole`` and ``collect()`` like the others, not to Nexmark's file
  system sink partitioned by ``dt`` and ``hm`` (the columns are there).

Q5 outputs every auction tied for the most bids, in all three engines. Q7 outputs every bid
tied for the highest price, as Nexmark defines it; cedar's and Spark's forms pick one (the
largest by the tuple order): :func:`comparable` picks the same one from Flink's rows before
comparing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import queries as nq

Row = tuple[Any, ...]

#: Q15's and Q16's statistics, as Nexmark states them (Q17's price ranks).
_STATS = """  count(*) AS total_bids,
  count(*) FILTER (WHERE price < {r0}) AS rank1_bids,
  count(*) FILTER (WHERE price >= {r0} AND price < {r1}) AS rank2_bids,
  count(*) FILTER (WHERE price >= {r1}) AS rank3_bids,
  count(DISTINCT bidder) AS total_bidders,
  count(DISTINCT bidder) FILTER (WHERE price < {r0}) AS rank1_bidders,
  count(DISTINCT bidder) FILTER (WHERE price >= {r0} AND price < {r1}) AS rank2_bidders,
  count(DISTINCT bidder) FILTER (WHERE price >= {r1}) AS rank3_bidders,
  count(DISTINCT auction) AS total_auctions,
  count(DISTINCT auction) FILTER (WHERE price < {r0}) AS rank1_auctions,
  count(DISTINCT auction) FILTER (WHERE price >= {r0} AND price < {r1}) AS rank2_auctions,
  count(DISTINCT auction) FILTER (WHERE price >= {r1}) AS rank3_auctions""".format(
    r0=nq.Q17_RANKS[0], r1=nq.Q17_RANKS[1])

SQL: dict[str, str] = {
    "Q0": """
SELECT auction, bidder, price, channel, url, date_time, extra FROM bid""",
    "Q1": f"""
SELECT auction, bidder, CAST(price AS DOUBLE) * {nq.EURO}E0 AS price, date_time, extra
FROM bid""",
    "Q2": f"""
SELECT auction, price, date_time FROM bid WHERE MOD(auction, {nq.Q2_MOD}) = 0""",
    "Q3": f"""
SELECT P.name, P.city, P.state, A.id
FROM auction AS A INNER JOIN person AS P ON A.seller = P.id
WHERE A.category = {nq.Q3_CATEGORY}
  AND ({' OR '.join(f"P.state = '{s}'" for s in nq.Q3_STATES)})""",
    "Q4": """
SELECT Q.category, AVG(CAST(Q.final AS DOUBLE)) AS `avg`, COUNT(*) AS `count`
FROM (
  SELECT MAX(B.price) AS final, A.category
  FROM auction A, bid B
  WHERE A.id = B.auction AND B.date_time >= A.date_time AND B.date_time < A.expires
  GROUP BY A.id, A.category
) Q
GROUP BY Q.category""",
    "Q5": """
SELECT AuctionBids.auction, AuctionBids.num, AuctionBids.starttime AS window_start,
       AuctionBids.endtime AS window_end
FROM (
  SELECT auction, count(*) AS num, window_start AS starttime, window_end AS endtime
  FROM TABLE(HOP(TABLE bid, DESCRIPTOR(rt), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
  GROUP BY auction, window_start, window_end
) AS AuctionBids
JOIN (
  SELECT max(CountBids.num) AS maxn, CountBids.starttime, CountBids.endtime
  FROM (
    SELECT count(*) AS num, window_start AS starttime, window_end AS endtime
    FROM TABLE(HOP(TABLE bid, DESCRIPTOR(rt), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
    GROUP BY auction, window_start, window_end
  ) AS CountBids
  GROUP BY CountBids.starttime, CountBids.endtime
) AS MaxBids
ON AuctionBids.starttime = MaxBids.starttime AND AuctionBids.endtime = MaxBids.endtime
   AND AuctionBids.num >= MaxBids.maxn""",
    "Q7": """
SELECT B.auction, B.price, B.bidder, B.date_time, B.extra
FROM bid B
JOIN (
  SELECT MAX(price) AS maxprice, window_end AS rt
  FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(rt), INTERVAL '10' SECOND))
  GROUP BY window_start, window_end
) B1
ON B.price = B1.maxprice
WHERE B.rt BETWEEN B1.rt - INTERVAL '10' SECOND AND B1.rt""",
    "Q8": """
SELECT P.id, P.name, P.starttime AS window_start, P.endtime AS window_end
FROM (
  SELECT id, name, window_start AS starttime, window_end AS endtime
  FROM TABLE(TUMBLE(TABLE person, DESCRIPTOR(rt), INTERVAL '10' SECOND))
  GROUP BY id, name, window_start, window_end
) P
JOIN (
  SELECT seller, window_start AS starttime, window_end AS endtime
  FROM TABLE(TUMBLE(TABLE auction, DESCRIPTOR(rt), INTERVAL '10' SECOND))
  GROUP BY seller, window_start, window_end
) A
ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime""",
    # Nexmark's session statement; the session's bounds from the bids' µs times (the rowtime
    # has milliseconds): its first bid, and its last bid plus the gap
    "Q11": """
SELECT B.bidder, count(*) AS `count`, MIN(B.date_time) AS window_start,
       MAX(B.date_time) + 10000000 AS window_end
FROM bid B
GROUP BY B.bidder, SESSION(B.rt, INTERVAL '10' SECOND)""",
    "Q14": f"""
SELECT auction, bidder, CAST(price AS DOUBLE) * {nq.EURO}E0 AS price,
  CASE
    WHEN HOUR(rt) >= 8 AND HOUR(rt) <= 18 THEN 'dayTime'
    WHEN HOUR(rt) <= 6 OR HOUR(rt) >= 20 THEN 'nightTime'
    ELSE 'otherTime'
  END AS bidTimeType,
  date_time, extra,
  CAST(CHAR_LENGTH(extra) - CHAR_LENGTH(REPLACE(extra, 'c', '')) AS BIGINT) AS c_counts
FROM bid
WHERE CAST(price AS DOUBLE) * {nq.EURO}E0 > {nq.Q14_LOW}
  AND CAST(price AS DOUBLE) * {nq.EURO}E0 < {nq.Q14_HIGH}""",
    "Q21": """
SELECT auction, bidder, price, channel, date_time,
  CASE
    WHEN LOWER(channel) = 'apple' THEN '0'
    WHEN LOWER(channel) = 'google' THEN '1'
    WHEN LOWER(channel) = 'facebook' THEN '2'
    WHEN LOWER(channel) = 'baidu' THEN '3'
    ELSE REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2)
  END AS channel_id
FROM bid
WHERE REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2) IS NOT NULL
   OR LOWER(channel) IN ('apple', 'google', 'facebook', 'baidu')""",
    "Q22": """
SELECT auction, bidder, price, channel, date_time,
  SPLIT_INDEX(url, '/', 3) AS dir1, SPLIT_INDEX(url, '/', 4) AS dir2,
  SPLIT_INDEX(url, '/', 5) AS dir3
FROM bid""",
    "Q9": """
SELECT id, item_name, description, initial_bid, reserve, date_time, expires, seller, category,
       extra, auction, bidder, price, bid_date_time, bid_extra
FROM (
  SELECT A.id, A.item_name, A.description, A.initial_bid, A.reserve, A.date_time, A.expires,
         A.seller, A.category, A.extra, B.auction, B.bidder, B.price,
         B.date_time AS bid_date_time, B.extra AS bid_extra,
         ROW_NUMBER() OVER (PARTITION BY A.id ORDER BY B.price DESC, B.date_time ASC) AS rownum
  FROM auction A, bid B
  WHERE A.id = B.auction AND B.date_time >= A.date_time AND B.date_time < A.expires
)
WHERE rownum <= 1""",
    "Q18": """
SELECT auction, bidder, price, channel, url, date_time, extra
FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder, auction ORDER BY rt DESC) AS rank_number
  FROM bid
)
WHERE rank_number <= 1""",
    "Q19": f"""
SELECT auction, bidder, price, channel, url, date_time, extra, rank_number
FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS rank_number
  FROM bid
)
WHERE rank_number <= {nq.Q19_TOP}""",
    "Q20": f"""
SELECT B.auction, B.bidder, B.price, B.channel, B.url, B.date_time AS bid_date_time,
       B.extra AS bid_extra, A.item_name, A.description, A.initial_bid, A.reserve,
       A.date_time AS auction_date_time, A.expires, A.seller, A.category,
       A.extra AS auction_extra
FROM bid AS B INNER JOIN auction AS A ON B.auction = A.id
WHERE A.category = {nq.Q3_CATEGORY}""",
    "Q12": """
SELECT bidder, COUNT(*) AS bid_count, window_start, window_end
FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(rt), INTERVAL '10' SECOND))
GROUP BY bidder, window_start, window_end""",
    "Q17": f"""
SELECT auction, DATE_FORMAT(rt, 'yyyy-MM-dd') AS `day`,
  COUNT(*) AS total_bids,
  COUNT(*) FILTER (WHERE price < {nq.Q17_RANKS[0]}) AS rank1_bids,
  COUNT(*) FILTER (WHERE price >= {nq.Q17_RANKS[0]} AND price < {nq.Q17_RANKS[1]}) AS rank2_bids,
  COUNT(*) FILTER (WHERE price >= {nq.Q17_RANKS[1]}) AS rank3_bids,
  MIN(price) AS min_price, MAX(price) AS max_price,
  AVG(CAST(price AS DOUBLE)) AS avg_price, SUM(price) AS sum_price
FROM bid
GROUP BY auction, DATE_FORMAT(rt, 'yyyy-MM-dd')""",
    "Q10": """
SELECT auction, bidder, price, date_time, extra, DATE_FORMAT(rt, 'yyyy-MM-dd') AS dt,
       DATE_FORMAT(rt, 'HH:mm') AS hm
FROM bid""",
    # Nexmark: a lookup join FOR SYSTEM_TIME AS OF the bid's PROCTIME() (see queries.q13)
    "Q13": f"""
SELECT B.auction, B.bidder, B.price, B.date_time, S.`value`
FROM bid B JOIN side_input S ON MOD(B.auction, {nq.Q13_KEYS}) = S.`key`""",
    "Q15": f"""
SELECT DATE_FORMAT(rt, 'yyyy-MM-dd') AS `day`,
{_STATS}
FROM bid
GROUP BY DATE_FORMAT(rt, 'yyyy-MM-dd')""",
    "Q16": f"""
SELECT channel, DATE_FORMAT(rt, 'yyyy-MM-dd') AS `day`, max(DATE_FORMAT(rt, 'HH:mm')) AS `minute`,
{_STATS}
FROM bid
GROUP BY channel, DATE_FORMAT(rt, 'yyyy-MM-dd')""",
}

#: The tables each query reads (Flink reads auctions as rows; cedar's ``auction_iv`` is the
#: same table as intervals).
INPUTS: dict[str, tuple[str, ...]] = {
    "Q0": ("bid",), "Q1": ("bid",), "Q2": ("bid",), "Q3": ("person", "auction"),
    "Q4": ("auction", "bid"), "Q5": ("bid",), "Q7": ("bid",), "Q8": ("person", "auction"),
    "Q11": ("bid",),
}
INPUTS.update({"Q14": ("bid",), "Q21": ("bid",), "Q22": ("bid",)})
INPUTS.update({"Q9": ("auction", "bid"), "Q18": ("bid",), "Q19": ("bid",),
               "Q20": ("auction", "bid")})
INPUTS.update({"Q12": ("bid",)})
INPUTS.update({"Q17": ("bid",)})
INPUTS.update({"Q10": ("bid",)})
INPUTS.update({"Q13": ("side_input", "bid"), "Q15": ("bid",), "Q16": ("bid",)})


def _q5(rows: list[dict[str, Any]], latest: int) -> list[Row]:
    """Every auction tied for the most bids in its window, as cedar's and Spark's."""
    return nq.closed_by([(r["window_start"], r["window_end"], r["auction"], r["num"])
                         for r in rows], latest)


def _q7(rows: list[dict[str, Any]], latest: int) -> list[Row]:
    best: dict[int, tuple[Any, Any, Any]] = {}
    for r in rows:
        t = r["date_time"]
        # the bid's own window (a bid at a window's end also matches that window's maximum)
        start = t - t % nq.WINDOW
        best[start] = max(best.get(start, (-1, -1, -1)), (r["price"], r["auction"],
                                                          r["bidder"]))
    return nq.closed_by([(s, s + nq.WINDOW, *m) for s, m in best.items()], latest)


def _q9(rows: list[dict[str, Any]], latest: int) -> list[Row]:
    """Q9's Top-N reaches ``collect()`` as an upsert stream keyed by the auction id (each new
    winner an ``UPDATE_AFTER``, no ``UPDATE_BEFORE`` for the one it replaces): the final row
    per id is the last one (the collected rows keep their order of arrival)."""
    last = {r["id"]: r for r in rows}
    return nq.QUERIES["Q9"].spark_rows(list(last.values()), latest)


#: Flink's rows as the comparable rows of :class:`.queries.Query`: the Spark mapping where the
#: columns are the same, Q5's columns, Q7's tie-breaking pick.
_OWN: dict[str, Callable[[list[dict[str, Any]], int], list[Row]]] = {"Q5": _q5, "Q7": _q7}
_OWN["Q9"] = _q9


def comparable(name: str, rows: list[dict[str, Any]], latest: int) -> list[Row]:
    return _OWN[name](rows, latest) if name in _OWN else nq.QUERIES[name].spark_rows(rows,
                                                                                    latest)
