"""The runtime's pure parts: the wire format, routing, the publishing sink and the partition
merge, and the operator shell driven in-process (no Ray)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from actors.config import ShellConfig
from actors.shell import OperatorShell
from actors.stage_config import StageConfig
from actors.wire import decode, encode
from operators.cht import to_cht, validate
from operators.columns import Columns
from operators.events import MIN_TIME, Cti, FreshId, Insert
from operators.publish import Publish
from operators.union import Union
from operators.where import Where
from tests.kit import PROPERTY, assert_equivalent, physical_streams
from topology.planning.routing import OutEdge, Partitioner, Router, stable_hash


@PROPERTY
@given(stream=physical_streams(payloads=st.one_of(st.integers(), st.text(max_size=3),
                                                  st.dictionaries(st.text(max_size=2),
                                                                  st.integers(), max_size=2))))
def test_wire_format_round_trips_every_message(stream):
    stream = stream + [Insert(FreshId("x", 3), 0, 1, None)]
    assert decode(encode(stream)) == stream


_ORIGIN = "keyed#3"  # one object: the ids a window emits share their origin


_KINDS = (
    st.builds(lambda n, p: Insert(FreshId(_ORIGIN, n), n, n + 1, p), st.integers(0, 99),
              st.integers()),
    st.builds(lambda n: Insert(FreshId(n, 0), 0, 2, n), st.integers(0, 3)),
    st.builds(lambda n: Insert(n, n, n + 5, {"v": n}), st.integers(0, 9)),
    st.builds(lambda n: tuple.__new__(Insert, (n, 5, 3)), st.integers(0, 3)),  # malformed
    st.builds(Cti, st.integers(0, 9)))


@PROPERTY
@given(messages=st.lists(st.one_of(*(st.lists(k, max_size=12) for k in _KINDS)),
                         max_size=6).map(lambda segs: [m for seg in segs for m in seg]))
def test_runs_of_inserts_travel_as_columns_and_come_back_as_they_were(messages):
    """Long runs of inserts travel as columns (their FreshIds of one origin as numbers); the
    messages come back equal, of the same types, a malformed insert with its own fields."""
    back = decode(encode(messages))
    assert back == messages
    assert [(type(m), len(m)) for m in back] == [(type(m), len(m)) for m in messages]
    assert [type(m.id) for m in back if len(m) == 4 and type(m) is Insert] == [
        type(m.id) for m in messages if len(m) == 4 and type(m) is Insert]


def _cols(first, n, payload, points=True):
    starts = np.arange(first, first + n)
    return Columns(np.arange(first, first + n), starts, None if points else starts + 2, payload)


@pytest.mark.parametrize("batch", [
    # a source's batch: Columns cut at CTIs, same types: packed into one, unpacked as views
    [_cols(0, 3, {"k": np.arange(3), "v": np.ones(3)}), Cti(3),
     _cols(3, 2, {"k": np.arange(2), "v": np.zeros(2)}), Cti(5)],
    [_cols(0, 3, (np.arange(3),), points=False), _cols(3, 1, (np.arange(1),), points=False)],
    # types differ (an int and a float payload; points and not): each travels as it is
    [_cols(0, 2, np.arange(2)), Cti(2), _cols(2, 2, np.ones(2))],
    [_cols(0, 2, np.arange(2)), _cols(2, 2, np.arange(2), points=False)],
])
def test_column_batches_come_back_with_their_events_and_types(batch):
    back = decode(encode(batch))
    assert back == batch
    for got, sent in zip(back, batch):
        if isinstance(sent, Columns):
            assert got.points == sent.points
            assert [a.dtype for a in _arrays(got)] == [a.dtype for a in _arrays(sent)]


def _arrays(c):
    p = c.payload
    payload = list(p.values()) if isinstance(p, dict) else list(p) if isinstance(p, tuple) else [p]
    return [c.ids, c.starts, c.ends, *payload]


def test_stable_hash_is_the_same_in_another_process():
    keys = ["meter-7", 12, ("a", 3), b"\x00k", 2.0, None]
    here = [stable_hash(k) for k in keys]
    code = ("from topology.planning.routing import stable_hash; "
            f"print([stable_hash(k) for k in {keys!r}])")
    env = dict(os.environ, PYTHONHASHSEED="12345", PYTHONPATH=os.pathsep.join(sys.path))
    there = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, check=True).stdout.strip()
    assert there == repr(here)
    assert stable_hash(2.0) == stable_hash(2) == stable_hash(2)  # equal keys, one partition


@PROPERTY
@given(stream=physical_streams(), n=st.integers(1, 4))
def test_partitions_split_events_by_key_and_broadcast_ctis(stream, n):
    part = Partitioner(lambda p: p % 3, n)
    router = Router([OutEdge(f"g{i}", 0, part, i) for i in range(n)] + [OutEdge("all", 0)])
    parts = router.route(stream)
    assert parts[-1] is stream
    for i, msgs in enumerate(parts[:-1]):
        assert [m for m in msgs if type(m) is Cti] == [m for m in stream if type(m) is Cti]
        assert all(stable_hash(m.payload % 3) % n == i for m in msgs if type(m) is not Cti)
        validate(msgs)  # each partition is a valid stream: an event's messages stay together
    assert sum(len(p) for p in parts[:-1]) == len(stream) + (n - 1) * sum(
        type(m) is Cti for m in stream)


@PROPERTY
@given(stream=physical_streams(), data=st.data())
def test_a_newcomer_sees_the_alive_events_then_the_live_stream(stream, data):
    #   publisher:  ──── prefix ────┤ cut: Cti c ├──── rest ────
    #   newcomer:                   snapshot (rows with end >= c, then Cti(c)) + rest
    cut = data.draw(st.integers(0, len(stream)))
    pub = Publish("sink")
    pub.process(stream[:cut])
    pub._check()
    joined = pub.alive_snapshot() + pub.process(stream[cut:])
    validate(joined)
    c = max([m.time for m in stream[:cut] if type(m) is Cti], default=MIN_TIME)
    assert_equivalent(joined, [r for r in to_cht(stream) if r[1] >= c])


def test_history_keeps_the_final_rows():
    pub = Publish("sink", history=True)
    pub.process([Insert("a", 0, 3, "x"), Insert("b", 2, 9, "y"), Cti(5)])
    assert pub.rows() == [(0, 3, "x"), (2, 9, "y")]
    assert pub.state_size() == 1


def test_partition_merge_keeps_ids_apart_and_holds_the_cti():
    m = Union(2)
    out = m.process([Insert(0, 1, 2, "a"), Cti(9)], 0) + m.process([Insert(0, 3, 4, "b")], 1)
    # the same id in two partitions: tagged apart (an int id i of input p: i * 2 + p)
    assert [x.id for x in out] == [0, 1]
    assert m.process([Insert("a", 5, 6, "c")], 1)[0].id == (1, "a")
    assert m.process([Cti(4)], 1) == [Cti(4)]


def test_the_shell_runs_a_processor_and_serves_a_driver_subscription():
    # the shell is a plain class: drive it in-process, its output going to a pull queue
    shell = OperatorShell()
    shell.configure(StageConfig(step="where#1", describe="where", factory=lambda: Where(bool),
                                settings=ShellConfig(batch_size=2)))
    pull = shell.open_pull()
    shell.push(0, encode([Insert("a", 0, 1, 1), Insert("b", 0, 1, 0), Cti(1)]))
    blob, finished, error = shell.fetch(pull, timeout_s=0)
    assert decode(blob) == [Insert("a", 0, 1, 1), Cti(1)] and not finished and error is None
    shell.end(0)
    assert shell.fetch(pull, timeout_s=0)[1:] == (True, None)
    stats = shell.stats()
    assert (stats["events_in"], stats["events_out"], stats["cti"]) == (3, 2, 1)


def test_the_shell_reports_an_operator_failure_with_its_step():
    shell = OperatorShell()
    shell.configure(StageConfig(step="select#4", describe="select",
                                factory=lambda: Where(lambda p: p["missing"], name="select#4")))
    pull = shell.open_pull()
    shell.push(0, encode([Insert("a", 0, 1, {})]))
    _, _, error = shell.fetch(pull, timeout_s=0)
    assert "select#4" in error and "KeyError" in error
    shell.push(0, encode([Insert("b", 0, 1, {})]))  # later batches are dropped, not processed
    assert shell.stats()["events_in"] == 1


def test_the_sink_forgets_retracted_ends():
    # 3,000 edge events opened and deleted at ∞: no CTI ever passes their ends, so the end
    # index must be compacted rather than grow with every retraction
    from operators.events import MAX_TIME, Retract

    pub = Publish("sink")
    for i in range(3_000):
        pub.process([Insert(i, i, MAX_TIME, i), Retract(i, i, MAX_TIME, i, i)])
    pub._check()
    assert pub.state_size() == 0 and len(pub.events.by_end) < 1_100


def test_string_columns_cross_actors_as_they_are(runtime):
    """String columns travel as Arrow arrays (``portable_column``); what arrives is the same
    values: str and None, and bytes (or a str/bytes mix) are not turned into str."""
    import numpy as np
    import pyarrow as pa

    from topology import Stream

    n = 600  # past the size below which object columns pickle as they are
    table = pa.table({"t": np.arange(n), "s": ["a", None, "ü"] * (n // 3),
                      "b": [b"x", b"y"] * (n // 2)})
    src = Stream.from_arrow(table, start="t")
    out = src.select(lambda p: p).collect(runtime)
    rows = [m.payload for m in out if isinstance(m, Insert)]
    assert [r["s"] for r in rows] == ["a", None, "ü"] * (n // 3)
    assert [r["b"] for r in rows] == [b"x", b"y"] * (n // 2)
